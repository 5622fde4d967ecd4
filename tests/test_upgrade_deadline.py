"""The upgrade DAG's deadline (issue 29): a run still going after FLINKSTATE_UPGRADE_DEADLINE_SECONDS alerts while it
runs. Here the DAG as Airflow loads it carries the DeadlineAlert with the bound from its environment, and the
callback, run as the triggerer runs it, posts one alert naming the run, the deployment and where to look to the
upgrade webhook (a local HTTP receiver). The scheduler and triggerer that miss the deadline and run the callback on
a real run: tests/test_airflow_standalone.py."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.support.airflow_env import ROOT, load_dag

pytestmark = pytest.mark.airflow  # the DAG loaded by Airflow's DagBag


@pytest.mark.parametrize(("value", "seconds"), [("45", 45.0), ("2.5", 2.5), ("soon", None), ("-1", None),
                                                (None, None)], ids=["45", "fraction", "not-a-number", "negative",
                                                                    "unset"])
def test_the_dag_carries_the_deadline_from_its_environment(airflow_home: Path, monkeypatch: pytest.MonkeyPatch,
                                                           value: str | None, seconds: float | None) -> None:
    if value is None:
        monkeypatch.delenv("FLINKSTATE_UPGRADE_DEADLINE_SECONDS", raising=False)
    else:
        monkeypatch.setenv("FLINKSTATE_UPGRADE_DEADLINE_SECONDS", value)
    dag = load_dag("flink_state_upgrade", ROOT / "dags")
    if seconds is None:  # opt-in: no deadline (Airflow 3.3's `dags test` fails a run that has one)
        assert not dag.deadline
        return
    [deadline] = dag.deadline
    assert deadline.interval == timedelta(seconds=seconds)
    assert type(deadline.reference).__name__ == "DagRunQueuedAtDeadline"
    assert deadline.callback.path == "flinkstate_airflow.deadline.upgrade_overran"
    assert deadline.callback.kwargs == {"seconds": seconds}


def test_the_callback_posts_one_alert_naming_the_run(airflow_home: Path, webhook: Any) -> None:
    from flinkstate_airflow.deadline import upgrade_overran

    since = len(webhook.received)
    # The context the scheduler hands the callback: the DAG run as the REST API shows it (a hostile name in it).
    context = {"dag_run": {"dag_id": "flink_state_upgrade", "dag_run_id": "manual__2026-11-28T10:00:00",
                           "queued_at": "2026-11-28T10:00:00Z", "state": "running",
                           "conf": {"job_name": "orders\x1b[2J<!channel>"}},
               "deadline": {"id": "d1", "deadline_time": "2026-11-28T10:00:20Z"}}
    asyncio.run(upgrade_overran(20.0, context))
    [alert] = webhook.received[since:]
    text = alert["text"]
    assert text.startswith("Flink upgrade still running after 20 s: DAG run manual__2026-11-28T10:00:00 of "
                           "flink_state_upgrade, deployment orders"), text
    assert "\x1b" not in text and "<!channel>" not in text  # a name from the conf goes out as plain text
    assert text.endswith("/dags/flink_state_upgrade/runs/manual__2026-11-28T10%3A00%3A00/plugin/flink-upgrade"), text
