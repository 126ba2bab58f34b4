#!/usr/bin/env bash
# End-to-end ingest through a real Kafka-protocol broker (tansu), one core each, side by side:
# ragwatch (decode, stratify, offline judge on every trace, windows, histograms, sampling) against a
# Python aiokafka consumer doing decode, stratify, sampling and a one-feature lexical score.
# Also prints traces per CPU second of each consumer (its own user + system time over the same span): on a
# shared machine a process waits for its core, and that is what a core of its own would do.
# PREFETCH_KB sets ragwatch's queued.max.messages.kbytes (default: ragwatch's own, 16384; TESTBED.md
# measured 65536 at about twice the throughput on tansu).
#   benches/ingest_vs_python.sh [N=100000]
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-100000}
work=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
tansu=${TANSU_BIN:-$(command -v tansu || echo "$HOME/.cargo/bin/tansu")}
"$tansu" broker --listener-url tcp://127.0.0.1:$port --advertised-listener-url tcp://127.0.0.1:$port --storage-engine memory://tansu/ >/dev/null 2>&1 &
broker=$!
trap 'kill $broker ${rw:-} 2>/dev/null || true; rm -rf "$work"' EXIT
sleep 2
"$tansu" topic create bench --partitions 3 --broker tcp://127.0.0.1:$port >/dev/null
python3 -m pip show aiokafka >/dev/null 2>&1 || python3 -m pip install -q aiokafka
python3 tests/gen_traces.py "$n" --seed 12 --pad 1500 > "$work/traces.jsonl"
python3 benches/python_consumer.py produce 127.0.0.1:$port bench "$work/traces.jsonl"
cargo build --release -q

# (env, because a shell cannot assign a variable whose name has dots)
env RAGWATCH__SOURCE__KIND=kafka RAGWATCH__KAFKA__BROKERS=127.0.0.1:$port RAGWATCH__KAFKA__TOPICS=bench \
  RAGWATCH__KAFKA__GROUP_ID=rw-bench "RAGWATCH__KAFKA__PROPERTIES__FETCH.WAIT.MAX.MS=5" \
  ${PREFETCH_KB:+"RAGWATCH__KAFKA__PROPERTIES__QUEUED.MAX.MESSAGES.KBYTES=$PREFETCH_KB"} \
  RAGWATCH__HTTP__LISTEN=127.0.0.1:0 RAGWATCH__HTTP__PORT_FILE="$work/addr" \
  taskset -c 0 ./target/release/ragwatch run 2>"$work/log" &
rw=$!
for _ in $(seq 100); do [ -s "$work/addr" ] && break; sleep 0.1; done
addr=$(cat "$work/addr")
count() { curl -s "http://$addr/metrics" | awk '/^ragwatch_source_messages_total/ {print $2}'; }
while [ "$(count)" = "0" ] || [ -z "$(count)" ]; do sleep 0.01; done
start=$(date +%s.%N)
cpu() { awk '{print $14 + $15}' /proc/$rw/stat; }
cpu_start=$(cpu)
deadline=$(( $(date +%s) + 300 ))
while [ "$(count)" -lt "$n" ]; do
  sleep 0.05
  [ "$(date +%s)" -lt "$deadline" ] || { echo "ragwatch read only $(count) of $n in 300 s"; exit 1; }
done
end=$(date +%s.%N)
cpu_end=$(cpu)
python3 -c "print(f'ragwatch: $n messages in {($end-$start):.2f} s = {$n/($end-$start):.0f} traces/s; {($cpu_end-$cpu_start)/100:.2f} CPU s = {$n*100/max($cpu_end-$cpu_start,1):.0f} traces per CPU second')"
kill $rw; wait $rw 2>/dev/null || true
taskset -c 0 python3 benches/python_consumer.py consume 127.0.0.1:$port bench "$n"
