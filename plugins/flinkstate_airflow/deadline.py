"""The upgrade DAG's deadline: a run still going after its bound alerts while it runs (Airflow's ``DeadlineAlert``,
evaluated by the scheduler, its callback run by the triggerer), so that an upgrade stuck in a gate, a slow
migration or a wait for a savepoint is seen before anyone wonders why production has not moved.

The bound is ``FLINKSTATE_UPGRADE_DEADLINE_SECONDS`` in the environment the DAG is parsed in, from the moment the run
was queued; unset, the DAG has no deadline. Opt-in because Airflow 3.3's ``airflow dags test`` (the demo's and
``flinkstate upgrade run --local``'s way of running the DAG) fails at the end of a successful run of a DAG that has
one (``'dict' object has no attribute 'hex'`` in ``DeadlineAlertModel.get_by_id``, from ``DagRun.update_state``);
under the scheduler it works. The alert goes to the same webhook as every other alert, once per run.
"""

from __future__ import annotations

import asyncio
import os
from datetime import timedelta
from typing import Any

from airflow.sdk.definitions.callback import AsyncCallback
from airflow.sdk.definitions.deadline import DeadlineAlert, DeadlineReference

from flinkstate import printable

DEADLINE_ENV = "FLINKSTATE_UPGRADE_DEADLINE_SECONDS"


def deadline_seconds() -> float | None:
    """The bound, from the environment; None when unset or no positive number (the DAG must still load: the bound
    is a safety net, not a reason to lose the DAG)."""
    try:
        seconds = float(os.environ.get(DEADLINE_ENV, ""))
    except ValueError:
        return None
    return seconds if seconds > 0 else None


def upgrade_deadline() -> DeadlineAlert | None:
    seconds = deadline_seconds()
    if seconds is None:
        return None
    return DeadlineAlert(reference=DeadlineReference.DAGRUN_QUEUED_AT, interval=timedelta(seconds=seconds),
                         callback=AsyncCallback(upgrade_overran, kwargs={"seconds": seconds}),
                         name="flink-upgrade-overran")


def overrun_text(seconds: float, context: dict[str, Any], base_url: str) -> str:
    """The alert: which run, which deployment, since when, and where to look."""
    from flinkstate_airflow.ui import run_tab_url  # the link every alert of the run gives

    run = context.get("dag_run") or {}
    dag_id, run_id = str(run.get("dag_id", "?")), str(run.get("dag_run_id") or run.get("run_id") or "?")
    conf = run.get("conf") or {}
    deployment = conf.get("job_name") or conf.get("job_id") or "(not named in the run's conf)"
    return (f"Flink upgrade still running after {seconds:g} s: DAG run {printable(run_id)} of {printable(dag_id)}, "
            f"deployment {printable(str(deployment))}, queued at {printable(str(run.get('queued_at', '?')))}, "
            f"{printable(str(run.get('state', '?')))}. It goes on; see where it is: "
            f"{run_tab_url(base_url, dag_id, run_id)}")


async def upgrade_overran(seconds: float, context: dict[str, Any], **_: Any) -> None:
    """The deadline's callback (in the triggerer): one alert to the upgrade webhook."""
    from airflow.configuration import conf

    from flinkstate_airflow.notifiers import send_alert

    text = overrun_text(seconds, context, conf.get("api", "base_url", fallback="http://localhost:8080"))
    await asyncio.to_thread(send_alert, text)  # the webhook hook is blocking: off the triggerer's event loop
