"""The handoff between an upgrade run and its pre-started migration application (issue 28).

A Spark application pays its JVM and session start (13 to 28 s on 2 cores) whatever the size of the savepoint. The
upgrade DAG therefore starts the migration application before the old job is stopped; the application builds its
session, says it is ready, and waits for the stop savepoint's path. The run's stop task writes that path here once
the stop savepoint exists; the migration task only waits for the application's result. Three small files in the
run's folder (``<run_dir>/migrate-app/<token>/``, local or ``s3://``), each written whole (:func:`write_durably`):

- ``ready.json``: the application has its session (its token, pid, host), written by the application;
- ``handoff.json``: the stop savepoint (or why none will come: the run took another path), written by the run;
- ``result.json``: what the application did (published, abandoned, failed), in one line, written by it.

Every file carries the run (dag_id, run_id) and the token of one launch of the application: a handoff written for
another run (foreign) or for an earlier launch of this run's application (stale) is refused, never migrated. The
application's wait is bounded, and it gives up cleanly (migrating nothing) when the run is no longer this DAG run's
(its journal closed: rolled back, concluded; or taken over by the watchdog or a person): a pre-started application
never works for a run that lost its lease. Its publish is fenced on the journal as any migration's
(``MigrationJob.fence``)."""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from flinkstate.errors import FlinkStateError
from flinkstate.storage.uri import exists, read_file
from flinkstate.upgrades.journal import RunTakenOver, UpgradeJournal, write_durably

HANDOFF_VERSION = 1
READY_FILE, HANDOFF_FILE, RESULT_FILE = "ready.json", "handoff.json", "result.json"
#: Seconds between looks at the handoff (by the application) and at the result (by the run) while waiting: the job
#: is down meanwhile, and on a small state its whole downtime is under a second; a look is a local read or one S3
#: request.
POLL_SECONDS = 0.05
#: Seconds between looks at the run's journal while the application waits (the whole journal is read: a run that
#: lost it need only be noticed soon, not at once).
JOURNAL_POLL_SECONDS = 1.0


class HandoffRefused(FlinkStateError):
    """A handoff file that is not this application's (another run's, or an earlier launch's), or not readable."""


class HandoffAbandoned(FlinkStateError):
    """No stop savepoint will come for this application: the run took another path, lost its lease, or the wait
    timed out. The application migrates nothing and ends cleanly."""


@dataclass(frozen=True)
class AppRef:
    """One launch of a run's migration application: its folder (``<run_dir>/migrate-app/<token>``), the run it works for
    (``{"dag_id": ..., "run_id": ...}``) and the token of this launch."""

    folder: str
    run: dict[str, str]
    token: str

    @classmethod
    def new(cls, run_dir: str, run: dict[str, Any]) -> AppRef:
        token = uuid.uuid4().hex  # a folder of its own: no file of an earlier launch is ever in the way
        return cls(f"{run_dir.rstrip('/')}/migrate-app/{token}",
                   {"dag_id": str(run["dag_id"]), "run_id": str(run["run_id"])}, token)

    def path(self, name: str) -> str:
        return f"{self.folder}/{name}"

    def _write(self, name: str, body: dict[str, Any]) -> None:
        body = {"handoff_version": HANDOFF_VERSION, "run": self.run, "token": self.token, "written_at": time.time(),
                **body}
        write_durably(self.path(name), json.dumps(body, sort_keys=True).encode())

    def _read(self, name: str) -> dict[str, Any] | None:
        """The file ``name`` when it exists and is this launch's; None when absent; :class:`HandoffRefused` when it
        is another run's or launch's, or not one of these files."""
        uri = self.path(name)
        if not exists(uri):
            return None
        try:
            body = json.loads(read_file(uri))
        except ValueError as exc:
            raise HandoffRefused(f"{uri}: not a handoff file ({exc})") from None
        if not isinstance(body, dict) or body.get("handoff_version") != HANDOFF_VERSION:
            raise HandoffRefused(f"{uri}: not a handoff file of version {HANDOFF_VERSION}")
        run = body.get("run") or {}
        if run != self.run:
            raise HandoffRefused(f"{uri}: foreign: written for run {run.get('run_id')} of {run.get('dag_id')}, not "
                                 f"for run {self.run['run_id']} of {self.run['dag_id']}")
        if body.get("token") != self.token:
            raise HandoffRefused(f"{uri}: stale: written for another launch of this run's migration application "
                                 f"(token {str(body.get('token'))[:12]}, not {self.token[:12]})")
        return body

    # ------------------------------------------------------------------ the run's side

    def hand_over(self, stop_savepoint: str) -> None:
        """The stop task: the stop savepoint exists, the application may migrate it."""
        self._write(HANDOFF_FILE, {"stop_savepoint": stop_savepoint})

    def call_off(self, why: str) -> None:
        """The run will not migrate (it restores as is, was refused, concluded): the application ends, migrating
        nothing. A handoff already written is kept (the application may be using it; its publish is fenced)."""
        try:
            if self._read(HANDOFF_FILE) is not None:
                return
        except HandoffRefused:
            pass  # another launch's file: replaced by this launch's cancellation
        self._write(HANDOFF_FILE, {"called_off": why})

    def handed_over(self) -> str | None:
        """The stop savepoint handed over to this launch, if any (None too when the run called it off)."""
        body = self._read(HANDOFF_FILE)
        return str(body["stop_savepoint"]) if body and body.get("stop_savepoint") else None

    def ready(self) -> dict[str, Any] | None:
        """The application's ready file, when it has its session."""
        return self._read(READY_FILE)

    def result(self) -> dict[str, Any] | None:
        """The application's result, once it ended."""
        return self._read(RESULT_FILE)

    def wait_for(self, what: Callable[[], dict[str, Any] | None], timeout: float, *,
                 alive: Callable[[], bool] = lambda: True, poll: float = POLL_SECONDS) -> dict[str, Any] | None:
        """``what()`` once it is not None; None after ``timeout`` seconds or once ``alive()`` says the application's
        process ended (looked at once more after that: it may have written its file as it ended)."""
        deadline = time.monotonic() + timeout
        while True:
            found = what()
            if found is not None:
                return found
            if not alive():
                return what()
            if time.monotonic() >= deadline:
                return None
            time.sleep(poll)

    # ------------------------------------------------------------------ the application's side

    def say_ready(self, session_seconds: float) -> None:
        self._write(READY_FILE, {"pid": os.getpid(), "host": socket.gethostname(), "session_seconds": session_seconds})

    def await_stop_savepoint(self, journal: str, timeout: float, *, poll: float = POLL_SECONDS) -> str:
        """The stop savepoint's path, once the run hands it over. :class:`HandoffAbandoned` when the run called the
        migration off, no longer holds its journal (closed, or taken over), or ``timeout`` seconds passed;
        :class:`HandoffRefused` for a foreign or stale handoff."""
        deadline = time.monotonic() + timeout
        journal_due = 0.0
        while True:
            body = self._read(HANDOFF_FILE)
            if body is not None:
                if body.get("called_off"):
                    raise HandoffAbandoned(f"the run called the migration off: {body['called_off']}")
                savepoint = body.get("stop_savepoint")
                if not isinstance(savepoint, str) or not savepoint:
                    raise HandoffRefused(f"{self.path(HANDOFF_FILE)}: names no stop savepoint")
                return savepoint
            if time.monotonic() >= journal_due:
                try:
                    UpgradeJournal.held_by(journal, self.run)
                except RunTakenOver as exc:
                    raise HandoffAbandoned(f"the run no longer holds its journal: {exc}") from None
                journal_due = time.monotonic() + JOURNAL_POLL_SECONDS
            if time.monotonic() >= deadline:
                raise HandoffAbandoned(f"no stop savepoint handed over in {self.path(HANDOFF_FILE)} within "
                                       f"{timeout:.0f} s")
            time.sleep(poll)

    def record_result(self, outcome: str, line: str, exit_code: int) -> None:
        """``outcome``: published, abandoned or failed; ``line``: what happened, in one line."""
        self._write(RESULT_FILE, {"outcome": outcome, "line": line, "exit_code": exit_code})
