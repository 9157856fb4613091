#!/usr/bin/env bash
# Builds the release `berth` (the lean client) and `berth-full` (the whole CLI and
# server), next to each other in the target directory. Extra arguments go to cargo
# (e.g. --quiet).
#
# On Linux with glibc, `berth` alone is linked statically (`-C target-feature=+crt-static`
# on that binary only; its dependencies are the same artifacts `berth-full` uses): it then
# starts without the dynamic loader and libgcc_s, whose start-up alone (relocations,
# CPU-feature probes that trap under a hypervisor) cost more CPU than the whole of
# `berth send`'s own work (issue 17). A plain `cargo build --release` links it
# dynamically; it works the same, a little slower to start.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked -p berth-local-agent --bin berth-full "$@"
case "$(rustc -vV | sed -n 's/^host: //p')" in
  *-linux-gnu)
    if ! cargo rustc --release --locked -p berth-local-agent --bin berth "$@" \
        -- -C target-feature=+crt-static; then
      echo "warning: linking berth statically failed (is libc6-dev installed?); linking it dynamically" >&2
      cargo build --release --locked -p berth-local-agent --bin berth "$@"
    fi
    ;;
  *) cargo build --release --locked -p berth-local-agent --bin berth "$@" ;;
esac
