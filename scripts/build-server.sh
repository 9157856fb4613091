#!/usr/bin/env bash
# Builds `berth-server` as a team deploys it: the cloud build (berth-web without
# `local-binding`) with PostgreSQL, in release, from the lock file:
#
#   cargo build -p berth-web --no-default-features --features postgres --release --locked
#
# On Linux (x86_64, aarch64) for the host architecture's musl target: one static binary,
# no dynamic loader, no libc to match, which is what the container image holds
# (scripts/build-image.sh). rusqlite's bundled SQLite and ring's C parts need a musl C
# compiler: Debian's musl-tools, installed when missing, as is the rustup target.
#
#   scripts/build-server.sh            the static musl binary (elsewhere: the host's)
#   scripts/build-server.sh --host     the same build for the host target (glibc, dynamic)
#
# Extra arguments go to cargo (e.g. --quiet). Progress goes to stderr; the last line of
# stdout is the binary's absolute path, so `server=$(scripts/build-server.sh)` works.
# Honours CARGO_TARGET_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

host_only=""
cargo_args=()
for a in "$@"; do
  case "$a" in
    --host) host_only=1 ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) cargo_args+=("$a") ;;
  esac
done

host=$(rustc -vV | sed -n 's/^host: //p')
target=""
if [[ -z "$host_only" ]]; then
  case "$host" in
    x86_64-unknown-linux-*) target=x86_64-unknown-linux-musl ;;
    aarch64-unknown-linux-*) target=aarch64-unknown-linux-musl ;;
    *) echo "note: no musl target for $host; building for the host" >&2 ;;
  esac
fi

features=(-p berth-web --bin berth-server --no-default-features --features postgres --release --locked)
out="${CARGO_TARGET_DIR:-target}"
[[ "$out" == /* ]] || out="$PWD/$out"
if [[ -n "$target" ]]; then
  ensure_musl "$target"
  # cc-rs would look for `x86_64-linux-musl-gcc` first; Debian's wrapper is musl-gcc.
  cc_var="CC_${target//-/_}"
  export "$cc_var=${!cc_var:-musl-gcc}"
  say "building berth-server for $target (static; release, no local-binding, postgres)" >&2
  cargo build "${features[@]}" --target "$target" ${cargo_args[@]+"${cargo_args[@]}"} >&2
  bin="$out/$target/release/berth-server"
else
  say "building berth-server for $host (release, no local-binding, postgres)" >&2
  cargo build "${features[@]}" ${cargo_args[@]+"${cargo_args[@]}"} >&2
  bin="$out/release/berth-server"
fi
[[ -x "$bin" ]] || { echo "error: cargo finished but $bin is missing" >&2; exit 1; }
echo "$bin"
