"""The run's one alert in the task's log: a success at INFO, anything else (a refusal, a failure, a rollback) at
WARNING. Posted to the local webhook receiver through Airflow's HTTP hook, as the DAG sends it; no cluster."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest


@pytest.mark.parametrize(("succeeded", "level"), [(True, logging.INFO), (False, logging.WARNING)])
def test_a_successful_upgrade_is_logged_at_info_and_anything_else_at_warning(
        airflow_home: Path, webhook: Any, caplog: pytest.LogCaptureFixture, succeeded: bool, level: int):
    from flinkstate_airflow.notifiers import send_alert

    text = f"Flink upgrade of orders {'succeeded' if succeeded else 'FAILED and was ROLLED BACK'}: ..."
    before = len(webhook.received)
    with caplog.at_level(logging.DEBUG, logger="flinkstate_airflow.notifiers"):
        send_alert(text, succeeded=succeeded)
    logged = [(r.levelno, r.getMessage()) for r in caplog.records if r.getMessage().startswith("flink upgrade alert")]
    assert logged == [(level, f"flink upgrade alert:\n{text}")]
    assert [m["text"] for m in webhook.received[before:]] == [text]  # posted either way, as it is
