#!/bin/sh
# Runs once in the minio/mc container: the bucket for savepoints, checkpoints, reports and the release file.
set -eu
tries=0
until mc alias set local http://minio:9000 "$MINIO_ROOT_USER" "$MINIO_ROOT_PASSWORD" >/dev/null 2>&1; do
  tries=$((tries + 1))
  if [ "$tries" -ge 120 ]; then echo "minio did not answer within 120 s" >&2; exit 1; fi
  echo "waiting for minio"; sleep 1
done
mc mb --ignore-existing "local/$FLINKSTATE_BUCKET"
echo "bucket $FLINKSTATE_BUCKET ready"
