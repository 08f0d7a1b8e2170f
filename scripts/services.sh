#!/usr/bin/env bash
# Real servers for the connector and dashboard tests: PostgreSQL, a
# Kafka-protocol broker (noida-db; nisshi or tansu on request) and
# chromedriver (headless Chromium over WebDriver), each on a free loopback
# port, private to this checkout.
#
#   scripts/services.sh start [postgres] [kafka] [webdriver]   install what is missing, start, wait
#   scripts/services.sh stop                                   stop them
#   scripts/services.sh kill kafka                 SIGKILL the broker, keep its port and storage
#                                                  (`start kafka` then restarts it on both)
#   scripts/services.sh env                        print the env file (source it)
#
# `start` writes target/services.env with
#   FLOE_TEST_POSTGRES_URL=postgres://floe:floe@127.0.0.1:PORT/floe
#   FLOE_TEST_KAFKA=127.0.0.1:PORT
#   FLOE_TEST_KAFKA_BROKER=noida|nisshi|tansu   (which broker; the tests adapt to its gaps)
#   FLOE_TEST_WEBDRIVER=http://127.0.0.1:PORT
# which the tests read (they fail with a pointer here when it is missing,
# unless FLOE_SKIP_SERVICES=1). Installs: PostgreSQL from Debian's packages,
# the broker (below), chromium and chromium-driver (dashboard tests).
# The broker: noida-db 0.2.3 by default, from PyPI (a 5 MB wheel carrying
# one prebuilt binary: installed in seconds into a virtualenv, nothing to
# compile), which commits Kafka transactions (EndTxn, read_committed); it
# snapshots its topics into its data directory every second or so (a
# `kill -9` loses what came since; open transactions do not survive any
# restart: docs/kafka.md). With
# FLOE_KAFKA_BROKER=nisshi|tansu: nisshi 0.8.1 (storage in a SQLite file
# under target/services/kafka-data; its dependencies need rustc 1.96) or
# tansu 0.6 (memory storage), both built by `cargo install` and kept in
# ~/.cargo/bin; neither commits Kafka transactions. The tests use the
# librdkafka 2.12 that rdkafka-sys vendors (Debian's 2.0.2 misreads the
# tagged fields of the brokers' ApiVersions v3 answer and reconnects
# forever); docs/kafka.md says what each broker lacks and what the tests
# do about it.
# PostgreSQL runs as the `postgres` user (initdb refuses root), with
# max_prepared_transactions=64 for two-phase commit, its data and socket in
# a private directory under $TMPDIR.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
ENV_FILE="$TARGET/services.env"
STATE="$TARGET/services"
mkdir -p "$STATE"

log() { echo "services: $*" >&2; }
die() { echo "services: error: $*" >&2; exit 1; }

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

apt_updated=""
apt_install() {
  if [ -z "$apt_updated" ]; then
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
    apt_updated=1
  fi
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >&2
}

# A free loopback port (the kernel picks one).
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# Waits until 127.0.0.1:$1 accepts connections (or $2 seconds passed).
wait_port() {
  local port=$1 limit=$2 i=0
  until (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do
    i=$((i + 1))
    [ "$i" -le $((limit * 10)) ] || return 1
    sleep 0.1
  done
}

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

pg_bin() {
  local d
  for d in /usr/lib/postgresql/*/bin; do
    [ -x "$d/initdb" ] && { echo "$d"; return 0; }
  done
  return 1
}

install_postgres() {
  pg_bin >/dev/null && return 0
  log "installing PostgreSQL"
  apt_install postgresql
  pg_bin >/dev/null || die "PostgreSQL did not install"
}

# noida-db's virtualenv (outside target/, so `cargo clean` keeps it).
NOIDA_VERSION=0.2.3
NOIDA_VENV="${FLOE_NOIDA_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/floe/noida-db-$NOIDA_VERSION}"

# The path of broker $1 (noida, nisshi or tansu), if installed.
broker_path() {
  if [ "$1" = noida ]; then
    # The wheel's binary itself, not its Python wrapper (which runs it as a
    # child): `kill kafka` must reach the broker.
    local bin
    bin="$(ls "$NOIDA_VENV"/lib/python3*/site-packages/noida_db/noida-db 2>/dev/null | head -1)"
    [ -n "$bin" ] && [ -x "$bin" ] && { echo "$bin"; return 0; }
    return 1
  fi
  if command -v "$1" >/dev/null 2>&1; then command -v "$1"; return 0; fi
  [ -x "$HOME/.cargo/bin/$1" ] && { echo "$HOME/.cargo/bin/$1"; return 0; }
  return 1
}

# Whether the default toolchain can build nisshi 0.8.1 (rustc >= 1.96).
nisshi_buildable() {
  local v
  v="$(rustc --version 2>/dev/null | awk '{print $2}')" || return 1
  [ -n "$v" ] && [ "$(printf '%s\n1.96.0\n' "${v%%-*}" | sort -V | head -1)" = 1.96.0 ]
}

# Which broker `start kafka` runs (see the header).
broker_kind() {
  if [ -n "${FLOE_KAFKA_BROKER:-}" ]; then
    case "$FLOE_KAFKA_BROKER" in
      noida | nisshi | tansu) echo "$FLOE_KAFKA_BROKER"; return 0 ;;
      *) die "FLOE_KAFKA_BROKER=$FLOE_KAFKA_BROKER: expected noida, nisshi or tansu" ;;
    esac
  fi
  echo noida
}

install_broker() {
  local kind=$1
  broker_path "$kind" >/dev/null && return 0
  case "$kind" in
    noida)
      log "installing noida-db $NOIDA_VERSION (pip, into $NOIDA_VENV)"
      rm -rf "$NOIDA_VENV"
      python3 -m venv "$NOIDA_VENV" >&2 || die "python3 -m venv $NOIDA_VENV failed"
      "$NOIDA_VENV/bin/pip" install -q --disable-pip-version-check "noida-db==$NOIDA_VERSION" >&2 \
        || die "pip install noida-db==$NOIDA_VERSION failed"
      ;;
    nisshi)
      nisshi_buildable || log "nisshi needs rustc >= 1.96; this one is $(rustc --version)"
      log "installing nisshi (cargo install, 15 minutes or more on 2 cores)"
      cargo install nisshi@0.8.1 --locked >&2 || die "cargo install nisshi failed"
      ;;
    tansu)
      log "installing tansu (cargo install, about 10 minutes)"
      cargo install tansu --locked --features dynostore >&2 || die "cargo install tansu failed"
      ;;
  esac
  broker_path "$kind" >/dev/null || die "$kind is not on PATH nor in ~/.cargo/bin"
}

install_chromium() {
  if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
    return 0
  fi
  log "installing chromium and chromium-driver"
  apt_install chromium chromium-driver || log "chromium could not be installed (dashboard tests need it)"
}

# Runs a PostgreSQL tool as a non-root user (initdb refuses root).
pg_as() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

start_postgres() {
  local bin dir port
  bin="$(pg_bin)"
  if [ -f "$STATE/pg.dir" ] && [ -f "$(cat "$STATE/pg.dir")/data/postmaster.pid" ] \
    && pg_as "$bin/pg_ctl" -D "$(cat "$STATE/pg.dir")/data" status >/dev/null 2>&1; then
    log "PostgreSQL already runs"
    return 0
  fi
  dir="$(mktemp -d "${TMPDIR:-/tmp}/floe-pg.XXXXXX")"
  [ "$(id -u)" = 0 ] && chown postgres: "$dir"
  chmod 700 "$dir"
  echo "$dir" >"$STATE/pg.dir"
  port="$(free_port)"
  echo "$port" >"$STATE/pg.port"
  printf 'floe\n' >"$dir/pw"
  [ "$(id -u)" = 0 ] && chown postgres: "$dir/pw"
  pg_as "$bin/initdb" -D "$dir/data" -U floe --pwfile="$dir/pw" --auth=scram-sha-256 \
    -E UTF8 --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; die "initdb failed"; }
  mkdir -p "$dir/run"
  [ "$(id -u)" = 0 ] && chown postgres: "$dir/run"
  pg_as "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
    -o "-p $port -c listen_addresses=127.0.0.1 -k $dir/run -c max_prepared_transactions=64 -c max_connections=200" \
    start >&2 || { cat "$dir/server.log" >&2; die "PostgreSQL did not start"; }
  wait_port "$port" 60 || die "PostgreSQL does not accept connections on $port"
  PGPASSWORD=floe "$bin/createdb" -h 127.0.0.1 -p "$port" -U floe floe
  log "PostgreSQL on 127.0.0.1:$port (data $dir)"
}

stop_postgres() {
  local bin dir
  [ -f "$STATE/pg.dir" ] || return 0
  dir="$(cat "$STATE/pg.dir")"
  if bin="$(pg_bin)" && [ -d "$dir/data" ]; then
    pg_as "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >&2 2>/dev/null || true
  fi
  rm -rf "$dir" "$STATE/pg.dir" "$STATE/pg.port"
}

start_kafka() {
  local kind bin port
  if alive "$STATE/kafka.pid"; then
    log "$(cat "$STATE/kafka.kind") already runs"
    return 0
  fi
  # A restart after `kill kafka` keeps the broker, its port and storage.
  if [ -f "$STATE/kafka.kind" ] && [ -f "$STATE/kafka.port" ]; then
    kind="$(cat "$STATE/kafka.kind")"
    port="$(cat "$STATE/kafka.port")"
  else
    kind="$(broker_kind)"
    port="$(free_port)"
  fi
  install_broker "$kind"
  bin="$(broker_path "$kind")"
  echo "$kind" >"$STATE/kafka.kind"
  echo "$port" >"$STATE/kafka.port"
  mkdir -p "$STATE/kafka-data"
  # The broker's command line, and where it keeps its topics.
  local args storage
  case "$kind" in
    # Only its Kafka service. It snapshots its topics into the data
    # directory every second or so: a restart keeps what was snapshotted,
    # not open transactions (docs/kafka.md). Each start warns that Debian
    # 12's glibc lacks the weak symbol version GLIBC_2.39; it runs (the
    # wheel is built for manylinux 2.17).
    noida)
      storage="$STATE/kafka-data/noida"
      args=(start --only kafka --host 127.0.0.1 --kafka-port "$port" --data-dir "$storage")
      ;;
    # A SQLite file (the URL is relative to the working directory): the
    # topics outlive a restart of the broker.
    nisshi) storage="sqlite://kafka.db" ;;
    # Memory: every topic is gone at a restart (the tests create their own
    # uniquely named topics).
    tansu) storage="memory://tansu/" ;;
  esac
  if [ "$kind" != noida ]; then
    args=(broker --listener-url "tcp://127.0.0.1:$port"
      --advertised-listener-url "tcp://127.0.0.1:$port" --storage-engine "$storage")
  fi
  (cd "$STATE/kafka-data" && exec nohup "$bin" "${args[@]}" >>"$STATE/kafka.log" 2>&1) &
  echo $! >"$STATE/kafka.pid"
  wait_port "$port" 60 || { cat "$STATE/kafka.log" >&2; die "$kind does not accept connections on $port"; }
  log "$kind on 127.0.0.1:$port (storage $storage)"
}

# SIGKILL the broker, keeping its port and storage for the next start.
kill_kafka() {
  if alive "$STATE/kafka.pid"; then
    kill -9 "$(cat "$STATE/kafka.pid")" 2>/dev/null || true
    # Gone once its port refuses connections (a zombie still answers kill -0).
    local port i=0
    port="$(cat "$STATE/kafka.port")"
    while (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && [ "$i" -lt 100 ]; do
      sleep 0.1
      i=$((i + 1))
    done
  fi
  rm -f "$STATE/kafka.pid"
}

start_webdriver() {
  local port
  if alive "$STATE/chromedriver.pid"; then
    log "chromedriver already runs"
    return 0
  fi
  command -v chromedriver >/dev/null 2>&1 || die "chromedriver is not installed (apt-get install chromium-driver)"
  port="$(free_port)"
  echo "$port" >"$STATE/chromedriver.port"
  nohup chromedriver --port="$port" >"$STATE/chromedriver.log" 2>&1 &
  echo $! >"$STATE/chromedriver.pid"
  wait_port "$port" 60 || { cat "$STATE/chromedriver.log" >&2; die "chromedriver does not accept connections on $port"; }
  log "chromedriver on 127.0.0.1:$port"
}

stop_webdriver() {
  if alive "$STATE/chromedriver.pid"; then
    kill "$(cat "$STATE/chromedriver.pid")" 2>/dev/null || true
  fi
  rm -f "$STATE/chromedriver.pid" "$STATE/chromedriver.port"
}

stop_kafka() {
  kill_kafka
  # Brokers started before the kafka.* state files (tansu.pid).
  if alive "$STATE/tansu.pid"; then
    kill "$(cat "$STATE/tansu.pid")" 2>/dev/null || true
  fi
  rm -rf "$STATE/kafka-data" "$STATE/kafka.kind" "$STATE/kafka.port" \
    "$STATE/tansu.pid" "$STATE/tansu.port"
}

write_env() {
  {
    if [ -f "$STATE/pg.port" ]; then
      echo "export FLOE_TEST_POSTGRES_URL=postgres://floe:floe@127.0.0.1:$(cat "$STATE/pg.port")/floe"
    fi
    if [ -f "$STATE/kafka.port" ]; then
      echo "export FLOE_TEST_KAFKA=127.0.0.1:$(cat "$STATE/kafka.port")"
      echo "export FLOE_TEST_KAFKA_BROKER=$(cat "$STATE/kafka.kind")"
    fi
    if [ -f "$STATE/chromedriver.port" ]; then
      echo "export FLOE_TEST_WEBDRIVER=http://127.0.0.1:$(cat "$STATE/chromedriver.port")"
    fi
  } >"$ENV_FILE"
}

cmd="${1:-}"
shift || true
want_pg=1 want_kafka=1 want_web=1
if [ $# -gt 0 ]; then
  want_pg="" want_kafka="" want_web=""
  for s in "$@"; do
    case "$s" in
      postgres) want_pg=1 ;;
      kafka) want_kafka=1 ;;
      webdriver) want_web=1 ;;
      *) die "unknown service '$s' (postgres, kafka, webdriver)" ;;
    esac
  done
fi

case "$cmd" in
  start)
    [ -n "$want_pg" ] && install_postgres
    [ -n "$want_web" ] && install_chromium
    [ -n "$want_pg" ] && start_postgres
    [ -n "$want_kafka" ] && start_kafka
    [ -n "$want_web" ] && start_webdriver
    write_env
    cat "$ENV_FILE"
    ;;
  stop)
    stop_postgres
    stop_kafka
    stop_webdriver
    rm -f "$ENV_FILE"
    ;;
  kill)
    [ "${1:-}" = kafka ] || die "usage: scripts/services.sh kill kafka"
    kill_kafka
    log "broker killed (port and storage kept: \`start kafka\` restarts it)"
    ;;
  env)
    [ -f "$ENV_FILE" ] || die "no services running: run scripts/services.sh start"
    cat "$ENV_FILE"
    ;;
  *)
    echo "usage: scripts/services.sh start [postgres] [kafka] [webdriver] | stop | kill kafka | env" >&2
    exit 2
    ;;
esac
