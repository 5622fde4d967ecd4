#!/usr/bin/env bash
# Builds the compatibility-matrix job, its base version and every variant: build.sh FLINK_HOME [OUT_DIR [NAME...]]
# (NAME...: only these versions, e.g. base).
# A variant is src/common + src/base with the files of variants/<name>/ replacing or adding to them, minus the base
# files listed in variants/<name>/REMOVE. Produces OUT_DIR/compat-matrix-<name>.jar (default OUT_DIR: build/ beside
# this script); a jar is rebuilt only when one of its sources is newer, so re-running is fast.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
flink_home=${1:?usage: build.sh FLINK_HOME [OUT_DIR [NAME...]]}
out=${2:-$here/build}
only=("${@:3}")
[ -d "$flink_home/lib" ] || { echo "build.sh: no Flink distribution at $flink_home (missing lib/)" >&2; exit 1; }
command -v javac >/dev/null || { echo "build.sh: javac not found: install a JDK 17 or newer" >&2; exit 1; }
mkdir -p "$out"

build() {  # build NAME [VARIANT_DIR]
  local name=$1 variant=${2:-} jar="$out/compat-matrix-$1.jar"
  local inputs=("$here/src/common" "$here/src/base" "$here/build.sh")
  [ -n "$variant" ] && inputs+=("$variant")
  if [ -f "$jar" ] && [ -z "$(find "${inputs[@]}" -newer "$jar" -type f | head -1)" ]; then
    return
  fi
  local work
  work=$(mktemp -d)
  mkdir -p "$work/src" "$work/classes"
  cp -r "$here/src/common/." "$here/src/base/." "$work/src/"
  if [ -n "$variant" ]; then
    cp -r "$variant/matrix" "$work/src/"
    if [ -f "$variant/REMOVE" ]; then
      while read -r file; do [ -n "$file" ] && rm -f "$work/src/matrix/$file"; done < "$variant/REMOVE"
    fi
  fi
  javac -nowarn --release 17 -encoding UTF-8 -cp "$flink_home/lib/*" -d "$work/classes" \
    $(find "$work/src" -name '*.java')
  jar --create --file "$jar.tmp" --main-class matrix.MatrixJob -C "$work/classes" .
  mv "$jar.tmp" "$jar"
  rm -rf "$work"
  echo "built $jar"
}

wanted() { [ ${#only[@]} -eq 0 ] || [[ " ${only[*]} " == *" $1 "* ]]; }
wanted base && build base
for variant in "$here"/variants/*/; do
  wanted "$(basename "$variant")" && build "$(basename "$variant")" "${variant%/}"
done
exit 0
