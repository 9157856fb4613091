#!/usr/bin/env bash
# Berth's benchmarks in one command: builds the release `berth` and the runner, runs
# every benchmark with bounded time (about 10 minutes; --quick about 2), prints a
# table (one JSON document with --json) and regenerates BENCHMARKS.md at the root.
#
#   scripts/bench.sh [--json] [--quick] [--only GROUP,...]
#   scripts/bench.sh [--json] [--quick] --compare OTHER_BERTH
#
# --only runs some of footprint, dispatch, first, remote, throughput, reads, postgres, micro, and leaves
# BENCHMARKS.md alone. --compare runs only this build's API round trip against another
# build's (a `berth` with its `berth-full` beside it, e.g. main's, built in a worktree), in
# one loop, and leaves BENCHMARKS.md alone.
# Build output and progress go to stderr; stdout carries only the table or the JSON.
set -euo pipefail
cd "$(dirname "$0")/.."

args=()
compare=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --json|--quick) args+=("$1") ;;
    --only) [[ $# -ge 2 ]] || { echo "error: --only needs a list of groups" >&2; exit 2; }
            args+=("$1" "$2"); shift ;;
    --compare) [[ $# -ge 2 ]] || { echo "error: --compare needs the other build's berth" >&2; exit 2; }
            args+=("$1" "$(realpath "$2")"); compare=1; shift ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "error: unknown argument '$1'" >&2
       echo "hint: scripts/bench.sh [--json] [--quick] [--only GROUP,... | --compare OTHER_BERTH]" >&2
       exit 2 ;;
  esac
  shift
done

say() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

say "building release binaries"
cargo build --release -p berth-web --bin berth-server >&2
cargo build --release -p berth-tests --bin berth-bench >&2
if [[ $compare == 0 ]]; then
  say "building the criterion benches"
  # The runner starts these executables itself, so nothing rebuilds in the middle of a run.
  bench_exe() {
    cargo bench --no-run -p "$1" --bench "$2" --message-format=json-render-diagnostics \
      | grep '"kind":\["bench"\]' | grep -o '"executable":"[^"]*"' | tail -n 1 | cut -d'"' -f4
  }
  BERTH_BENCH_CORE_EXE=$(bench_exe berth-core core)
  BERTH_BENCH_NATIVE_EXE=$(bench_exe berth-local-agent native)
  export BERTH_BENCH_CORE_EXE BERTH_BENCH_NATIVE_EXE
fi
# `berth` and `berth-full` last: `cargo bench` builds the package's binaries too, and
# would leave a dynamically linked `berth` where build-berth.sh puts the static one.
say "building berth and berth-full"
scripts/build-berth.sh >&2
if [[ ! -f web/ui/pkg/berth_wasm_bg.wasm ]]; then
  say "building the wasm bundle"
  scripts/build-wasm.sh >&2 || echo "warning: the wasm bundle did not build; its row will say so" >&2
fi

say "running the benchmarks (load average: $(cut -d' ' -f1-3 /proc/loadavg))"
target="${CARGO_TARGET_DIR:-target}"
[[ "$target" == /* ]] || target="$PWD/$target"
BERTH_BIN="$target/release/berth" exec "$target/release/berth-bench" "${args[@]}"
