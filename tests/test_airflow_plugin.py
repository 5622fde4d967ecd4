"""The Airflow plugin in real Airflow (dag.test) against the real local Flink: every operator and sensor, the health
gate passing and failing fast, and the webhook notifier posting to a local receiver."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from flinkstate.engine import LocalFlinkCluster
from tests.support import sample_job
from tests.support.airflow_env import ROOT, load_dag, set_connection
from tests.support.sample_job import check_audit_record

pytestmark = [pytest.mark.flink, pytest.mark.airflow]

DAGS = ROOT / "tests" / "airflow_dags"


@pytest.fixture(scope="module")
def plugin_dag(airflow_home: Path, flink_cluster: LocalFlinkCluster, webhook: Any) -> Any:
    state = flink_cluster.status()
    set_connection("flink_default", conn_type="http", host="127.0.0.1", port=state["rest_port"])
    return load_dag("flink_plugin_check", DAGS)


def _conf(tmp_path: Path, **extra: str) -> dict[str, Any]:
    return {"jar_v1": str(sample_job.jar("v1")), "jar_v2": str(sample_job.jar("v2")),
            "program_args": ["--keys", "5", "--rate", "100", "--audit-dir", str(tmp_path / "audit")],
            "savepoint_dir": str(tmp_path / "savepoints"), "report": "## report\n| state | verdict |", **extra}


def _task_states(run: Any) -> dict[str, str]:
    return {ti.task_id: str(ti.state) for ti in run.get_task_instances()}


def test_plugin_pieces_drive_a_real_upgrade(plugin_dag: Any, flink_cluster: LocalFlinkCluster, webhook: Any,
                                            tmp_path: Path):
    received_before = len(webhook.received)
    run = plugin_dag.test(run_conf=_conf(tmp_path))
    assert str(run.state) == "success", _task_states(run)

    savepoints = sorted((tmp_path / "savepoints").iterdir())
    assert len(savepoints) == 2, "one savepoint while running, one at stop"
    # v2 restored v1's state (the audit lines v2 wrote at each key's first event), then was cancelled.
    v2_records = sample_job.read_audit(tmp_path / "audit", "v2")
    assert len({r["key"] for r in v2_records}) == 5
    assert all(check_audit_record(r, "v1") > 0 for r in v2_records)
    assert not [j for j in flink_cluster.client.list_jobs() if j["state"] == "RUNNING"]

    posted = webhook.received[received_before:]
    assert len(posted) == 1 and posted[0]["path"] == "/hooks/flink"
    assert posted[0]["text"].startswith("plugin check done: ") and "| state | verdict |" in posted[0]["text"]
    stop_savepoint = run.get_task_instance("stopped").xcom_pull(task_ids="stopped")
    assert stop_savepoint in posted[0]["text"] and stop_savepoint.rsplit("/", 1)[-1] in {p.name for p in savepoints}


def test_health_gate_fails_fast_on_the_wrong_restore_path_and_alerts(plugin_dag: Any, webhook: Any,
                                                                      tmp_path: Path):
    received_before = len(webhook.received)
    started = time.monotonic()
    run = plugin_dag.test(run_conf=_conf(tmp_path, expected_savepoint="/somewhere/else/savepoint-000000-000000000000"))
    states = _task_states(run)
    assert str(run.state) == "failed"
    assert states["health_gate"] == "failed" and states["cancel"] == "success", states
    assert time.monotonic() - started < 110, "the gate must fail at once, not wait for its 120 s timeout"
    alerts = [m for m in webhook.received[received_before:] if m["text"].startswith("plugin check FAILED")]
    assert len(alerts) == 1 and "| state | verdict |" in alerts[0]["text"]
