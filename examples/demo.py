"""The demo behind `make demo`: a safe upgrade of a running stateful Flink job, end to end, on this machine.

1. starts (or reuses) a local Flink 2.3 cluster in .work/demo/cluster and runs v1 of the sample job;
2. runs the Airflow DAG flink_state_upgrade (real Airflow, `airflow dags test`) to upgrade it to v2, whose state
   schema comes from v2's jar (its main() run before anything is stopped) with v2's overlay, which says only what a
   jar cannot (the value the migration gives the new field): no hand-written v2 manifest; preflight
   savepoint, the check job, the migration branch (the migration job, which re-checks what it wrote; both run
   in-process on the Airflow worker for a savepoint this small, on Spark above the DAG's in_process_max_bytes),
   stop-with-savepoint, restore, health gate; prints the check report and the state before and after;
3. runs the same DAG to v3, whose `count` changed type without a declared conversion: the check refuses it, an
   alert goes out, and v2 keeps running with its state.

Each upgrade is one `flinkstate upgrade run --local`, which sets up the local Airflow, prints the run's progress, its
outcome and its alert (the webhook is a receiver inside that command, a stand-in for a chat). The cluster keeps running
afterwards with v2 RUNNING; `make cluster-stop` stops it.
"""

from __future__ import annotations

import itertools
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from flinkstate import (
    FlinkRestClient,
    FlinkStateError,
    LocalFlinkCluster,
    Phase,
    UpgradeJournal,
    describe_outcome,
    open_savepoint,
    to_json,
)

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / ".work" / "demo"
JOBS = ROOT / "examples" / "sample-job"
KEYS = 6


def step(text: str) -> None:
    print(f"\n== {text}", flush=True)


def version(name: str, manifest: str, audit: Path) -> dict[str, Any]:
    """A version of the sample job: its jar, and a manifest (an overlay of the jar's schema)."""
    return {"jar": str(JOBS / "build" / f"sample-job-{name}.jar"), "manifest": str(JOBS / "manifests" / manifest),
            "entry_class": "sample.KeyedStatsJob", "parallelism": 2,
            "program_args": ["--keys", str(KEYS), "--rate", "20", "--audit-dir", str(audit)]}


def upgrade(cluster: LocalFlinkCluster, base: Path, new: dict[str, Any], *, current: dict[str, Any] | None = None,
            job_id: str | None = None) -> int:
    """One run of the DAG flink_state_upgrade by `flinkstate upgrade run --local`: a local Airflow (its home in
    .work/demo/airflow, `airflow dags test`), whose alert goes to a receiver in that command, which prints it with the
    run's progress and outcome. Its exit status says what the run did (0 upgraded, 3 refused)."""
    command = [sys.executable, "-m", "flinkstate", "upgrade", "run", "--local", "--airflow-home", str(WORK / "airflow"),
               "--flink-url", cluster.rest_url, "--deployment", "keyed-stats", "--savepoint-base", str(base),
               "--jar", new["jar"], "--entry-class", new["entry_class"], "--manifest", new["manifest"],
               "--parallelism", str(new["parallelism"]), "--log", str(base / f"upgrade-{Path(new['jar']).stem}.log")]
    if job_id:
        command += ["--job-id", job_id]
    if current:  # the first run: the registry has no record of the running version yet
        command += ["--current-jar", current["jar"], "--current-entry-class", current["entry_class"],
                    "--current-manifest", current["manifest"], "--current-parallelism", str(current["parallelism"]),
                    f"--current-program-args={shlex.join(current['program_args'])}"]
    print(f"   $ flinkstate upgrade run --local --deployment keyed-stats --jar {Path(new['jar']).name} ...", flush=True)
    # From the project's folder: the command is this checkout's flinkstate.
    return subprocess.run([*command, "--", *new["program_args"]], cwd=ROOT, check=False, timeout=900).returncode


def latest_run(base: Path) -> Path:
    runs = sorted((base / "keyed-stats").iterdir(), key=lambda p: p.stat().st_mtime)
    return runs[-1]


def show_entries(title: str, savepoint: Path, states: tuple[str, ...] = ("stats", "count", "recent")) -> None:
    print(f"   {title}: {savepoint}")
    opened = open_savepoint(savepoint)
    for state in states:
        for key, _, value in itertools.islice(sorted(opened.iter_entries("stats", state), key=str), 2):
            print(f"     {state:<7} {key:<7} {json.dumps(to_json(value))}")


def final_event(record: dict[str, Any]) -> dict[str, Any]:
    """The run record's closing event (the conclude task's: outcome, durations, what runs)."""
    return next((event for event in reversed(record["events"]) if event.get("stage") == "done"), {})


def downtime(record: dict[str, Any]) -> str:
    """The upgrade's downtime as the run recorded it (run.json's ``durations``, from the journal): from the stop
    request to the last subtask of the new job RUNNING, i.e. with its state restored (Flink's own per-subtask
    timestamps; the job status says RUNNING before the restore), split by the journal's phases; the health gate
    comes after, and is not downtime."""
    durations = final_event(record).get("durations") or {}
    if "down" not in durations:
        return "downtime: not recorded (no time at which every subtask of the new job was RUNNING)"
    # (run.json's submit step waits for the tasks, so it lies inside the restore, which runs from the submit request)
    names = {"stop": "stop", "migrate": "migration with its re-check",
             "restore": "submit and restore (submit request -> every subtask RUNNING)"}
    steps = {name: durations[key] for key, name in names.items() if key in durations}
    steps["Airflow between tasks"] = durations["down"] - sum(steps.values())
    gate = f"; then the health gate, {durations['gate']:.1f} s" if "gate" in durations else ""
    return (f"downtime (stop request -> every v2 subtask RUNNING): {durations['down']:.1f} s = "
            + ", ".join(f"{name} {seconds:.1f}" for name, seconds in steps.items()) + gate)


def stop_account(record: dict[str, Any]) -> str:
    """Whether the run stopped the running job, as its journal says (read now: the deployment's next run replaces
    the journal)."""
    journal = UpgradeJournal.load(record["plan"]["journal"])
    if journal.data["run_id"] != record["plan"]["run_id"]:
        return f"(the journal {journal.uri} is another run's now: what this run stopped is not known)"
    if not journal.reached(Phase.STOPPING):
        return "its journal records no stop: nothing was stopped"
    stop = journal.data.get("stop_savepoint") or "no stop savepoint recorded"
    return f"its journal records a stop ({stop}); {describe_outcome(journal)}"


def cancel_earlier_demo_jobs(client: FlinkRestClient) -> None:
    for job in client.list_jobs():
        if job["name"].startswith("keyed-stats-") and job["state"] not in {"FINISHED", "CANCELED", "FAILED"}:
            print(f"   cancelling the earlier demo job {job['jid']} ({job['name']})")
            client.cancel(job["jid"])


def main() -> int:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = WORK / "runs" / stamp  # savepoints, reports and the deployment registry of this demo
    step("Starting a local Flink 2.3 cluster (reused if it already runs)")
    cluster = LocalFlinkCluster(WORK / "cluster", slots=4).start()
    client = cluster.client
    print(f"   web UI and REST API: {cluster.rest_url}")
    cancel_earlier_demo_jobs(client)

    step("Running v1 of the sample job: String keys; ValueState<POJO>, ValueState<Long>, ListState<Tuple2>, "
         "MapState<String, Row>, a timer per key")
    v1 = version("v1", "v1.yaml", base / "audit-v1")
    job_id = client.submit_jar(v1["jar"], entry_class=v1["entry_class"], parallelism=2, program_args=v1["program_args"])
    client.wait_until_running(job_id)
    time.sleep(8)
    print(f"   job {job_id} (keyed-stats-v1) RUNNING, building up state")

    step("Upgrading to v2 with the Airflow DAG flink_state_upgrade (the POJO gains a field): v2's schema from its "
         "jar, with v2-overlay.yaml (the new field's default)")
    v2 = version("v2", "v2-overlay.yaml", base / "audit-v2")
    upgraded = upgrade(cluster, base, v2, current=v1, job_id=job_id)
    registry = json.loads((base / "deployments.json").read_text()) if (base / "deployments.json").exists() else {}
    run_dir = latest_run(base)
    record = json.loads((run_dir / "run.json").read_text())
    print(f"   outcome: {record.get('outcome')}; every savepoint and report of the run is in {run_dir}")
    for which, schema in next((e["schemas"] for e in record["events"] if "schemas" in e), {}).items():
        print(f"   the {which} version's state schema: {schema['origin']} (resolved into {schema['file']})")
    print("\n   The check report (Spark check job, before anything was stopped):\n")
    print("   " + (run_dir / "preflight" / "check-report.md").read_text().replace("\n", "\n   "))
    show_entries("state before (the stop savepoint, written by v1)", next((run_dir / "stop").glob("savepoint-*")))
    show_entries("state after (the migrated savepoint v2 restored)", run_dir / "migrated" / "savepoint")
    deployed = registry.get("keyed-stats")
    if upgraded != 0 or record.get("outcome") != "upgraded" or not deployed:
        print("demo: error: the upgrade to v2 did not succeed; see the log above", file=sys.stderr)
        return 1
    v2_job = deployed["job_id"]
    print(f"   v2 runs as job {v2_job}: {client.job_state(v2_job)}, restored from "
          f"{client.checkpoints(v2_job).restored_from}")
    print(f"   {downtime(record)}")

    step("Trying v3: `count` changes from long to String, with no conversion declared (Flink would loop in "
         "restarts)")
    v3 = version("v3", "v3.yaml", base / "audit-v3")
    refused = upgrade(cluster, base, v3)
    run_dir = latest_run(base)
    record = json.loads((run_dir / "run.json").read_text())
    findings = json.loads((run_dir / "preflight" / "check-report.json").read_text())["findings"]
    print(f"   outcome: {record.get('outcome')} (exit status {refused}): "
          + "; ".join(f"{f['code']} at {f['state']}/{f['path']}" for f in findings if f["verdict"] == "INCOMPATIBLE"))
    print(f"   v2 (job {v2_job}) is {client.job_state(v2_job)}; {stop_account(record)}")
    print(f"   the run's folder: {run_dir}\n   its report: {run_dir / 'preflight' / 'check-report.md'}")

    step("Left running")
    print(f"   cluster: {cluster.rest_url}; v2 RUNNING as job {v2_job}")
    print(f"   try: .venv/bin/flinkstate check {next((run_dir / 'preflight').glob('savepoint-*'))} "
          f"--schema {JOBS / 'manifests' / 'v3-with-conversion.yaml'}")
    print("   stop everything with: make cluster-stop")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except FlinkStateError as exc:
        print(f"demo: error: {exc}", file=sys.stderr)
        sys.exit(1)
