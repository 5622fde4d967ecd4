#!/usr/bin/env bash
# Builds and runs the Kryo byte writer against a Flink distribution's lib/: build.sh FLINK_LIB OUT_JSONL [MAIN]
# FLINK_LIB is the directory of the distribution's jars (Flink 1.x: Kryo 2.24, Flink 2.x: Kryo 5.6). The classes are
# compiled per distribution (the API differs slightly between them) and rebuilt only when a source is newer.
# MAIN: KryoBytes (JDK classes, the default) or KryoUserClasses (user classes and their layouts, which it takes with
# the jar inspector's own KryoLayouts).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
lib=${1:?usage: build.sh FLINK_LIB OUT_JSONL}
out=${2:?usage: build.sh FLINK_LIB OUT_JSONL}
main=${3:-KryoBytes}
sources=("$here/src/kryojob/KryoBytes.java" "$here/src/kryojob/KryoUserClasses.java"
         "$here/../../../inspector/src/flinkstate/inspector/KryoLayouts.java")
[ -f "$(ls "$lib"/flink-dist-*.jar 2>/dev/null | head -1)" ] || { echo "build.sh: no flink-dist jar in $lib" >&2; exit 1; }
command -v javac >/dev/null || { echo "build.sh: javac not found: install a JDK 17 or newer" >&2; exit 1; }
classes="$out.classes"
stale=0
[ -f "$classes/kryojob/$main.class" ] || stale=1
for source in "${sources[@]}"; do [ "$source" -nt "$classes/kryojob/$main.class" ] && stale=1; done
if [ "$stale" = 1 ]; then
  rm -rf "$classes" && mkdir -p "$classes"
  javac -nowarn --release 17 -encoding UTF-8 -cp "$lib/*" -d "$classes" "${sources[@]}"
fi
# --add-opens: Kryo's FieldSerializer and Flink's reflection reach into java.base classes on JDK 17.
java --add-opens java.base/java.util=ALL-UNNAMED --add-opens java.base/java.lang=ALL-UNNAMED \
  --add-opens java.base/java.time=ALL-UNNAMED --add-opens java.base/java.math=ALL-UNNAMED \
  --add-opens java.base/java.net=ALL-UNNAMED --add-opens java.base/java.nio.charset=ALL-UNNAMED \
  -cp "$classes:$lib/*" "kryojob.$main" > "$out.tmp" 2> "$out.log"
mv "$out.tmp" "$out"
