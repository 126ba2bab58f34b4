#!/usr/bin/env bash
# End-to-end ingest through a real Kafka-protocol broker (tansu), one core each, side by side:
# ragwatch (decode, stratify, offline judge on every trace, windows, histograms, sampling) against a
# Python aiokafka consumer doing decode, stratify, sampling and a one-feature lexical score.
# The two alternate ROUNDS times over the same topic (each round a fresh consumer group reading it
# from the start), so that a neighbour's load hits both sides alike; the broker runs on the other
# core, so that it takes no time from the consumer being measured. Prints each run, per wall second
# and per CPU second of the consumer (its own user + system time over the same span: on a shared
# machine a process waits for its core, and that is what a core of its own would do), then the
# medians and their ratios.
# PREFETCH_KB sets ragwatch's queued.max.messages.kbytes (default: ragwatch's own, 16384; TESTBED.md
# measured 65536 at about twice the throughput on tansu). RAGWATCH_BIN= measures another build (not
# rebuilt) instead of this tree's.
#   benches/ingest_vs_python.sh [N=100000] [ROUNDS=3] [CORE=0]
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-100000}
rounds=${2:-3}
core=${3:-0}
broker_core=$(( (core + 1) % $(nproc) ))
# This script's own commands (curl, awk, sleep) run beside the broker, off the measured core.
taskset -pc "$broker_core" $$ >/dev/null
work=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
tansu=${TANSU_BIN:-$(command -v tansu || echo "$HOME/.cargo/bin/tansu")}
taskset -c "$broker_core" "$tansu" broker --listener-url tcp://127.0.0.1:$port \
  --advertised-listener-url tcp://127.0.0.1:$port --storage-engine memory://tansu/ >/dev/null 2>&1 &
broker=$!
trap 'kill $broker ${rw:-} 2>/dev/null || true; rm -rf "$work"' EXIT
sleep 2
"$tansu" topic create bench --partitions 3 --broker tcp://127.0.0.1:$port >/dev/null
python3 -m pip show aiokafka >/dev/null 2>&1 || python3 -m pip install -q aiokafka
python3 tests/gen_traces.py "$n" --seed 12 --pad 1500 > "$work/traces.jsonl"
python3 benches/python_consumer.py produce 127.0.0.1:$port bench "$work/traces.jsonl"
bin=${RAGWATCH_BIN:-./target/release/ragwatch}
[[ -n ${RAGWATCH_BIN:-} ]] || cargo build --release -q
echo "$n traces, broker on core $broker_core, consumers on core $core"

# One ragwatch run in consumer group $1; prints "traces/s wall, traces per CPU second".
ragwatch_run() {
  rm -f "$work/addr"
  # (env, because a shell cannot assign a variable whose name has dots)
  env RAGWATCH__SOURCE__KIND=kafka RAGWATCH__KAFKA__BROKERS=127.0.0.1:$port RAGWATCH__KAFKA__TOPICS=bench \
    RAGWATCH__KAFKA__GROUP_ID="$1" "RAGWATCH__KAFKA__PROPERTIES__FETCH.WAIT.MAX.MS=5" \
    ${PREFETCH_KB:+"RAGWATCH__KAFKA__PROPERTIES__QUEUED.MAX.MESSAGES.KBYTES=$PREFETCH_KB"} \
    RAGWATCH__HTTP__LISTEN=127.0.0.1:0 RAGWATCH__HTTP__PORT_FILE="$work/addr" \
    taskset -c "$core" "$bin" run 2>"$work/log" &
  rw=$!
  for _ in $(seq 100); do [ -s "$work/addr" ] && break; sleep 0.1; done
  local addr c c0 start cpu_start end cpu_end deadline
  addr=$(cat "$work/addr")
  count() { curl -s "http://$addr/metrics" | awk '/^ragwatch_source_messages_total/ {print $2}'; }
  cpu() { awk '{print $14 + $15}' "/proc/$rw/stat"; }
  while c0=$(count); [ -z "$c0" ] || [ "$c0" = "0" ]; do sleep 0.01; done
  # From the first scrape that sees messages: those it saw are not counted.
  start=$(date +%s.%N)
  cpu_start=$(cpu)
  deadline=$(( $(date +%s) + 300 ))
  # Each scrape renders every series on the measured core (about 1.5 ms): look again when about half
  # of what is left should be read, at least 20 ms and at most 500 ms later.
  while c=$(count); [ "$c" -lt "$n" ]; do
    sleep "$(awk -v c="$c" -v n="$n" -v t="$(date +%s.%N)" -v s="$start" \
      'BEGIN { w = (n - c) / 2 * (t - s) / (c > 0 ? c : 1); print (w < 0.02 ? 0.02 : (w > 0.5 ? 0.5 : w)) }')"
    [ "$(date +%s)" -lt "$deadline" ] || { echo "ragwatch read only $c of $n in 300 s" >&2; exit 1; }
  done
  end=$(date +%s.%N)
  cpu_end=$(cpu)
  kill "$rw"; wait "$rw" 2>/dev/null || true
  python3 -c "print(f'{($n-$c0)/($end-$start):.0f} {($n-$c0)*100/max($cpu_end-$cpu_start,1):.0f}')"
}

rw_wall=() rw_cpu=() py_wall=() py_cpu=()
for r in $(seq "$rounds"); do
  read -r wall cpu < <(ragwatch_run "rw-bench-$r")
  rw_wall+=("$wall") rw_cpu+=("$cpu")
  echo "round $r ragwatch:        $wall traces/s wall, $cpu traces per CPU second"
  line=$(taskset -c "$core" python3 benches/python_consumer.py consume 127.0.0.1:$port bench "$n")
  read -r wall cpu < <(sed -E 's/.* = ([0-9]+) traces\/s; .* = ([0-9]+) traces per CPU second/\1 \2/' <<<"$line")
  py_wall+=("$wall") py_cpu+=("$cpu")
  echo "round $r python aiokafka: $wall traces/s wall, $cpu traces per CPU second"
done
python3 - "${rw_wall[*]}" "${rw_cpu[*]}" "${py_wall[*]}" "${py_cpu[*]}" <<'PY'
import statistics, sys
rw_wall, rw_cpu, py_wall, py_cpu = (statistics.median(map(float, a.split())) for a in sys.argv[1:5])
print(f"median per wall second: ragwatch {rw_wall:,.0f} traces/s, python {py_wall:,.0f}, ratio {rw_wall / py_wall:.1f}x")
print(f"median per CPU second:  ragwatch {rw_cpu:,.0f} traces/s, python {py_cpu:,.0f}, ratio {rw_cpu / py_cpu:.1f}x")
PY
