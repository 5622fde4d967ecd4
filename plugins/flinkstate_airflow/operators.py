"""Operators for a Flink job's lifecycle: savepoint (job keeps running), stop-with-savepoint, submit a jar (from a
savepoint), cancel. Each is a thin wrapper around :class:`~flinkstate_airflow.hooks.FlinkHook`'s REST client; what
they return goes to XCom (savepoint paths, trigger ids, job ids)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator

from flinkstate_airflow.hooks import FlinkHook


class TaskRefused(SystemExit):
    """Fails a task on purpose, with one log line saying why. Airflow 3 logs every other exception a task raises
    with its traceback (AirflowFailException too); a ``SystemExit`` it logs as one line (``Task exited
    exit_code='<the message>'``) and otherwise treats like any failure: failure callbacks get it as the exception,
    retries apply. For expected outcomes (an upgrade refused, a run failed after its alert), not for bugs."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class _FlinkOperator(BaseOperator):
    def __init__(self, *, flink_conn_id: str = FlinkHook.default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.flink_conn_id = flink_conn_id

    @property
    def hook(self) -> FlinkHook:
        return FlinkHook(self.flink_conn_id)


class FlinkSavepointOperator(_FlinkOperator):
    """Takes a canonical savepoint of a running job, which keeps running.

    With ``wait=True`` (default) returns the savepoint's location; with ``wait=False`` returns the trigger id for a
    :class:`~flinkstate_airflow.sensors.FlinkSavepointSensor`.
    """

    # flink_conn_id too: the upgrade DAG takes its savepoint on the cluster its plan names.
    template_fields: Sequence[str] = ("flink_conn_id", "job_id", "job_name", "target_directory")

    def __init__(self, *, target_directory: str, job_id: str | None = None, job_name: str | None = None,
                 wait: bool = True, savepoint_timeout: float = 600, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.job_id, self.job_name, self.target_directory = job_id, job_name, target_directory
        self.wait, self.savepoint_timeout = wait, savepoint_timeout

    def execute(self, context: Any) -> str:
        hook = self.hook
        job_id = hook.resolve_job_id(self.job_id, self.job_name)
        client = hook.get_conn()
        trigger = client.trigger_savepoint(job_id, self.target_directory)
        if not self.wait:
            return trigger
        location = client.wait_for_savepoint(job_id, trigger, timeout=self.savepoint_timeout)
        self.log.info("savepoint of job %s: %s (the job keeps running)", job_id, location)
        return location


class FlinkStopWithSavepointOperator(_FlinkOperator):
    """Stops a job with a final canonical savepoint; returns the savepoint's location (or the trigger id)."""

    template_fields: Sequence[str] = ("job_id", "job_name", "target_directory")

    def __init__(self, *, target_directory: str, job_id: str | None = None, job_name: str | None = None,
                 drain: bool = False, wait: bool = True, savepoint_timeout: float = 600, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.job_id, self.job_name, self.target_directory = job_id, job_name, target_directory
        self.drain, self.wait, self.savepoint_timeout = drain, wait, savepoint_timeout

    def execute(self, context: Any) -> str:
        hook = self.hook
        job_id = hook.resolve_job_id(self.job_id, self.job_name)
        client = hook.get_conn()
        if not self.wait:
            return client.trigger_stop_with_savepoint(job_id, self.target_directory, drain=self.drain)
        location = client.stop_with_savepoint(job_id, self.target_directory, drain=self.drain,
                                              timeout=self.savepoint_timeout)
        self.log.info("job %s stopped with savepoint %s", job_id, location)
        return location


class FlinkSubmitJarOperator(_FlinkOperator):
    """Uploads and runs a jar, optionally restoring a savepoint; returns the new job's id.

    With ``wait_running=True`` (default) the task succeeds only once every task of the job is RUNNING (its state
    restored) and fails with Flink's own error if the restore fails.
    """

    # flink_conn_id too: the upgrade DAG submits the new version to the cluster its plan names.
    template_fields: Sequence[str] = ("flink_conn_id", "jar", "entry_class", "program_args", "savepoint_path",
                                      "parallelism", "allow_non_restored_state")

    def __init__(self, *, jar: str, entry_class: str | None = None, program_args: Sequence[str] | str = (),
                 parallelism: int | str | None = None, savepoint_path: str | None = None,
                 allow_non_restored_state: bool | str = False, wait_running: bool = True,
                 running_timeout: float = 300, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.jar, self.entry_class, self.program_args = jar, entry_class, program_args
        self.parallelism, self.savepoint_path = parallelism, savepoint_path
        self.allow_non_restored_state = allow_non_restored_state
        self.wait_running, self.running_timeout = wait_running, running_timeout

    def execute(self, context: Any) -> str:
        client = self.hook.get_conn()
        args = self.program_args.split() if isinstance(self.program_args, str) else list(self.program_args)
        job_id = client.submit_jar(
            self.jar, entry_class=self.entry_class or None, program_args=args,
            parallelism=int(self.parallelism) if self.parallelism not in (None, "", "None") else None,
            savepoint_path=self.savepoint_path or None,
            allow_non_restored_state=_as_bool(self.allow_non_restored_state))
        self.log.info("submitted %s as job %s (from savepoint %s)", self.jar, job_id, self.savepoint_path or "none")
        # Known before it is known to run: a rollback must be able to cancel a job that fails to start.
        context["ti"].xcom_push(key="job_id", value=job_id)
        if self.wait_running:
            client.wait_until_running(job_id, timeout=self.running_timeout)
        return job_id


class FlinkCancelJobOperator(_FlinkOperator):
    """Cancels a job (no savepoint) and waits until it is CANCELED."""

    template_fields: Sequence[str] = ("job_id", "job_name")

    def __init__(self, *, job_id: str | None = None, job_name: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.job_id, self.job_name = job_id, job_name

    def execute(self, context: Any) -> str:
        hook = self.hook
        job_id = hook.resolve_job_id(self.job_id, self.job_name)
        hook.get_conn().cancel(job_id)
        return job_id


def _as_bool(value: bool | str) -> bool:
    """Templated fields arrive as strings ("True", "false")."""
    return value if isinstance(value, bool) else str(value).strip().lower() in {"1", "true", "yes"}
