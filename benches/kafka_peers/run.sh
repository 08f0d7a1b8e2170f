#!/usr/bin/env bash
# floe, Kafka Streams and Apache Flink side by side on one Apache Kafka
# broker: the same word count, Kafka -> Kafka, exactly-once, over the same
# input topic, each output checked against the oracle.
#
#   benches/kafka_peers/run.sh [WORDS=10000000]
#
# Env: P=2 (each system's parallelism: floe --parallelism, Kafka Streams'
# stream threads, Flink's parallelism), CHECKPOINT_MS=1000 (floe's and
# Flink's checkpoint interval, Kafka Streams' commit interval),
# PARTITIONS=4, VOCAB=10000, WORDS_PER_LINE=10, SEED=42,
# ENGINES="floe kafka-streams flink", FLOE (default target/release/floe,
# built with --features kafka when missing), FLOE_TEST_KAFKA=HOST:PORT (a
# running broker; default: scripts/services.sh start kafka).
#
# Prints one RESULT line per system (e2e_ms: the system's start to the
# moment a read_committed reader of its output has every word's final
# count, i.e. first record in to last committed record out; cpu_s and
# peak_rss_mb of the system's process, from /usr/bin/time), the broker's
# own produce and consume rates, then a table. Exits 1 when an output
# disagrees with the oracle.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
WORDS="${1:-10000000}"
P="${P:-2}" CHECKPOINT_MS="${CHECKPOINT_MS:-1000}" PARTITIONS="${PARTITIONS:-4}"
VOCAB="${VOCAB:-10000}" WORDS_PER_LINE="${WORDS_PER_LINE:-10}" SEED="${SEED:-42}"
ENGINES="${ENGINES:-floe kafka-streams flink}"
FLOE="${FLOE:-$ROOT/target/release/floe}"
BUILD="$HERE/build"
mkdir -p "$BUILD"

say() { echo "kafka_peers: $*" >&2; }

# The broker.
if [ -z "${FLOE_TEST_KAFKA:-}" ]; then
  "$ROOT/scripts/services.sh" start kafka >&2
  # shellcheck disable=SC1091
  . "${CARGO_TARGET_DIR:-$ROOT/target}/services.env"
fi
B="$FLOE_TEST_KAFKA"
say "broker $B"

# The Java side: classpaths from Maven Central (cached in ~/.m2), sources
# compiled with javac.
for peer in streams flink; do
  if [ ! -s "$BUILD/cp-$peer.txt" ] || [ "$HERE/$peer/pom.xml" -nt "$BUILD/cp-$peer.txt" ]; then
    say "resolving the $peer classpath (Maven Central)"
    (cd "$HERE/$peer" && mvn -B -q dependency:build-classpath -Dmdep.outputFile="$BUILD/cp-$peer.txt" >&2)
  fi
done
rm -rf "$BUILD/streams" "$BUILD/flink"
javac --release 17 -Xlint:-options -cp "$(cat "$BUILD/cp-streams.txt")" -d "$BUILD/streams" "$HERE"/streams/src/peers/*.java
javac --release 17 -Xlint:-options -cp "$(cat "$BUILD/cp-flink.txt")" -d "$BUILD/flink" \
  "$HERE"/flink/src/peers/*.java "$HERE/streams/src/peers/Words.java"
CPS="$BUILD/streams:$(cat "$BUILD/cp-streams.txt")"
CPF="$BUILD/flink:$(cat "$BUILD/cp-flink.txt")"
tools() { java -Xmx1g -cp "$CPS" "$@" 2> >(grep -v '^SLF4J' >&2); }

if [[ " $ENGINES " == *" floe "* ]] && [ ! -x "$FLOE" ]; then
  say "building $FLOE (cargo build --release --features kafka)"
  (cd "$ROOT" && cargo build --release --features kafka >&2)
fi

RUN="kp$(date +%s)"
TMP="$(mktemp -d)"
trap 'pkill -TERM -f "^java .*peers.StreamsWordCount" 2>/dev/null || true; rm -rf "$TMP"' EXIT
IN="$RUN-lines"
RESULTS="$TMP/results.txt"
tools peers.Load produce "$B" "$IN" "$PARTITIONS" "$WORDS" "$VOCAB" "$WORDS_PER_LINE" "$SEED" | tee -a "$RESULTS"
tools peers.Load consume "$B" "$IN" "$TMP/oracle.txt" | tee -a "$RESULTS"

# One system: its command under /usr/bin/time (@OUT@ in an argument
# stands for its output topic), the verifier beside it.
# $1 engine, $2 "stop": the system runs until stopped (Kafka Streams).
run_engine() {
  local engine=$1 stop=$2; shift 2
  local out="$RUN-out-$engine" start pid verdict=0 args=()
  for a in "$@"; do args+=("${a//@OUT@/$out}"); done
  tools peers.Load topic "$B" "$out" "$PARTITIONS"
  start=$(date +%s%3N)
  /usr/bin/time -v -o "$TMP/time-$engine.txt" "${args[@]}" >"$TMP/$engine.log" 2>&1 &
  pid=$!
  tools peers.Verify "$B" "$out" "$TMP/oracle.txt" "$start" 1800 "$engine" >"$TMP/verify-$engine.txt" || verdict=1
  if [ "$stop" = stop ]; then pkill -TERM -f "^java .*peers.StreamsWordCount" || true; fi
  wait "$pid" || { [ "$stop" = stop ] || { say "$engine failed:"; tail -5 "$TMP/$engine.log" >&2; verdict=1; }; }
  local user sys rss
  user=$(awk -F': ' '/User time/ {print $2}' "$TMP/time-$engine.txt")
  sys=$(awk -F': ' '/System time/ {print $2}' "$TMP/time-$engine.txt")
  rss=$(awk -F': ' '/Maximum resident/ {print $2}' "$TMP/time-$engine.txt")
  echo "$(cat "$TMP/verify-$engine.txt") cpu_s=$(echo "$user + $sys" | bc) peak_rss_mb=$((rss / 1024)) parallelism=$P checkpoint_ms=$CHECKPOINT_MS" | tee -a "$RESULTS"
  return $verdict
}

failed=0
for engine in $ENGINES; do
  case $engine in
    floe)
      run_engine floe wait "$FLOE" run wordcount --input "kafka://$B/$IN?start=earliest" --bounded \
        --parallelism "$P" --checkpoint-interval "$CHECKPOINT_MS" \
        --checkpoint-dir "$TMP/floe-ck" --output "kafka://$B/@OUT@" || failed=1 ;;
    kafka-streams)
      run_engine kafka-streams stop java -Xmx2g -cp "$CPS" peers.StreamsWordCount "$B" "$IN" @OUT@ \
        "$RUN-app" "$P" "$CHECKPOINT_MS" "$TMP/streams-state" || failed=1 ;;
    flink)
      run_engine flink wait java -Xmx2g -cp "$CPF" peers.FlinkKafkaWordCount "$B" "$IN" @OUT@ \
        "$P" "$CHECKPOINT_MS" "$RUN-flink" || failed=1 ;;
    *) say "unknown engine $engine"; exit 2 ;;
  esac
done

echo
python3 - "$RESULTS" <<'PY'
import sys
rows = []
for line in open(sys.argv[1]):
    if not line.startswith("RESULT"):
        continue
    kv = dict(f.split("=", 1) for f in line.split()[1:] if "=" in f)
    rows.append(kv)
floe = next((r for r in rows if r["engine"] == "floe" and "e2e_ms" in r), None)
print(f"{'system':<16}{'records/s':>12}{'e2e s':>8}{'cpu s':>8}{'rss MB':>8}{'out records':>13}{'agree':>7}{'floe x':>8}")
for r in rows:
    if r["engine"].startswith("broker"):
        print(f"{r['engine']:<16}{float(r['rate_per_s']):>12,.0f}{float(r['secs']):>8.1f}")
        continue
    if "e2e_ms" not in r:
        print(f"{r['engine']:<16}{'-':>12}{'-':>8}{r.get('cpu_s','-'):>8}{r.get('peak_rss_mb','-'):>8}{r.get('out_records','-'):>13}{'false':>7}")
        continue
    ratio = float(r["e2e_ms"]) / float(floe["e2e_ms"]) if floe else float("nan")
    print(f"{r['engine']:<16}{float(r['rps_e2e']):>12,.0f}{int(r['e2e_ms'])/1000:>8.1f}{float(r['cpu_s']):>8.1f}"
          f"{r['peak_rss_mb']:>8}{r['out_records']:>13}{r['agree']:>7}{ratio:>8.2f}")
PY
exit $failed
