#!/usr/bin/env bash
# A SQL window aggregation against the same job in floe's DataStream API and
# in Flink SQL, on one file, in interleaved rounds.
#   compare.sh FLOE_BIN INPUT FLINK_PYTHON [ROUNDS=3]
# FLINK_PYTHON: a Python with the apache-flink package (the Flink peer's venv).
# Each round runs, in an order rotating by round:
#   floe-datastream  floe run window --window tumbling:1000 --agg sum --out-of-orderness 1000
#   floe-sql         floe sql -f window.sql (SUM and COUNT per key and 1 s window)
#   flink-sql        flink_sql.py: the same window.sql on Flink
# all at parallelism P (default 2), each writing its rows to a file of its own.
# ENGINES (default all three, in that order) picks and orders the engines,
# e.g. ENGINES="floe-datastream floe-sql" without Flink; with BASE_FLOE set
# to another floe binary, the engine floe-sql-base is floe-sql run by it
# (a before/after comparison in the same run).
# Per run, one line:
#   run round=R engine=E wall_s= cpu_s= rss_mb= job_s= rows= load1=
# wall_s, cpu_s (user + sys), rss_mb: the whole process (/usr/bin/time; Flink:
# Python, JVM and MiniCluster); job_s: floe's summary elapsed_ms, Flink's net
# runtime; rows: lines written (every engine must write the same number).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ $# -lt 3 ]; then sed -n '2,20p' "$0"; exit 2; fi
FLOE="$(realpath "$1")" INPUT="$(realpath "$2")" PY="$3" ROUNDS="${4:-3}" P="${P:-2}"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
sed -e "s|\${INPUT}|$INPUT|" -e "s|\${OUTPUT}|$TMP/sql.csv|" "$HERE/window.sql" > "$TMP/window.sql"

run() {
  local round="$1" engine="$2" load rc=0 rows job
  load=$(cut -d' ' -f1 /proc/loadavg)
  rm -rf "$TMP/out" "$TMP/sql.csv"
  case "$engine" in
    floe-datastream)
      /usr/bin/time -f "%e %U %S %M" -o "$TMP/time" "$FLOE" run window --input "$INPUT" \
        --window tumbling:1000 --agg sum --out-of-orderness 1000 --parallelism "$P" \
        --output "$TMP/out" >/dev/null 2>"$TMP/err" || rc=$?
      rows=$(find "$TMP/out" -type f -exec cat {} + | wc -l) ;;
    floe-sql|floe-sql-base)
      local bin="$FLOE"
      [ "$engine" = floe-sql-base ] && bin="$(realpath "${BASE_FLOE:?BASE_FLOE: the other floe binary}")"
      /usr/bin/time -f "%e %U %S %M" -o "$TMP/time" "$bin" sql -f "$TMP/window.sql" \
        --parallelism "$P" >/dev/null 2>"$TMP/err" || rc=$?
      rows=$(wc -l < "$TMP/sql.csv") ;;
    flink-sql)
      /usr/bin/time -f "%e %U %S %M" -o "$TMP/time" "$PY" "$HERE/flink_sql.py" "$INPUT" \
        "$TMP/out" "$P" >"$TMP/err" 2>&1 || rc=$?
      rows=$(find "$TMP/out" -type f ! -name '.*' -exec cat {} + | wc -l) ;;
  esac
  if [ $rc -ne 0 ]; then tail -5 "$TMP/err" >&2; echo "compare.sh: $engine failed" >&2; exit 1; fi
  job=$(grep -o 'elapsed_ms=[0-9]*\|job_ms=[0-9]*' "$TMP/err" | head -1 | cut -d= -f2)
  read -r wall user sys rss < "$TMP/time"
  echo "run round=$round engine=$engine wall_s=$wall cpu_s=$(echo "$user + $sys" | bc)" \
    "rss_mb=$((rss / 1024)) job_s=$(echo "scale=3; ${job:-0} / 1000" | bc) rows=$rows load1=$load"
}

read -r -a engines <<< "${ENGINES:-floe-datastream floe-sql flink-sql}"
n=${#engines[@]}
for round in $(seq 1 "$ROUNDS"); do
  for i in $(seq 0 $((n - 1))); do
    run "$round" "${engines[$(( (i + round - 1) % n ))]}"
  done
done
