#!/usr/bin/env bash
# Group mode into PostgreSQL (`floe run wordcount --group … --output
# postgres://…`), on the servers of scripts/services.sh:
#
#   postgres.sh throughput N   N members from launch until the table holds every word
#   postgres.sh kill           two members, one killed with kill -9 once both read:
#                              kill -> the survivor's next first_record, and
#                              kill -> the table holding every word
#
# Input: 100,000 seeded lines of 1-10 words (550,134 words, 10,000-word
# vocabulary), produced with Kafka's console producer to a new 6-partition
# topic per run; --parallelism 1, checkpoints every 1000 ms, session timeout
# 6000 ms for kill runs. Prints one RESULT line per run.
# Env: FLOE (default target/release/floe, built with --features kafka,postgres).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
FLOE="${FLOE:-$ROOT/target/release/floe}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
# shellcheck disable=SC1091
. "$ROOT/target/services.env"
B=$FLOE_TEST_KAFKA PG=$FLOE_TEST_POSTGRES_URL
python3 - "$WORK" <<'PY'
import random, sys
random.seed(7)
words = 0
with open(sys.argv[1] + "/lines.txt", "w") as f:
    for _ in range(100000):
        k = random.randint(1, 10)
        words += k
        f.write(" ".join("w%d" % random.randrange(10000) for _ in range(k)) + "\n")
open(sys.argv[1] + "/words.txt", "w").write(str(words))
PY
WANT=$(cat "$WORK/words.txt")
id=pgb$(date +%s%N | tail -c 8)
T=$id-in G=$id TABLE=t_$id
java -cp "$FLOE_TEST_KAFKA_CLASSPATH" org.apache.kafka.tools.TopicCommand --bootstrap-server "$B" \
  --create --topic "$T" --partitions 6 --replication-factor 1 >/dev/null 2>&1
java -cp "$FLOE_TEST_KAFKA_CLASSPATH" org.apache.kafka.tools.ConsoleProducer --bootstrap-server "$B" \
  --topic "$T" <"$WORK/lines.txt" 2>/dev/null
counted() { psql "$PG" -tAc "SELECT coalesce(sum(count), 0) FROM $TABLE" 2>/dev/null || echo 0; }
member() {
  "$FLOE" run wordcount --input "kafka://$B/$T" --output "$PG?table=$TABLE" --group "$G" \
    --checkpoint-dir "$WORK/ck" --checkpoint-interval 1000 --parallelism 1 \
    --session-timeout 6000 2>"$WORK/$1.log" &
}
first_records() { grep -c first_record "$WORK/$1.log" || true; }
case "${1:-}" in
  throughput)
    t0=$(date +%s%3N) pids=()
    for i in $(seq 1 "${2:-1}"); do member "m$i"; pids+=($!); done
    until [ "$(counted)" = "$WANT" ]; do sleep 0.2; done
    ms=$(( $(date +%s%3N) - t0 ))
    kill -TERM "${pids[@]}"; wait || true
    echo "RESULT members=${2:-1} words=$WANT ms=$ms words_per_s=$((WANT * 1000 / ms)) load=$(cut -d' ' -f1 /proc/loadavg)"
    ;;
  kill)
    member a; A=$!
    member b; V=$!
    until [ "$(first_records a)" -gt 0 ] && [ "$(first_records b)" -gt 0 ]; do sleep 0.1; done
    sleep 2
    kill -9 "$V"; k=$(date +%s%3N)
    n0=$(first_records a)
    until [ "$(first_records a)" -gt "$n0" ]; do sleep 0.05; done
    line=$(grep first_record "$WORK/a.log" | tail -1)
    until [ "$(counted)" = "$WANT" ]; do sleep 0.2; done
    complete=$(( $(date +%s%3N) - k ))
    kill -TERM "$A"; wait "$A" || true
    echo "RESULT kill_to_first_record_ms=$(( ${line##*at_ms=} - k )) kill_to_table_complete_ms=$complete $line load=$(cut -d' ' -f1 /proc/loadavg)"
    ;;
  *) echo "usage: postgres.sh throughput N | kill" >&2; exit 2 ;;
esac
# The prepared transactions the stopped members left (docs/scale-out.md).
psql "$PG" -tAc "SELECT gid FROM pg_prepared_xacts WHERE gid LIKE 'floe:$G/%'" | while read -r g; do
  [ -n "$g" ] && psql "$PG" -tAc "ROLLBACK PREPARED '$g'" >/dev/null
done
