#!/usr/bin/env bash
# Builds the browser bundle: berth-wasm (berth-core WITHOUT local-binding) compiled to
# wasm32-unknown-unknown with the size-tuned `wasm` profile, then bound for the browser
# with the wasm-bindgen CLI of the same version as the crate, into web/ui/pkg/.
# Prints the bundle's raw and gzipped sizes.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
ensure_wasm_toolchain

cargo build -p berth-wasm --target wasm32-unknown-unknown --profile wasm --locked
out=web/ui/pkg
rm -rf "$out.tmp" && mkdir -p "$out.tmp"
wasm-bindgen --target web --no-typescript --out-dir "$out.tmp" \
  target/wasm32-unknown-unknown/wasm/berth_wasm.wasm
rm -rf "$out" && mv "$out.tmp" "$out"

wasm="$out/berth_wasm_bg.wasm"
raw=$(wc -c <"$wasm")
gz=$(gzip -9 -c "$wasm" | wc -c)
js_gz=$(gzip -9 -c "$out/berth_wasm.js" | wc -c)
echo "wasm bundle: $wasm raw ${raw} B, gzipped ${gz} B (+ glue JS gzipped ${js_gz} B)"
if (( gz + js_gz > 60 * 1024 )); then
  echo "error: the browser bundle is over the 60 KB gzipped budget" >&2
  exit 1
fi
