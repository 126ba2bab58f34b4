#!/usr/bin/env bash
# Resident memory and /metrics scrape time in steady state with 50 strata and 3 windows, while
# `ragwatch run` ingests a looping file as fast as it can (one core) for DURATION seconds.
#   benches/rss.sh [DURATION=60]   (RAGWATCH_BIN=path measures another build, e.g. a copy of an older one)
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:-60}
work=$(mktemp -d)
trap 'kill $pid 2>/dev/null || true; rm -rf "$work"' EXIT
strata=$(python3 -c 'print(",".join(f"s{i}" for i in range(50)))')
python3 tests/gen_traces.py 5000 --seed 4 --pad 1500 --strata "$strata" > "$work/traces.jsonl"
declared=$(python3 -c 'print(", ".join(f"\"s{i}\"" for i in range(50)))')
cat > "$work/config.toml" <<TOML
[source]
kind = "file"
path = "$work/traces.jsonl"
rate_per_sec = 0.0
loop = true
[strata]
declared = [$declared]
[http]
listen = "127.0.0.1:0"
port_file = "$work/addr"
TOML
bin=${RAGWATCH_BIN:-./target/release/ragwatch}
[ -n "${RAGWATCH_BIN:-}" ] || cargo build --release -q
taskset -c 0 "$bin" run --config "$work/config.toml" 2>"$work/log" &
pid=$!
for _ in $(seq 100); do [ -s "$work/addr" ] && break; sleep 0.1; done
addr=$(cat "$work/addr")
echo "second rss_kib traces_received"
for s in $(seq "$duration"); do
  sleep 1
  rss=$(awk '/VmRSS/ {print $2}' /proc/$pid/status)
  n=$(curl -s "http://$addr/metrics" | awk '/^ragwatch_traces_received_total/ {s+=$2} END {printf "%d", s}')
  [ $((s % 10)) -eq 0 ] || [ "$s" -le 3 ] && echo "$s $rss $n"
done
series=$(curl -s "http://$addr/metrics" | grep -vc '^#')
echo "series exported: $series"
python3 - "$addr" <<'PY'
import sys, time, urllib.request
url = f"http://{sys.argv[1]}/metrics"
times = []
for _ in range(50):
    t = time.perf_counter(); body = urllib.request.urlopen(url).read(); times.append(time.perf_counter() - t)
times.sort()
print(f"/metrics scrape: {len(body)} bytes, median {times[25]*1000:.1f} ms, p90 {times[45]*1000:.1f} ms (50 strata)")
PY
