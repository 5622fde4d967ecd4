"""A plain client for Flink's REST API (the JobManager's ``rest.port``): jars, jobs, savepoints, checkpoints.

Used by the Airflow hook, the demo and the tests. Every failure surfaces as a :class:`FlinkRestError` (or a
subclass) whose message is Flink's own, shortened to the lines a person needs; the full text stays in ``details``.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import requests

from flinkstate.errors import FlinkStateError

#: Job states after which a job never runs again.
T = TypeVar("T")

TERMINAL_STATES = frozenset({"FINISHED", "CANCELED", "FAILED", "SUSPENDED"})
#: Job states of a job that is being scheduled, running or recovering.
ACTIVE_STATES = frozenset({"INITIALIZING", "CREATED", "RUNNING", "RESTARTING", "FAILING", "CANCELLING", "RECONCILING"})


class FlinkRestError(FlinkStateError):
    """Flink answered with an error, or with something this client cannot use.

    ``message`` holds Flink's own message, shortened to its first line and deepest cause; ``details`` holds
    everything Flink sent (often a Java stack trace).
    """

    def __init__(self, message: str, *, status: int | None = None, url: str | None = None, details: str = ""):
        super().__init__(message)
        self.status = status
        self.url = url
        self.details = details or message


class FlinkUnreachable(FlinkRestError):
    """No Flink REST API answers at the address."""


class FlinkTimeout(FlinkRestError):
    """Flink did not reach the awaited state in time."""


class SavepointFailed(FlinkRestError):
    """A savepoint or stop-with-savepoint operation completed with a failure."""


class FlinkJobFailed(FlinkRestError):
    """A job failed, or is failing and restarting (e.g. its state could not be restored)."""


def summarize_java_error(text: str) -> str:
    """Shortens a Java stack trace to ``<first line> | caused by: <deepest cause>`` (one line).

    The deepest ``Caused by`` is usually what a person needs (``StateMigrationException: ...``); the first line says
    where it surfaced.
    """
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return "(Flink sent no message)"
    first = lines[0]
    causes = [line[len("Caused by:") :].strip() for line in lines if line.startswith("Caused by:")]
    if causes and causes[-1] != first:
        return f"{first} | caused by: {causes[-1]}"
    return first


@dataclass(frozen=True)
class CheckpointStats:
    """What ``GET /jobs/<id>/checkpoints`` says, reduced to what a health gate needs."""

    completed: int
    failed: int
    in_progress: int
    restored: int
    #: The savepoint or checkpoint the job was restored from (``latest.restored.external_path``), if any.
    restored_from: str | None
    restored_is_savepoint: bool | None
    latest_completed_id: int | None
    latest_completed_path: str | None
    #: When the latest completed checkpoint was triggered, in the JobManager's clock (epoch ms).
    latest_completed_trigger_ms: int | None = None

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> CheckpointStats:
        counts = body.get("counts") or {}
        latest = body.get("latest") or {}
        restored = latest.get("restored") or {}
        completed = latest.get("completed") or {}
        return cls(
            completed=int(counts.get("completed", 0)),
            failed=int(counts.get("failed", 0)),
            in_progress=int(counts.get("in_progress", 0)),
            restored=int(counts.get("restored", 0)),
            restored_from=restored.get("external_path"),
            restored_is_savepoint=restored.get("is_savepoint") if restored else None,
            latest_completed_id=completed.get("id"),
            latest_completed_path=completed.get("external_path"),
            latest_completed_trigger_ms=completed.get("trigger_timestamp"),
        )


@dataclass(frozen=True)
class JobException:
    """One entry of a job's exception history."""

    #: The exception's class name, e.g. ``org.apache.flink.util.StateMigrationException``.
    name: str
    stacktrace: str
    timestamp: int
    task_name: str | None

    @property
    def summary(self) -> str:
        return summarize_java_error(self.stacktrace) if self.stacktrace else self.name


class FlinkRestClient:
    """Talks to one Flink cluster's REST endpoint, e.g. ``FlinkRestClient("http://127.0.0.1:8081")``."""

    def __init__(self, base_url: str, *, timeout: float = 30.0, session: requests.Session | None = None):
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self._session = session or requests.Session()

    def __repr__(self) -> str:
        return f"FlinkRestClient({self.base_url!r})"

    # ------------------------------------------------------------------ plumbing

    def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        url = f"{self.base_url}{path}"
        kwargs.setdefault("timeout", self.timeout)
        try:
            response = self._session.request(method, url, **kwargs)
        except requests.ConnectionError as exc:
            raise FlinkUnreachable(f"cannot reach the Flink REST API at {self.base_url}: connection refused or reset",
                                   url=url, details=str(exc)) from None
        except requests.Timeout as exc:
            raise FlinkUnreachable(f"the Flink REST API at {self.base_url} did not answer within {self.timeout}s",
                                   url=url, details=str(exc)) from None
        if response.status_code >= 400:
            errors: list[str] = []
            try:
                errors = [str(e) for e in response.json().get("errors", [])]
            except ValueError:
                errors = [response.text]
            details = "\n".join(errors)
            message = summarize_java_error(details) if details else response.reason
            raise FlinkRestError(f"Flink REST {method} {path} failed ({response.status_code}): {message}",
                                 status=response.status_code, url=url, details=details)
        if not response.content:
            return None
        try:
            return response.json()
        except ValueError:
            raise FlinkRestError(f"Flink REST {method} {path} answered with something that is not JSON",
                                 status=response.status_code, url=url, details=response.text) from None

    def _object(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        """A request whose answer must be a JSON object (every Flink REST answer read by key is one)."""
        body = self._request(method, path, **kwargs)
        if not isinstance(body, dict):
            raise FlinkRestError(f"Flink REST {method} {path} answered {type(body).__name__}, not a JSON object",
                                 url=f"{self.base_url}{path}", details=repr(body)[:2000])
        return body

    def _text(self, method: str, path: str, key: str, **kwargs: Any) -> str:
        """One string field of a request's JSON object (a job id, a trigger id); an error naming it when absent."""
        body = self._object(method, path, **kwargs)
        if key not in body:
            raise FlinkRestError(f"Flink REST {method} {path} answered without {key!r}", url=f"{self.base_url}{path}",
                                 details=repr(body)[:2000])
        return str(body[key])

    @staticmethod
    def _poll(what: str, probe: Callable[[], T | None], timeout: float, interval: float = 0.5) -> T:
        """Calls ``probe`` until it returns something other than None, or raises FlinkTimeout."""
        deadline = time.monotonic() + timeout
        while True:
            result = probe()
            if result is not None:
                return result
            if time.monotonic() >= deadline:
                raise FlinkTimeout(f"timed out after {timeout:.0f}s waiting for {what}")
            time.sleep(interval)

    # ------------------------------------------------------------------ cluster

    def overview(self) -> dict[str, Any]:
        """``GET /overview``: flink-version, taskmanagers, slots-total, slots-available, jobs-running, ..."""
        return self._object("GET", "/overview")

    def config(self) -> dict[str, Any]:
        """``GET /config``: the cluster's flink-version, flink-revision, features."""
        return self._object("GET", "/config")

    def taskmanagers(self) -> list[dict[str, Any]]:
        """``GET /taskmanagers``: the registered TaskManagers (id, slotsNumber, freeSlots, timeSinceLastHeartbeat)."""
        return list(self._object("GET", "/taskmanagers").get("taskmanagers", []))

    # ------------------------------------------------------------------ jars

    def upload_jar(self, jar_path: str | os.PathLike[str]) -> str:
        """Uploads a jar; returns the jar id to run it by."""
        path = os.fspath(jar_path)
        if not os.path.isfile(path):
            raise FlinkRestError(f"cannot upload {path}: no such file")
        with open(path, "rb") as handle:
            filename = self._text("POST", "/jars/upload", "filename",
                                  files={"jarfile": (os.path.basename(path), handle, "application/x-java-archive")})
        return os.path.basename(filename)

    def list_jars(self) -> list[dict[str, Any]]:
        return list(self._object("GET", "/jars").get("files", []))

    def delete_jar(self, jar_id: str) -> None:
        self._request("DELETE", f"/jars/{jar_id}")

    def run_jar(
        self,
        jar_id: str,
        *,
        entry_class: str | None = None,
        program_args: Sequence[str] = (),
        parallelism: int | None = None,
        savepoint_path: str | None = None,
        allow_non_restored_state: bool = False,
        restore_mode: str | None = None,
    ) -> str:
        """Runs an uploaded jar (``POST /jars/<id>/run``), optionally from a savepoint; returns the job id.

        ``restore_mode`` is Flink's ``CLAIM``/``NO_CLAIM``/``LEGACY`` (Flink's default, NO_CLAIM, when None).
        """
        body: dict[str, Any] = {"programArgsList": list(program_args),
                                "allowNonRestoredState": allow_non_restored_state}
        if entry_class:
            body["entryClass"] = entry_class
        if parallelism is not None:
            body["parallelism"] = parallelism
        if savepoint_path:
            body["savepointPath"] = savepoint_path
        if restore_mode:
            body["restoreMode"] = restore_mode
        return self._text("POST", f"/jars/{jar_id}/run", "jobid", json=body)

    def submit_jar(self, jar_path: str | os.PathLike[str], **run_options: Any) -> str:
        """Uploads and runs a jar in one call (see :meth:`run_jar` for the options); returns the job id.

        The uploaded jar is deleted from the cluster afterwards: a running job keeps its own copy.
        """
        jar_id = self.upload_jar(jar_path)
        try:
            return self.run_jar(jar_id, **run_options)
        finally:
            try:
                self.delete_jar(jar_id)
            except FlinkRestError:
                pass

    # ------------------------------------------------------------------ jobs

    def list_jobs(self) -> list[dict[str, Any]]:
        """``GET /jobs/overview``: one dict per job with jid, name, state, start-time, ..."""
        return list(self._object("GET", "/jobs/overview").get("jobs", []))

    def find_jobs(self, name: str, states: Iterable[str] | None = ACTIVE_STATES) -> list[dict[str, Any]]:
        """Jobs with exactly this name (newest first), limited to ``states`` (all states when None)."""
        wanted = set(states) if states is not None else None
        jobs = [j for j in self.list_jobs() if j.get("name") == name and (wanted is None or j.get("state") in wanted)]
        return sorted(jobs, key=lambda j: j.get("start-time", 0), reverse=True)

    def find_job(self, name: str) -> str:
        """The id of the one active job with this name; an error when there is none or more than one."""
        jobs = self.find_jobs(name)
        if not jobs:
            raise FlinkRestError(f"no running job named {name!r} on {self.base_url}")
        if len(jobs) > 1:
            ids = ", ".join(j["jid"] for j in jobs)
            raise FlinkRestError(
                f"{len(jobs)} running jobs are named {name!r} on {self.base_url} ({ids}): name one by id")
        return str(jobs[0]["jid"])

    def job(self, job_id: str) -> dict[str, Any]:
        """``GET /jobs/<id>``: name, state, vertices with their status, timestamps, ..."""
        return self._object("GET", f"/jobs/{job_id}")

    def job_state(self, job_id: str) -> str:
        return str(self.job(job_id)["state"])

    def exceptions(self, job_id: str) -> list[JobException]:
        """The job's exception history, newest first (``GET /jobs/<id>/exceptions``)."""
        body = self._object("GET", f"/jobs/{job_id}/exceptions")
        entries = (body.get("exceptionHistory") or {}).get("entries") or []
        result = [
            JobException(
                name=str(e.get("exceptionName", "")),
                stacktrace=str(e.get("stacktrace", "")),
                timestamp=int(e.get("timestamp", 0)),
                task_name=e.get("taskName"),
            )
            for e in entries
        ]
        if not result and body.get("root-exception"):  # Flink 1.x also reports the root exception on its own
            result.append(JobException(name="root-exception", stacktrace=str(body["root-exception"]),
                                       timestamp=int(body.get("timestamp") or 0), task_name=None))
        return result

    def subtask_timestamps(self, job_id: str) -> list[dict[str, int]]:
        """Flink's own per-subtask state timestamps (ms, the JobManager's clock) of every vertex of the job, one
        map per subtask's current attempt: execution state -> when it was entered (0: not entered)
        (``GET /jobs/<id>/vertices/<vertex>/subtasktimes``)."""
        return [{str(state): int(ms) for state, ms in (subtask.get("timestamps") or {}).items()}
                for vertex in self.job(job_id).get("vertices") or []
                for subtask in self._object("GET", f"/jobs/{job_id}/vertices/{vertex['id']}/subtasktimes")
                .get("subtasks") or []]

    def all_subtasks_running_at(self, job_id: str) -> float | None:
        """When the last subtask of the job turned RUNNING, in epoch seconds, i.e. when every subtask had restored
        its state (Task.restoreAndInvoke: INITIALIZING -> restore -> RUNNING; the job's own status says RUNNING
        before that). None while a subtask has not reached RUNNING. The end of an upgrade's downtime."""
        times = self.subtask_timestamps(job_id)
        if not times or any(t.get("RUNNING", 0) <= 0 for t in times):
            return None
        return max(t["RUNNING"] for t in times) / 1000

    def checkpoints(self, job_id: str) -> CheckpointStats:
        """Checkpoint statistics, including the path the job was restored from."""
        return CheckpointStats.from_json(self._object("GET", f"/jobs/{job_id}/checkpoints"))

    def num_restarts(self, job_id: str) -> int:
        """How often the job has restarted (the job metric ``numRestarts``)."""
        body = self._request("GET", f"/jobs/{job_id}/metrics", params={"get": "numRestarts"})
        for metric in body or []:
            if metric.get("id") == "numRestarts":
                return int(float(metric["value"]))
        return 0

    def cancel(self, job_id: str, *, wait: bool = True, timeout: float = 60.0) -> None:
        """Cancels a job (no savepoint) and, by default, waits until it is CANCELED."""
        self._request("PATCH", f"/jobs/{job_id}", params={"mode": "cancel"})
        if wait:
            self.wait_for_job_state(job_id, {"CANCELED"}, timeout=timeout)

    def wait_for_job_state(self, job_id: str, states: Iterable[str], *, timeout: float = 60.0) -> str:
        """Waits until the job is in one of ``states``; returns that state."""
        wanted = set(states)

        def probe() -> str | None:
            state = self.job_state(job_id)
            if state in wanted:
                return state
            if state in TERMINAL_STATES:
                raise FlinkJobFailed(f"job {job_id} ended {state} while waiting for {'/'.join(sorted(wanted))}"
                                     + self._latest_failure(job_id))
            return None

        return self._poll(f"job {job_id} to become {'/'.join(sorted(wanted))}", probe, timeout)

    def wait_until_running(self, job_id: str, *, timeout: float = 120.0) -> dict[str, Any]:
        """Waits until the job and every one of its tasks is RUNNING, i.e. state has been restored.

        Raises FlinkJobFailed as soon as the job records a failure (a restore failure makes Flink restart the job
        in a loop: this reports the first failure instead of waiting out the timeout).
        """

        def probe() -> dict[str, Any] | None:
            job = self.job(job_id)
            state = job["state"]
            if state in TERMINAL_STATES or state in {"FAILING", "RESTARTING"} or self._has_failed(job_id):
                raise FlinkJobFailed(f"job {job_id} ({job.get('name')}) failed while starting (state {state})"
                                     + self._latest_failure(job_id))
            vertices = job.get("vertices") or []
            if state == "RUNNING" and vertices and all(v.get("status") == "RUNNING" for v in vertices):
                return job
            return None

        return self._poll(f"job {job_id} to run with all tasks RUNNING", probe, timeout)

    def _has_failed(self, job_id: str) -> bool:
        return bool(self.exceptions(job_id))

    def _latest_failure(self, job_id: str) -> str:
        try:
            history = self.exceptions(job_id)
        except FlinkRestError:
            return ""
        return f": {history[0].summary}" if history else ""

    # ------------------------------------------------------------------ savepoints

    def trigger_savepoint(self, job_id: str, target_directory: str, *, format_type: str = "CANONICAL") -> str:
        """Triggers a savepoint while the job keeps running; returns the trigger id to poll."""
        body = {"target-directory": target_directory, "cancel-job": False, "formatType": format_type}
        return self._text("POST", f"/jobs/{job_id}/savepoints", "request-id", json=body)

    def trigger_stop_with_savepoint(
        self, job_id: str, target_directory: str, *, drain: bool = False, format_type: str = "CANONICAL"
    ) -> str:
        """Stops the job with a final savepoint (``POST /jobs/<id>/stop``); returns the trigger id to poll."""
        body = {"targetDirectory": target_directory, "drain": drain, "formatType": format_type}
        return self._text("POST", f"/jobs/{job_id}/stop", "request-id", json=body)

    def savepoint_status(self, job_id: str, trigger_id: str) -> dict[str, Any]:
        """``GET /jobs/<id>/savepoints/<trigger>``: status.id IN_PROGRESS or COMPLETED, and the operation."""
        return self._object("GET", f"/jobs/{job_id}/savepoints/{trigger_id}")

    def wait_for_savepoint(self, job_id: str, trigger_id: str, *, timeout: float = 300.0) -> str:
        """Waits for a savepoint operation; returns the savepoint's location or raises SavepointFailed."""

        def probe() -> str | None:
            body = self.savepoint_status(job_id, trigger_id)
            if (body.get("status") or {}).get("id") != "COMPLETED":
                return None
            operation = body.get("operation") or {}
            if operation.get("location"):
                return str(operation["location"])
            cause = operation.get("failure-cause") or {}
            trace = str(cause.get("stack-trace") or cause.get("class") or "no failure cause given")
            raise SavepointFailed(f"savepoint of job {job_id} failed: {summarize_java_error(trace)}", details=trace)

        return self._poll(f"savepoint {trigger_id} of job {job_id}", probe, timeout)

    def savepoint(self, job_id: str, target_directory: str, *, timeout: float = 300.0) -> str:
        """Takes a canonical savepoint while the job keeps running; returns its location."""
        return self.wait_for_savepoint(job_id, self.trigger_savepoint(job_id, target_directory), timeout=timeout)

    def stop_with_savepoint(
        self, job_id: str, target_directory: str, *, drain: bool = False, timeout: float = 300.0
    ) -> str:
        """Stops the job with a canonical savepoint; returns its location once the savepoint is complete."""
        trigger = self.trigger_stop_with_savepoint(job_id, target_directory, drain=drain)
        location = self.wait_for_savepoint(job_id, trigger, timeout=timeout)
        self.wait_for_job_state(job_id, {"FINISHED", "CANCELED"}, timeout=timeout)
        return location

    def stop_job_with_savepoint(
        self, job_id: str, target_directory: str, *, drain: bool = False, timeout: float = 300.0
    ) -> str:
        """Like :meth:`stop_with_savepoint`, but also returns the savepoint when Flink created it and then failed
        the job while stopping (``StopWithSavepointStoppingException``): that savepoint is complete and consistent,
        and it is the only copy of the job's last state, so an upgrade must use it rather than give up."""
        trigger = self.trigger_stop_with_savepoint(job_id, target_directory, drain=drain)
        try:
            location = self.wait_for_savepoint(job_id, trigger, timeout=timeout)
        except SavepointFailed as exc:
            created = savepoint_created_before_stop_failed(exc.details)
            if created is None:
                raise
            self.wait_for_job_state(job_id, TERMINAL_STATES, timeout=timeout)
            return created
        self.wait_for_job_state(job_id, {"FINISHED", "CANCELED"}, timeout=timeout)
        return location


_URL_PATTERN = re.compile(r"^https?://")
#: Flink's StopWithSavepointStoppingException message (flink-runtime, scheduler/stopwithsavepoint).
_STOPPING_FAILED = re.compile(r"A savepoint has been created at: (\S+?), but the corresponding job \S+ failed during "
                              r"stopping")


def savepoint_created_before_stop_failed(details: str) -> str | None:
    """The savepoint a failed stop-with-savepoint did create (``StopWithSavepointStoppingException``), if any."""
    match = _STOPPING_FAILED.search(details or "")
    return match.group(1) if match else None


def client_for(address: str, **kwargs: Any) -> FlinkRestClient:
    """A client for ``host:port`` or a full ``http(s)://`` URL."""
    return FlinkRestClient(address if _URL_PATTERN.match(address) else f"http://{address}", **kwargs)
