#!/usr/bin/env bash
# Runs each fuzz target for a set time (default 60 s each), keeping the corpus found
# under fuzz/corpus/<target>/, minimized afterwards to the inputs that cover distinct
# edges (`cargo fuzz cmin`, hit counts ignored) so it stays small enough to commit.
# fuzz/seeds/<target>/, where it exists, seeds a run. Not part of CI. A crash stops
# the script and leaves its input under fuzz/artifacts/<target>/.
#
#   fuzz/run.sh [SECONDS] [TARGET...]
#
# Needs cargo-fuzz (`cargo install cargo-fuzz`); the sanitizer flags it passes are
# unstable, so a stable toolchain is told to accept them with RUSTC_BOOTSTRAP=1.
set -euo pipefail
cd "$(dirname "$0")"
seconds=${1:-60}
shift || true
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz
export RUSTC_BOOTSTRAP=1
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || mapfile -t targets < <(cargo fuzz list)
for target in "${targets[@]}"; do
  mkdir -p "corpus/$target"
  seeds=()
  [[ -d "seeds/$target" ]] && seeds=("seeds/$target")
  echo "==> $target for ${seconds}s"
  cargo fuzz run "$target" "corpus/$target" "${seeds[@]}" -- -max_total_time="$seconds"
  echo "==> $target: minimizing the corpus"
  cargo fuzz cmin "$target" "corpus/$target" -- -use_counters=0
done
