#!/usr/bin/env bash
# Runs every test Berth has, installing what they need on a fresh machine first.
# This is the README's test command and what CI runs (.ci/run).
#
#   scripts/test.sh            everything
#   scripts/test.sh --quick    skip the slow end-to-end suites (browser, fault runs)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

quick=""
[[ "${1:-}" == "--quick" ]] && quick=1

# A full run's builds (four feature sets, macOS, release, musl) take about 20 GB of
# target directories: say so up front rather than fail half-way with ENOSPC.
target_parent=$(dirname "${CARGO_TARGET_DIR:-$PWD/target}")
mkdir -p "$target_parent"
free_kb=$(df -Pk "$target_parent" | awk 'NR == 2 {print $4}')
if [[ -n "$free_kb" ]] && ((free_kb < 20 * 1024 * 1024)); then
  echo "warning: $((free_kb / 1024 / 1024)) GB free under $target_parent; a full run's builds need about 20 GB" >&2
  echo "hint: remove old target directories (cargo clean) or point CARGO_TARGET_DIR at a bigger disk" >&2
fi

ensure_wasm_toolchain
ensure_node
ensure_agent_clis
ensure_tmux
ensure_dbus
ensure_systemd_analyze
ensure_postgres
rustup component list --installed | grep -q '^rustfmt' || rustup component add rustfmt
rustup component list --installed | grep -q '^clippy' || rustup component add clippy

say "formatting"
cargo fmt --all -- --check
say "no import circles between modules (issue 35)"
python3 scripts/module-cycles.py
# The runner (the in-place executor's folders) leans on core's contract types and
# berth-host, never on the server crate: only cli/, front/, daemon/, notify/ and serve.rs may.
say "the runner's folders import nothing from berth-web (issue 53)"
if grep -rln --include='*.rs' berth_web local-agent/src/{agent,changes,dir,inject,run,settings,git}; then
  echo "the files above name berth_web: take the contract's types from berth_core::exec, host helpers from berth_host" >&2
  exit 1
fi
say "every relative link and #anchor in the README and docs/ resolves"
python3 scripts/check-links.py

# The browser bundle is checked in (web/ui/pkg) and embedded by berth-web as it is:
# rebuild it from core/ and wasm/ into a temporary directory and fail unless it matches
# byte for byte. Early, as it is quick and a stale bundle is a common slip.
say "the checked-in browser bundle matches its sources"
scripts/build-wasm.sh --check

say "clippy, default features"
cargo clippy --workspace --all-targets --locked -- -D warnings
say "clippy, without local-binding (browser and cloud builds)"
cargo clippy -p berth-core -p berth-web -p berth-wasm --all-targets --no-default-features --locked -- -D warnings
cargo clippy -p berth-web --all-targets --no-default-features --features postgres --locked -- -D warnings
say "clippy, the browser bundle for wasm32"
cargo clippy -p berth-wasm --target wasm32-unknown-unknown --all-targets --locked -- -D warnings

# macOS: clippy-clean and built (linked, not only checked) for Apple silicon, and
# checked for Intel Macs (the same source; linking it too was CI's slowest step for what
# it added, issue 53), in a target directory of its own, so the host build is not
# rebuilt. The Mac gets the desktop build only (the cloud build, without local-binding,
# is Linux's: its clippy above covers its code). Nothing runs there: see docs/mac.md,
# "What is tested where".
ensure_macos_cross
mac_target="${CARGO_TARGET_DIR:-target}-macos"
say "macOS: clippy (aarch64-apple-darwin)"
CARGO_TARGET_DIR="$mac_target" cargo-zigbuild clippy --target aarch64-apple-darwin \
  --workspace --all-targets --locked -- -D warnings
say "macOS: building berth and berth-server for aarch64-apple-darwin"
CARGO_TARGET_DIR="$mac_target" cargo zigbuild --target aarch64-apple-darwin --locked \
  -p berth-local-agent --bin berth --bin berth-full -p berth-web --bin berth-server
say "macOS: checking berth and berth-server for x86_64-apple-darwin"
CARGO_TARGET_DIR="$mac_target" cargo-zigbuild check --target x86_64-apple-darwin --locked \
  -p berth-local-agent --bin berth --bin berth-full -p berth-web --bin berth-server

# One throwaway PostgreSQL cluster for every test that needs one (the store suite on
# PostgreSQL, berth-server --database): in a temporary directory, as a non-root user,
# on a loopback port; its reaper stops it and removes it when this script exits.
say "a throwaway PostgreSQL server for the tests"
BERTH_TEST_DATABASE_URL=$(scripts/pg-cluster.sh start --watch $$)
export BERTH_TEST_DATABASE_URL

say "tests, default features"
cargo test --workspace --locked
# The binaries that build made (berth, berth-full, berth-server, berth-bench, in
# target/debug) are what the browser and the dispatch benchmark run next, before any
# other feature set is built over them: building them again on their own resolved
# other features and recompiled (issue 53).
dbg="${CARGO_TARGET_DIR:-target}/debug"
[[ "$dbg" == /* ]] || dbg="$PWD/$dbg"

if [[ -z "$quick" && -x scripts/test-browser.sh ]]; then
  say "the web UI in headless Chromium"
  BERTH_BIN="$dbg/berth" scripts/test-browser.sh
fi

if [[ -z "$quick" ]]; then
  # Issue 17: the dispatch benchmark runs end to end (a benchmark that cannot run fails
  # the tests; a missed goal prints NO and never does). On the test build's binaries:
  # a release build of its own was CI's largest compile (issue 53), and a debug build's
  # figures say nothing of Berth's speed. The figures are scripts/bench.sh's, on release
  # builds (BENCHMARKS.md).
  say "the dispatch benchmark runs (its quick mode, on the debug build: the figures are not the benchmark's)"
  BERTH_BIN="$dbg/berth" "$dbg/berth-bench" --quick --only dispatch
fi

# The runs below that take part of the workspace select it whole (`--workspace --test
# all`, a name filter): `-p ONE` resolves other features, and every crate under them
# was compiled again (issue 53). Only the cloud build's features differ on purpose.
say "the agents' process tests again on the fork path (macOS's, and old kernels')"
BERTH_SPAWN_FORK=1 cargo test --workspace --locked --test all -- \
  suite::processes:: suite::groups:: suite::agents:: suite::fence::
say "tests, without local-binding (the cloud build, with PostgreSQL)"
cargo test -p berth-core -p berth-web -p berth-wasm --no-default-features \
  --features berth-web/postgres --locked

say "wasm tests under Node"
cargo test -p berth-wasm --target wasm32-unknown-unknown --locked

if [[ -z "$quick" ]]; then
  # Issue 38: berth-server as deployed (the static musl cloud build with PostgreSQL)
  # and the image made from it, checked by the ignored tests in
  # tests/tests/suite/deployed.rs.
  # The release musl build is this step's cost (about 2 minutes on 2 cores from clean).
  say "the deployed berth-server and its image"
  BERTH_DEPLOYED_SERVER=$(scripts/build-server.sh --quiet)
  BERTH_IMAGE=$(scripts/build-image.sh --binary "$BERTH_DEPLOYED_SERVER")
  export BERTH_DEPLOYED_SERVER BERTH_IMAGE
  cargo test --workspace --test all --locked -- --ignored suite::deployed::
  # The metrics' end-to-end test again, on the deployed binary: its task counter moves
  # when a task runs through a daemon.
  cargo test --workspace --test all --locked -- suite::metrics::
fi
say "all tests passed"
