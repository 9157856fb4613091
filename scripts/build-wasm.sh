#!/usr/bin/env bash
# Builds the browser bundle: berth-wasm (berth-core WITHOUT local-binding) compiled to
# wasm32-unknown-unknown with the size-tuned `wasm` profile, then bound for the browser
# with the wasm-bindgen CLI of the same version as the crate. Prints the bundle's raw and
# gzipped sizes and fails over the 60 KB gzipped budget.
#
# The bundle (web/ui/pkg/) is checked in: berth-web embeds it in every build, so
# `cargo install` and `cargo build` need no wasm toolchain. After changing core/ or
# wasm/ (or their dependencies), run this script and commit web/ui/pkg.
#
#   scripts/build-wasm.sh              write web/ui/pkg/
#   scripts/build-wasm.sh --out DIR    write DIR/ instead
#   scripts/build-wasm.sh --check      build into a temporary directory and fail unless
#                                      it is byte-for-byte web/ui/pkg/ (CI runs this)
#
# The build is reproducible: the same toolchain (rustc, the pinned wasm-bindgen CLI,
# binaryen's wasm-opt) gives the same bytes wherever the repository is cloned, since
# the paths rustc would embed (this checkout, cargo's home, the target directory) are
# remapped to fixed names.
set -euo pipefail

out=""
check=""
usage() {
  echo "usage: scripts/build-wasm.sh [--out DIR | --check]" >&2
  exit 2
}
while (($#)); do
  case "$1" in
    --out)
      [[ $# -ge 2 && -n "$2" ]] || usage
      out=$2
      [[ "$out" == /* ]] || out="$PWD/$out"
      shift 2
      ;;
    --check)
      check=1
      shift
      ;;
    *) usage ;;
  esac
done
[[ -z "$out" || -z "$check" ]] || usage

cd "$(dirname "$0")/.."
source scripts/lib.sh
pkg=web/ui/pkg
out=${out:-$pkg}

ensure_wasm_toolchain
ensure_wasm_opt

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT

root=$(pwd -P)
target="${CARGO_TARGET_DIR:-target}"
[[ "$target" == /* ]] || target="$root/$target"
# Reproducible paths, for this build only (the flags are the wasm target's: build
# scripts and proc macros, built for the host, keep theirs). rustc applies the last
# remapping that matches, so the most specific directories come last. The encoded form
# keeps paths with spaces whole and takes precedence over RUSTFLAGS from the caller.
remaps=(
  "--remap-path-prefix=${CARGO_HOME:-$HOME/.cargo}=/cargo"
  "--remap-path-prefix=$root=/berth"
  "--remap-path-prefix=$target=/target"
)
CARGO_ENCODED_RUSTFLAGS=$(IFS=$'\x1f'; echo "${remaps[*]}") \
  cargo build -p berth-wasm --target wasm32-unknown-unknown --profile wasm --locked

# Size pass (binaryen) on rustc's output, BEFORE wasm-bindgen: it strips names and
# shrinks code (`--converge` repeats the passes while they still shrink it: about 300 B
# gzipped); the features listed are the ones rustc enables by default for
# wasm32-unknown-unknown. Run after wasm-bindgen, binaryen 108 (Debian 12) rewrites the
# `__wbindgen_externrefs` export to point at the funcref table, and the bundle fails
# to initialise in the browser ("WebAssembly.Table.set(): Argument 1 is invalid").
mkdir -p "$stage/opt" "$stage/pkg"
wasm-opt -Oz --converge --strip-debug --strip-producers \
  --enable-bulk-memory --enable-nontrapping-float-to-int --enable-sign-ext \
  --enable-mutable-globals --enable-reference-types --enable-multivalue \
  -o "$stage/opt/berth_wasm.wasm" "$target/wasm32-unknown-unknown/wasm/berth_wasm.wasm"
wasm-bindgen --target web --no-typescript --out-dir "$stage/pkg" "$stage/opt/berth_wasm.wasm"

wasm="$stage/pkg/berth_wasm_bg.wasm"
raw=$(wc -c <"$wasm")
gz=$(gzip -9 -c "$wasm" | wc -c)
js_raw=$(wc -c <"$stage/pkg/berth_wasm.js")
js_gz=$(gzip -9 -c "$stage/pkg/berth_wasm.js" | wc -c)
echo "wasm bundle: ${raw} B raw, ${gz} B gzipped; JS glue: ${js_raw} B raw, ${js_gz} B gzipped"
if ((gz > 60 * 1024)); then
  echo "error: the wasm bundle is ${gz} B gzipped, over its 60 KB budget" >&2
  exit 1
fi

if [[ -n "$check" ]]; then
  # Every file, both ways: a changed, missing or extra file is a difference.
  if ! diff -r -q "$stage/pkg" "$pkg" >&2; then
    echo "error: the checked-in browser bundle does not match its sources ($pkg differs from a fresh build of core/ and wasm/)" >&2
    echo "hint: run scripts/build-wasm.sh and commit web/ui/pkg" >&2
    # The bundle embeds the compiler's commit (std's panic locations): a different rustc
    # alone changes it, so say when that is the cause.
    built_by=$(grep -a -o -m1 '/rustc/[0-9a-f]\{40\}' "$pkg/berth_wasm_bg.wasm" 2>/dev/null | head -n1 | cut -d/ -f3 || true)
    here=$(rustc -vV | sed -n 's/^commit-hash: //p')
    if [[ -n "$built_by" && "$built_by" != "$here" ]]; then
      echo "note: $pkg was built by rustc $built_by and this machine has rustc $here ($(rustc -V)); build and check the bundle with the same toolchain" >&2
    fi
    exit 1
  fi
  echo "the checked-in browser bundle ($pkg) matches its sources"
  exit 0
fi

mkdir -p "$(dirname "$out")"
rm -rf "$out.tmp"
cp -R "$stage/pkg" "$out.tmp"
rm -rf "$out"
mv "$out.tmp" "$out"
echo "wrote $out"
