"""The demo behind `make demo`: a real Flink job with real keyed state takes a real, canonical savepoint.

1. starts (or reuses) a local Flink 2.3 cluster in .work/demo/cluster;
2. runs v1 of the sample job (examples/sample-job) until every key holds state, cancelling any earlier demo job;
3. takes a canonical savepoint through Flink's REST API while the job keeps running;
4. prints the savepoint directory, then reads it with flinkstate: operators, states, types and a few entries.

It leaves the cluster running with v1 RUNNING (web UI address printed); `make cluster-stop` stops it.
"""

from __future__ import annotations

import itertools
import json
import sys
import time
from pathlib import Path

from flinkstate.cli.describe import render_text
from flinkstate.engine import FlinkRestClient, LocalFlinkCluster
from flinkstate.errors import FlinkStateError
from flinkstate.jsonify import to_json
from flinkstate.savepoint import Savepoint

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / ".work" / "demo"
JOB_JAR = ROOT / "examples" / "sample-job" / "build" / "sample-job-v1.jar"
JOB_NAME_PREFIX = "keyed-stats-"
KEYS = 10


def step(text: str) -> None:
    print(f"\n== {text}", flush=True)


def cancel_earlier_demo_jobs(client: FlinkRestClient) -> None:
    for job in client.list_jobs():
        if job["name"].startswith(JOB_NAME_PREFIX) and job["state"] not in {"FINISHED", "CANCELED", "FAILED"}:
            print(f"   cancelling the earlier demo job {job['jid']} ({job['name']})")
            client.cancel(job["jid"])


def keys_with_state(audit: Path) -> set[str]:
    """Keys that have seen an event in this run: the job writes one audit line per key at its first event."""
    return {json.loads(line)["key"] for path in audit.glob("*.jsonl") for line in path.read_text().splitlines()}


def show_savepoint(savepoint: Path) -> None:
    """What flinkstate reads from the savepoint: its operators and states, and a few decoded entries."""
    opened = Savepoint.open(savepoint)
    for line in render_text(opened.describe()).splitlines():
        print(f"   {line}")
    print("\n   a few entries of each state of operator 'stats' (flinkstate dump gives them all as JSON Lines):")
    for info in opened.keyed_states("stats"):
        for entry in itertools.islice(opened.iter_entries("stats", info.name), 2):
            key, value = entry[0], entry[-1]
            where = f"{key} / {entry[2]}" if len(entry) == 4 else key
            print(f"   {info.name:<38} {where:<14} {json.dumps(to_json(value))}")


def main() -> int:
    step("Starting a local Flink 2.3 cluster (reused if it already runs)")
    cluster = LocalFlinkCluster(WORK / "cluster").start()
    client = cluster.client
    print(f"   web UI and REST API: {cluster.rest_url}")
    cancel_earlier_demo_jobs(client)

    step("Running v1 of the sample job: 10 String keys, ValueState<POJO>, ValueState<Long>, "
         "ListState<Tuple2>, MapState<String, Row>, a timer per key")
    audit = WORK / "audit" / time.strftime("%Y%m%d-%H%M%S")
    job_id = client.submit_jar(JOB_JAR, entry_class="sample.KeyedStatsJob", parallelism=2,
                               program_args=["--keys", str(KEYS), "--rate", "50", "--audit-dir", str(audit)])
    client.wait_until_running(job_id)
    print(f"   job {job_id} is RUNNING; letting it build up state", end="", flush=True)
    deadline = time.monotonic() + 60
    while (len(keys_with_state(audit)) < KEYS or client.checkpoints(job_id).completed < 2) \
            and time.monotonic() < deadline:
        print(".", end="", flush=True)
        time.sleep(1)
    print(f" every key holds state; {client.checkpoints(job_id).completed} checkpoints completed")

    step("Taking a canonical savepoint while the job keeps running")
    location = client.savepoint(job_id, str(WORK / "savepoints"))
    savepoint = Path(location.removeprefix("file:"))
    print(f"   savepoint: {savepoint}")
    print(f"   job state afterwards: {client.job_state(job_id)}")

    step("The savepoint directory: _metadata plus state files referenced by relative names (relocatable)")
    for path in sorted(savepoint.iterdir()):
        print(f"   {path.name:<40} {path.stat().st_size:>8} bytes")

    step("What is inside, read by flinkstate without a JVM (flinkstate describe / dump)")
    show_savepoint(savepoint)

    step("Left running")
    print(f"   cluster: {cluster.rest_url} (work folder {cluster.work_dir})")
    print(f"   job {job_id} (keyed-stats-v1) keeps RUNNING; `make demo` again cancels it and starts afresh")
    print("   stop everything with: make cluster-stop")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except FlinkStateError as exc:
        print(f"demo: error: {exc}", file=sys.stderr)
        sys.exit(1)
