#!/usr/bin/env bash
# Real servers for the connector and dashboard tests: PostgreSQL, Apache
# Kafka, an S3-compatible object store (s3s-fs) and chromedriver (headless
# Chromium over WebDriver), each on a free loopback port, private to this
# checkout.
#
#   scripts/services.sh start [postgres] [kafka] [s3] [webdriver]   install what is missing, start, wait
#   scripts/services.sh stop                                   stop them
#   scripts/services.sh kill kafka|s3              SIGKILL the server, keep its port and storage
#                                                  (`start kafka|s3` then restarts it on both)
#   scripts/services.sh env                        print the env file (source it)
#
# `start` writes target/services.env with
#   FLOE_TEST_POSTGRES_URL=postgres://floe:floe@127.0.0.1:PORT/floe
#   FLOE_TEST_KAFKA=127.0.0.1:PORT
#   FLOE_TEST_KAFKA_CLASSPATH='~/.cache/floe/kafka-4.4.0/lib/*'   (Kafka's tools, for the tests)
#   FLOE_TEST_WEBDRIVER=http://127.0.0.1:PORT
#   FLOE_TEST_S3_ENDPOINT=http://127.0.0.1:PORT  FLOE_TEST_S3_BUCKET=floe-test
#   FLOE_TEST_S3_ACCESS_KEY=…  FLOE_TEST_S3_SECRET_KEY=…  FLOE_TEST_S3_DATA=DIR (its files)
#   FLOE_TEST_S3_SERVER=PATH (the s3s-fs binary, for tests that run a private one)
# which the tests read (they fail with a pointer here when it is missing,
# unless FLOE_SKIP_SERVICES=1). Installs: PostgreSQL from Debian's packages,
# Apache Kafka (below), chromium and chromium-driver (dashboard tests).
# Apache Kafka 4.4.0 in KRaft mode, one node that is both broker and
# controller: its jars come from Maven Central (scripts/kafka/pom.xml,
# `mvn dependency:copy-dependencies`, about 55 MB) into
# ~/.cache/floe/kafka-4.4.0/lib, kept outside target/ so `cargo clean`
# keeps them; a JDK 17+ and Maven are installed from Debian's packages when
# missing. Its log directory is target/services/kafka/data, formatted once
# (`kafka.tools.StorageTool format`): a `kill -9` and a start keep the
# records it acknowledged and its open transactions. The tests use the
# librdkafka 2.12 that rdkafka-sys vendors; docs/kafka.md says how the
# broker is configured for them.
# The S3 server is s3s-fs 0.14.1 from crates.io (`cargo install
# s3s-fs --features binary`, a debug build: it compiles in a fraction of a
# release build's time and serves tests well), into
# ~/.cache/floe/s3s-fs-0.14.1-debug. It keeps each object as a file under
# target/services/s3/data/BUCKET/KEY, speaks SigV4 with one access key,
# path-style requests, and conditional writes (If-None-Match, If-Match),
# which the checkpoint storage's commit point and lease need. (0.17 needs a
# newer rustc than 1.95; SeaweedFS's module refuses `go install`; MinIO is
# not in the reachable registries.)
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

# Apache Kafka's classpath (outside target/, so `cargo clean` keeps it).
KAFKA_VERSION=4.4.0
KAFKA_HOME="${FLOE_KAFKA_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/floe/kafka-$KAFKA_VERSION}"

install_kafka() {
  [ -f "$KAFKA_HOME/lib/kafka_2.13-$KAFKA_VERSION.jar" ] && return 0
  command -v java >/dev/null 2>&1 || apt_install openjdk-17-jre-headless
  command -v mvn >/dev/null 2>&1 || apt_install maven
  log "installing Apache Kafka $KAFKA_VERSION (Maven Central, into $KAFKA_HOME)"
  rm -rf "$KAFKA_HOME/lib.partial"
  mkdir -p "$KAFKA_HOME"
  mvn -q -B -f "$ROOT/scripts/kafka/pom.xml" -Dkafka.version="$KAFKA_VERSION" \
    dependency:copy-dependencies -DincludeScope=runtime \
    -DoutputDirectory="$KAFKA_HOME/lib.partial" >"$KAFKA_HOME/mvn.log" 2>&1 \
    || { cat "$KAFKA_HOME/mvn.log" >&2; die "mvn could not fetch Apache Kafka $KAFKA_VERSION (scripts/kafka/pom.xml)"; }
  mv "$KAFKA_HOME/lib.partial" "$KAFKA_HOME/lib"
}

# A new cluster id: 16 random bytes, base64url without padding (what
# `kafka-storage random-uuid` prints, without starting a JVM for it). Like
# Kafka's own generator it never starts with '-', which the tool's argument
# parser would take for an option (one id in 64 did, before).
cluster_id() {
  python3 -c '
import base64, uuid
while True:
    s = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    if not s.startswith("-"):
        print(s)
        break'
}

# Runs a class of the Kafka classpath (a tool: small heap).
kafka_java() {
  java -Xmx256m -cp "$KAFKA_HOME/lib/*" "$@"
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

# The broker's configuration: one node, broker and controller, on
# 127.0.0.1:$1 (clients) and :$2 (controller), its log in $3. Transaction
# timeouts are small so that an abandoned transaction (a killed producer's)
# is aborted within seconds, not after Kafka's default minute.
kafka_config() {
  cat <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$2
listeners=PLAINTEXT://127.0.0.1:$1,CONTROLLER://127.0.0.1:$2
advertised.listeners=PLAINTEXT://127.0.0.1:$1
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs=$3
num.partitions=1
num.network.threads=2
num.io.threads=4
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
transaction.abort.timed.out.transaction.cleanup.interval.ms=1000
transaction.remove.expired.transaction.cleanup.interval.ms=60000
log.retention.ms=-1
EOF
}

start_kafka() {
  local dir="$STATE/kafka" port cport since
  if alive "$STATE/kafka.pid"; then
    log "Apache Kafka already runs"
    return 0
  fi
  install_kafka
  mkdir -p "$dir"
  # A restart after `kill kafka` keeps the ports and the storage.
  if [ -f "$STATE/kafka.port" ] && [ -f "$dir/controller.port" ] && [ -f "$dir/data/meta.properties" ]; then
    port="$(cat "$STATE/kafka.port")"
    cport="$(cat "$dir/controller.port")"
  else
    rm -rf "$dir/data"
    port="$(free_port)"
    cport="$(free_port)"
    kafka_config "$port" "$cport" "$dir/data" >"$dir/server.properties"
    kafka_java kafka.tools.StorageTool format --cluster-id="$(cluster_id)" \
      -c "$dir/server.properties" >"$dir/format.log" 2>&1 \
      || { cat "$dir/format.log" >&2; die "kafka-storage format failed"; }
    echo "$cport" >"$dir/controller.port"
    echo "$port" >"$STATE/kafka.port"
  fi
  # This start's lines of the log (it is appended to).
  since=1
  [ -f "$dir/kafka.log" ] && since=$(($(wc -l <"$dir/kafka.log") + 1))
  # A session of its own: the broker outlives the shell that started it.
  (cd "$dir" && exec setsid nohup java -Xms128m -Xmx512m -XX:+UseSerialGC \
    -Dlog4j2.configurationFile="$ROOT/scripts/kafka/log4j2.yaml" \
    -cp "$KAFKA_HOME/lib/*" kafka.Kafka server.properties >>"$dir/kafka.log" 2>&1) &
  echo $! >"$STATE/kafka.pid"
  # Started once it says so (the port opens a little before it serves).
  local i=0
  until tail -n +"$since" "$dir/kafka.log" 2>/dev/null | grep -q 'Kafka Server started'; do
    alive "$STATE/kafka.pid" || { tail -n +"$since" "$dir/kafka.log" >&2; die "Apache Kafka exited"; }
    i=$((i + 1))
    [ "$i" -le 1200 ] || { tail -n +"$since" "$dir/kafka.log" >&2; die "Apache Kafka did not start in 120 s"; }
    sleep 0.1
  done
  log "Apache Kafka $KAFKA_VERSION on 127.0.0.1:$port (storage $dir/data)"
}

# SIGKILL the broker, keeping its ports and storage for the next start.
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

S3S_VERSION=0.14.1
S3S_HOME="${FLOE_S3S_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/floe/s3s-fs-$S3S_VERSION-debug}"
S3_BUCKET=floe-test
S3_ACCESS_KEY=floetest
S3_SECRET_KEY=floetest-secret

install_s3() {
  [ -x "$S3S_HOME/bin/s3s-fs" ] && return 0
  log "installing s3s-fs $S3S_VERSION (crates.io, debug build, into $S3S_HOME)"
  cargo install s3s-fs --version "$S3S_VERSION" --features binary --locked --debug \
    --root "$S3S_HOME" >"$STATE/s3s-install.log" 2>&1 \
    || { tail -20 "$STATE/s3s-install.log" >&2; die "cargo install s3s-fs failed"; }
}

start_s3() {
  local dir="$STATE/s3" port
  if alive "$STATE/s3.pid"; then
    log "s3s-fs already runs"
    return 0
  fi
  install_s3
  # A restart after `kill s3` keeps the port and the objects.
  if [ -f "$STATE/s3.port" ] && [ -d "$dir/data/$S3_BUCKET" ]; then
    port="$(cat "$STATE/s3.port")"
  else
    rm -rf "$dir"
    port="$(free_port)"
    echo "$port" >"$STATE/s3.port"
  fi
  # A bucket of s3s-fs is a directory of its root.
  mkdir -p "$dir/data/$S3_BUCKET"
  (exec setsid nohup "$S3S_HOME/bin/s3s-fs" --host 127.0.0.1 --port "$port" \
    --access-key "$S3_ACCESS_KEY" --secret-key "$S3_SECRET_KEY" "$dir/data" \
    >>"$dir/s3s-fs.log" 2>&1) &
  echo $! >"$STATE/s3.pid"
  wait_port "$port" 60 || { tail -20 "$dir/s3s-fs.log" >&2; die "s3s-fs does not accept connections on $port"; }
  log "s3s-fs $S3S_VERSION on 127.0.0.1:$port (bucket $S3_BUCKET, objects in $dir/data)"
}

# SIGKILL the S3 server, keeping its port and objects for the next start.
kill_s3() {
  if alive "$STATE/s3.pid"; then
    kill -9 "$(cat "$STATE/s3.pid")" 2>/dev/null || true
    local port i=0
    port="$(cat "$STATE/s3.port")"
    while (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && [ "$i" -lt 100 ]; do
      sleep 0.1
      i=$((i + 1))
    done
  fi
  rm -f "$STATE/s3.pid"
}

stop_s3() {
  kill_s3
  rm -rf "$STATE/s3" "$STATE/s3.port"
}

stop_kafka() {
  kill_kafka
  rm -rf "$STATE/kafka" "$STATE/kafka.port"
}

write_env() {
  {
    if [ -f "$STATE/pg.port" ]; then
      echo "export FLOE_TEST_POSTGRES_URL=postgres://floe:floe@127.0.0.1:$(cat "$STATE/pg.port")/floe"
    fi
    if [ -f "$STATE/kafka.port" ]; then
      echo "export FLOE_TEST_KAFKA=127.0.0.1:$(cat "$STATE/kafka.port")"
      echo "export FLOE_TEST_KAFKA_CLASSPATH='$KAFKA_HOME/lib/*'"
    fi
    if [ -f "$STATE/s3.port" ]; then
      echo "export FLOE_TEST_S3_ENDPOINT=http://127.0.0.1:$(cat "$STATE/s3.port")"
      echo "export FLOE_TEST_S3_BUCKET=$S3_BUCKET"
      echo "export FLOE_TEST_S3_ACCESS_KEY=$S3_ACCESS_KEY"
      echo "export FLOE_TEST_S3_SECRET_KEY=$S3_SECRET_KEY"
      echo "export FLOE_TEST_S3_DATA=$STATE/s3/data"
      echo "export FLOE_TEST_S3_SERVER=$S3S_HOME/bin/s3s-fs"
    fi
    if [ -f "$STATE/chromedriver.port" ]; then
      echo "export FLOE_TEST_WEBDRIVER=http://127.0.0.1:$(cat "$STATE/chromedriver.port")"
    fi
  } >"$ENV_FILE"
}

cmd="${1:-}"
shift || true
want_pg=1 want_kafka=1 want_s3=1 want_web=1
if [ $# -gt 0 ]; then
  want_pg="" want_kafka="" want_s3="" want_web=""
  for s in "$@"; do
    case "$s" in
      postgres) want_pg=1 ;;
      kafka) want_kafka=1 ;;
      s3) want_s3=1 ;;
      webdriver) want_web=1 ;;
      *) die "unknown service '$s' (postgres, kafka, s3, webdriver)" ;;
    esac
  done
fi

case "$cmd" in
  start)
    [ -n "$want_pg" ] && install_postgres
    [ -n "$want_kafka" ] && install_kafka
    [ -n "$want_web" ] && install_chromium
    [ -n "$want_s3" ] && install_s3
    [ -n "$want_pg" ] && start_postgres
    [ -n "$want_kafka" ] && start_kafka
    [ -n "$want_s3" ] && start_s3
    [ -n "$want_web" ] && start_webdriver
    write_env
    cat "$ENV_FILE"
    ;;
  stop)
    stop_postgres
    stop_kafka
    stop_s3
    stop_webdriver
    rm -f "$ENV_FILE"
    ;;
  kill)
    case "${1:-}" in
      kafka) kill_kafka; log "broker killed (port and storage kept: \`start kafka\` restarts it)" ;;
      s3) kill_s3; log "s3s-fs killed (port and objects kept: \`start s3\` restarts it)" ;;
      *) die "usage: scripts/services.sh kill kafka|s3" ;;
    esac
    ;;
  env)
    [ -f "$ENV_FILE" ] || die "no services running: run scripts/services.sh start"
    cat "$ENV_FILE"
    ;;
  *)
    echo "usage: scripts/services.sh start [postgres] [kafka] [s3] [webdriver] | stop | kill kafka|s3 | env" >&2
    exit 2
    ;;
esac
