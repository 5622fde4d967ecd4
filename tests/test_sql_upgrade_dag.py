"""The SQL job (tests/support/sql_job/) upgraded through the upgrade DAG, in real Airflow (dag.test), against the
real local Flink and Spark in local mode, its state checked value by value.

The running SQL job's manifest comes from `flinkstate schema` of a savepoint taken while it runs; the new version
is the same SQL (its plan compiled at build time, so its operator uids are the same), deployed with another
configuration. The DAG takes a savepoint, checks it with the Spark job (RowData state: the verdict is "restore"),
stops the job with a savepoint, restores the new version from it and gates on its health. The new job's own
savepoint then holds every accumulator, deduplicated row, join entry and bitmap recomputed from the rows processed,
which grew past what the old job had processed: the state came through exactly and kept counting.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from flinkstate import schema_of_jar
from flinkstate.cli import main
from flinkstate.engine import LocalFlinkCluster
from tests.support import sql_job
from tests.support.airflow_env import ROOT, load_dag, set_connection
from tests.test_sql_job import RUN_SECONDS, check_every_value, rows_processed

pytestmark = [pytest.mark.flink, pytest.mark.airflow, pytest.mark.spark]  # the DAG runs spark-submit

#: Checkpoints every second, so that the health gate sees the restored job complete some.
PROGRAM_ARGS = ["--set", "state.backend.type=hashmap", "--set", "execution.checkpointing.interval=1s"]


def _states(run: Any) -> dict[str, str]:
    return {ti.task_id: str(ti.state) for ti in run.get_task_instances()}


def test_a_sql_job_is_upgraded_through_the_dag_with_every_value(airflow_home: Path, flink_cluster: LocalFlinkCluster,
                                                                webhook: Any, tmp_path: Path) -> None:
    set_connection("flink_default", conn_type="http", host="127.0.0.1", port=flink_cluster.status()["rest_port"])
    set_connection("spark_default", conn_type="spark", host="local[2]")
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"  # spark-submit
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    client = flink_cluster.client
    jar = sql_job.build()
    # The jar's schema as preflight_checks takes it (the planner's JVM start: 12 s and more), inspected before the
    # job starts and then cached by the jar's hash: the source's sequence lasts 150 s, which the run must not outlast.
    schema_of_jar(jar, entry_class=sql_job.ENTRY_CLASS, program_args=PROGRAM_ARGS, parallelism=1)
    job_id = client.submit_jar(jar, entry_class=sql_job.ENTRY_CLASS, program_args=PROGRAM_ARGS, parallelism=1)
    client.wait_until_running(job_id, timeout=120)
    new_job = None
    try:
        time.sleep(RUN_SECONDS)
        # The running version's manifest: `schema` of a savepoint the job keeps running through.
        taken = client.savepoint(job_id, str(tmp_path / "for-schema")).removeprefix("file:")
        manifest = tmp_path / "sql-v1.yaml"
        assert main(["schema", taken, "-o", str(manifest)]) == 0
        version = {"jar": str(jar), "manifest": str(manifest), "entry_class": sql_job.ENTRY_CLASS,
                   "program_args": PROGRAM_ARGS, "parallelism": 1}
        base = tmp_path / "savepoints"
        conf = {"job_name": "", "job_id": job_id, **version, "savepoint_base": str(base), "min_checkpoints": 2,
                "gate_timeout": 90, "min_running_seconds": 3, "current": version}
        since = len(webhook.received)
        run = load_dag("flink_state_upgrade", ROOT / "dags").test(run_conf=conf)
        states = _states(run)
        assert str(run.state) == "success", states
        for task in ("preflight_checks", "preflight_savepoint", "check", "stop_for_restore", "submit_new",
                     "health_gate", "record", "conclude"):
            assert states[task] == "success", (task, states)
        assert states["migrate"] == "skipped" and states["stop_for_migration"] == "skipped", states
        texts = [m["text"] for m in webhook.received[since:]]
        assert len(texts) == 1 and " succeeded: RUNNING now: the new version" in texts[0], texts

        # The old job stopped with a savepoint holding N rows' state, every value exact; the new job restored
        # from exactly that savepoint.
        assert client.job_state(job_id) == "FINISHED"
        [stop] = list(base.glob("*/*/stop/savepoint-*"))
        n = check_every_value(stop)
        [entry] = json.loads((base / "deployments.json").read_text()).values()
        new_job = entry["job_id"]
        assert client.job_state(new_job) == "RUNNING" and entry["savepoint"] == str(stop)
        restored_from = client.checkpoints(new_job).restored_from
        assert restored_from is not None and restored_from.removeprefix("file:") == str(stop)

        # The new job kept counting from N: its own savepoint holds the longer prefix, every value exact.
        after = sql_job.stop_with_savepoint(client, new_job, tmp_path / "after")
        new_job = None
        grown = check_every_value(after)
        assert grown > n == rows_processed(stop), (n, grown)
    finally:
        for running in (job_id, new_job):
            if running and client.job_state(running) == "RUNNING":
                client.cancel(running)
