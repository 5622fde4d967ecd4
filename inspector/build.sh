#!/usr/bin/env bash
# Builds the jar inspector (`flinkstate schema --jar`) against a Flink distribution: build.sh FLINK_HOME [OUT_JAR]
# Default OUT_JAR: build/flink-<version>/flinkstate-inspector.jar beside this script. The inspector uses Flink's
# runtime classes, so it is built once per Flink version, against that version's lib/ jars; a jar is rebuilt only
# when a source (or this script) is newer than it, so re-running is fast.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
flink_home=${1:?usage: build.sh FLINK_HOME [OUT_JAR]}
[ -d "$flink_home/lib" ] || { echo "build.sh: no Flink distribution at $flink_home (missing lib/)" >&2; exit 1; }
command -v javac >/dev/null || { echo "build.sh: javac not found: install a JDK 17 or newer" >&2; exit 1; }
dist=$(ls "$flink_home"/lib/flink-dist*.jar 2>/dev/null | head -1)
[ -n "$dist" ] || { echo "build.sh: no lib/flink-dist-*.jar in $flink_home" >&2; exit 1; }
version=$(basename "$dist" | sed 's/^flink-dist[_0-9.]*-\(.*\)\.jar$/\1/')
jar=${2:-$here/build/flink-$version/flinkstate-inspector.jar}
if [ -f "$jar" ] && [ -z "$(find "$here/src" "$here/build.sh" -newer "$jar" -type f | head -1)" ]; then
  exit 0
fi
mkdir -p "$(dirname "$jar")"
classes=$(mktemp -d)
trap 'rm -rf "$classes"' EXIT
javac -nowarn --release 17 -encoding UTF-8 -cp "$flink_home/lib/*" -d "$classes" $(find "$here/src" -name '*.java')
tmp=$(mktemp "$jar.XXXXXX")  # two builds at once each write their own file; the last rename wins, both whole
jar --create --file "$tmp" --main-class flinkstate.inspector.SchemaInspector -C "$classes" .
mv "$tmp" "$jar"
echo "built $jar"
