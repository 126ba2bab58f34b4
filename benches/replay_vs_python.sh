#!/usr/bin/env bash
# `ragwatch replay` with the offline judge against a 15-line Python script (decode, stratify, one lexical
# support score), on the same file and the same core, alternating ROUNDS times so that a neighbour's load
# hits both sides alike. Prints each run (per wall second, and per CPU second of the process: on a shared
# machine a process waits for its core, and traces per CPU second is what a core of its own would do) and
# the ratios of the medians.
#   benches/replay_vs_python.sh [N=100000] [ROUNDS=3] [CORE=0]
# RAGWATCH_BIN= measures another build (not rebuilt) instead of this tree's.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-100000}
rounds=${2:-3}
core=${3:-0}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 tests/gen_traces.py "$n" --seed 12 --pad 1500 > "$work/traces.jsonl"
echo "$n traces, $(( $(stat -c %s "$work/traces.jsonl") / n )) bytes each on average; core $core"
bin=${RAGWATCH_BIN:-./target/release/ragwatch}
[[ -n ${RAGWATCH_BIN:-} ]] || cargo build --release -q
# Runs a command pinned to the core; prints "wall_secs cpu_secs" (user + system).
timed() { /usr/bin/time -f "%e %U %S" -o "$work/time" taskset -c "$core" "$@" >"$work/out" 2>/dev/null; awk '{print $1, $2 + $3}' "$work/time"; }
rw_wall=() rw_cpu=() py_wall=() py_cpu=()
for r in $(seq "$rounds"); do
  read -r wall cpu < <(timed "$bin" replay "$work/traces.jsonl" --output /dev/null)
  rw_wall+=("$wall") rw_cpu+=("$cpu")
  echo "round $r ragwatch replay: ${wall} s wall, ${cpu} s CPU (verdicts written, process start included)"
  read -r wall cpu < <(timed python3 benches/replay_vs_python.py "$work/traces.jsonl")
  py_wall+=("$wall") py_cpu+=("$cpu")
  echo "round $r python:          ${wall} s wall, ${cpu} s CPU ($(cat "$work/out"))"
done
python3 - "$n" "${rw_wall[*]}" "${rw_cpu[*]}" "${py_wall[*]}" "${py_cpu[*]}" <<'PY'
import statistics, sys
n = int(sys.argv[1])
rw_wall, rw_cpu, py_wall, py_cpu = (statistics.median(map(float, a.split())) for a in sys.argv[2:6])
print(f"median per wall second: ragwatch {n / rw_wall:,.0f} traces/s, python {n / py_wall:,.0f}, ratio {py_wall / rw_wall:.1f}x")
print(f"median per CPU second:  ragwatch {n / rw_cpu:,.0f} traces/s, python {n / py_cpu:,.0f}, ratio {py_cpu / rw_cpu:.1f}x")
PY
