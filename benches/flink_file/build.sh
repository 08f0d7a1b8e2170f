#!/usr/bin/env bash
# Compiles the Flink file-window job against the jars of the Flink peer.
#   build.sh [PEER_DIR]      PEER_DIR (or $FLINK_PEER): a copy of peers/flink on
#                            which setup.sh has run (build/classpath.txt,
#                            build/flink-home.txt)
# Output: build/classes and build/classpath.txt (flink-dist + log4j from the
# peer, plus flink-connector-files, which holds FileSource and
# TextLineInputFormat and ships beside flink-dist in the wheel's lib/).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PEER="${1:-${FLINK_PEER:-}}"
if [ -z "$PEER" ]; then
  echo "build.sh: give the Flink peer directory (argument or FLINK_PEER)" >&2; exit 2
fi
PEER="$(cd "$PEER" && pwd)"
if [ ! -s "$PEER/build/classpath.txt" ] || [ ! -s "$PEER/build/flink-home.txt" ]; then
  echo "build.sh: run $PEER/setup.sh first (FLINK_PIP_MINIMAL=1 is enough)" >&2; exit 2
fi
LIB="$(cat "$PEER/build/flink-home.txt")/lib"
files=$(ls "$LIB"/flink-connector-files-*.jar 2>/dev/null | head -1 || true)
if [ -z "$files" ]; then
  echo "build.sh: no flink-connector-files jar under $LIB" >&2; exit 1
fi
cd "$HERE"
mkdir -p build
echo "$(cat "$PEER/build/classpath.txt"):$files" > build/classpath.txt
echo "$PEER" > build/peer.txt
rm -rf build/classes && mkdir -p build/classes
javac --release 17 -Xlint:-options -cp "$(cat build/classpath.txt)" -d build/classes $(find src -name '*.java')
echo "build: ok -> $HERE/build/classes"
