#!/usr/bin/env bash
# Runs each fuzz target for a set time (default 60 s each), keeping the corpus found
# under fuzz/corpus/<target>/. Not part of CI. Needs nightly-free cargo-fuzz:
#   cargo install cargo-fuzz
set -euo pipefail
cd "$(dirname "$0")"
seconds=${1:-60}
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz
for target in $(cargo fuzz list); do
  mkdir -p "corpus/$target"
  echo "==> $target for ${seconds}s"
  RUSTC_BOOTSTRAP=1 cargo fuzz run "$target" "corpus/$target" -- -max_total_time="$seconds"
done
