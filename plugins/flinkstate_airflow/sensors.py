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

    - it restored from ``expected_savepoint`` (Flink's checkpoint statistics say which; compared as paths);
    - it has been RUNNING with every task RUNNING, without a break, for ``min_running_seconds``;
    - at least ``min_checkpoints`` checkpoints completed after that restore (a restart would restore from a
      checkpoint instead, and is caught first), the latest of them triggered after the ``min_running_seconds``
      were reached (in the JobManager's clock): every task acknowledged a barrier injected after the window, so a
      TaskManager that died during it, which the JobManager notices only at its heartbeat timeout, cannot pass;
    - it restarted at most ``max_restarts`` times (a restore that fails makes Flink restart in a loop), and no
      TaskManager that was registered when the gate started has gone.

    A job that FAILED, restarted too often, lost a TaskManager or restored from another path fails the task at once
    with that reason, so a rollback can start without waiting out the sensor's timeout. On success the task's XCom
    is the gate's result (checkpoints, seconds running, restarts, restored from, and when every subtask was RUNNING:
    ``all_subtasks_running_at``, epoch seconds).
    """

    template_fields: Sequence[str] = ("flink_conn_id", "job_id", "expected_savepoint", "min_checkpoints",
                                      "max_restarts", "gate_timeout", "min_running_seconds")

    def __init__(self, *, job_id: str, expected_savepoint: str | None, min_checkpoints: int | str = 2,
                 max_restarts: int | str = 0, gate_timeout: float | str = 300, min_running_seconds: float | str = 0,
                 flink_conn_id: str = FlinkHook.default_conn_name, **kwargs: Any) -> None:
        kwargs.setdefault("timeout", 24 * 3600)  # a backstop: gate_timeout (templated, e.g. from params) governs
        super().__init__(**kwargs)
        self.job_id, self.expected_savepoint = job_id, expected_savepoint
        self.min_checkpoints, self.max_restarts, self.flink_conn_id = min_checkpoints, max_restarts, flink_conn_id
        self.gate_timeout, self.min_running_seconds = gate_timeout, min_running_seconds
        self._started: float | None = None
        self._running_since: float | None = None
        self._window_end_ms: int | None = None  # the JobManager's clock when min_running_seconds were reached
        self._taskmanagers: set[str] | None = None

    def poke(self, context: Any) -> PokeReturnValue:
        now = time.monotonic()
        if self._started is None:
            self._started = now
        elif now - self._started > float(self.gate_timeout):
            raise AirflowException(f"health gate: job {self.job_id} not healthy within {self.gate_timeout} s")
        client = FlinkHook(self.flink_conn_id).get_conn()
        registered = {str(tm["id"]) for tm in client.taskmanagers()}
        if self._taskmanagers is None:
            self._taskmanagers = registered
        lost = sorted(self._taskmanagers - registered)
        job = client.job(self.job_id)
        state = job["state"]
        if lost:
            raise AirflowException(f"health gate: TaskManager lost during the gate ({', '.join(lost)}); job "
                                   f"{self.job_id} is {state}" + _latest_error(client, self.job_id))
        if state in {"FAILED", "CANCELED", "FINISHED", "SUSPENDED"}:
            raise AirflowException(f"health gate: job {self.job_id} is {state}" + _latest_error(client, self.job_id))
        restarts = client.num_restarts(self.job_id)
        if restarts > int(self.max_restarts) or (state in {"RESTARTING", "FAILING"} and not int(self.max_restarts)):
            raise AirflowException(f"health gate: job {self.job_id} is {state} and restarted {restarts} times "
                                   f"(allowed {self.max_restarts}){_failure_reason(client, self.job_id)}")
        stats = client.checkpoints(self.job_id)
        if self.expected_savepoint and _normalise(stats.restored_from) != _normalise(self.expected_savepoint):
            raise AirflowException(f"health gate: job {self.job_id} restored from {stats.restored_from!r}, "
                                   f"not from {self.expected_savepoint!r}")
        tasks_running = state == "RUNNING" and bool(job.get("vertices")) and \
            all(v.get("status") == "RUNNING" for v in job["vertices"])
        self._running_since = (self._running_since or now) if tasks_running else None
        running_for = now - self._running_since if self._running_since is not None else 0.0
        if not tasks_running:
            self._window_end_ms = None
        elif self._window_end_ms is None and running_for >= float(self.min_running_seconds):
            self._window_end_ms = int(job.get("now") or time.time() * 1000)
        confirmed = self._window_end_ms is not None and \
            (stats.latest_completed_trigger_ms or 0) >= self._window_end_ms
        self.log.info("health gate: state %s, all tasks running for %.0f s (need %s), %d checkpoints completed "
                      "after the restore (need %s, the latest triggered after that time: %s), %d restarts, restored "
                      "from %s", state, running_for, self.min_running_seconds, stats.completed, self.min_checkpoints,
                      "yes" if confirmed else "not yet", restarts, stats.restored_from)
        done = tasks_running and confirmed and stats.completed >= int(self.min_checkpoints)
        if not done:
            return PokeReturnValue(is_done=False)
        # When the job was back (every subtask RUNNING, by Flink's own timestamps): the end of the downtime, which
        # the gate's own time does not stretch.
        result = {"passed": True, "checkpoints": stats.completed, "running_seconds": round(running_for, 1),
                  "restarts": restarts, "restored_from": stats.restored_from, "taskmanagers": len(registered),
                  "confirmed_by_checkpoint": stats.latest_completed_id,
                  "all_subtasks_running_at": client.all_subtasks_running_at(self.job_id)}
        return PokeReturnValue(is_done=True, xcom_value=result)


def _normalise(path: str | None) -> str | None:
    if path is None:
        return None
    text = path.removeprefix("file://").removeprefix("file:")
    return text.rstrip("/").removesuffix("/_metadata")


def _latest_error(client: Any, job_id: str) -> str:
    history = client.exceptions(job_id)
    return f": {history[0].summary}" if history else ""


def _failure_reason(client: Any, job_id: str) -> str:
    """The latest failure, named plainly when it is a lost TaskManager (Flink words it several ways)."""
    history = client.exceptions(job_id)
    if not history:
        return ""
    text = f"{history[0].name} {history[0].summary}"  # the messages, not the stack frames' class names
    lost = any(marker in text for marker in ("TaskManager", "no longer reachable", "Connection unexpectedly closed",
                                             "TaskExecutor"))
    return (": TaskManager lost: " if lost else ": ") + history[0].summary
