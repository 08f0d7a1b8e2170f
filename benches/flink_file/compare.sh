#!/usr/bin/env bash
# floe against Flink on the same window CSV, interleaved rounds, one line per run.
#   compare.sh FLOE_BIN INPUT [ROUNDS=3]
# Env:
#   WINDOWS="tumbling:1000 sliding:10000,1000"   window specs (floe's --window syntax)
#   P=2  OOO=500                                 parallelism, out-of-orderness (ms)
#   FLINK_SPLIT=0|1   1: give Flink the input cut into P files at line boundaries
#                     (a directory; TextLineInputFormat reads a file as one split,
#                     so with one file only one Flink source subtask reads)
#   QUIET_PCT=30 QUIET_WAIT_S=60   before each run, wait up to QUIET_WAIT_S for the
#                     machine to be under QUIET_PCT % busy over 3 s (0..100 per core)
#   FLINK_PEER        only if build.sh has not run yet
# Per run:  run round=R engine=floe|flink window=W records= windows= wall_s= rps_wall=
#           job_s= rps_job= cpu_s= cpu_pct= peak_rss_mb= load1= other_cpu_pct=
#   wall_s: the whole process (/usr/bin/time); job_s: floe's summary elapsed_ms,
#   Flink's JobExecutionResult net runtime (no JVM/MiniCluster start).
# Per round and window:  ratio round=R window=W rps_wall=floe/flink rps_job=... cpu=flink/floe
# The order floe/flink alternates between rounds. Output goes to /dev/null (floe)
# and a counting discarding sink (Flink); the window counts must agree.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ $# -lt 2 ]; then sed -n '2,21p' "$0"; exit 2; fi
FLOE="$(realpath "$1")" INPUT="$(realpath "$2")" ROUNDS="${3:-3}"
WINDOWS="${WINDOWS:-tumbling:1000 sliding:10000,1000}"
P="${P:-2}" OOO="${OOO:-500}"
[ -x "$FLOE" ] || { echo "compare.sh: $FLOE is not executable" >&2; exit 2; }
[ -f "$INPUT" ] || { echo "compare.sh: no input $INPUT" >&2; exit 2; }
[ -d "$HERE/build/classes" ] || "$HERE/build.sh" >&2

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
FLINK_INPUT="$INPUT"
if [ "${FLINK_SPLIT:-0}" = 1 ]; then
  mkdir "$TMP/split"
  (cd "$TMP/split" && split -n "l/$P" -d "$INPUT" part-)
  FLINK_INPUT="$TMP/split"
fi

busy() { awk '/^cpu /{print $2+$3+$4+$7+$8+$9; exit}' /proc/stat; }
HZ=$(getconf CLK_TCK)
wait_quiet() {
  local deadline=$(( $(date +%s) + ${QUIET_WAIT_S:-60} )) a b pct
  while :; do
    a=$(busy); sleep 3; b=$(busy)
    pct=$(( (b - a) * 100 / (3 * HZ) ))
    [ "$pct" -lt "${QUIET_PCT:-30}" ] && return 0
    [ "$(date +%s)" -ge "$deadline" ] && return 0
  done
}
field() { sed -n "s/^\(.* \)\{0,1\}$1=\([^ ]*\).*/\2/p" | head -1; }

# run_floe W -> sets LINE (the run line) and RPS_WALL RPS_JOB CPU WINDOWS_N
run_floe() {
  local w="$1" load b0 rc=0
  load=$(cut -d' ' -f1 /proc/loadavg); b0=$(busy)
  /usr/bin/time -f "wall=%e user=%U sys=%S rss=%M cpu=%P" -o "$TMP/time" \
    "$FLOE" run window --input "$INPUT" --window "$w" --agg sum --out-of-orderness "$OOO" \
    --parallelism "$P" --output /dev/null 2>"$TMP/err" >/dev/null || rc=$?
  if [ $rc -ne 0 ]; then cat "$TMP/err" >&2; echo "compare.sh: floe failed" >&2; exit 1; fi
  local sum t
  sum=$(grep 'windows_fired=' "$TMP/err" | tail -1)
  t=$(cat "$TMP/time")
  emit floe "$w" "$(echo "$sum" | field records)" "$(echo "$sum" | field windows_fired)" \
    "$(echo "$t" | field wall)" "$(echo "$sum" | field elapsed_ms)" "$(echo "$t" | field user)" \
    "$(echo "$t" | field sys)" "$(echo "$t" | field cpu)" "$(echo "$t" | field rss)" "$load" "$b0"
}

run_flink() {
  local w="$1" r
  r=$("$HERE/run.sh" --input "$FLINK_INPUT" --window "$w" --out-of-orderness "$OOO" --parallelism "$P" | grep '^RESULT ')
  LOAD_OVERRIDE=$(echo "$r" | field load1)
  OTHER_OVERRIDE=$(echo "$r" | field other_cpu_pct)
  emit flink "$w" "$(echo "$r" | field records)" "$(echo "$r" | field windows)" \
    "$(awk -v ms="$(echo "$r" | field process_ms)" 'BEGIN{print ms/1000}')" "$(echo "$r" | field elapsed_ms)" \
    "$(echo "$r" | field user_s)" "$(echo "$r" | field sys_s)" "$(echo "$r" | field cpu)" \
    "$(echo "$r" | field peak_rss_kb)" "" ""
  LOAD_OVERRIDE="" OTHER_OVERRIDE=""
}

# emit ENGINE W RECORDS WINDOWS WALL_S JOB_MS USER SYS CPU% RSS_KB LOAD1 BUSY0
emit() {
  local other load="${11}"
  if [ -n "${12}" ]; then
    other=$(awk -v b="$(( $(busy) - ${12} ))" -v hz="$HZ" -v own="$(awk -v u="$7" -v s="$8" 'BEGIN{print u+s}')" -v w="$5" \
      'BEGIN { o = (b / hz - own) * 100 / (w > 0 ? w : 1); printf "%d", (o < 0 ? 0 : o) }')
  else
    other="$OTHER_OVERRIDE" load="$LOAD_OVERRIDE"
  fi
  LINE=$(awk -v e="$1" -v w="$2" -v n="$3" -v win="$4" -v wall="$5" -v job="$6" -v u="$7" -v s="$8" \
    -v cpu="${9%\%}" -v rss="${10}" -v load="$load" -v other="$other" -v round="$ROUND" 'BEGIN {
      printf "run round=%d engine=%s window=%s records=%d windows=%d wall_s=%.2f rps_wall=%.0f job_s=%.2f rps_job=%.0f cpu_s=%.2f cpu_pct=%d peak_rss_mb=%.0f load1=%s other_cpu_pct=%s",
        round, e, w, n, win, wall, n / wall, job / 1000, n * 1000 / (job > 0 ? job : 1), u + s, cpu, rss / 1024, load, other }')
  echo "$LINE"
  RPS_WALL=$(echo "$LINE" | field rps_wall) RPS_JOB=$(echo "$LINE" | field rps_job)
  CPU=$(echo "$LINE" | field cpu_s) WINDOWS_N=$(echo "$LINE" | field windows)
}

echo "# compare.sh $(date -u +%FT%TZ) floe=$FLOE input=$INPUT P=$P OOO=$OOO flink_input=$FLINK_INPUT"
for ROUND in $(seq 1 "$ROUNDS"); do
  for w in $WINDOWS; do
    order="floe flink"; [ $((ROUND % 2)) = 0 ] && order="flink floe"
    for e in $order; do
      wait_quiet
      "run_$e" "$w"
      eval "${e}_rps_wall=$RPS_WALL ${e}_rps_job=$RPS_JOB ${e}_cpu=$CPU ${e}_windows=$WINDOWS_N"
    done
    same=yes; [ "$floe_windows" = "$flink_windows" ] || same=NO
    awk -v r="$ROUND" -v w="$w" -v a="$floe_rps_wall" -v b="$flink_rps_wall" -v c="$floe_rps_job" \
      -v d="$flink_rps_job" -v x="$floe_cpu" -v y="$flink_cpu" -v same="$same" 'BEGIN {
      printf "ratio round=%d window=%s rps_wall=%.2f rps_job=%.2f cpu=%.2f same_window_count=%s\n",
        r, w, a / b, c / d, y / x, same }'
  done
done
