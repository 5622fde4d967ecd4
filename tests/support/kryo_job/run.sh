#!/usr/bin/env bash
# Runs KryoStateJob from its jar on an in-process MiniCluster of the Flink distribution of FLINK_LIB:
# run.sh FLINK_LIB JOB_JAR LOG_FILE JOB_ARGS... (savepoint.sh builds the jar and writes; the restore mode's arguments
# are in KryoStateJob.java). The job's stdout is this script's; Flink's log goes to LOG_FILE.
set -euo pipefail
lib=${1:?usage: run.sh FLINK_LIB JOB_JAR LOG_FILE JOB_ARGS...}
jar=${2:?usage: run.sh FLINK_LIB JOB_JAR LOG_FILE JOB_ARGS...}
log=${3:?usage: run.sh FLINK_LIB JOB_JAR LOG_FILE JOB_ARGS...}
shift 3
# --add-opens: Kryo's FieldSerializer and Flink's reflection reach into java.base classes on JDK 17.
exec java --add-opens java.base/java.util=ALL-UNNAMED --add-opens java.base/java.lang=ALL-UNNAMED \
  --add-opens java.base/java.time=ALL-UNNAMED --add-opens java.base/java.math=ALL-UNNAMED \
  --add-opens java.base/java.net=ALL-UNNAMED -Dlog4j2.level=WARN \
  -cp "$jar:$lib/*" kryojob.KryoStateJob "$@" 2> "$log"
