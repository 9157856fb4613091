#!/usr/bin/env bash
# Builds the berth-server container image from the Containerfile at the root, with
# Debian's podman (installed when missing): FROM scratch, the static musl binary from
# scripts/build-server.sh, the CA bundle, a non-root user (10001) and its BERTH_HOME.
# The image holds only COPY lines, so the build runs nothing and needs no container
# runtime.
#
#   scripts/build-image.sh [--tag NAME:TAG] [--binary PATH]
#
# --tag      default localhost/berth-server:VERSION (the binary's --version)
# --binary   an already built static berth-server (default: run build-server.sh)
#
# The build context is a temporary directory holding only what the Containerfile copies
# (the target directory is gigabytes). In docker format: OCI images drop HEALTHCHECK.
# PODMAN_STORAGE_DRIVER (e.g. vfs, where overlay cannot mount) is passed to podman as
# --storage-driver. Progress goes to stderr; the last line of stdout is the image's name.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

tag=""
bin=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --tag) [[ $# -ge 2 ]] || { echo "error: --tag needs NAME:TAG" >&2; exit 2; }
           tag="$2"; shift ;;
    --binary) [[ $# -ge 2 ]] || { echo "error: --binary needs a path" >&2; exit 2; }
              bin="$2"; shift ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "error: unknown argument '$1'" >&2
       echo "hint: scripts/build-image.sh [--tag NAME:TAG] [--binary PATH]" >&2
       exit 2 ;;
  esac
  shift
done

[[ -n "$bin" ]] || bin=$(scripts/build-server.sh | tail -n 1)
[[ -x "$bin" ]] || { echo "error: $bin is not an executable" >&2; exit 1; }
# FROM scratch has no loader and no libc: only a static binary runs there.
if LC_ALL=C readelf -lW "$bin" 2>/dev/null | grep -q 'INTERP'; then
  echo "error: $bin is dynamically linked; the image needs the static musl build" >&2
  echo "hint: scripts/build-server.sh (without --host) builds it" >&2
  exit 1
fi
version=$("$bin" --version | awk '{print $2}')
[[ -n "$tag" ]] || tag="localhost/berth-server:$version"

ensure_podman
ca=/etc/ssl/certs/ca-certificates.crt
if [[ ! -s "$ca" ]]; then
  say "installing ca-certificates from Debian's packages" >&2
  apt_install ca-certificates >&2
fi

ctx=$(mktemp -d "${TMPDIR:-/tmp}/berth-image.XXXXXX")
trap 'rm -rf "$ctx"' EXIT
cp Containerfile "$ctx/Containerfile"
cp "$bin" "$ctx/berth-server"
cp -L "$ca" "$ctx/ca-certificates.crt"
printf 'berth:x:10001:10001:Berth:/var/lib/berth:/sbin/nologin\n' >"$ctx/passwd"
printf 'berth:x:10001:\n' >"$ctx/group"
mkdir "$ctx/home"
chmod 0755 "$ctx/berth-server"
chmod 0644 "$ctx/ca-certificates.crt" "$ctx/passwd" "$ctx/group"

podman_opts=()
[[ -z "${PODMAN_STORAGE_DRIVER:-}" ]] || podman_opts+=(--storage-driver "$PODMAN_STORAGE_DRIVER")
# The image this tag named before, removed once the tag moves (no pile of old images).
old=$(podman ${podman_opts[@]+"${podman_opts[@]}"} image inspect --format '{{.Id}}' "$tag" 2>/dev/null || true)
say "building $tag ($(du -h "$bin" | cut -f1) binary, context $(du -sh "$ctx" | cut -f1))" >&2
podman ${podman_opts[@]+"${podman_opts[@]}"} build --format docker --pull=never --layers=false \
  --label "org.opencontainers.image.version=$version" \
  --label "org.opencontainers.image.title=berth-server" \
  -f "$ctx/Containerfile" -t "$tag" "$ctx" >&2
new=$(podman ${podman_opts[@]+"${podman_opts[@]}"} image inspect --format '{{.Id}}' "$tag")
if [[ -n "$old" && "$old" != "$new" ]]; then
  podman ${podman_opts[@]+"${podman_opts[@]}"} rmi "$old" >/dev/null 2>&1 || true
fi
echo "$tag"
