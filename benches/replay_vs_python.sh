#!/usr/bin/env bash
# `ragwatch replay` with the offline judge against a 15-line Python script (decode, stratify, one lexical
# support score), on the same file and the same core, alternating ROUNDS times so that a neighbour's load
# hits both sides alike. Prints each run and the ratio of the medians.
#   benches/replay_vs_python.sh [N=100000] [ROUNDS=3] [CORE=0]
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-100000}
rounds=${2:-3}
core=${3:-0}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 tests/gen_traces.py "$n" --seed 12 --pad 1500 > "$work/traces.jsonl"
echo "$n traces, $(( $(stat -c %s "$work/traces.jsonl") / n )) bytes each on average; core $core"
cargo build --release -q
now() { date +%s.%N; }
rw_rates=() py_rates=()
for r in $(seq "$rounds"); do
  start=$(now)
  taskset -c "$core" ./target/release/ragwatch replay "$work/traces.jsonl" --output /dev/null 2>/dev/null
  end=$(now)
  rate=$(python3 -c "print(round($n / ($end - $start)))")
  rw_rates+=("$rate")
  echo "round $r ragwatch replay: $rate traces/s (verdicts written, process start included)"
  out=$(taskset -c "$core" python3 benches/replay_vs_python.py "$work/traces.jsonl")
  py_rates+=("$(echo "$out" | sed -E 's/.* = ([0-9]+) traces.*/\1/')")
  echo "round $r $out"
done
python3 - "${rw_rates[*]}" "${py_rates[*]}" <<'PY'
import statistics, sys
rw, py = (list(map(float, a.split())) for a in sys.argv[1:3])
m_rw, m_py = statistics.median(rw), statistics.median(py)
print(f"median: ragwatch {m_rw:.0f} traces/s, python {m_py:.0f} traces/s, ratio {m_rw / m_py:.1f}x")
PY
