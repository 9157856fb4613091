#!/usr/bin/env bash
# Builds the browser bundle: berth-wasm (berth-core WITHOUT local-binding) compiled to
# wasm32-unknown-unknown with the size-tuned `wasm` profile, then bound for the browser
# with the wasm-bindgen CLI of the same version as the crate, into web/ui/pkg/.
# Prints the bundle's raw and gzipped sizes.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
ensure_wasm_toolchain
ensure_wasm_opt

cargo build -p berth-wasm --target wasm32-unknown-unknown --profile wasm --locked
out=web/ui/pkg
rm -rf "$out.tmp" && mkdir -p "$out.tmp/opt"
# Size pass (binaryen) on rustc's output, BEFORE wasm-bindgen: it strips names and
# shrinks code; the features listed are the ones rustc enables by default for
# wasm32-unknown-unknown. Run after wasm-bindgen, binaryen 108 (Debian 12) rewrites the
# `__wbindgen_externrefs` export to point at the funcref table, and the bundle fails
# to initialise in the browser ("WebAssembly.Table.set(): Argument 1 is invalid").
wasm-opt -Oz --strip-debug --strip-producers \
  --enable-bulk-memory --enable-nontrapping-float-to-int --enable-sign-ext \
  --enable-mutable-globals --enable-reference-types --enable-multivalue \
  -o "$out.tmp/opt/berth_wasm.wasm" "${CARGO_TARGET_DIR:-target}/wasm32-unknown-unknown/wasm/berth_wasm.wasm"
wasm-bindgen --target web --no-typescript --out-dir "$out.tmp" "$out.tmp/opt/berth_wasm.wasm"
rm -rf "$out.tmp/opt"
rm -rf "$out" && mv "$out.tmp" "$out"

wasm="$out/berth_wasm_bg.wasm"
raw=$(wc -c <"$wasm")
gz=$(gzip -9 -c "$wasm" | wc -c)
js_raw=$(wc -c <"$out/berth_wasm.js")
js_gz=$(gzip -9 -c "$out/berth_wasm.js" | wc -c)
echo "wasm bundle: ${raw} B raw, ${gz} B gzipped; JS glue: ${js_raw} B raw, ${js_gz} B gzipped"
if (( gz > 60 * 1024 )); then
  echo "error: the wasm bundle is ${gz} B gzipped, over its 60 KB budget" >&2
  exit 1
fi
