#!/usr/bin/env bash
# Soak: `ragwatch run` at a steady rate for DURATION seconds (default 1800) with 50 strata, 3 windows
# and the sampled-judge queue in use; prints resident memory, exported series and traces every minute.
#   benches/soak.sh [DURATION=1800] [RATE=2000]
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:-1800}
rate=${2:-2000}
work=$(mktemp -d)
trap 'kill $pid 2>/dev/null || true; rm -rf "$work"' EXIT
strata=$(python3 -c 'print(",".join(f"s{i}" for i in range(50)))')
python3 tests/gen_traces.py 20000 --seed 6 --pad 1500 --strata "$strata" --malformed 20 > "$work/traces.jsonl"
declared=$(python3 -c 'print(", ".join(f"\"s{i}\"" for i in range(50)))')
cat > "$work/config.toml" <<TOML
[source]
kind = "file"
path = "$work/traces.jsonl"
rate_per_sec = $rate
loop = true
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
for _ in $(seq 100); do [ -s "$work/addr" ] && break; sleep 0.1; done
addr=$(cat "$work/addr")
echo "minute rss_kib series traces_received traces_rejected"
start=$(date +%s)
while [ $(( $(date +%s) - start )) -lt "$duration" ]; do
  sleep 60
  body=$(curl -s "http://$addr/metrics")
  rss=$(awk '/VmRSS/ {print $2}' /proc/$pid/status)
  series=$(grep -vc '^#' <<<"$body")
  n=$(awk '/^ragwatch_traces_received_total/ {s+=$2} END {printf "%d", s}' <<<"$body")
  r=$(awk '/^ragwatch_traces_rejected_total/ {s+=$2} END {printf "%d", s}' <<<"$body")
  echo "$(( ($(date +%s) - start) / 60 )) $rss $series $n $r"
done
