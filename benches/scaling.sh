#!/usr/bin/env bash
# How cost grows with strata and windows: for each (strata, windows) pair, `ragwatch run` ingests a
# looping file at a steady RATE (default 2000 traces/s, one core) for DURATION seconds (default 40),
# then reports resident memory, CPU per trace, exported series and the /metrics scrape time.
#   benches/scaling.sh [DURATION=40] [RATE=2000]
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:-40}
rate=${2:-2000}
work=$(mktemp -d)
pid=
trap 'kill $pid 2>/dev/null || true; rm -rf "$work"' EXIT
cargo build --release -q
ticks=$(getconf CLK_TCK)
printf '%7s %7s %9s %12s %8s %10s\n' strata windows rss_mib cpu_us/trace series scrape_ms
for strata in 1 10 50 200; do
  for windows in 1 3 5; do
    names=$(python3 -c "print(','.join(f's{i}' for i in range($strata)))")
    python3 tests/gen_traces.py 5000 --seed 4 --pad 1500 --strata "$names" > "$work/traces.jsonl"
    declared=$(python3 -c "print(', '.join(f'\"s{i}\"' for i in range($strata)))")
    case $windows in
      1) secs="300"; short=300; base=300 ;;
      3) secs="300, 3600, 86400"; short=300; base=86400 ;;
      5) secs="60, 300, 3600, 21600, 86400"; short=300; base=86400 ;;
    esac
    rm -f "$work/addr"
    cat > "$work/config.toml" <<TOML
[source]
kind = "file"
path = "$work/traces.jsonl"
rate_per_sec = $rate
loop = true
[strata]
declared = [$declared]
[windows]
window_secs = [$secs]
short_secs = $short
baseline_secs = $base
[http]
listen = "127.0.0.1:0"
port_file = "$work/addr"
TOML
    taskset -c 0 ./target/release/ragwatch run --config "$work/config.toml" 2>"$work/log" &
    pid=$!
    for _ in $(seq 100); do [ -s "$work/addr" ] && break; sleep 0.1; done
    addr=$(cat "$work/addr")
    sleep "$duration"
    rss=$(awk '/VmRSS/ {printf "%.1f", $2/1024}' /proc/$pid/status)
    cpu=$(awk '{print $14+$15}' /proc/$pid/stat)
    n=$(curl -s "http://$addr/metrics" | awk '/^ragwatch_traces_received_total/ {s+=$2} END {printf "%d", s}')
    series=$(curl -s "http://$addr/metrics" | grep -vc '^#')
    scrape=$(python3 - "$addr" <<'PY'
import sys, time, urllib.request
url = f"http://{sys.argv[1]}/metrics"
times = []
for _ in range(21):
    t = time.perf_counter(); urllib.request.urlopen(url).read(); times.append(time.perf_counter() - t)
print(f"{sorted(times)[10]*1000:.1f}")
PY
)
    kill "$pid"; wait "$pid" 2>/dev/null || true
    printf '%7s %7s %9s %12s %8s %10s\n' "$strata" "$windows" "$rss" \
      "$(python3 -c "print(f'{$cpu / $ticks / max($n,1) * 1e6:.1f}')")" "$series" "$scrape"
  done
done
