"""The upgrade watchdog: finds upgrade journals whose run died (its process is gone: killed, OOM, a lost worker;
Airflow skips failure callbacks then) and acts as the run would have: it restores the old version from the stop
savepoint, or finishes the upgrade when the migrated savepoint was verified, then sends one alert per run.

Sweeps the savepoint bases in the ``savepoint_bases`` param, else ``FLINKSTATE_SAVEPOINT_BASES`` (comma-separated);
runs on ``FLINKSTATE_WATCHDOG_SCHEDULE`` (default every 5 minutes). Logic: ``flinkstate.upgrades`` (the same as
``flinkstate upgrade recover``).
"""

from __future__ import annotations

import os
from datetime import datetime

from airflow.sdk import DAG, Param, task
from flinkstate_airflow import upgrade
from flinkstate_airflow.hooks import FlinkHook
from flinkstate_airflow.notifiers import send_alert

with DAG(
    dag_id="flink_upgrade_watchdog",
    description="Recover Flink upgrades whose run died between the stop and the health gate, and alert",
    schedule=os.environ.get("FLINKSTATE_WATCHDOG_SCHEDULE", "*/5 * * * *"),
    start_date=datetime(2024, 1, 1),
    catchup=False,
    max_active_runs=1,
    params={"savepoint_bases": Param("", type="string", description="comma-separated savepoint bases to sweep"),
            "grace": Param(int(os.environ.get("FLINKSTATE_WATCHDOG_GRACE", 60)), type="integer", minimum=0,
                           description="seconds a dead run's journal must be quiet before the watchdog acts")},
    tags=["flink", "flinkstate"],
) as dag:

    @task
    def sweep(params: dict | None = None, ti=None) -> int:  # Airflow injects the task instance
        params = params or {}
        # Airflow says whether the DAG run owning a journal lives: the watchdog never takes over a live run.
        alerts = upgrade.watchdog_sweep(upgrade.watchdog_bases(params.get("savepoint_bases")),
                                        FlinkHook().get_conn(), grace=float(params.get("grace", 60)),
                                        probe=upgrade.airflow_probe(ti))
        for alert in alerts:
            send_alert(alert)
        return len(alerts)

    sweep()
