#!/usr/bin/env bash
# What [variants] adds to /metrics: the shipped demo config (config/ragwatch.toml, its 4 declared
# strata plus default and other) with the LLM judge as the sampled judge, scraped once without
# variants and once with `stable` and `canary`; prints the series and the bytes of each scrape.
#   cargo build --release && benches/variant_series.sh
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
port=19464
for mode in off on; do
  vars=(RAGWATCH__HTTP__LISTEN=127.0.0.1:$port RAGWATCH__JUDGE__SAMPLED=llm
    RAGWATCH__LLM__BASE_URL=http://127.0.0.1:9/v1 RAGWATCH__LLM__CHAT_MODEL=judge
    RAGWATCH__LLM__EMBEDDING_MODEL=embed)
  if [ "$mode" = on ]; then
    vars+=('RAGWATCH__VARIANTS__DECLARED=["stable","canary"]' RAGWATCH__VARIANTS__BASELINE=stable
      'RAGWATCH__VARIANTS__FIELDS=["/release"]')
  fi
  env "${vars[@]}" ./target/release/ragwatch run --config config/ragwatch.toml >"$out/$mode.log" 2>&1 &
  pid=$!
  for _ in $(seq 50); do
    curl -sf "127.0.0.1:$port/metrics" >"$out/$mode.txt" && break
    sleep 0.2
  done
  sleep 5
  curl -sf "127.0.0.1:$port/metrics" >"$out/$mode.txt"
  kill "$pid"
  wait "$pid" || true
  series=$(grep -vc '^#' "$out/$mode.txt")
  added=$(grep -v '^#' "$out/$mode.txt" | grep -c 'ragwatch_comparison_\|ragwatch_variant_' || true)
  echo "variants $mode: $series series, $(wc -c <"$out/$mode.txt") bytes; of them comparison and variant series: $added"
done
