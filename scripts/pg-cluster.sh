#!/usr/bin/env bash
# A throwaway PostgreSQL server for tests: a fresh cluster in a temporary directory,
# listening on 127.0.0.1 only, on a free port, tuned for speed over durability (fsync and
# friends off: nothing in it is meant to survive).
#
#   scripts/pg-cluster.sh start [--watch PID]
#       start a cluster and print its URL, postgres://berth:PASSWORD@127.0.0.1:PORT/postgres,
#       as the only line on stdout (everything else goes to stderr). With --watch, a
#       detached reaper stops the cluster and removes its directory once PID is gone, or
#       after 2 hours at the latest (BERTH_PG_LIFETIME seconds, to test that).
#   scripts/pg-cluster.sh restart URL_OR_PORT SECONDS
#       stop the server (fast: its connections are dropped), keep it down SECONDS, start
#       it again on the same port with the same data: the fault tests' database restart
#   scripts/pg-cluster.sh stop URL_OR_PORT
#       stop the cluster on that port at once and remove its directory; exits 0 when
#       there is none
#
# Each cluster lives in ${TMPDIR:-/tmp}/berth-pg.XXXXXXXXXX/: data/ (the data directory),
# log (the server's), port, and the server's Unix socket. The socket is reached without a
# password (only the cluster's owner can enter the directory); TCP needs the password.
#
# PostgreSQL refuses to run as root: as root, the cluster belongs to and runs as the
# `postgres` system user (Debian's package makes it), or `berth-pg`, created if need be.
set -euo pipefail

self=$(readlink -f "${BASH_SOURCE[0]}")
root="${TMPDIR:-/tmp}"
root="${root%/}"
lifetime="${BERTH_PG_LIFETIME:-7200}"

# Descriptors beyond stdin, stdout and stderr that the caller let us inherit (a pipe, say)
# would live on in the server and the reaper, and keep whoever reads them waiting: close
# them. 255 is bash's own, the script.
for fd in "/proc/$$/fd"/*; do
  fd="${fd##*/}"
  if [[ "$fd" =~ ^[0-9]+$ ]] && ((fd > 2 && fd != 255)); then
    eval "exec $fd>&-" 2>/dev/null || true
  fi
done

log() { printf 'pg-cluster: %s\n' "$*" >&2; }
die() {
  log "$@"
  exit 1
}
usage() {
  echo "usage: scripts/pg-cluster.sh start [--watch PID] | stop URL_OR_PORT | restart URL_OR_PORT SECONDS" >&2
  exit 2
}

# The directory of PostgreSQL's server binaries: pg_config's when it has a server (Debian's
# pg_config names the newest installed version's), else the newest under
# /usr/lib/postgresql that has a server (a client package's has only the client tools).
find_bindir() {
  local dir
  if command -v pg_config >/dev/null; then
    dir=$(pg_config --bindir 2>/dev/null) || dir=""
    if [[ -n "$dir" && -x "$dir/postgres" ]]; then
      echo "$dir"
      return
    fi
  fi
  dir=$(printf '%s\n' /usr/lib/postgresql/*/bin/postgres | sort -t/ -k5,5n | tail -n 1)
  dir="${dir%/postgres}"
  if [[ -n "$dir" && -x "$dir/postgres" ]]; then
    echo "$dir"
    return
  fi
  die "no PostgreSQL server found: install Debian's postgresql package" \
    "(apt-get install postgresql), or run scripts/test.sh, which installs it"
}

# Runs a command as USER (the first argument); as is, when that is who we are. From /, as
# the server's user may not enter the caller's working directory.
as_user() {
  local user="$1"
  shift
  if [[ "$user" == "$(id -un)" ]]; then
    (cd / && "$@")
  elif command -v setpriv >/dev/null; then
    (cd / && setpriv --reuid="$user" --regid="$(id -gn "$user")" --init-groups -- "$@")
  else
    (cd / && runuser -u "$user" -- "$@")
  fi
}

# The user the server runs as: ourselves, unless we are root.
server_user() {
  if [[ "$(id -u)" != 0 ]]; then
    id -un
  elif getent passwd postgres >/dev/null; then
    echo postgres
  else
    if ! getent passwd berth-pg >/dev/null; then
      log "creating the system user berth-pg to run PostgreSQL as"
      useradd --system --no-create-home --shell /usr/sbin/nologin berth-pg >&2
    fi
    echo berth-pg
  fi
}

# A TCP port free on 127.0.0.1 at the moment: the kernel's pick for port 0. Without python3,
# a random one that nothing answers on. Either may be taken before the server binds it:
# `start` then tries again with another.
free_port() {
  if command -v python3 >/dev/null &&
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null; then
    return
  fi
  local port
  while :; do
    port=$((20000 + RANDOM % 12000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      echo "$port"
      return
    fi
  done
}

# Stops the cluster in DIR at once (the owner's pg_ctl, immediate mode: no checkpoint)
# and removes DIR. Quiet when the server is already down or DIR already gone, as `stop`
# and a reaper may both get there.
stop_cluster() {
  local dir="$1" bindir user
  [[ -d "$dir" ]] || return 0
  if [[ -f "$dir/data/postmaster.pid" ]]; then
    bindir=$(find_bindir)
    user=$(stat -c %U "$dir")
    as_user "$user" "$bindir/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true
  fi
  rm -rf "$dir" 2>/dev/null || true
}

# Whether process PID lives: kill -0, or its /proc entry (kill -0 fails on another user's
# process when we are not root); one that exited but was not yet waited for does not.
alive() {
  local stat
  kill -0 "$1" 2>/dev/null || [[ -d "/proc/$1" ]] || return 1
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || stat=""
  stat="${stat##*) }"
  [[ "${stat%% *}" != Z ]]
}

# The reaper (internal: `start --watch` runs it detached as `_reap DIR PID`). Polls every
# 0.5 s; once PID is gone (or a zombie), or the cluster has lived `lifetime` seconds,
# stops the cluster. Ends quietly if the cluster went another way (`stop`).
reap() {
  local dir="$1" pid="$2"
  while [[ -d "$dir" ]] && ((SECONDS < lifetime)) && alive "$pid"; do
    sleep 0.5
  done
  stop_cluster "$dir"
}

start() {
  local watch=""
  while (($#)); do
    case "$1" in
      --watch)
        [[ $# -ge 2 && "$2" =~ ^[0-9]+$ ]] || usage
        watch="$2"
        shift 2
        ;;
      *) usage ;;
    esac
  done
  if [[ -n "$watch" ]] && ! alive "$watch"; then
    die "--watch $watch: no such process"
  fi

  local bindir user group dir
  bindir=$(find_bindir)
  user=$(server_user)
  group=$(id -gn "$user")
  mkdir -p "$root"
  dir=$(mktemp -d "$root/berth-pg.XXXXXXXXXX")
  # Until the URL is out, a failure (or an interrupt) takes the cluster with it.
  # shellcheck disable=SC2064
  trap "rc=\$?; stop_cluster '$dir'; ((rc == 0)) || log 'start failed: removed $dir'" EXIT
  trap 'exit 129' HUP
  trap 'exit 130' INT
  trap 'exit 143' TERM
  chown "$user:$group" "$dir"
  as_user "$user" test -w "$dir" ||
    die "$user cannot write to $dir: is $root open to it? (set TMPDIR to, say, /tmp)"
  # A Unix socket's path holds at most 107 bytes: "$dir/.s.PGSQL.PORT".
  ((${#dir} + 17 <= 107)) || die "$dir is too long for a Unix socket's path: set TMPDIR shorter"

  # The superuser's password, for TCP; initdb reads it from a file, removed right after.
  local password major auth_host
  password=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
  (umask 077 && printf '%s\n' "$password" >"$dir/pwfile")
  chown "$user:$group" "$dir/pwfile"
  # scram-sha-256 needs PostgreSQL 14's default password_encryption to store the password
  # that way; before 14, md5.
  major=$("$bindir/postgres" --version | sed -n 's/^[^0-9]*\([0-9]*\).*/\1/p')
  auth_host=scram-sha-256
  ((major >= 14)) || auth_host=md5

  log "initdb ($("$bindir/postgres" --version), as $user) in $dir"
  local locale initdb_ok=""
  for locale in C.UTF-8 C; do
    if as_user "$user" "$bindir/initdb" -D "$dir/data" -U berth --pwfile="$dir/pwfile" \
      --auth-local=trust --auth-host="$auth_host" --encoding=UTF8 --locale="$locale" \
      --no-sync >"$dir/initdb.log" 2>&1; then
      initdb_ok=1
      break
    fi
    log "initdb with --locale=$locale failed:"
    tail -n 5 "$dir/initdb.log" >&2
    rm -rf "$dir/data"
  done
  rm -f "$dir/pwfile"
  [[ -n "$initdb_ok" ]] || die "initdb failed"

  cat >>"$dir/data/postgresql.conf" <<EOF

# scripts/pg-cluster.sh: a throwaway test server.
listen_addresses = '127.0.0.1'
unix_socket_directories = '$dir'
max_connections = 200
shared_buffers = 128MB
fsync = off
synchronous_commit = off
full_page_writes = off
EOF

  # The port goes on the command line (-o), so another can be tried when the free one was
  # taken in the meantime. pg_ctl points the server's standard input, output and error
  # at /dev/null and the log, so nothing holds the caller's pipes.
  local port="" attempt started=""
  SECONDS=0
  local seen
  for attempt in 1 2 3 4 5; do
    port=$(free_port)
    echo "$port" >"$dir/port"
    seen=0
    [[ ! -f "$dir/log" ]] || seen=$(wc -l <"$dir/log")
    if as_user "$user" "$bindir/pg_ctl" -D "$dir/data" -l "$dir/log" -o "-p $port" \
      -w -t 30 start >&2; then
      started=1
      break
    fi
    # This attempt's part of the log (pg_ctl appends) says whether the port was the trouble.
    if tail -n +$((seen + 1)) "$dir/log" 2>/dev/null | grep -q 'could not create any TCP/IP sockets' &&
      ((SECONDS < 30)); then
      log "port $port was taken (attempt $attempt): trying another"
      continue
    fi
    break
  done
  if [[ -z "$started" ]]; then
    log "the server did not start; the end of its log:"
    tail -n 20 "$dir/log" >&2 || true
    exit 1
  fi

  # pg_ctl waits for the server to be ready; make sure it is over TCP too.
  until "$bindir/pg_isready" -q -h 127.0.0.1 -p "$port" -t 1; do
    if ((SECONDS >= 30)); then
      log "the server did not accept connections on 127.0.0.1:$port in 30 s; the end of its log:"
      tail -n 20 "$dir/log" >&2 || true
      exit 1
    fi
    sleep 0.1
  done

  if [[ -n "$watch" ]]; then
    # Detached: a session of its own, and none of our standard streams, so a caller
    # reading our stdout to its end (`$(...)`, a piped Command) is not kept waiting.
    setsid "$self" _reap "$dir" "$watch" </dev/null >/dev/null 2>&1 &
  fi
  log "PostgreSQL on 127.0.0.1:$port, in $dir${watch:+, stopped when process $watch ends}"
  # The cluster is the caller's once the URL is out (a failed write still takes it back).
  echo "postgres://berth:$password@127.0.0.1:$port/postgres"
  trap - EXIT HUP INT TERM
}

# The port of a port or a postgres://user:password@host:PORT/db URL.
port_of() {
  local port="$1"
  if [[ "$port" == *://* ]]; then
    port="${port#*://}"
    port="${port#*@}"
    port="${port%%/*}"
    port="${port%%\?*}"
    port="${port##*:}"
  fi
  [[ "$port" =~ ^[0-9]+$ ]] || die "not a port or a postgres:// URL with a port: $1"
  echo "$port"
}

# The cluster directory serving PORT.
dir_of() {
  local dir
  for dir in "$root"/berth-pg.*; do
    [[ -f "$dir/port" && "$(cat "$dir/port" 2>/dev/null)" == "$1" ]] || continue
    echo "$dir"
    return
  done
  die "no cluster on port $1 under $root"
}

# Stops the server (fast: connections are told and dropped, as an operator's restart
# does), keeps it down SECONDS, and starts it again on the same port and data.
restart() {
  [[ $# -eq 2 && "$2" =~ ^[0-9.]+$ ]] || usage
  local port dir bindir user
  port=$(port_of "$1")
  dir=$(dir_of "$port")
  bindir=$(find_bindir)
  user=$(stat -c %U "$dir")
  log "stopping the server on port $port for $2 s"
  as_user "$user" "$bindir/pg_ctl" -D "$dir/data" -m fast -w stop >&2
  sleep "$2"
  as_user "$user" "$bindir/pg_ctl" -D "$dir/data" -l "$dir/log" -o "-p $port" -w -t 30 start >&2
  log "the server on port $port is back"
}

stop() {
  [[ $# -eq 1 ]] || usage
  local port dir found=""
  port=$(port_of "$1")
  for dir in "$root"/berth-pg.*; do
    [[ -f "$dir/port" && "$(cat "$dir/port" 2>/dev/null)" == "$port" ]] || continue
    log "stopping the cluster on port $port in $dir"
    stop_cluster "$dir"
    found=1
  done
  [[ -n "$found" ]] || log "no cluster on port $port under $root: nothing to stop"
}

case "${1:-}" in
  start) shift && start "$@" ;;
  stop) shift && stop "$@" ;;
  restart) shift && restart "$@" ;;
  _reap)
    [[ $# -eq 3 ]] || usage
    reap "$2" "$3"
    ;;
  *) usage ;;
esac
