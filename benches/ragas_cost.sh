#!/usr/bin/env bash
# Tokens per judged trace: ragwatch's LLM judge against the RAGAS library itself (ragas 0.4.3
# collections metrics), on the same traces, billed by the same stand-in server (benches/judge_stub.py).
#
#   benches/ragas_cost.sh [TRACES.jsonl] [N]
#
# Defaults: the first 200 traces of ../shared/data/ragtruth_qa_train.jsonl (real RAG answers), or of
# `tests/gen_traces.py 200 --pad 1500` when that file is absent. RAGAS goes into a virtualenv under
# target/ (PyPI), pinned to the versions this was measured with. Also reports CPU seconds per judged
# trace outside the API (the stand-in answers in well under a millisecond).
set -euo pipefail
cd "$(dirname "$0")/.."
N=${2:-200}
work=$(mktemp -d)
trap 'kill $stub 2>/dev/null || true; rm -rf "$work"' EXIT
if [[ -n ${1:-} ]]; then
    head -n "$N" "$1" > "$work/traces.jsonl"
elif [[ -f ../shared/data/ragtruth_qa_train.jsonl ]]; then
    head -n "$N" ../shared/data/ragtruth_qa_train.jsonl > "$work/traces.jsonl"
else
    python3 tests/gen_traces.py "$N" --seed 31 --pad 1500 > "$work/traces.jsonl"
fi

venv=target/ragas-venv
if [[ ! -x $venv/bin/python ]] || ! "$venv/bin/python" -c "import ragas" 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q "ragas==0.4.3" "langchain-community==0.3.31" "langchain-core==0.3.86" \
        "langchain==0.3.30" "langchain-openai==0.3.35" "openai==1.109.1"
fi
cargo build --release --quiet
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
python3 benches/judge_stub.py "$port" & stub=$!
base="http://127.0.0.1:$port/v1"
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$port/stats" >/dev/null && break; sleep 0.1; done

# One measurement: reset the server's meters, run the command, print a row from the meters and the
# command's CPU time.
measure() {
    local name=$1; shift
    curl -sf -X POST "http://127.0.0.1:$port/reset" >/dev/null
    /usr/bin/time -f "%U %S" -o "$work/cpu" "$@" > "$work/out" 2> "$work/err" || { cat "$work/err"; exit 1; }
    local judged
    judged=$(python3 - "$work/out" "$name" <<'EOF'
import json, sys
text = open(sys.argv[1]).read().strip().splitlines()
if sys.argv[2].startswith("ragas"):
    print(json.loads(text[-1])["traces"])
else:
    print(sum(1 for l in text if json.loads(l)["status"] in ("judged", "no_claims")))
EOF
)
    curl -sf "http://127.0.0.1:$port/stats" | python3 -c "
import json, sys
s = json.load(sys.stdin); n = $judged
u, k = map(float, open('$work/cpu').read().split()[-2:])
total = s['prompt_tokens'] + s['completion_tokens'] + s['embedding_tokens']
print(f\"{'$name':<34} {n:>6} {s['chat_requests']/n:>6.2f} {s['embedding_requests']/n:>5.2f} {s['prompt_tokens']/n:>8.0f} {s['completion_tokens']/n:>7.0f} {s['embedding_tokens']/n:>6.0f} {total/n:>8.0f} {(u+k)*1000/n:>8.2f}\")
print(total / n, file=open('$work/total-$name', 'w'))
"
}

config() {
    cat > "$work/$1.toml" <<EOF
[judge]
sampled = "llm"
workers = 1
[llm]
base_url = "$base"
chat_model = "judge-stub"
embedding_model = "embed-stub"
# The stub speaks JSON schema; fixing the mode spares the start-up probe (not a judged trace's cost).
structured_output = "json_schema"
cache_capacity = 0
faithfulness_mode = "$2"
context_relevance = $3
[budget]
requests_per_minute = 1000000
tokens_per_minute = 1000000000
tokens_per_day = 100000000000
EOF
    echo "$work/$1.toml"
}

printf '%-34s %6s %6s %5s %8s %7s %6s %8s %8s\n' form traces calls embeds prompt compl embed total cpu_ms
rw=target/release/ragwatch
measure ragwatch_one_call "$rw" replay --judge llm --config "$(config a one_call false)" "$work/traces.jsonl"
measure ragwatch_two_call "$rw" replay --judge llm --config "$(config b two_call false)" "$work/traces.jsonl"
measure ragas_f_ar "$venv/bin/python" benches/ragas_cost.py "$base" "$work/traces.jsonl" "$N"
measure ragwatch_one_call+context "$rw" replay --judge llm --config "$(config c one_call true)" "$work/traces.jsonl"
measure ragwatch_two_call+context "$rw" replay --judge llm --config "$(config d two_call true)" "$work/traces.jsonl"
measure ragas_f_ar+context_precision "$venv/bin/python" benches/ragas_cost.py "$base" "$work/traces.jsonl" "$N" --context-precision
ratio() { python3 -c "print(f'{float(open(\"$work/total-$1\").read())/float(open(\"$work/total-$2\").read()):.2f}')"; }
echo
echo "faithfulness + answer relevancy:      one_call $(ratio ragwatch_one_call ragas_f_ar)x RAGAS, two_call $(ratio ragwatch_two_call ragas_f_ar)x"
echo "with context relevance / precision:   one_call $(ratio ragwatch_one_call+context ragas_f_ar+context_precision)x RAGAS, two_call $(ratio ragwatch_two_call+context ragas_f_ar+context_precision)x"
