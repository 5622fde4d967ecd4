#!/usr/bin/env bash
# Sets up everything the demo and the tests need, idempotently; a re-run with nothing changed takes seconds.
#   .venv        Airflow 3.3, the Spark provider, PySpark 4.3, fastavro, boto3, pytest, and flinkstate (editable)
#   .venv-flink  Flink 2.3 from PyPI (apache-flink): the local cluster's distribution
#   .flink-dists/<version>  older Flink distributions for the version matrix (FLINK_MATRIX_VERSIONS)
#   examples/sample-job/build/sample-job-v{1,2,3}.jar, and build/flink-<version>/ for each matrix version
#   inspector/build/flink-<version>/flinkstate-inspector.jar  the jar inspector ('schema --jar'), per Flink version
# Checks for Java 17+ first. Environment: PYTHON (default python3).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
# Flink versions besides 2.3 that the tests read savepoints of (metadata version 4 and 6). Each is the PyPI
# apache-flink (scripts, conf/) and apache-flink-libraries (jars) of that version, unpacked with --no-deps into
# .flink-dists/<version>: only the Java distribution is used, so no Python dependencies are needed.
FLINK_MATRIX_VERSIONS=${FLINK_MATRIX_VERSIONS-"1.20.3 2.2.0"}
logs=.work/setup
mkdir -p "$logs"

say() { printf 'setup: %s\n' "$*"; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 1; }

# --- Java 17+ (Flink runs on it; the sample jobs compile with javac)
java_major() { "$1" -version 2>&1 | sed -n 's/.*version "\([0-9]*\)\(\.\([0-9]*\)\)\{0,1\}.*/\1 \3/p' | head -1 |
               awk '{ print ($1 == 1 ? $2 : $1) }'; }
command -v java >/dev/null || die "Java 17+ is required but 'java' is not on PATH (Debian: apt-get install openjdk-17-jdk-headless)"
command -v javac >/dev/null || die "a JDK 17+ is required but 'javac' is not on PATH (Debian: apt-get install openjdk-17-jdk-headless)"
major=$(java_major java)
[ -n "$major" ] && [ "$major" -ge 17 ] || die "Java 17+ is required; 'java' is version ${major:-unknown}"

command -v "$PYTHON" >/dev/null || die "$PYTHON not found (set PYTHON to a Python 3.10+ interpreter)"

# --- a virtual environment whose inputs are fingerprinted: rebuilt only when a requirements file changes
fingerprint() { cat "$@" | sha256sum | cut -d' ' -f1; }

setup_project_venv() {
  local want; want=$(fingerprint requirements.txt constraints.txt pyproject.toml plugins/pyproject.toml)
  if [ -x .venv/bin/python ] && [ "$(cat .venv/.setup-fingerprint 2>/dev/null)" = "$want" ]; then
    return 0
  fi
  say "installing the project environment in .venv (first time: a few minutes)"
  [ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -r requirements.txt -c constraints.txt
  # The pyspark-client trap: the Spark provider's pyspark-client overwrote pyspark's files; put pyspark back.
  .venv/bin/python -m pip install -q --force-reinstall --no-deps "pyspark==4.3.0"
  .venv/bin/python -m pip install -q --no-deps -e .
  # The Airflow pieces as a provider (the flink connection type; plugins/pyproject.toml).
  .venv/bin/python -m pip install -q --no-deps -e plugins
  .venv/bin/python -c "import pyspark, airflow, flinkstate; from pyspark.sql import SparkSession" \
    || die "the project environment is broken (pyspark, airflow or flinkstate does not import)"
  echo "$want" > .venv/.setup-fingerprint
  fingerprint setup.py flinkstate/_speedups/*.c > .venv/.speedups-fingerprint  # just built by the -e install
}

# The compiled fast path (flinkstate/_speedups) is built by the editable install; when its C source or setup.py
# changes, only flinkstate is reinstalled (seconds), not the whole environment.
build_speedups() {
  local want; want=$(fingerprint setup.py flinkstate/_speedups/*.c)
  if [ "$(cat .venv/.speedups-fingerprint 2>/dev/null)" = "$want" ] && \
     .venv/bin/python -c "import flinkstate._speedups._cdecode" 2>/dev/null; then
    return 0
  fi
  say "building the compiled fast path (flinkstate/_speedups)"
  .venv/bin/python -m pip install -q --no-deps -e . || die "building flinkstate (and its C extension) failed"
  echo "$want" > .venv/.speedups-fingerprint
}

setup_flink_venv() {
  local want; want=$(fingerprint requirements-flink.txt constraints-flink.txt)
  if [ -x .venv-flink/bin/python ] && [ "$(cat .venv-flink/.setup-fingerprint 2>/dev/null)" = "$want" ]; then
    return 0
  fi
  say "installing Flink 2.3 in .venv-flink (first time: about a minute)"
  [ -x .venv-flink/bin/python ] || "$PYTHON" -m venv .venv-flink
  .venv-flink/bin/python -m pip install -q --upgrade pip
  .venv-flink/bin/python -m pip install -q -r requirements-flink.txt -c constraints-flink.txt
  echo "$want" > .venv-flink/.setup-fingerprint
}

setup_flink_dist() {
  local version=$1 dir=.flink-dists/$1
  [ -x "$dir/pyflink/bin/jobmanager.sh" ] && [ -f "$dir/.complete" ] && return 0
  say "unpacking Flink $version into $dir"
  rm -rf "$dir"
  "$PYTHON" -m pip install -q --no-deps --target "$dir" "apache-flink==$version" "apache-flink-libraries==$version"
  touch "$dir/.complete"
}

# The environments are independent: install them side by side, saying what is still under way while it is.
pids=() names=()
{ setup_project_venv && build_speedups; } > "$logs/venv.log" 2>&1 & pids+=($!) names+=(".venv")
setup_flink_venv > "$logs/venv-flink.log" 2>&1 & pids+=($!) names+=(".venv-flink")
for version in $FLINK_MATRIX_VERSIONS; do
  setup_flink_dist "$version" > "$logs/flink-$version.log" 2>&1 & pids+=($!) names+=("Flink $version")
done
started=$SECONDS reported=$SECONDS
declare -A shown=()
echo_new_steps() {  # the "setup: ..." lines the background installs wrote since the last look
  local log count
  for log in "$logs"/*.log; do
    count=$(grep -c '^setup:' "$log" 2>/dev/null || true)
    if [ "${count:-0}" -gt "${shown[$log]:-0}" ]; then
      grep '^setup:' "$log" | tail -n +$(( ${shown[$log]:-0} + 1 ))
      shown[$log]=$count
    fi
  done
}
while :; do
  echo_new_steps
  running=()
  for i in "${!pids[@]}"; do kill -0 "${pids[$i]}" 2>/dev/null && running+=("${names[$i]}"); done
  [ ${#running[@]} -eq 0 ] && break
  # Every 15 s: which installs are still running (the first cold setup takes a few minutes, mostly pip).
  if [ $((SECONDS - reported)) -ge 15 ]; then
    say "still installing (${running[*]}) after $((SECONDS - started)) s; logs in $logs/"
    reported=$SECONDS
  fi
  sleep 1
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
echo_new_steps
if [ $status -ne 0 ]; then
  for log in "$logs"/*.log; do printf '\n--- %s\n' "$log" >&2; cat "$log" >&2; done
  die "installing an environment failed (logs above)"
fi

flink_home=$(ls -d .venv-flink/lib/python*/site-packages/pyflink 2>/dev/null | head -1)
[ -n "$flink_home" ] && [ -x "$flink_home/bin/jobmanager.sh" ] || die "no Flink distribution in .venv-flink"
examples/sample-job/build.sh "$flink_home"
examples/compat-matrix/build.sh "$flink_home"
examples/edge-job/build.sh "$flink_home"
inspector/build.sh "$flink_home"  # the jar inspector ('schema --jar'), one build per Flink version
for version in $FLINK_MATRIX_VERSIONS; do
  examples/sample-job/build.sh ".flink-dists/$version/pyflink" "examples/sample-job/build/flink-$version"
  inspector/build.sh ".flink-dists/$version/pyflink"
done
# Flink 1.x builds of the edge job and the matrix's base (the jar ground truth on the other major: test_jar_schema)
if [[ " $FLINK_MATRIX_VERSIONS " == *" 1.20.3 "* ]]; then
  examples/edge-job/build.sh .flink-dists/1.20.3/pyflink examples/edge-job/build/flink-1.20.3
  examples/compat-matrix/build.sh .flink-dists/1.20.3/pyflink examples/compat-matrix/build/flink-1.20.3 base
fi
say "ready (Java $major, $(.venv/bin/python --version), Flink $(ls "$flink_home"/lib/flink-dist-*.jar | sed 's/.*flink-dist-\(.*\)\.jar/\1/'))"
