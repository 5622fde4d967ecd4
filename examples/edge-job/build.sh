#!/usr/bin/env bash
# Builds the edge-types job's two versions against a Flink distribution: build.sh FLINK_HOME [OUT_DIR]
# Produces OUT_DIR/edge-job-v{1,2}.jar (default OUT_DIR: build/ beside this script). A jar is rebuilt only when a
# source is newer than it, so re-running is fast.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
flink_home=${1:?usage: build.sh FLINK_HOME [OUT_DIR]}
out=${2:-$here/build}
[ -d "$flink_home/lib" ] || { echo "build.sh: no Flink distribution at $flink_home (missing lib/)" >&2; exit 1; }
command -v javac >/dev/null || { echo "build.sh: javac not found: install a JDK 17 or newer" >&2; exit 1; }
mkdir -p "$out"
for v in v1 v2; do
  jar="$out/edge-job-$v.jar"
  if [ -f "$jar" ] && [ -z "$(find "$here/src/common" "$here/src/$v" "$here/build.sh" -newer "$jar" -type f | head -1)" ]; then
    continue
  fi
  classes=$(mktemp -d)
  javac -nowarn --release 17 -encoding UTF-8 -cp "$flink_home/lib/*" -d "$classes" \
    $(find "$here/src/common" "$here/src/$v" -name '*.java')
  jar --create --file "$jar.tmp" --main-class edge.EdgeJob -C "$classes" .
  mv "$jar.tmp" "$jar"
  rm -rf "$classes"
  echo "built $jar"
done
