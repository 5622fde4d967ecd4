"""Sensors: a savepoint operation finishing, and the health gate after a restore."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue
from airflow.sdk.exceptions import AirflowException

from flinkstate_airflow.hooks import FlinkHook


class FlinkSavepointSensor(BaseSensorOperator):
    """Waits for a savepoint or stop-with-savepoint triggered with ``wait=False``; returns its location (XCom).
    A failed savepoint fails the task with Flink's message."""

    template_fields: Sequence[str] = ("job_id", "trigger_id")

    def __init__(self, *, job_id: str, trigger_id: str, flink_conn_id: str = FlinkHook.default_conn_name,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.job_id, self.trigger_id, self.flink_conn_id = job_id, trigger_id, flink_conn_id

    def poke(self, context: Any) -> PokeReturnValue:
        client = FlinkHook(self.flink_conn_id).get_conn()
        status = client.savepoint_status(self.job_id, self.trigger_id)
        if (status.get("status") or {}).get("id") != "COMPLETED":
            return PokeReturnValue(is_done=False)
        return PokeReturnValue(is_done=True, xcom_value=client.wait_for_savepoint(self.job_id, self.trigger_id,
                                                                                  timeout=1))


class FlinkHealthGateSensor(BaseSensorOperator):
    """Passes once a freshly restored job is healthy, and fails fast when it cannot become so:

    - the job is RUNNING, with every task RUNNING;
    - it restored from ``expected_savepoint`` (Flink's checkpoint statistics say which; compared as paths);
    - at least ``min_checkpoints`` checkpoints completed after the restore;
    - it restarted at most ``max_restarts`` times (a restore that fails makes Flink restart in a loop).

    A job that FAILED, restored from another path, or restarted too often fails the task at once with the reason,
    so a rollback can start without waiting out the sensor's timeout.
    """

    template_fields: Sequence[str] = ("job_id", "expected_savepoint", "min_checkpoints", "max_restarts",
                                      "gate_timeout")

    def __init__(self, *, job_id: str, expected_savepoint: str | None, min_checkpoints: int | str = 2,
                 max_restarts: int | str = 0, gate_timeout: float | str = 300,
                 flink_conn_id: str = FlinkHook.default_conn_name, **kwargs: Any) -> None:
        kwargs.setdefault("timeout", 24 * 3600)  # a backstop: gate_timeout (templated, e.g. from params) governs
        super().__init__(**kwargs)
        self.job_id, self.expected_savepoint = job_id, expected_savepoint
        self.min_checkpoints, self.max_restarts, self.flink_conn_id = min_checkpoints, max_restarts, flink_conn_id
        self.gate_timeout = gate_timeout
        self._started: float | None = None

    def poke(self, context: Any) -> bool:
        if self._started is None:
            self._started = time.monotonic()
        elif time.monotonic() - self._started > float(self.gate_timeout):
            raise AirflowException(f"health gate: job {self.job_id} not healthy within {self.gate_timeout} s")
        client = FlinkHook(self.flink_conn_id).get_conn()
        job = client.job(self.job_id)
        state = job["state"]
        if state in {"FAILED", "CANCELED", "FINISHED", "SUSPENDED"}:
            raise AirflowException(f"health gate: job {self.job_id} is {state}" + _latest_error(client, self.job_id))
        restarts = client.num_restarts(self.job_id)
        if restarts > int(self.max_restarts):
            raise AirflowException(f"health gate: job {self.job_id} restarted {restarts} times "
                                   f"(allowed {self.max_restarts})" + _latest_error(client, self.job_id))
        stats = client.checkpoints(self.job_id)
        if self.expected_savepoint and _normalise(stats.restored_from) != _normalise(self.expected_savepoint):
            raise AirflowException(f"health gate: job {self.job_id} restored from {stats.restored_from!r}, "
                                   f"not from {self.expected_savepoint!r}")
        tasks_running = state == "RUNNING" and all(v.get("status") == "RUNNING" for v in job.get("vertices", []))
        self.log.info("health gate: state %s, %d checkpoints completed (need %s), %d restarts, restored from %s",
                      state, stats.completed, self.min_checkpoints, restarts, stats.restored_from)
        return tasks_running and stats.completed >= int(self.min_checkpoints)


def _normalise(path: str | None) -> str | None:
    if path is None:
        return None
    text = path.removeprefix("file://").removeprefix("file:")
    return text.rstrip("/").removesuffix("/_metadata")


def _latest_error(client: Any, job_id: str) -> str:
    history = client.exceptions(job_id)
    return f": {history[0].summary}" if history else ""
