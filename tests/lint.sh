#!/usr/bin/env bash
# The habits CI enforces before any test runs: formatted code, no clippy warning, docs that build
# without a warning. Called by tests/run.sh; run it alone before a commit.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all -- --check
cargo clippy --release --all-targets -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --release --no-deps --quiet
