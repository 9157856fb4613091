#!/usr/bin/env bash
# The web UI in a real browser: headless Chromium (Debian's package) driven by
# playwright-core, against `berth serve` with fake agents. Installs what it needs on a
# fresh machine, builds the `berth` binary (which embeds the UI and the checked-in wasm
# bundle, web/ui/pkg; scripts/test.sh checks that bundle against its sources), then
# runs tests/browser/ui.test.mjs. Screenshots land in tests/artifacts/.
#
#   scripts/test-browser.sh
#   BERTH_BIN=/path/to/berth scripts/test-browser.sh   (skip building the binary)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

ensure_node
if [[ ! -x "${CHROMIUM:-/usr/bin/chromium}" ]]; then
  say "installing Chromium from Debian's packages"
  apt_install chromium
fi
if [[ ! -d tests/browser/node_modules/playwright-core ]]; then
  say "installing playwright-core (tests/browser/package-lock.json)"
  (cd tests/browser && npm ci --no-audit --no-fund)
fi

if [[ -z "${BERTH_BIN:-}" ]]; then
  say "the berth binary (embeds the UI and the checked-in bundle)"
  cargo build -p berth-local-agent --bin berth --bin berth-full -p berth-web --bin berth-server --locked
  target_dir="${CARGO_TARGET_DIR:-target}"
  [[ "$target_dir" == /* ]] || target_dir="$PWD/$target_dir"
  export BERTH_BIN="$target_dir/debug/berth"
fi

say "the web UI in headless Chromium"
mkdir -p tests/artifacts
cd tests/browser
node --test --test-concurrency=1 --test-reporter=spec ui.test.mjs
