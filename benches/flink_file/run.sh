#!/usr/bin/env bash
# One run of the Flink file-window job in a fresh JVM (local MiniCluster).
#   run.sh --input FILE|DIR [--window tumbling:1000|sliding:10000,1000]
#          [--out-of-orderness 500] [--parallelism 2] [--output FILE]
# Needs build.sh first (or FLINK_PEER set: then it builds). Env: JAVA_HEAP
# (default 4g, as the peer), JAVA_OPTS (extra JVM flags).
# Prints the job's RESULT line with, from /usr/bin/time -v, the whole JVM's
# peak_rss_kb, process_ms (wall), cpu (%), user_s, sys_s, and
# other_cpu_pct (CPU of other processes during the run, % of one core) and
# load1 (1-minute load average at the start).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
for a in "$@"; do
  if [ "$a" = --help ] || [ "$a" = -h ]; then sed -n '2,10p' "$0"; exit 0; fi
done
if [ ! -d "$HERE/build/classes" ]; then "$HERE/build.sh" >&2; fi
PEER="$(cat "$HERE/build/peer.txt")"
CP="$HERE/build/classes:$(cat "$HERE/build/classpath.txt")"
# absolute paths: the JVM runs in build/ (Flink writes scratch files in its cwd)
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --input|--output) args+=("$1" "$(realpath -m "$2")"); shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done

# JDK 17 module opens, as in Flink's own conf/config.yaml (env.java.opts.all)
OPENS="--add-exports=java.rmi/sun.rmi.registry=ALL-UNNAMED \
--add-exports=java.security.jgss/sun.security.krb5=ALL-UNNAMED \
--add-opens=java.base/java.lang=ALL-UNNAMED --add-opens=java.base/java.net=ALL-UNNAMED \
--add-opens=java.base/java.io=ALL-UNNAMED --add-opens=java.base/java.nio=ALL-UNNAMED \
--add-opens=java.base/sun.nio.ch=ALL-UNNAMED --add-opens=java.base/java.lang.reflect=ALL-UNNAMED \
--add-opens=java.base/java.text=ALL-UNNAMED --add-opens=java.base/java.time=ALL-UNNAMED \
--add-opens=java.base/java.util=ALL-UNNAMED --add-opens=java.base/java.util.concurrent=ALL-UNNAMED \
--add-opens=java.base/java.util.concurrent.atomic=ALL-UNNAMED \
--add-opens=java.base/java.util.concurrent.locks=ALL-UNNAMED"

mkdir -p "$HERE/build/logs"
tag="$(date +%H%M%S)-$$"
LOG="$HERE/build/logs/$tag.log"
TIMEF="$HERE/build/logs/$tag.time"
cmd=(java "-Xmx${JAVA_HEAP:-4g}" ${JAVA_OPTS:-} $OPENS
     "-Dlog4j.configurationFile=$PEER/conf/log4j2.properties"
     -cp "$CP" flinkfile.FlinkFileWindowJob "${args[@]}")
busy() { awk '/^cpu /{print $2+$3+$4+$7+$8+$9; exit}' /proc/stat; }
load1=$(cut -d' ' -f1 /proc/loadavg)
b0=$(busy)
rc=0
( cd "$HERE/build" && /usr/bin/time -v -o "$TIMEF" "${cmd[@]}" >"$LOG.out" 2>"$LOG" ) || rc=$?
if [ $rc -ne 0 ] || ! grep -q '^RESULT ' "$LOG.out"; then
  cat "$LOG.out"; tail -40 "$LOG" >&2
  echo "run.sh: job failed (rc=$rc), log: $LOG" >&2
  exit 1
fi
rss=$(sed -n 's/^\s*Maximum resident set size (kbytes): //p' "$TIMEF")
wall=$(sed -n 's/^\s*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$TIMEF")
ms=$(echo "$wall" | awk -F: '{ s=0; for (i=1;i<=NF;i++) s=s*60+$i; printf "%d", s*1000 }')
cpu=$(sed -n 's/^\s*Percent of CPU this job got: //p' "$TIMEF")
user=$(sed -n 's/^\s*User time (seconds): //p' "$TIMEF")
sys=$(sed -n 's/^\s*System time (seconds): //p' "$TIMEF")
hz=$(getconf CLK_TCK)
other=$(awk -v b="$(( $(busy) - b0 ))" -v hz="$hz" -v own="$(echo "$user $sys" | awk '{print $1+$2}')" -v ms="$ms" \
        'BEGIN { o = (b / hz - own) * 100000 / (ms > 0 ? ms : 1); printf "%d", (o < 0 ? 0 : o) }')
grep '^RESULT ' "$LOG.out" | sed "s/\$/ peak_rss_kb=$rss process_ms=$ms cpu=$cpu user_s=$user sys_s=$sys other_cpu_pct=$other load1=$load1/"
grep -v '^RESULT ' "$LOG.out" || true
