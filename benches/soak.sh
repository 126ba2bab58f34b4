#!/usr/bin/env bash
# Soak: `ragwatch run` at a steady rate for DURATION seconds (default 1800) with 50 strata, 3 windows
# and the sampled-judge queue in use; prints resident memory, exported series, traces and consumer lag
# every minute.
#   benches/soak.sh [DURATION=1800] [RATE=2000] [SOURCE=file|kafka]
# SOURCE=kafka runs a tansu broker (tests/run.sh installs it) with a 3-partition topic and a Python
# aiokafka producer writing RATE traces a second (`pip install aiokafka`); the file source paces itself.
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:-1800}
rate=${2:-2000}
source_kind=${3:-file}
work=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; rm -rf "$work"' EXIT
strata=$(python3 -c 'print(",".join(f"s{i}" for i in range(50)))')
python3 tests/gen_traces.py 20000 --seed 6 --pad 1500 --strata "$strata" --malformed 20 > "$work/traces.jsonl"
declared=$(python3 -c 'print(", ".join(f"\"s{i}\"" for i in range(50)))')
if [ "$source_kind" = kafka ]; then
  tansu=${TANSU_BIN:-$HOME/.cargo/bin/tansu}
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  "$tansu" broker --listener-url "tcp://127.0.0.1:$port" --advertised-listener-url "tcp://127.0.0.1:$port" \
    --storage-engine memory://tansu/ >/dev/null 2>&1 &
  pids+=($!)
  sleep 1
  "$tansu" topic create soak --partitions 3 --broker "tcp://127.0.0.1:$port" >/dev/null
  python3 - "$port" "$rate" "$duration" "$work/traces.jsonl" "$work/produced" <<'PY' &
import asyncio, sys, time
from aiokafka import AIOKafkaProducer
port, rate, duration, path, counter = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
lines = [l.rstrip("\n").encode() for l in open(path)]
async def main():
    p = AIOKafkaProducer(bootstrap_servers=f"127.0.0.1:{port}", linger_ms=5, max_batch_size=1 << 20)
    await p.start()
    start, sent = time.monotonic(), 0
    while time.monotonic() - start < duration:
        due = int((time.monotonic() - start) * rate)
        while sent < due:
            await p.send("soak", lines[sent % len(lines)])
            sent += 1
        open(counter, "w").write(str(sent))
        await asyncio.sleep(0.01)
    await p.stop()
asyncio.run(main())
PY
  pids+=($!)
  source_toml="[source]
kind = \"kafka\"
[kafka]
brokers = \"127.0.0.1:$port\"
topics = [\"soak\"]
group_id = \"soak\"
stats_interval_ms = 5000
[kafka.properties]
\"fetch.wait.max.ms\" = \"5\""
else
  source_toml="[source]
kind = \"file\"
path = \"$work/traces.jsonl\"
rate_per_sec = $rate
loop = true"
fi
cat > "$work/config.toml" <<TOML
$source_toml
[strata]
declared = [$declared]
[judge]
sampled = "offline"
[sample]
default_rate = 0.05
[http]
listen = "127.0.0.1:0"
port_file = "$work/addr"
TOML
cargo build --release -q
./target/release/ragwatch run --config "$work/config.toml" 2>"$work/log" &
pid=$!
pids+=($pid)
for _ in $(seq 100); do [ -s "$work/addr" ] && break; sleep 0.1; done
addr=$(cat "$work/addr")
echo "minute rss_kib series produced traces_received traces_rejected lag_messages"
start=$(date +%s)
while [ $(( $(date +%s) - start )) -lt "$duration" ]; do
  sleep 60
  body=$(curl -s "http://$addr/metrics")
  rss=$(awk '/VmRSS/ {print $2}' /proc/$pid/status)
  series=$(grep -vc '^#' <<<"$body")
  n=$(awk '/^ragwatch_traces_received_total/ {s+=$2} END {printf "%d", s}' <<<"$body")
  r=$(awk '/^ragwatch_traces_rejected_total/ {s+=$2} END {printf "%d", s}' <<<"$body")
  lag=$(awk '/^ragwatch_kafka_consumer_lag_messages/ {s+=$2} END {printf "%d", s}' <<<"$body")
  produced=$(cat "$work/produced" 2>/dev/null || echo -)
  echo "$(( ($(date +%s) - start) / 60 )) $rss $series $produced $n $r $lag"
done
