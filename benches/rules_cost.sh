#!/usr/bin/env bash
# What the shipped rules cost a Prometheus: for each (replicas, strata) case, ragwatch replicas
# judge generated traces (offline on every trace, an LLM stand-in, benches/judge_stub.py, on a
# sample) and one real Prometheus scrapes them every 15 s and evaluates deploy/prometheus/rules.yaml
# (the shipped windows) every 15 s for MINUTES minutes. Reported from Prometheus's own metrics: the
# raw ragwatch series it holds, the series the rules record, the head series in all, and the
# rule groups' evaluation time (the sum of every group's last evaluation, and the slowest group).
# Series per stratum and per replica follow from the differences between the cases.
#   benches/rules_cost.sh [MINUTES=4]
# The evaluation time is measured with MINUTES of data: the rules that read 24-hour ranges read
# more samples as a day of data accumulates, and cost more then (see docs/operations.md).
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=${1:-4}
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
cargo build --release -q
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
judge=$(free_port)
python3 benches/judge_stub.py "$judge" >"$work/judge.log" 2>&1 &
pids+=($!)
query() {
  curl -s --get "http://127.0.0.1:$prom/api/v1/query" --data-urlencode "query=$1" |
    python3 -c 'import json, sys; r = json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else 0)'
}
printf '%8s %6s %10s %15s %12s %16s %18s\n' replicas strata raw_series recorded_series head_series rule_eval_ms slowest_group_ms
for case in "1 1" "1 8" "2 8"; do
  read -r replicas strata <<<"$case"
  names=$(python3 -c "print(','.join(f's{i}' for i in range($strata)))")
  declared=$(python3 -c "print(', '.join(f'\"s{i}\"' for i in range($strata)))")
  python3 tests/gen_traces.py 4000 --seed 7 --strata "$names" >"$work/traces.jsonl"
  targets=()
  case_pids=()
  for r in $(seq "$replicas"); do
    rm -f "$work/addr-$r"
    cat >"$work/ragwatch-$r.toml" <<TOML
[source]
kind = "file"
path = "$work/traces.jsonl"
rate_per_sec = 50
loop = true
[strata]
declared = [$declared]
[sample]
default_rate = 0.2
[budget]
requests_per_minute = 60000
tokens_per_minute = 100000000
tokens_per_day = 10000000000
[judge]
sampled = "llm"
[llm]
base_url = "http://127.0.0.1:$judge/v1"
chat_model = "judge-stub"
embedding_model = "embed-stub"
[http]
listen = "127.0.0.1:0"
port_file = "$work/addr-$r"
TOML
    ./target/release/ragwatch run --config "$work/ragwatch-$r.toml" 2>"$work/ragwatch-$r.log" &
    case_pids+=($!)
    for _ in $(seq 100); do [ -s "$work/addr-$r" ] && break; sleep 0.1; done
    targets+=("\"$(cat "$work/addr-$r")\"")
  done
  prom=$(free_port)
  cp deploy/prometheus/rules.yaml "$work/rules.yaml"
  cat >"$work/prometheus.yml" <<YAML
global:
  scrape_interval: 15s
  evaluation_interval: 15s
rule_files: [rules.yaml]
scrape_configs:
  - job_name: prometheus
    static_configs:
      - targets: ["127.0.0.1:$prom"]
  - job_name: rag
    static_configs:
      - targets: [$(IFS=,; echo "${targets[*]}")]
        labels: {namespace: rag}
YAML
  rm -rf "$work/tsdb"
  prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
    --web.listen-address="127.0.0.1:$prom" 2>"$work/prometheus.log" &
  case_pids+=($!)
  for _ in $(seq 300); do curl -sf "http://127.0.0.1:$prom/-/ready" >/dev/null && break; sleep 0.1; done
  sleep $((minutes * 60))
  raw=$(query 'count({__name__=~"ragwatch_.+"})')
  recorded=$(query 'count({__name__=~"ragwatch:.+"})')
  head=$(query 'prometheus_tsdb_head_series')
  eval_ms=$(query 'sum(prometheus_rule_group_last_duration_seconds) * 1000')
  slowest=$(query 'max(prometheus_rule_group_last_duration_seconds) * 1000')
  printf '%8s %6s %10s %15s %12s %16.1f %18.1f\n' "$replicas" "$strata" "$raw" "$recorded" "$head" "$eval_ms" "$slowest"
  for p in "${case_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${case_pids[@]}"; do wait "$p" 2>/dev/null || true; done
done
