#!/usr/bin/env bash
# Group mode (`floe run wordcount --group`) and Kafka Streams on one Apache
# Kafka broker: throughput with N members, and the time a rebalance takes
# after a member's `kill -9`. README.md says what each figure is.
#
#   run.sh setup                         broker, Java classpath, javac, floe, the input topics
#   run.sh throughput floe|streams N     one throughput run with N members
#   run.sh rebalance floe|streams N MS   one kill -9 run, N members, session timeout MS
#   run.sh series                        the rounds, interleaved (ROUNDS, SIZES, SESSIONS, KILLS)
#
# Each run prints one `RESULT …` line (also appended to $RESULTS);
# summarize.py turns them into medians and ratios.
#
# Env: FLOE (default target/release/floe, built with --features kafka when
# missing), FLOE_TEST_KAFKA=HOST:PORT (a running broker; default:
# scripts/services.sh start kafka), WORDS (4000000, the throughput topic),
# RB_WORDS (20000000, the rebalance topic: enough to outlast a kill),
# PARTITIONS (6), VOCAB (10000), SEED (42), P (1: floe --parallelism and
# Kafka Streams' stream threads per member), CHECKPOINT_MS (1000: floe's
# checkpoint interval, Kafka Streams' commit interval), SESSION_MS (10000,
# for throughput runs), RESULTS (build/results.txt).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
BUILD="$HERE/build"
mkdir -p "$BUILD"
FLOE="${FLOE:-$ROOT/target/release/floe}"
WORDS="${WORDS:-4000000}" RB_WORDS="${RB_WORDS:-20000000}"
PARTITIONS="${PARTITIONS:-6}" VOCAB="${VOCAB:-10000}" SEED="${SEED:-42}"
STATUS_PORT="${STATUS_PORT:-19100}"
P="${P:-1}" CHECKPOINT_MS="${CHECKPOINT_MS:-1000}" SESSION_MS="${SESSION_MS:-10000}"
RESULTS="${RESULTS:-$BUILD/results.txt}"
CLK_TCK="$(getconf CLK_TCK)"

say() { echo "scale-out: $*" >&2; }
now_ms() { date +%s%3N; }
load1() { cut -d' ' -f1 /proc/loadavg; }
# CPU ticks (user + system) of a process, 0 once it is gone.
ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
rss_kb() { awk '/VmHWM/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
# The machine's busy ticks (user nice system irq softirq steal).
busy() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8 + $9}' /proc/stat; }
# Keeps a run's logs in build/logs/RUN, removes its work dir ($1 run, $2 dir).
keep_logs() {
  mkdir -p "$BUILD/logs/$1"
  cp "$2"/*.log "$2"/*.txt "$BUILD/logs/$1/" 2>/dev/null || true
  rm -rf "$2"
}
# Waits up to QUIET_WAIT_S (120) for the machine to be under QUIET_PCT
# (30) % busy over 3 s (0..200 on 2 cores; the brokers idle at a few %);
# sets QUIET to the last figure.
wait_quiet() {
  local deadline=$(( $(date +%s) + ${QUIET_WAIT_S:-120} )) a b
  while :; do
    a=$(busy); sleep 3; b=$(busy)
    QUIET=$(( (b - a) * 100 / (3 * CLK_TCK) ))
    [ "$QUIET" -lt "${QUIET_PCT:-30}" ] && return 0
    [ "$(date +%s)" -ge "$deadline" ] && return 0
  done
}
# Stamps each line with ms since the epoch.
stamp() { python3 -u -c 'import sys, time
for l in sys.stdin: sys.stdout.write("%d %s" % (time.time() * 1000, l))'; }

broker() {
  if [ -z "${FLOE_TEST_KAFKA:-}" ]; then
    "$ROOT/scripts/services.sh" start kafka >&2
    # shellcheck disable=SC1091
    . "${CARGO_TARGET_DIR:-$ROOT/target}/services.env"
  fi
  B="$FLOE_TEST_KAFKA"
  BROKER_PID=""
  local f="${CARGO_TARGET_DIR:-$ROOT/target}/services/kafka.pid"
  if [ -f "$f" ] && [ -d "/proc/$(cat "$f")" ]; then BROKER_PID="$(cat "$f")"; fi
}

classpath() {
  if [ ! -s "$BUILD/cp.txt" ] || [ "$HERE/pom.xml" -nt "$BUILD/cp.txt" ]; then
    say "resolving the Kafka Streams classpath (Maven Central)"
    (cd "$HERE" && mvn -B -q dependency:build-classpath -Dmdep.outputFile="$BUILD/cp.txt" >&2)
  fi
  CP="$BUILD/classes:$(cat "$BUILD/cp.txt")"
}
tools() { java -Xmx512m -cp "$CP" scaleout.Tools "$@" 2> >(grep -v '^SLF4J' >&2); }

setup() {
  broker
  classpath
  rm -rf "$BUILD/classes"
  javac --release 17 -Xlint:-options -cp "$(cat "$BUILD/cp.txt")" -d "$BUILD/classes" "$HERE"/src/scaleout/*.java
  local id; id="so$(date +%s)"
  tools produce "$B" "$id-tp" "$PARTITIONS" "$WORDS" "$VOCAB" 10 "$SEED" "$BUILD/oracle-tp.txt" | tee -a "$RESULTS"
  tools produce "$B" "$id-rb" "$PARTITIONS" "$RB_WORDS" "$VOCAB" 10 "$((SEED + 1))" "$BUILD/oracle-rb.txt" | tee -a "$RESULTS"
  cat >"$BUILD/inputs.env" <<EOF
B=$B
TP_TOPIC=$id-tp
TP_WORDS=$WORDS
RB_TOPIC=$id-rb
EOF
  say "inputs: $id-tp ($WORDS words), $id-rb ($RB_WORDS words), $PARTITIONS partitions"
  if [ ! -x "$FLOE" ]; then
    say "building $FLOE (cargo build --release --features kafka)"
    (cd "$ROOT" && cargo build --release --features kafka >&2)
  fi
}

load_inputs() {
  [ -f "$BUILD/inputs.env" ] || { say "run.sh setup first"; exit 2; }
  # shellcheck disable=SC1091
  . "$BUILD/inputs.env"
  broker
  classpath
}

# Starts member $2 of system $1 (group/app $3, input $4, output $5,
# session timeout $6, work dir $7): its pid in PIDS, its log in $7/m$2.log.
start_member() {
  local sys=$1 i=$2 group=$3 in=$4 out=$5 session=$6 dir=$7
  case $sys in
    floe)
      "$FLOE" run wordcount --input "kafka://$B/$in" --output "kafka://$B/$out" --group "$group" \
        --group-partitions "$PARTITIONS" --session-timeout "$session" --parallelism "$P" \
        --checkpoint-dir "$dir/ck" --checkpoint-interval "$CHECKPOINT_MS" \
        ${PROFILE:+--metrics-addr "127.0.0.1:$((STATUS_PORT + i))"} \
        > /dev/null 2> >(stamp >"$dir/m$i.log") &
      ;;
    streams)
      java -Xmx1g -cp "$CP" scaleout.StreamsWordCount "$B" "$in" "$out" "$group" "$P" \
        "$CHECKPOINT_MS" "$dir/state-$i" "$session" >"$dir/m$i.log" 2> >(grep -v '^SLF4J' >"$dir/m$i.err") &
      ;;
    *) say "unknown system $sys"; exit 2 ;;
  esac
  PIDS+=("$!")
}

# Whether a member is still running.
any_alive() {
  local pid
  for pid in "${PIDS[@]}"; do kill -0 "$pid" 2>/dev/null && return 0; done
  return 1
}

# SIGTERM to every member still running, then waits for them.
stop_members() {
  local pid
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
}

# With PROFILE set: where each member's and the broker's threads spent the
# run (threads.py), and, for floe, each member's /status time shares per
# subtask (busy = 1 - idle - backpressured, since the member's current job
# started), as PROFILE lines of $RESULTS ($1 system, $2 members, $3 dir).
profile() {
  local i
  touch "$3/threads.txt.stop"
  wait "$SAMPLER" || true
  sed "s/^/PROFILE system=$1 members=$2 /" "$3/threads.txt" | tee -a "$RESULTS"
  [ "$1" = floe ] || return 0
  for i in $(seq 1 "$2"); do
    curl -sf "http://127.0.0.1:$((STATUS_PORT + i))/status" | python3 -c '
import json, sys
members, member = sys.argv[1], sys.argv[2]
s = json.load(sys.stdin)
head = "PROFILE system=floe members=%s member=%s" % (members, member)
for t in s.get("subtasks", []):
    idle, bp = t["idle_share"], t["backpressured_share"]
    print("%s subtask=%s#%d records_in=%d busy=%.2f idle=%.2f backpressured=%.2f"
          % (head, t["name"].replace(" ", "_"), t["subtask"], t["records_in"], 1 - idle - bp, idle, bp))
for c in s.get("checkpoints", {}).get("history", [])[-3:]:
    print("%s checkpoint=%s" % (head, json.dumps(c, separators=(",", ":"))))
' "$2" "$i" | tee -a "$RESULTS" || true
  done
}

throughput() {
  local sys=$1 n=$2
  load_inputs
  local run dir out load_start t0 b0 m0 verdict i
  run="tp-$sys-$n-$(now_ms)"
  dir="$(mktemp -d)"
  out="$run-out"
  tools topic "$B" "$out" "$PARTITIONS"
  wait_quiet
  load_start=$(load1)
  PIDS=()
  b0=$(ticks "${BROKER_PID:-0}")
  m0=$(busy)
  t0=$(now_ms)
  for i in $(seq 1 "$n"); do start_member "$sys" "$i" "$run" "$TP_TOPIC" "$out" "$SESSION_MS" "$dir"; done
  [ -z "${PROFILE:-}" ] || { python3 "$HERE/threads.py" "$dir/threads.txt" "${PIDS[@]}" ${BROKER_PID:-} & SAMPLER=$!; }
  # The verifier waits for the output; a run whose members all ended
  # (gave up) ends it.
  tools verify "$B" "$out" "$BUILD/oracle-tp.txt" 1800 >"$dir/verify.txt" &
  local verifier=$!
  while kill -0 "$verifier" 2>/dev/null; do
    if ! any_alive; then kill "$verifier" 2>/dev/null; break; fi
    sleep 1
  done
  wait "$verifier" 2>/dev/null || true
  [ -z "${PROFILE:-}" ] || profile "$sys" "$n" "$dir"
  local b1 m1 cpu=0 rss="" t
  b1=$(ticks "${BROKER_PID:-0}")
  m1=$(busy)
  for pid in "${PIDS[@]}"; do
    t=$(ticks "$pid"); cpu=$((cpu + t)); rss="$rss${rss:+,}$(( $(rss_kb "$pid") / 1024 ))"
  done
  stop_members
  verdict=$(cat "$dir/verify.txt")
  local done_ms first="" recs="" rebal=""
  done_ms=$(sed -n 's/.*complete_at_ms=\([0-9]*\).*/\1/p' <<<"$verdict")
  case $sys in
    floe)
      first=$(cat "$dir"/m*.log | sed -n 's/.*first_record .*at_ms=\([0-9]*\).*/\1/p' | sort -n | head -1)
      recs=$(cat "$dir"/m*.log | sed -n 's/.* records=\([0-9]*\) .*/\1/p' | paste -sd, -)
      rebal=$(cat "$dir"/m*.log | grep -c ' rebalance generation=' || true) ;;
    streams)
      first=$(cat "$dir"/m*.log | sed -n 's/^first_record stage=in .*at_ms=\([0-9]*\).*/\1/p' | sort -n | head -1) ;;
  esac
  local line
  if [ -n "$done_ms" ]; then
    line=$(QUIET=$QUIET python3 - "$sys" "$n" "$TP_WORDS" "$t0" "$first" "$done_ms" "$cpu" "$((b1 - b0))" "$((m1 - m0))" \
      "$CLK_TCK" "$load_start" "$(load1)" "$rss" "$recs" "$rebal" <<'PY'
import os, sys
sysname, n, words, t0, first, done, cpu, bcpu, mbusy, tck, l0, l1, rss, recs, rebal = sys.argv[1:]
words, t0, done, tck = int(words), int(t0), int(done), int(tck)
secs = (done - t0) / 1000
first = int(first) if first else t0
cpu, bcpu, mbusy = int(cpu) / tck, int(bcpu) / tck, int(mbusy) / tck
print(f"RESULT what=throughput round={os.environ.get('ROUND', 0)} system={sysname} members={n} words={words} secs={secs:.2f} "
      f"rps={words / secs:.0f} rps_from_first_record={words / ((done - first) / 1000):.0f} "
      f"startup_ms={first - t0} members_cpu_s={cpu:.2f} broker_cpu_s={bcpu:.2f} machine_busy_s={mbusy:.2f} "
      f"others_cpu_s={mbusy - cpu - bcpu:.2f} members_cores={cpu / secs:.2f} broker_cores={bcpu / secs:.2f} "
      f"machine_cores={mbusy / secs:.2f} peak_rss_mb={rss} busy_pct_before={os.environ['QUIET']} load_start={l0} load_end={l1}"
      + (f" member_records={recs} rebalance_lines={rebal}" if recs else ""))
PY
)
  else
    line="RESULT what=throughput system=$sys members=$n failed=1 $verdict"
    say "members' logs kept in $dir"
  fi
  echo "$line" | tee -a "$RESULTS"
  [ -z "$done_ms" ] || keep_logs "$run" "$dir"
}

# Waits (up to $2 s) until command $1 succeeds.
wait_for() {
  local i=0
  until eval "$1"; do
    i=$((i + 1)); [ "$i" -le $(($2 * 10)) ] || return 1; sleep 0.1
  done
}

# floe: every member's newest rebalance is of the group's newest
# generation and reported its first record.
floe_settled() {
  local dir=$1 n=$2 g i
  g=$(cat "$dir"/m*.log | sed -n 's/.* rebalance generation=\([0-9]*\) .*/\1/p' | sort -n | tail -1)
  [ -n "$g" ] || return 1
  for i in $(seq 1 "$n"); do
    grep -q " rebalance generation=$g " "$dir/m$i.log" || return 1
    grep -q "first_record generation=$g " "$dir/m$i.log" || return 1
  done
}
# Kafka Streams: every instance is RUNNING and every task has a first record.
streams_settled() {
  local dir=$1 n=$2 i
  for i in $(seq 1 "$n"); do
    [ "$(grep '^state ' "$dir/m$i.log" | tail -1 | cut -d' ' -f2)" = "REBALANCING->RUNNING" ] || return 1
  done
  [ "$(cat "$dir"/m*.log | sed -n 's/^first_record stage=\([a-z]*\) task=\([0-9_]*\) .*/\1 \2/p' | sort -u | wc -l)" \
    -ge $((2 * PARTITIONS)) ]
}

rebalance() {
  local sys=$1 n=$2 session=$3
  load_inputs
  local run dir out load_start i victim tk
  run="rb-$sys-$n-$session-$(now_ms)"
  dir="$(mktemp -d)"
  out="$run-out"
  tools topic "$B" "$out" "$PARTITIONS"
  wait_quiet
  PIDS=()
  for i in $(seq 1 "$n"); do start_member "$sys" "$i" "$run" "$RB_TOPIC" "$out" "$session" "$dir"; done
  java -Xmx256m -cp "$CP" scaleout.Tools watch "$B" "$run" >"$dir/watch.log" 2>/dev/null &
  local watcher=$!
  if ! wait_for "${sys}_settled $dir $n" 120; then
    say "the group did not settle in 120 s; logs in $dir"
    kill -TERM "$watcher"; stop_members; return 1
  fi
  sleep 3   # a steady state: every member well into its partitions
  victim=$n
  load_start=$(load1)
  tk=$(now_ms)
  kill -9 "${PIDS[$((victim - 1))]}"
  local ok=1
  case $sys in
    floe)
      # The victim's partitions (its newest assignment), then the
      # survivors' first records of a generation that holds some of them.
      local parts
      parts=$(grep ' rebalance generation=' "$dir/m$victim.log" | tail -1 | sed 's/.*partitions=//')
      echo "$parts" | tr ',' '\n' >"$dir/victim-parts"
      moved() {
        local i g
        for i in $(seq 1 $((n - 1))); do
          g=$(awk -v tk="$tk" '$1 > tk && / rebalance generation=/' "$dir/m$i.log" \
            | grep -F -f "$dir/victim-parts" | tail -1 | sed 's/.*generation=\([0-9]*\) .*/\1/')
          [ -n "$g" ] && grep -q "first_record generation=$g " "$dir/m$i.log" && return 0
        done
        return 1
      }
      wait_for "moved" 120 || ok=0
      sleep 2   # the other survivors' lines
      ;;
    streams)
      # The victim's tasks (opened, not closed), then their first records at a survivor.
      awk '/^task_init/ {t[$2" "$3]=1} /^task_close/ {delete t[$2" "$3]} END {for (k in t) print k}' \
        "$dir/m$victim.log" >"$dir/victim-tasks"
      moved() {
        local k
        while read -r k; do
          cat "$dir"/m[0-9]*.log | grep -v "^$" | grep -F "first_record $k " \
            | awk -v tk="$tk" '{split($NF, a, "="); if (a[2] > tk) f = 1} END {exit !f}' || return 1
        done <"$dir/victim-tasks"
      }
      wait_for "moved" 120 || ok=0
      ;;
  esac
  local load_end; load_end=$(load1)
  kill -TERM "$watcher" 2>/dev/null || true
  stop_members
  local line
  line=$(QUIET=$QUIET python3 "$HERE/rebalance_figures.py" "$sys" "$n" "$session" "$dir" "$victim" "$tk" "$ok" \
    "$load_start" "$load_end")
  echo "$line" | tee -a "$RESULTS"
  if [ "$ok" = 1 ]; then keep_logs "$run" "$dir"; else say "logs kept in $dir"; fi
}

series() {
  local rounds="${ROUNDS:-3}" sizes="${SIZES:-1 2 3}" sessions="${SESSIONS:-6000 10000}"
  local kills="${KILLS:-5}" r n s sys
  for r in $(seq 1 "$rounds"); do
    export ROUND=$r
    for n in $sizes; do
      # The first system alternates round by round.
      for sys in $([ $((r % 2)) = 1 ] && echo floe streams || echo streams floe); do
        throughput "$sys" "$n"
      done
    done
  done
  for r in $(seq 1 "$kills"); do
    export ROUND=$r
    for s in $sessions; do
      for sys in $([ $((r % 2)) = 1 ] && echo floe streams || echo streams floe); do
        rebalance "$sys" 3 "$s"
      done
    done
  done
}

case "${1:-}" in
  setup) setup ;;
  throughput) throughput "$2" "$3" ;;
  rebalance) rebalance "$2" "$3" "$4" ;;
  series) series ;;
  *) sed -n '2,22p' "$0" >&2; exit 2 ;;
esac
