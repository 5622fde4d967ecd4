#!/usr/bin/env bash
# Writes a canonical savepoint holding Kryo state with the Flink distribution of FLINK_LIB (an in-process MiniCluster
# of that Flink): savepoint.sh FLINK_LIB OUT_DIR. Prints the savepoint directory (a file: URI) on stdout.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
lib=${1:?usage: savepoint.sh FLINK_LIB OUT_DIR}
out=${2:?usage: savepoint.sh FLINK_LIB OUT_DIR}
[ -f "$(ls "$lib"/flink-dist-*.jar 2>/dev/null | head -1)" ] || { echo "savepoint.sh: no flink-dist jar in $lib" >&2; exit 1; }
command -v javac >/dev/null || { echo "savepoint.sh: javac not found: install a JDK 17 or newer" >&2; exit 1; }
mkdir -p "$out"
classes="$out/classes"
rm -rf "$classes" && mkdir -p "$classes"
javac -nowarn --release 17 -encoding UTF-8 -cp "$lib/*" -d "$classes" "$here/src/kryojob/KryoStateJob.java"
# A job jar as `flink run` takes one: the job runs from it, and `flinkstate schema --jar` reads it (issue 25).
jar --create --file "$out/kryo-state-job.jar" --main-class kryojob.KryoStateJob -C "$classes" .
"$here/run.sh" "$lib" "$out/kryo-state-job.jar" "$out/job.log" "$out"
