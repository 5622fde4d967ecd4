"""Upgrade Flink jobs to the versions a release file names, inside each job's upgrade window.

    plan (read the release file and the deployment registry) -> trigger_upgrade (one flink_state_upgrade run per
    deployment to upgrade, mapped)
    plan -> report_problems (fails the run, and so alerts, if a job could not be planned)

The release file's path or s3:// URI comes from the ``release_file`` param (manual runs), else the Airflow Variable
``flinkstate_release_file``, else the environment variable ``FLINKSTATE_RELEASE_FILE``. Its format and the rules
(diff against the registry, windows, one try per release) are in ``plugins/flinkstate_airflow/releases.py``.
A deployment whose own upgrade run is unfinished is skipped until the next tick (``releases.plan_tick``); no other
deployment waits for it. The upgrades a tick triggers run side by side, one per deployment (flink_state_upgrade's
journal is the lock).
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone

from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
from airflow.sdk import DAG, Param, task
from flinkstate_airflow import releases
from flinkstate_airflow.hooks import FlinkHook
from flinkstate_airflow.notifiers import WebhookReportNotifier

log = logging.getLogger(__name__)

with DAG(
    dag_id="flink_scheduled_upgrades",
    description="Trigger flink_state_upgrade for each job whose release version differs, inside its window",
    schedule="*/15 * * * *",
    start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
    catchup=False,  # a missed tick has nothing to catch up: the next one reads the release file again
    max_active_runs=1,
    params={"release_file": Param("", type="string", description="overrides the Variable flinkstate_release_file")},
    on_failure_callback=WebhookReportNotifier("Scheduled Flink upgrades: planning FAILED (run {{ run_id }})"),
    tags=["flink", "flinkstate"],
) as dag:

    @task
    def plan(params: dict | None = None, ti=None) -> list[dict]:  # Airflow injects the task instance
        release = releases.load_release(releases.release_file_location((params or {}).get("release_file")))
        tick = releases.plan_tick(release, datetime.now(timezone.utc), FlinkHook().get_conn(),
                                  connect=lambda conn_id: FlinkHook(conn_id).get_conn())
        for job, reason in tick["skipped"].items():
            log.info("%s: skipped: %s", job, reason)
        for trigger in tick["triggers"]:
            log.info("%s: upgrade as run %s", trigger["conf"]["job_name"], trigger["trigger_run_id"])
        # Mapping needs the triggers as the return value; the rest goes under its own keys.
        ti.xcom_push(key="skipped", value=tick["skipped"])
        ti.xcom_push(key="problems", value=tick["problems"])
        return tick["triggers"]

    triggers = plan()

    TriggerDagRunOperator.partial(
        task_id="trigger_upgrade", trigger_dag_id=releases.UPGRADE_DAG_ID,
        # The run id is per deployment and release version: a second trigger of it is skipped, not an error.
        skip_when_already_exists=True, wait_for_completion=False,
    ).expand_kwargs(triggers)

    @task(trigger_rule="all_done")
    def report_problems(ti=None) -> None:
        problems = ti.xcom_pull(task_ids="plan", key="problems")
        if problems is None:
            raise releases.ReleaseError("the plan task did not finish: nothing was decided (see its log)")
        if problems:
            raise releases.ReleaseError("; ".join(problems))

    triggers >> report_problems()
