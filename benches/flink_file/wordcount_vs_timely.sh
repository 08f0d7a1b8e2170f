#!/usr/bin/env bash
# floe's word count against timely-dataflow's, whole process, interleaved rounds.
#   wordcount_vs_timely.sh FLOE_BIN MAILBOX_BENCH_BIN [ROUNDS=5]
# MAILBOX_BENCH_BIN: peers/mailbox built per its README (target/release/mailbox-bench).
#   floe:   FLOE_BIN run wordcount --records 10000000 --output /dev/null   (P=2 default)
#   timely: MAILBOX_BENCH_BIN timely-wc-string --workers 2 --reps 1        (10 M words)
# Both draw 10 M words from a 10,000-word vocabulary and count them with 2 threads.
# Per run:   run round=R engine=floe|timely wall_s= cpu_s= peak_rss_mb= load1= other_cpu_pct=
# Per round: ratio round=R wall=timely/floe cpu=timely/floe   (> 1: floe faster)
# The order alternates between rounds; QUIET_PCT / QUIET_WAIT_S as in compare.sh.
# FLOE_OLD=BIN adds an older floe binary to every round (engine=floe-old, the
# order rotating over the three), and the ratio line then ends with
#   old_wall=floe-old/floe old_cpu=floe-old/floe   (> 1: the new binary faster)
set -euo pipefail
if [ $# -lt 2 ]; then sed -n '2,14p' "$0"; exit 2; fi
FLOE="$1" TIMELY="$2" ROUNDS="${3:-5}"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
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
one() { # ENGINE CMD... -> prints the run line, sets WALL CPU
  local e="$1" load b0; shift
  wait_quiet
  load=$(cut -d' ' -f1 /proc/loadavg); b0=$(busy)
  /usr/bin/time -f "%e %U %S %M" -o "$TMP/time" "$@" >/dev/null 2>"$TMP/err" \
    || { cat "$TMP/err" >&2; echo "wordcount_vs_timely.sh: $e failed" >&2; exit 1; }
  read -r WALL u s rss < "$TMP/time"
  CPU=$(awk -v u="$u" -v s="$s" 'BEGIN{printf "%.2f", u + s}')
  awk -v r="$ROUND" -v e="$e" -v w="$WALL" -v c="$CPU" -v rss="$rss" -v load="$load" \
    -v b="$(( $(busy) - b0 ))" -v hz="$HZ" 'BEGIN {
      o = (b / hz - c) * 100 / (w > 0 ? w : 1); if (o < 0) o = 0
      printf "run round=%d engine=%s wall_s=%.2f cpu_s=%.2f peak_rss_mb=%.1f load1=%s other_cpu_pct=%d\n",
        r, e, w, c, rss / 1024, load, o }'
}
echo "# wordcount_vs_timely.sh $(date -u +%FT%TZ) floe=$FLOE timely=$TIMELY"
for ROUND in $(seq 1 "$ROUNDS"); do
  if [ -n "${FLOE_OLD:-}" ]; then
    case $((ROUND % 3)) in
      1) order="floe-old floe timely" ;; 2) order="floe timely floe-old" ;; *) order="timely floe-old floe" ;;
    esac
  else
    order="floe timely"; [ $((ROUND % 2)) = 0 ] && order="timely floe"
  fi
  for e in $order; do
    if [ "$e" = floe ]; then
      one floe "$FLOE" run wordcount --records 10000000 --output /dev/null
      floe_wall=$WALL floe_cpu=$CPU
    elif [ "$e" = floe-old ]; then
      one floe-old "$FLOE_OLD" run wordcount --records 10000000 --output /dev/null
      old_wall=$WALL old_cpu=$CPU
    else
      one timely "$TIMELY" timely-wc-string --workers 2 --reps 1
      timely_wall=$WALL timely_cpu=$CPU
    fi
  done
  awk -v r="$ROUND" -v a="$timely_wall" -v b="$floe_wall" -v c="$timely_cpu" -v d="$floe_cpu" \
    -v ow="${old_wall:-}" -v oc="${old_cpu:-}" 'BEGIN {
      printf "ratio round=%d wall=%.2f cpu=%.2f", r, a / b, c / d
      if (ow != "") printf " old_wall=%.2f old_cpu=%.2f", ow / b, oc / d
      printf "\n" }'
done
