"""The upgrade journal and the deployment registry: what an upgrade records, and how it writes it safely.

Modelled on the Flink Kubernetes Operator's persisted ``UPGRADING`` phase: before and after each irreversible step
(stop, migrate, submit, gate, rollback) the upgrade records in its journal, atomically and durably, the phase, the
job ids and the savepoint paths. Whatever process dies, the state of production can be rebuilt from the journal and
Flink (:mod:`flinkstate.upgrades.recovery` acts on it). Journal writes are compare-and-swap (a lock beside a local
journal, S3's conditional PUT), so two actors never both act on one run.

Layout beside the savepoints (``savepoint_base`` is a local folder or ``s3://bucket/prefix``)::

    <savepoint_base>/deployments.json            what runs, and where (:mod:`flinkstate.upgrades.registry`)
    <savepoint_base>/journal/<deployment>.json   the last upgrade of each deployment: phase, job ids, savepoints
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlparse

from flinkstate.engine.rest import FlinkRestClient
from flinkstate.errors import FlinkStateError
from flinkstate.storage.s3 import s3_client, split_s3_uri
from flinkstate.storage.uri import exists, write_file
from flinkstate.upgrades.names import safe_name
from flinkstate.upgrades.ownership import Liveness, RunProbe, owner_liveness, process_start

JOURNAL_DIR = "journal"
JOURNAL_VERSION = 1

class Phase:
    """The phases of an upgrade (a journal's ``phase``), in the order it passes them. A journal whose phase is not
    DONE belongs to a run that is either still working or died: recovery tells the two apart by the owner (host,
    pid) and the time of the last write."""

    PLANNED: Final = "planned"
    STOPPING: Final = "stopping"
    STOPPED: Final = "stopped"
    MIGRATING: Final = "migrating"
    MIGRATED: Final = "migrated"
    VERIFIED: Final = "verified"
    SUBMITTING: Final = "submitting"
    SUBMITTED: Final = "submitted"
    GATING: Final = "gating"
    GATE_PASSED: Final = "gate_passed"
    ROLLING_BACK: Final = "rolling_back"
    DONE: Final = "done"


class Outcome:
    """The outcomes of a DONE journal. UNCHANGED: nothing was stopped; DOWN: the job is not running, a person must."""

    UPGRADED: Final = "upgraded"
    CHECKED: Final = "checked"
    REFUSED: Final = "refused"
    UNCHANGED: Final = "unchanged"
    ROLLED_BACK: Final = "rolled back"
    DOWN: Final = "DOWN"


class UpgradeError(FlinkStateError):
    """The upgrade cannot go on; the message says why, in one line."""


class JournalConflict(UpgradeError):
    """Another process wrote the journal since this one read it (a watchdog took the run over, or the run came back
    while a watchdog acted): this process must not act on what it read."""


class RunTakenOver(JournalConflict):
    """The fence before an irreversible step found the run no longer this one's (another actor took it over, or
    closed it, or a newer run replaced its journal): the step is not made, and nothing more is written."""


@dataclass(frozen=True)
class JobVersion:
    """Everything needed to (re)start one version of a job: rollback never guesses. ``manifest`` is optional: the
    version's state schema is its jar's, a manifest an overlay of it (:mod:`flinkstate.manifest_overlay`)."""

    jar: str
    manifest: str | None = None
    entry_class: str | None = None
    program_args: list[str] = field(default_factory=list)
    parallelism: int | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str) -> JobVersion:
        if not data.get("jar"):
            raise UpgradeError(f"{where}: missing jar")
        args = data.get("program_args") or []
        if isinstance(args, str):
            args = args.split()
        parallelism = data.get("parallelism")
        return cls(str(data["jar"]), str(data["manifest"]) if data.get("manifest") else None,
                   data.get("entry_class") or None, [str(a) for a in args],
                   int(parallelism) if parallelism not in (None, "") else None)

    def submit(self, client: FlinkRestClient, savepoint: str, *, allow_non_restored_state: bool = False) -> str:
        return client.submit_jar(self.jar, entry_class=self.entry_class, program_args=self.program_args,
                                 parallelism=self.parallelism, savepoint_path=savepoint,
                                 allow_non_restored_state=allow_non_restored_state)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def local_path(location: str) -> str:
    """Flink reports savepoints as ``file:/path``; the Spark jobs and the REST API take the path as it is."""
    return location.removeprefix("file://").removeprefix("file:")


def same_path(a: str | None, b: str | None) -> bool:
    """Savepoint locations compared as paths (``file:`` prefixes, trailing ``/`` and ``/_metadata`` ignored)."""
    if not a or not b:
        return False
    return local_path(a).rstrip("/").removesuffix("/_metadata") == local_path(b).rstrip("/").removesuffix("/_metadata")


def write_durably(uri: str, data: bytes) -> str:
    """Writes a small file so that a crash leaves either the old or the new content, never a torn one: local files
    go to a new file beside, are fsync'ed, renamed over the target, and the folder is fsync'ed (so the rename
    itself survives a power loss); ``s3://`` objects are one PUT, which S3 applies whole. See
    :func:`flinkstate.storage.uri.write_file`: links at the target are replaced, never followed."""
    return write_file(uri, data, durable=True)


def write_with_retries(write: Callable[[], object], *, attempts: int = 3, pause: float = 1.0) -> str | None:
    """Runs ``write`` up to ``attempts`` times: None once it succeeded, else why it failed, in one line (for steps
    that go on without a record, as the rollback). A :class:`JournalConflict` is raised: the run is another's."""
    problem = ""
    for attempt in range(attempts):
        try:
            write()
            return None
        except JournalConflict:
            raise
        except Exception as exc:  # any storage error (OSError, S3's ClientError, ...): reported, then retried
            problem = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        time.sleep(pause if attempt + 1 < attempts else 0)
    return problem


def not_writable(folder: str) -> str | None:
    """None when a small file can be written to and removed from ``folder`` (local or ``s3://``), else why not, in
    one line: checked before an upgrade stops anything, so that a run never stops a job it cannot record."""
    probe = f"{folder.rstrip('/')}/.flinkstate-write-probe-{os.getpid()}"
    try:
        write_file(probe, b"probe")
        if urlparse(probe).scheme in ("s3", "s3a"):
            bucket, key = split_s3_uri(probe)
            s3_client().delete_object(Bucket=bucket, Key=key)
        else:
            os.remove(local_path(probe))
    except Exception as exc:  # any storage error: the location is not usable, say why in one line
        return f"{folder}: not writable ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
    return None


def _read_versioned(uri: str) -> tuple[bytes, str] | None:
    """A journal's bytes and its version token (S3: the object's ETag; local: the file's ``revision``), or None
    when there is no journal."""
    if urlparse(uri).scheme in ("s3", "s3a"):
        bucket, key = split_s3_uri(uri)
        client = s3_client()
        try:
            answer = client.get_object(Bucket=bucket, Key=key)
        except client.exceptions.NoSuchKey:
            return None
        return answer["Body"].read(), str(answer["ETag"])
    path = Path(local_path(uri))
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        revision = json.loads(data).get("revision", 0)
    except (ValueError, AttributeError):
        revision = "unreadable"
    return data, f"revision {revision}"


@contextlib.contextmanager
def _local_lock(path: Path) -> Iterator[None]:
    """An exclusive lock beside a local journal for one read-compare-write (processes on this host)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # Never through a link (O_NOFOLLOW): opening with O_CREAT would create whatever file a dangling one names.
    fd = os.open(path.with_name(f".{path.name}.lock"), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def write_if_unchanged(uri: str, data: bytes, expected: str | None) -> str:
    """Writes the journal only if nobody wrote it since ``expected`` (the token read; None: there must be no
    journal yet), atomically: a local lock around read-compare-write, or S3's conditional PUT (``If-Match`` /
    ``If-None-Match``). Returns the new token; raises :class:`JournalConflict` otherwise."""
    if urlparse(uri).scheme in ("s3", "s3a"):
        bucket, key = split_s3_uri(uri)
        client = s3_client()
        condition = {"IfMatch": expected} if expected else {"IfNoneMatch": "*"}
        try:
            answer = client.put_object(Bucket=bucket, Key=key, Body=data, **condition)
        except client.exceptions.ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in ("PreconditionFailed", "ConditionalRequestConflict", "NoSuchKey", "412", "409"):
                raise JournalConflict(f"{uri}: written by another process meanwhile") from None
            raise
        return str(answer["ETag"])
    path = Path(local_path(uri))
    with _local_lock(path):
        current = _read_versioned(uri)
        if (current[1] if current else None) != expected:
            raise JournalConflict(f"{uri}: written by another process meanwhile")
        write_durably(uri, data)
    return f"revision {json.loads(data).get('revision', 0)}"


def journal_uri(savepoint_base: str, deployment: str) -> str:
    return f"{savepoint_base.rstrip('/')}/{JOURNAL_DIR}/{safe_name(deployment)}.json"


_process_start = process_start


def this_owner(actor: str, run: dict[str, Any] | None = None) -> dict[str, Any]:
    """Who writes the journal now: the host, the process (and its start time) and what it does; ``run``: the
    orchestrator's run it works for (dag_id, run_id, task_id), which owns the upgrade across its processes (see
    :mod:`flinkstate.upgrades.ownership`)."""
    return {"host": socket.gethostname(), "pid": os.getpid(), "pid_start": _process_start(os.getpid()),
            "actor": actor, "run": run}


class UpgradeJournal:
    """The journal of one deployment's last upgrade (a JSON document, rewritten whole at each step)."""

    #: The orchestrator's run this process writes for (set by :meth:`start` and :meth:`claim`): recorded as the
    #: owner's ``run`` with each write. None: the process itself owns what it writes (a watchdog, the CLI).
    owner_run: dict[str, Any] | None = None

    def __init__(self, uri: str, data: dict[str, Any], token: str | None = None) -> None:
        #: ``token``: the version this process read (or last wrote); every save compares it with the stored one.
        self.uri, self.data, self.token = uri, data, token
        self.unsaved: list[str] = []  #: the writes that failed after :meth:`tolerate_write_failures`, for the alert
        self._writes_may_fail = False

    # ------------------------------------------------------------------ files

    @classmethod
    def start(cls, plan: dict[str, Any], actor: str, run: dict[str, Any] | None = None) -> UpgradeJournal:
        """A fresh journal for a planned run (phase PLANNED: nothing changed yet); replaces a finished one. ``run``:
        the orchestrator's run that owns it (see :meth:`claim`)."""
        uri = journal_uri(plan["savepoint_base"], plan["job_name"])
        data = {"journal_version": JOURNAL_VERSION, "deployment": plan["job_name"], "run_id": plan["run_id"],
                "run_dir": plan["run_dir"], "savepoint_base": plan["savepoint_base"], "old": plan["old"],
                "new": plan["new"], "old_job_id": plan["job_id"], "mode": plan.get("mode", "upgrade"),
                "allow_non_restored_state": bool(plan.get("allow_non_restored_state", False)),
                "flink_url": plan.get("flink_url"), "phase": Phase.PLANNED, "outcome": None, "stop_savepoint": None,
                "migrated_savepoint": None, "restore_path": None, "new_job_id": None, "rollback_job_id": None,
                "running": None, "running_again_at": None, "gate": None, "failures": [], "alert_sent": False,
                "history": []}
        if plan.get("flink_conn_id"):  # the Airflow connection of flink_url's cluster, for the registry
            data["flink_conn_id"] = plan["flink_conn_id"]
        if plan.get("new_flink_url") not in (None, "", plan.get("flink_url")):  # the new version on another cluster
            data["new_flink_url"] = plan["new_flink_url"]  # (flink_url: the old one's): recovery acts on each its own
            data["new_flink_conn_id"] = plan.get("new_flink_conn_id")
        previous = _read_versioned(uri)  # a finished journal is replaced, but only as it was read
        journal = cls(uri, data, previous[1] if previous else None)
        if previous:
            with contextlib.suppress(ValueError, AttributeError):
                data["revision"] = int(json.loads(previous[0]).get("revision", 0))
        journal.owner_run = run
        journal.advance(Phase.PLANNED, actor)
        return journal

    @classmethod
    def claim(cls, uri: str, run: dict[str, Any], actor: str, *, open_only: bool = True,
              tolerate_write_failures: bool = False) -> UpgradeJournal:
        """The fence before each step of an orchestrated run (``run``: dag_id, run_id, task_id): re-reads the
        journal and claims it with a compare-and-swap write, only while it is still this run's journal, last
        owned by this run, and (``open_only``) not closed. Otherwise raises :class:`RunTakenOver`, in one line
        naming who holds it: the caller must not stop, submit, cancel, publish or record anything."""
        journal = cls.held_by(uri, run, open_only=open_only)
        journal.owner_run, journal._writes_may_fail = run, tolerate_write_failures
        try:
            journal.touch(actor)
        except JournalConflict:
            raise RunTakenOver(f"{uri}: written by another actor while run {run.get('run_id')} claimed it") from None
        return journal

    @classmethod
    def held_by(cls, uri: str, run: dict[str, Any], *, open_only: bool = True) -> UpgradeJournal:
        """The journal, read, while it is still ``run``'s (its journal, last owned by it, and, ``open_only``, not
        closed); else :class:`RunTakenOver`. Writes nothing: the fence of a step that works for the run without
        owning it (the Spark migration's publish, inside the ``migrate`` task that claimed it)."""
        try:
            journal = cls.load(uri)
        except UpgradeError as exc:
            raise RunTakenOver(f"{exc}: run {run.get('run_id')} no longer owns it") from None
        data, owner = journal.data, journal.data.get("owner") or {}
        if data["run_id"] != run.get("run_id"):
            raise RunTakenOver(f"{uri}: now the journal of run {data['run_id']}, not of run {run.get('run_id')}")
        holder = owner.get("run")
        if not holder or holder.get("dag_id") != run.get("dag_id") or holder.get("run_id") != run.get("run_id"):
            closed = f", and closed it ({data.get('outcome')})" if journal.finished else ""
            raise RunTakenOver(f"{uri}: run {run.get('run_id')} was taken over by {owner.get('actor')} (pid "
                               f"{owner.get('pid')} on {owner.get('host')}) in phase {data['phase']}{closed}")
        if open_only and journal.finished:
            raise RunTakenOver(f"{uri}: run {run.get('run_id')} is already closed ({data.get('outcome')}, by "
                               f"{owner.get('actor')})")
        return journal

    @classmethod
    def load(cls, uri: str) -> UpgradeJournal:
        found = _read_versioned(uri)
        if found is None:
            raise UpgradeError(f"{uri}: no upgrade journal")
        try:
            data = json.loads(found[0])
        except ValueError as exc:
            raise UpgradeError(f"{uri}: not an upgrade journal ({exc})") from None
        if not isinstance(data, dict) or data.get("journal_version") != JOURNAL_VERSION:
            raise UpgradeError(f"{uri}: not an upgrade journal of version {JOURNAL_VERSION}")
        return cls(uri, data, found[1])

    @classmethod
    def for_deployment(cls, savepoint_base: str, deployment: str) -> UpgradeJournal | None:
        uri = journal_uri(savepoint_base, deployment)
        return cls.load(uri) if exists(uri) else None

    @classmethod
    def all(cls, savepoint_base: str) -> list[UpgradeJournal]:
        """Every deployment's journal under ``savepoint_base`` (local folder or ``s3://``)."""
        folder = f"{savepoint_base.rstrip('/')}/{JOURNAL_DIR}"
        if urlparse(folder).scheme in ("s3", "s3a"):
            bucket, prefix = split_s3_uri(folder)
            pages = s3_client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/")
            uris = [f"s3://{bucket}/{o['Key']}" for page in pages for o in page.get("Contents", [])
                    if o["Key"].endswith(".json")]
        else:
            path = Path(local_path(folder))
            uris = [str(p) for p in sorted(path.glob("*.json"))] if path.is_dir() else []
        return [cls.load(uri) for uri in uris]

    def save(self) -> None:
        """Writes the journal, durably, if nobody else wrote it since this process read it (else raises
        :class:`JournalConflict` and keeps what it had: two actors never both act on one run)."""
        if self._writes_may_fail:
            problem = write_with_retries(self._write)
            self.unsaved += [f"journal not written: {problem}"] if problem else []
        else:
            self._write()

    def _write(self) -> None:
        revision = int(self.data.get("revision", 0))
        self.data.update(updated_at=_now(), updated_epoch=time.time(), revision=revision + 1)
        try:
            self.token = write_if_unchanged(self.uri, (json.dumps(self.data, indent=2) + "\n").encode(), self.token)
        except BaseException:
            self.data["revision"] = revision  # the stored journal keeps its revision: the next write compares it
            raise

    def tolerate_write_failures(self) -> UpgradeJournal:
        """From now on a write that fails (a full disk) is retried, then noted in :attr:`unsaved`, not raised (but a
        :class:`JournalConflict`): for the rollback and the run's end, which only read the stop savepoint."""
        self._writes_may_fail = True
        return self

    # ------------------------------------------------------------------ state

    @property
    def phase(self) -> str:
        return str(self.data["phase"])

    @property
    def finished(self) -> bool:
        return self.phase == Phase.DONE

    def reached(self, phase: str) -> bool:
        """Whether the run ever entered ``phase``."""
        return any(step["phase"] == phase for step in self.data["history"])

    def entered_at(self, phase: str) -> float | None:
        times = [step["epoch"] for step in self.data["history"] if step["phase"] == phase]
        return times[0] if times else None

    def advance(self, phase: str, actor: str, **details: Any) -> None:
        """Records a phase (and its details: job ids, savepoint paths) durably, before the caller goes on."""
        self.data.update({k: v for k, v in details.items() if k in self.data})
        self.data["phase"] = phase
        self.data["owner"] = this_owner(actor, self.owner_run)
        self.data["history"].append({"phase": phase, "at": _now(), "epoch": time.time(), "actor": actor,
                                     **{k: v for k, v in details.items() if v is not None}})
        self.save()

    def touch(self, actor: str) -> None:
        """The process now working on the run (each task claims it when it starts)."""
        self.data["owner"] = this_owner(actor, self.owner_run)
        self.save()

    def note_failure(self, what: str) -> None:
        self.data["failures"].append(what)
        self.save()

    def finish(self, outcome: str, actor: str, *, running: dict[str, Any] | None, **details: Any) -> None:
        """Closes the journal: the outcome and what runs now (``running``: version label, job id; None: nothing)."""
        self.data["outcome"] = outcome
        self.data["running"] = running
        self.advance(Phase.DONE, actor, **details)

    def owner_alive(self, *, stale_after: float, probe: RunProbe | None = None) -> bool:
        """Whether the run's owner may still be working on it (see :meth:`liveness`)."""
        return self.liveness(stale_after=stale_after, probe=probe).alive

    def liveness(self, *, stale_after: float, probe: RunProbe | None = None) -> Liveness:
        """Whether the run's owner may still be working on it, and why: an orchestrated run as its orchestrator
        (``probe``) says, else by the journal's age; a process owner by its process (this host) or the journal's
        age (another host). See :mod:`flinkstate.upgrades.ownership`."""
        return owner_liveness(self.data, stale_after=stale_after, probe=probe)

    def durations(self) -> dict[str, float]:
        """Seconds per step, from the phases' times: stop, migrate (with its re-check), submit, restore (submit
        request to every subtask of the new job running, state restored; it holds submit), gate (the health gate's
        own time, after the job was back), rollback; and ``down``: from the stop request until every subtask of the
        job that runs now was RUNNING (``running_again_at``, Flink's own timestamps: see :meth:`note_running_again`).
        ``down`` is absent while nothing runs, and when that time is unknown (it is never stretched to the gate)."""
        def span(start: str, *ends: str) -> float | None:
            began = self.entered_at(start)
            ended = min((t for t in (self.entered_at(e) for e in ends) if t is not None), default=None)
            return round(ended - began, 1) if began is not None and ended is not None else None

        def since(start: str, ended: float | None) -> float | None:
            began = self.entered_at(start)
            return round(ended - began, 1) if began is not None and ended is not None else None

        running_again = self.data.get("running_again_at")
        # The re-check (VERIFIED) comes after the migration (MIGRATED): the migrate step ends with it where it ran.
        migrate = span(Phase.MIGRATING, Phase.VERIFIED)
        spans = {"stop": span(Phase.STOPPING, Phase.STOPPED),
                 "migrate": migrate if migrate is not None else span(Phase.MIGRATING, Phase.MIGRATED),
                 "submit": span(Phase.SUBMITTING, Phase.SUBMITTED),
                 "restore": since(Phase.SUBMITTING, running_again) if self.data.get("outcome") == Outcome.UPGRADED
                 else None,
                 "gate": span(Phase.GATING, Phase.GATE_PASSED), "rollback": span(Phase.ROLLING_BACK, Phase.DONE)}
        if self.reached(Phase.STOPPED) and self.data.get("running"):
            spans["down"] = since(Phase.STOPPING, running_again)
        return {k: v for k, v in spans.items() if v is not None}

    def note_running_again(self, client: FlinkRestClient, job_id: str) -> float | None:
        """Records when every subtask of ``job_id`` (the job the run leaves running) turned RUNNING, from Flink's
        own timestamps (:meth:`FlinkRestClient.all_subtasks_running_at`): the end of the downtime. Not saved here:
        the caller's next phase writes it. None (and no time recorded: an earlier job's would be wrong) while a
        subtask is not RUNNING, or when Flink does not answer: a figure never fails the step that measures it."""
        try:
            at = client.all_subtasks_running_at(job_id)
        except FlinkStateError:
            at = None
        self.data["running_again_at"] = at
        return at

    def restore_command(self) -> str:
        """The command that restores production from this journal (what an alert tells a person to run)."""
        url = self.data.get("flink_url") or "<flink REST URL>"
        return (f"flinkstate upgrade recover --savepoint-base {self.data['savepoint_base']} --flink-url {url} "
                f"--deployment {self.data['deployment']} --force")
