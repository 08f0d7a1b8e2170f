#!/usr/bin/env bash
# Group mode into PostgreSQL (`floe run wordcount|window --group …
# --output postgres://…`), on the servers of scripts/services.sh:
#
#   postgres.sh throughput N [JOB]   N members from launch until the table is complete
#   postgres.sh kill [JOB]           two members, one killed with kill -9 once both read:
#                                    kill -> the survivor's next first_record, and
#                                    kill -> the table complete
#
# JOB is wordcount (default) or window.
# - wordcount: 100,000 seeded lines of 1-10 words (550,134 words, 10,000-word
#   vocabulary); complete: the counts sum to the words.
# - window: 300,000 seeded `key,ts,value` events (100 keys, timestamps rising
#   by 0-4 ms, so no partition's events are late), `--window tumbling:10000
#   --agg sum`, then one event per partition far ahead (keyed so that every
#   partition gets some) to close the last windows; complete: the table has
#   a row for every (key, window) of the events.
# Produced with Kafka's console producer to a new 6-partition topic per run;
# --parallelism 1, checkpoints every 1000 ms, session timeout 6000 ms for
# kill runs. Prints one RESULT line per run.
# Env: FLOE (default target/release/floe, built with --features kafka,postgres).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
FLOE="${FLOE:-$ROOT/target/release/floe}"
WORK="$(mktemp -d)"
# Members still running (a run that timed out) end with the script.
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$WORK"' EXIT
# shellcheck disable=SC1091
. "$ROOT/target/services.env"
B=$FLOE_TEST_KAFKA PG=$FLOE_TEST_POSTGRES_URL
case "${1:-}" in
  throughput) JOB=${3:-wordcount} ;;
  *) JOB=${2:-wordcount} ;;
esac
case "$JOB" in
  wordcount | window) ;;
  *) echo "postgres.sh: JOB is wordcount or window, not '$JOB'" >&2; exit 2 ;;
esac
python3 - "$WORK" "$JOB" <<'PY'
import random, sys
work, job = sys.argv[1], sys.argv[2]
if job == "wordcount":
    random.seed(7)
    words = 0
    with open(work + "/lines.txt", "w") as f:
        for _ in range(100000):
            k = random.randint(1, 10)
            words += k
            f.write(" ".join("w%d" % random.randrange(10000) for _ in range(k)) + "\n")
    open(work + "/records.txt", "w").write(str(words))
    open(work + "/want.txt", "w").write(str(words))
else:
    random.seed(8)
    ts, windows = 1_000_000, set()
    with open(work + "/lines.txt", "w") as f:
        for _ in range(300000):
            ts += random.randrange(5)
            key = "k%d" % random.randrange(100)
            windows.add((key, ts // 10000))
            f.write("%s,%d,%d\n" % (key, ts, random.randrange(2001) - 1000))
    # Keyed by 60 names: every one of the 6 partitions gets one but with
    # a chance of about 1e-4.
    with open(work + "/end.txt", "w") as f:
        for i in range(60):
            f.write("end%d|end%d,%d,0\n" % (i, i, ts + 100000))
    open(work + "/records.txt", "w").write("300000")
    open(work + "/want.txt", "w").write(str(len(windows)))
PY
RECORDS=$(cat "$WORK/records.txt") WANT=$(cat "$WORK/want.txt")
id=pgb$(date +%s%N | tail -c 8)
T=$id-in G=$id TABLE=t_$id
java -cp "$FLOE_TEST_KAFKA_CLASSPATH" org.apache.kafka.tools.TopicCommand --bootstrap-server "$B" \
  --create --topic "$T" --partitions 6 --replication-factor 1 >/dev/null 2>&1
java -cp "$FLOE_TEST_KAFKA_CLASSPATH" org.apache.kafka.tools.ConsoleProducer --bootstrap-server "$B" \
  --topic "$T" <"$WORK/lines.txt" 2>/dev/null
if [ "$JOB" = window ]; then
  java -cp "$FLOE_TEST_KAFKA_CLASSPATH" org.apache.kafka.tools.ConsoleProducer --bootstrap-server "$B" \
    --topic "$T" --reader-property parse.key=true --reader-property 'key.separator=|' \
    <"$WORK/end.txt" 2>/dev/null
fi
counted() {
  case "$JOB" in
    wordcount) psql "$PG" -tAc "SELECT coalesce(sum(count), 0) FROM $TABLE" 2>/dev/null || echo 0 ;;
    window) psql "$PG" -tAc "SELECT count(*) FROM $TABLE WHERE key NOT LIKE 'end%'" 2>/dev/null || echo 0 ;;
  esac
}
member() {
  local job_args=()
  [ "$JOB" = window ] && job_args=(--window tumbling:10000 --agg sum)
  "$FLOE" run "$JOB" "${job_args[@]}" --input "kafka://$B/$T" --output "$PG?table=$TABLE" \
    --group "$G" --checkpoint-dir "$WORK/ck" --checkpoint-interval 1000 --parallelism 1 \
    --session-timeout 6000 2>"$WORK/$1.log" &
}
first_records() { grep -c first_record "$WORK/$1.log" || true; }
# Waits for the table to be complete, at most LIMIT_S (default 900) seconds.
complete() {
  local until=$(( $(date +%s) + ${LIMIT_S:-900} ))
  until [ "$(counted)" = "$WANT" ]; do
    if [ "$(date +%s)" -ge "$until" ]; then
      echo "postgres.sh: the table of $TABLE has $(counted) of $WANT after ${LIMIT_S:-900} s; logs:" >&2
      tail -n 5 "$WORK"/*.log >&2
      exit 1
    fi
    sleep 0.2
  done
}
case "${1:-}" in
  throughput)
    t0=$(date +%s%3N) pids=()
    for i in $(seq 1 "${2:-1}"); do member "m$i"; pids+=($!); done
    complete
    ms=$(( $(date +%s%3N) - t0 ))
    kill -TERM "${pids[@]}"; wait || true
    if [ "$JOB" = wordcount ]; then
      echo "RESULT members=${2:-1} words=$WANT ms=$ms words_per_s=$((WANT * 1000 / ms)) load=$(cut -d' ' -f1 /proc/loadavg)"
    else
      echo "RESULT job=window members=${2:-1} records=$RECORDS rows=$WANT ms=$ms records_per_s=$((RECORDS * 1000 / ms)) load=$(cut -d' ' -f1 /proc/loadavg)"
    fi
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
    complete
    complete=$(( $(date +%s%3N) - k ))
    kill -TERM "$A"; wait "$A" || true
    echo "RESULT job=$JOB kill_to_first_record_ms=$(( ${line##*at_ms=} - k )) kill_to_table_complete_ms=$complete $line load=$(cut -d' ' -f1 /proc/loadavg)"
    ;;
  *) echo "usage: postgres.sh throughput N [wordcount|window] | kill [wordcount|window]" >&2; exit 2 ;;
esac
# The prepared transactions the stopped members left (docs/scale-out.md).
psql "$PG" -tAc "SELECT gid FROM pg_prepared_xacts WHERE gid LIKE 'floe:$G/%'" | while read -r g; do
  [ -n "$g" ] && psql "$PG" -tAc "ROLLBACK PREPARED '$g'" >/dev/null
done
