#!/usr/bin/env bash
# Two ragwatch builds side by side on the same real-length traces: `ragwatch replay` with the offline
# judge over FILE repeated TIMES times (e.g. the RAGTruth QA development set, answers of ~140 words),
# on one core, alternating the builds ROUNDS times so a neighbour's load hits both alike. Prints each
# run and the median traces per wall second and per CPU second of each build.
#   benches/replay_ab.sh FILE BIN_A BIN_B [TIMES=18] [ROUNDS=5] [CORE=0]
set -euo pipefail
file=$1 a=$2 b=$3
times=${4:-18}
rounds=${5:-5}
core=${6:-0}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for _ in $(seq "$times"); do cat "$file"; done > "$work/traces.jsonl"
n=$(wc -l < "$work/traces.jsonl")
echo "$n traces ($times x $(wc -l < "$file")), $(( $(stat -c %s "$work/traces.jsonl") / n )) bytes each; core $core"
timed() { /usr/bin/time -f "%e %U %S" -o "$work/time" taskset -c "$core" "$@" replay "$work/traces.jsonl" --output /dev/null >/dev/null 2>&1; awk '{print $1, $2 + $3}' "$work/time"; }
a_wall=() a_cpu=() b_wall=() b_cpu=()
for r in $(seq "$rounds"); do
  read -r wall cpu < <(timed "$a"); a_wall+=("$wall") a_cpu+=("$cpu")
  echo "round $r A: ${wall} s wall, ${cpu} s CPU"
  read -r wall cpu < <(timed "$b"); b_wall+=("$wall") b_cpu+=("$cpu")
  echo "round $r B: ${wall} s wall, ${cpu} s CPU"
done
python3 - "$n" "${a_wall[*]}" "${a_cpu[*]}" "${b_wall[*]}" "${b_cpu[*]}" <<'PY'
import statistics, sys
n = int(sys.argv[1])
aw, ac, bw, bc = (statistics.median(map(float, x.split())) for x in sys.argv[2:6])
print(f"median per wall second: A {n / aw:,.0f} traces/s, B {n / bw:,.0f}, A/B {bw / aw:.3f}")
print(f"median per CPU second:  A {n / ac:,.0f} traces/s, B {n / bc:,.0f}, A/B {bc / ac:.3f}")
PY
