# Shared set-up steps for Berth's scripts. Each step checks before it installs, so the
# scripts are fast on a prepared machine and complete on a fresh one.

# The wasm-bindgen version pinned in Cargo.toml (`wasm-bindgen = "=X"`): the CLI must
# match the crate exactly.
WASM_BINDGEN_VERSION=$(sed -n 's/^wasm-bindgen = "=\(.*\)"/\1/p' Cargo.toml)

# Each heading carries the seconds since the outermost script began (scripts called by
# scripts/test.sh count from its start), so a CI log shows where the time went: the gap
# between two headings is the step's cost.
: "${BERTH_T0:=$(date +%s)}"
export BERTH_T0
say() { printf '\033[1m==> [%4ds] %s\033[0m\n' "$(($(date +%s) - BERTH_T0))" "$*"; }

ensure_wasm_toolchain() {
  if ! rustup target list --installed | grep -qx wasm32-unknown-unknown; then
    say "installing the wasm32-unknown-unknown target"
    rustup target add wasm32-unknown-unknown
  fi
  local have=""
  if command -v wasm-bindgen >/dev/null; then
    have=$(wasm-bindgen --version | awk '{print $2}')
  fi
  if [[ "$have" != "$WASM_BINDGEN_VERSION" ]]; then
    say "installing wasm-bindgen-cli $WASM_BINDGEN_VERSION (found: ${have:-none})"
    # --locked first, as upstream intends; its lock file has named a crate version the
    # registry no longer serves, so fall back to a fresh resolution of the same release.
    cargo install wasm-bindgen-cli --version "$WASM_BINDGEN_VERSION" --locked \
      || cargo install wasm-bindgen-cli --version "$WASM_BINDGEN_VERSION"
  fi
}

ensure_wasm_opt() {
  if ! command -v wasm-opt >/dev/null; then
    say "installing binaryen (wasm-opt) from Debian's packages"
    apt_install binaryen
  fi
}

ensure_node() {
  if ! command -v node >/dev/null; then
    say "installing Node.js from Debian's packages"
    apt_install nodejs npm
  fi
}

# The macOS cross build (issue 19): rustup's two Apple targets, and zig (PyPI's `ziglang`)
# as the C compiler and linker through `cargo-zigbuild` (PyPI's prebuilt wheel).
ensure_macos_cross() {
  local installed
  installed=$(rustup target list --installed)
  for t in aarch64-apple-darwin x86_64-apple-darwin; do
    grep -qx "$t" <<<"$installed" || rustup target add "$t"
  done
  export PATH="$HOME/.local/bin:$PATH"
  if ! command -v cargo-zigbuild >/dev/null || ! python3 -m ziglang version >/dev/null 2>&1; then
    say "installing cargo-zigbuild and ziglang from PyPI"
    # A Debian python refuses system-wide installs (PEP 668): then into ~/.local.
    python3 -m pip install --quiet --disable-pip-version-check cargo-zigbuild ziglang ||
      python3 -m pip install --quiet --disable-pip-version-check --user \
        --break-system-packages cargo-zigbuild ziglang
  fi
}

# tmux drives `berth chat` through a real pseudo-terminal in tests/tests/suite/chat.rs.
# `systemd-analyze verify` checks the unit `berth service install --print` writes
# (tests/tests/suite/ops.rs); Debian ships it in the systemd package.
ensure_systemd_analyze() {
  if ! command -v systemd-analyze >/dev/null; then
    say "installing systemd-analyze from Debian's packages"
    apt_install systemd
  fi
}

ensure_tmux() {
  if ! command -v tmux >/dev/null; then
    say "installing tmux from Debian's packages"
    apt_install tmux
  fi
}

# A private D-Bus session bus and dbus-monitor, for the desktop notifications' test
# (tests/src/dbus.rs): dbus-daemon and dbus-monitor, from Debian's dbus package.
ensure_dbus() {
  if ! command -v dbus-daemon >/dev/null || ! command -v dbus-monitor >/dev/null; then
    say "installing dbus from Debian's packages"
    apt_install dbus
  fi
}

# PostgreSQL's server, for the tests' throwaway clusters (scripts/pg-cluster.sh), found
# where that script looks: pg_config's bindir, else /usr/lib/postgresql/*/bin.
ensure_postgres() {
  local bindir
  bindir=$(pg_config --bindir 2>/dev/null) || bindir=""
  if [[ ! -x "$bindir/postgres" ]] && ! compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null; then
    say "installing PostgreSQL from Debian's packages"
    apt_install postgresql
  fi
}

# The coding agent CLIs that tests/tests/suite/real_clis.rs, real_agents.rs and
# real_acp.rs drive against fake model servers, at pinned versions (about 1 GB), in BERTH_AGENT_CLIS
# (default ~/.cache/berth-agents): Claude Code, Codex, and three ACP agents (Gemini CLI,
# Zed's Codex adapter, opencode's `opencode acp`). Installs only when a package is missing
# or has another version, then exports BERTH_AGENT_CLIS for the tests.
ensure_agent_clis() {
  local claude_version="2.1.332"
  local codex_version="0.171.0"
  local gemini_version="0.61.0"
  local codex_acp_version="0.16.0"
  local opencode_version="1.18.33"
  local dir="${BERTH_AGENT_CLIS:-$HOME/.cache/berth-agents}"
  local bin="$dir/node_modules/.bin"
  local have_claude="" have_codex="" have_gemini="" have_codex_acp="" have_opencode=""
  if [[ -x "$bin/claude" ]]; then
    have_claude=$("$bin/claude" --version 2>/dev/null | awk '{print $1}') || have_claude=""
  fi
  if [[ -x "$bin/codex" ]]; then
    have_codex=$("$bin/codex" --version 2>/dev/null | awk '{print $2}') || have_codex=""
  fi
  if [[ -f "$dir/node_modules/@google/gemini-cli/package.json" ]]; then
    have_gemini=$(node -p 'require(process.argv[1]).version' \
      "$dir/node_modules/@google/gemini-cli/package.json" 2>/dev/null) || have_gemini=""
  fi
  if [[ -f "$dir/node_modules/@zed-industries/codex-acp/package.json" ]]; then
    have_codex_acp=$(node -p 'require(process.argv[1]).version' \
      "$dir/node_modules/@zed-industries/codex-acp/package.json" 2>/dev/null) || have_codex_acp=""
  fi
  if [[ -f "$dir/node_modules/opencode-ai/package.json" ]]; then
    have_opencode=$(node -p 'require(process.argv[1]).version' \
      "$dir/node_modules/opencode-ai/package.json" 2>/dev/null) || have_opencode=""
  fi
  if [[ "$have_claude" != "$claude_version" || "$have_codex" != "$codex_version" \
    || "$have_gemini" != "$gemini_version" || "$have_codex_acp" != "$codex_acp_version" \
    || "$have_opencode" != "$opencode_version" ]]; then
    say "installing claude-code $claude_version, codex $codex_version, gemini-cli" \
      "$gemini_version, codex-acp $codex_acp_version and opencode $opencode_version" \
      "into $dir (found: ${have_claude:-none}, ${have_codex:-none}, ${have_gemini:-none}," \
      "${have_codex_acp:-none}, ${have_opencode:-none})"
    mkdir -p "$dir"
    npm install --no-audit --no-fund --save-exact --prefix "$dir" \
      "@anthropic-ai/claude-code@$claude_version" "@openai/codex@$codex_version" \
      "@google/gemini-cli@$gemini_version" "@zed-industries/codex-acp@$codex_acp_version" \
      "opencode-ai@$opencode_version"
  fi
  export BERTH_AGENT_CLIS="$dir"
}

# The deployed berth-server is a static musl binary (scripts/build-server.sh): rustup's
# musl target for the host's architecture, and a musl C compiler for rusqlite's bundled
# SQLite and ring (Debian's musl-tools: musl-gcc).
ensure_musl() {
  local target="$1"
  if ! rustup target list --installed | grep -qx "$target"; then
    say "installing the $target target" >&2
    rustup target add "$target" >&2
  fi
  if ! command -v musl-gcc >/dev/null; then
    say "installing musl-tools (musl-gcc) from Debian's packages" >&2
    apt_install musl-tools >&2
  fi
}

# The container image (scripts/build-image.sh): Debian's podman (which brings buildah's
# library; `podman build` is enough for a FROM-scratch image of COPY lines).
ensure_podman() {
  if ! command -v podman >/dev/null; then
    say "installing podman from Debian's packages" >&2
    apt_install podman >&2
  fi
}

apt_updated=""
apt_install() {
  if [[ -z "$apt_updated" ]]; then
    apt-get update -qq
    apt_updated=1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
}
