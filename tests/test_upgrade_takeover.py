"""Fencing (issue 24): a run whose journal another actor took over never submits and never records. The upgrade DAG
runs in real Airflow (dag.test) against the session's real Flink, Spark in local mode; while its Spark migration
runs, a person runs ``flinkstate upgrade recover --force`` (believing the run dead), which restores the old version
from the stop savepoint. The run's next step is refused by the fence: nothing of the new version is started, the
registry and journal keep what the recovery wrote, the old version runs with the stop savepoint's exact state, and
the run sends one alert saying it was taken over and what runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from flinkstate.engine import LocalFlinkCluster
from flinkstate.savepoint import Savepoint
from tests.support import sample_job
from tests.support.airflow_env import ROOT, load_dag, set_connection

pytestmark = [pytest.mark.flink, pytest.mark.airflow, pytest.mark.spark]

MANIFESTS = ROOT / "examples" / "sample-job" / "manifests"
DEPLOYMENT = "takeover-stats"
KEYS = 5


def test_a_run_taken_over_never_submits_nor_records(airflow_home: Path, flink_cluster: LocalFlinkCluster,
                                                     webhook: Any, tmp_path: Path):
    client = flink_cluster.client
    set_connection("flink_default", conn_type="http", host="127.0.0.1", port=flink_cluster.status()["rest_port"])
    set_connection("spark_default", conn_type="spark", host="local[2]")
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"  # spark-submit
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    audit, base = tmp_path / "audit", tmp_path / "savepoints"
    running = sample_job.submit(client, "v1", audit, keys=KEYS, rate=50,
                                extra_args=["--checkpoint-interval-ms", "1000"])
    running.wait_for_keys()
    journal_file = base / "journal" / f"{DEPLOYMENT}.json"
    started_ms, since = time.time() * 1000, len(webhook.received)
    v1 = {"jar": str(sample_job.jar("v1")), "manifest": str(MANIFESTS / "v1.yaml"),
          "entry_class": sample_job.ENTRY_CLASS, "program_args": running.program_args, "parallelism": 1}
    conf = {"job_id": running.job_id, "job_name": DEPLOYMENT, "jar": str(sample_job.jar("v2")),
            "entry_class": sample_job.ENTRY_CLASS, "program_args": running.program_args, "parallelism": 1,
            "manifest": str(MANIFESTS / "v2.yaml"), "savepoint_base": str(base), "min_checkpoints": 2,
            "gate_timeout": 90, "min_running_seconds": 3, "current": v1}
    taken: dict[str, Any] = {}

    def take_over() -> None:
        """Once the run migrates (the old job stopped), a person runs the recovery by hand, forced."""
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            try:
                if json.loads(journal_file.read_text())["phase"] == "migrating":
                    break
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.1)
        taken["cli"] = subprocess.run(
            [sys.executable, "-m", "flinkstate", "upgrade", "recover", "--savepoint-base", str(base), "--flink-url",
             client.base_url, "--deployment", DEPLOYMENT, "--force"], capture_output=True, text=True, timeout=300,
            cwd=ROOT)
        taken["journal"] = journal_file.read_bytes()
        taken["registry"] = (base / "deployments.json").read_bytes()

    person = threading.Thread(target=take_over, daemon=True)
    person.start()
    rollback_job = None
    try:
        run = load_dag("flink_state_upgrade", ROOT / "dags").test(run_conf=conf)
        person.join(300)
        cli = taken["cli"]
        assert cli.returncode == 0 and "rolled back" in cli.stdout, cli.stdout + cli.stderr
        states = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
        # The first fenced step after the takeover is refused: the migration's publish (when the recovery came
        # before it), else the re-check's start. Nothing of the new version follows.
        if states["migrate"] == "failed":
            refused = "migrate: the migrated savepoint is not published: "
            assert not list(base.glob("**/migrated/savepoint/_metadata")), "a fenced migration published"
            assert states["recheck"] == "upstream_failed", states
        else:
            refused = "recheck: recheck not started: "
            assert states["migrate"] == "success" and states["recheck"] == "failed", states
        assert states["submit_new"] == states["record"] == "upstream_failed", states
        assert str(run.state) == "failed", states
        started_after = [j for j in client.list_jobs() if j.get("start-time", 0) >= started_ms]
        assert [j["name"] for j in started_after] == ["keyed-stats-v1"], started_after  # only the recovery's v1
        # The journal and the registry are exactly what the recovery wrote: the run wrote nothing after it.
        assert journal_file.read_bytes() == taken["journal"]
        assert (base / "deployments.json").read_bytes() == taken["registry"]
        journal = json.loads(taken["journal"])
        assert journal["outcome"] == "rolled back" and journal["history"][-1]["actor"] == "flinkstate upgrade recover"
        rollback_job = journal["running"]["job_id"]
        registry = json.loads(taken["registry"])[DEPLOYMENT]
        assert registry["job_id"] == rollback_job and registry["version"]["jar"] == v1["jar"], registry
        stop = journal["stop_savepoint"]
        assert client.job_state(rollback_job) == "RUNNING" and client.job_state(running.job_id) == "FINISHED"
        assert client.checkpoints(rollback_job).restored_from.removeprefix("file:") == stop
        # The restarted v1 found exactly the state v1 stopped with (each key's first event per run is audited).
        stats = {key: value for key, _, value in Savepoint.open(stop).iter_entries("stats", "stats")}
        assert len(stats) == KEYS
        deadline = time.monotonic() + 60
        while True:
            latest: dict[str, list[dict[str, Any]]] = {}
            for record in sample_job.read_audit(audit, "v1"):
                latest.setdefault(record["key"], []).append(record)
            if len(latest) == KEYS and all(len(r) >= 2 for r in latest.values()):
                break
            assert time.monotonic() < deadline, "the restored v1 did not see every key within 60 s"
            time.sleep(0.5)
        for records in latest.values():
            record = max(records, key=lambda r: r["seq"])
            assert record["count"] == stats[record["key"]]["count"], (record, stats[record["key"]])
            assert sample_job.check_audit_record(record, "v1") == stats[record["key"]]["count"]
        texts = [m["text"] for m in webhook.received[since:]]
        assert len(texts) == 1, texts
        assert texts[0].startswith(f"Flink upgrade of {DEPLOYMENT}: run {run.run_id} was TAKEN OVER by another "
                                   f"actor while it was working, and stopped without acting further ({refused}"), \
            texts
        assert "was taken over by flinkstate upgrade recover" in texts[0], texts
        assert f"RUNNING now: the old version (sample-job-v1.jar) as job {rollback_job}" in texts[0], texts
    finally:
        for job in (running.job_id, rollback_job):
            if job and client.job_state(job) == "RUNNING":
                client.cancel(job)
