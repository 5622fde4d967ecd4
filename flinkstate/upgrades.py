"""Crash-safe upgrades of a running Flink job: the deployment registry, the persisted upgrade journal, and recovery.

Modelled on the Flink Kubernetes Operator's persisted ``UPGRADING`` phase: before and after each irreversible step
(stop, migrate, submit, gate, rollback) the upgrade records in its journal, atomically and durably, the phase, the
job ids and the savepoint paths. Whatever process dies, the state of production can be rebuilt from the journal and
Flink, and :func:`recover` acts on it: it restores the old version from the stop savepoint, or finishes the upgrade
when the migrated savepoint was verified. Used by the Airflow DAGs (``plugins/flinkstate_airflow``) and by
``flinkstate upgrade recover``; imports neither Airflow nor Spark.

Layout beside the savepoints (``savepoint_base`` is a local folder or ``s3://bucket/prefix``)::

    <savepoint_base>/deployments.json            what runs: deployment -> version, job id, savepoint it started from
    <savepoint_base>/journal/<deployment>.json   the last upgrade of each deployment: phase, job ids, savepoints
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from flinkstate.engine.rest import TERMINAL_STATES, FlinkJobFailed, FlinkRestClient, FlinkRestError
from flinkstate.errors import FlinkStateError
from flinkstate.storage.s3 import s3_client, split_s3_uri
from flinkstate.storage.uri import exists, read_file, write_file

REGISTRY_FILE = "deployments.json"
JOURNAL_DIR = "journal"
JOURNAL_VERSION = 1

# Phases, in the order an upgrade passes them. A journal whose phase is not DONE belongs to a run that is either
# still working or died: recovery tells the two apart by the owner (host, pid) and the time of the last write.
PLANNED, STOPPING, STOPPED, MIGRATING, MIGRATED, VERIFIED = "planned", "stopping", "stopped", "migrating", \
    "migrated", "verified"
SUBMITTING, SUBMITTED, GATING, GATE_PASSED, ROLLING_BACK, DONE = "submitting", "submitted", "gating", \
    "gate_passed", "rolling_back", "done"
#: Outcomes of a DONE journal. UNCHANGED: nothing was stopped; DOWN: the job is not running and a person must act.
UPGRADED, CHECKED, REFUSED, UNCHANGED, ROLLED_BACK, DOWN = "upgraded", "checked", "refused", "unchanged", \
    "rolled back", "DOWN"
#: Phases after which the old job may be stopped: a rollback (or finishing the upgrade) is needed.
AFTER_STOP = (STOPPED, MIGRATING, MIGRATED, VERIFIED, SUBMITTING, SUBMITTED, GATING, GATE_PASSED, ROLLING_BACK)


class UpgradeError(FlinkStateError):
    """The upgrade cannot go on; the message says why, in one line."""


class JournalConflict(UpgradeError):
    """Another process wrote the journal since this one read it (a watchdog took the run over, or the run came back
    while a watchdog acted): this process must not act on what it read."""


@dataclass(frozen=True)
class JobVersion:
    """Everything needed to (re)start one version of a job: rollback never guesses."""

    jar: str
    manifest: str
    entry_class: str | None = None
    program_args: list[str] = field(default_factory=list)
    parallelism: int | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str) -> JobVersion:
        missing = [k for k in ("jar", "manifest") if not data.get(k)]
        if missing:
            raise UpgradeError(f"{where}: missing {', '.join(missing)}")
        args = data.get("program_args") or []
        if isinstance(args, str):
            args = args.split()
        parallelism = data.get("parallelism")
        return cls(str(data["jar"]), str(data["manifest"]), data.get("entry_class") or None, [str(a) for a in args],
                   int(parallelism) if parallelism not in (None, "") else None)

    def submit(self, client: FlinkRestClient, savepoint: str, *, allow_non_restored_state: bool = False) -> str:
        return client.submit_jar(self.jar, entry_class=self.entry_class, program_args=self.program_args,
                                 parallelism=self.parallelism, savepoint_path=savepoint,
                                 allow_non_restored_state=allow_non_restored_state)


class DeploymentRegistry:
    """``deployments.json`` beside the savepoints: deployment name -> the version running, its job id, and the
    savepoint it started from. Written whole and durably (see :func:`write_durably`)."""

    def __init__(self, savepoint_base: str) -> None:
        self.uri = f"{savepoint_base.rstrip('/')}/{REGISTRY_FILE}"

    def load(self) -> dict[str, Any]:
        if not exists(self.uri):
            return {}
        try:
            data = json.loads(read_file(self.uri))
        except ValueError as exc:
            raise UpgradeError(f"{self.uri}: not a deployment registry ({exc})") from None
        return data if isinstance(data, dict) else {}

    def current(self, job_name: str) -> JobVersion | None:
        entry = self.load().get(job_name)
        return JobVersion.from_dict(entry["version"], f"{self.uri}: {job_name}") if entry else None

    def record(self, job_name: str, version: JobVersion, job_id: str, savepoint: str | None, run_id: str) -> None:
        data = self.load()
        data[job_name] = {"version": asdict(version), "job_id": job_id, "savepoint": savepoint, "run_id": run_id,
                          "deployed_at": _now()}
        write_durably(self.uri, (json.dumps(data, indent=2, sort_keys=True) + "\n").encode())


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def safe_name(text: str) -> str:
    """A run id or job name as one path segment."""
    import re

    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "run"


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
    go to a temporary file beside, are fsync'ed, renamed over the target, and the folder is fsync'ed (so the rename
    itself survives a power loss); ``s3://`` objects are one PUT, which S3 applies whole."""
    if urlparse(uri).scheme in ("s3", "s3a"):
        return write_file(uri, data)
    path = Path(local_path(uri))
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(partial, path)
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)
    return str(path)


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
    fd = os.open(path.with_name(f".{path.name}.lock"), os.O_RDWR | os.O_CREAT, 0o644)
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


def _process_start(pid: int) -> str | None:
    """The start time of a process (Linux: /proc/<pid>/stat field 22), so that a reused pid is not taken for ours."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def this_owner(actor: str) -> dict[str, Any]:
    """Who writes the journal now: the host, the process (and its start time) and what it does."""
    return {"host": socket.gethostname(), "pid": os.getpid(), "pid_start": _process_start(os.getpid()),
            "actor": actor}


class UpgradeJournal:
    """The journal of one deployment's last upgrade (a JSON document, rewritten whole at each step)."""

    def __init__(self, uri: str, data: dict[str, Any], token: str | None = None) -> None:
        #: ``token``: the version this process read (or last wrote); every save compares it with the stored one.
        self.uri, self.data, self.token = uri, data, token

    # ------------------------------------------------------------------ files

    @classmethod
    def start(cls, plan: dict[str, Any], actor: str) -> UpgradeJournal:
        """A fresh journal for a planned run (phase PLANNED: nothing changed yet); replaces a finished one."""
        uri = journal_uri(plan["savepoint_base"], plan["job_name"])
        data = {"journal_version": JOURNAL_VERSION, "deployment": plan["job_name"], "run_id": plan["run_id"],
                "run_dir": plan["run_dir"], "savepoint_base": plan["savepoint_base"], "old": plan["old"],
                "new": plan["new"], "old_job_id": plan["job_id"], "mode": plan.get("mode", "upgrade"),
                "allow_non_restored_state": bool(plan.get("allow_non_restored_state", False)),
                "flink_url": plan.get("flink_url"), "phase": PLANNED, "outcome": None, "stop_savepoint": None,
                "migrated_savepoint": None, "restore_path": None, "new_job_id": None, "rollback_job_id": None,
                "running": None, "gate": None, "failures": [], "alert_sent": False, "history": []}
        previous = _read_versioned(uri)  # a finished journal is replaced, but only as it was read
        journal = cls(uri, data, previous[1] if previous else None)
        if previous:
            with contextlib.suppress(ValueError, AttributeError):
                data["revision"] = int(json.loads(previous[0]).get("revision", 0))
        journal.advance(PLANNED, actor)
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
        revision = int(self.data.get("revision", 0))
        self.data.update(updated_at=_now(), updated_epoch=time.time(), revision=revision + 1)
        try:
            self.token = write_if_unchanged(self.uri, (json.dumps(self.data, indent=2) + "\n").encode(), self.token)
        except JournalConflict:
            self.data["revision"] = revision
            raise

    # ------------------------------------------------------------------ state

    @property
    def phase(self) -> str:
        return str(self.data["phase"])

    @property
    def finished(self) -> bool:
        return self.phase == DONE

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
        self.data["owner"] = this_owner(actor)
        self.data["history"].append({"phase": phase, "at": _now(), "epoch": time.time(), "actor": actor,
                                     **{k: v for k, v in details.items() if v is not None}})
        self.save()

    def touch(self, actor: str) -> None:
        """The process now working on the run (each task claims it when it starts)."""
        self.data["owner"] = this_owner(actor)
        self.save()

    def note_failure(self, what: str) -> None:
        self.data["failures"].append(what)
        self.save()

    def finish(self, outcome: str, actor: str, *, running: dict[str, Any] | None, **details: Any) -> None:
        """Closes the journal: the outcome and what runs now (``running``: version label, job id; None: nothing)."""
        self.data["outcome"] = outcome
        self.data["running"] = running
        self.advance(DONE, actor, **details)

    def owner_alive(self, *, stale_after: float) -> bool:
        """Whether the process that last wrote the journal may still be working on it. On this host: the process
        (same pid and start time) exists. Elsewhere it cannot be asked, so the last write must be recent."""
        owner = self.data.get("owner") or {}
        age = time.time() - float(self.data.get("updated_epoch") or 0)
        if owner.get("host") == socket.gethostname() and owner.get("pid"):
            start = _process_start(int(owner["pid"]))
            if start is None:
                return os.path.exists(f"/proc/{owner['pid']}") if os.path.isdir("/proc") else age < stale_after
            return owner.get("pid_start") in (None, start)
        return age < stale_after

    def durations(self) -> dict[str, float]:
        """Seconds per step, from the phases' times: stop, migrate (with its re-check), submit, gate, rollback, and
        ``down``: from the stop until a job ran again (or until now when none does)."""
        def span(start: str, *ends: str) -> float | None:
            began = self.entered_at(start)
            ended = min((t for t in (self.entered_at(e) for e in ends) if t is not None), default=None)
            return round(ended - began, 1) if began is not None and ended is not None else None

        spans = {"stop": span(STOPPING, STOPPED), "migrate": span(MIGRATING, VERIFIED, MIGRATED),
                 "submit": span(SUBMITTING, SUBMITTED), "gate": span(GATING, GATE_PASSED),
                 "rollback": span(ROLLING_BACK, DONE)}
        if self.reached(STOPPED):
            running_again = GATE_PASSED if self.data.get("outcome") == UPGRADED else DONE
            spans["down"] = span(STOPPING, running_again) if self.data.get("running") else None
        return {k: v for k, v in spans.items() if v is not None}

    def restore_command(self) -> str:
        """The command that restores production from this journal (what an alert tells a person to run)."""
        url = self.data.get("flink_url") or "<flink REST URL>"
        return (f"flinkstate upgrade recover --savepoint-base {self.data['savepoint_base']} --flink-url {url} "
                f"--deployment {self.data['deployment']} --force")


# ---------------------------------------------------------------------- recovery


@dataclass
class Recovery:
    """What :func:`recover` did, in one line for an alert, and what runs afterwards."""

    outcome: str
    account: str
    running: dict[str, Any] | None


def find_stop_savepoint(journal: UpgradeJournal) -> str | None:
    """The stop savepoint: as recorded, else the newest complete one in the run's ``stop/`` folder (a run killed
    between Flink's stop and the journal's write leaves it only there)."""
    if journal.data.get("stop_savepoint"):
        return str(journal.data["stop_savepoint"])
    stop = f"{journal.data['run_dir']}/stop"
    if urlparse(stop).scheme in ("s3", "s3a"):
        bucket, prefix = split_s3_uri(stop)
        pages = s3_client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/")
        found = sorted({o["Key"].rsplit("/", 1)[0] for page in pages for o in page.get("Contents", [])
                        if o["Key"].endswith("/_metadata")})
        return f"s3://{bucket}/{found[-1]}" if found else None
    folder = Path(local_path(stop))
    found = sorted((p for p in folder.glob("savepoint-*") if (p / "_metadata").is_file()),
                   key=lambda p: p.stat().st_mtime) if folder.is_dir() else []
    return str(found[-1]) if found else None


def _state(client: FlinkRestClient, job_id: str | None) -> str | None:
    if not job_id:
        return None
    try:
        return client.job_state(job_id)
    except FlinkRestError as exc:
        if exc.status == 404:
            return None
        raise


def _jobs_restored_from(client: FlinkRestClient, path: str, since_epoch: float) -> list[str]:
    """Active jobs started since ``since_epoch`` that restored from ``path``: a job a run submitted before it could
    record the job id."""
    found = []
    for job in client.list_jobs():
        if job.get("state") in TERMINAL_STATES or job.get("start-time", 0) < since_epoch * 1000 - 5000:
            continue
        try:
            if same_path(client.checkpoints(job["jid"]).restored_from, path):
                found.append(str(job["jid"]))
        except FlinkRestError:
            continue
    return found


def _healthy(client: FlinkRestClient, job_id: str, *, checkpoints: int, timeout: float) -> None:
    """Waits until the job runs with every task up and ``checkpoints`` checkpoints completed since (raises)."""
    client.wait_until_running(job_id, timeout=timeout)
    deadline = time.monotonic() + timeout
    while client.checkpoints(job_id).completed < checkpoints:
        state = client.job_state(job_id)
        if state != "RUNNING" or client.num_restarts(job_id) > 0:
            raise FlinkJobFailed(f"job {job_id} is {state} (restarted {client.num_restarts(job_id)} times) before "
                                 f"{checkpoints} checkpoints completed")
        if time.monotonic() > deadline:
            raise FlinkJobFailed(f"job {job_id}: fewer than {checkpoints} checkpoints within {timeout:.0f} s")
        time.sleep(1)


def restore_old(client: FlinkRestClient, journal: UpgradeJournal, actor: str, *, timeout: float = 300,
                reason: str = "") -> Recovery:
    """Puts the old version back: cancels the new job if one runs, restarts the old version from the stop
    savepoint (waiting until every task runs, restored from exactly that path), records it in the registry and
    closes the journal. When the old job was never stopped it is left as it is. Never raises for Flink's answers:
    a failed restore closes the journal with outcome DOWN and says so."""
    data, steps = journal.data, []
    old = JobVersion(**data["old"])
    try:
        old_state = _state(client, data["old_job_id"])
        if old_state == "RUNNING" and not data.get("rollback_job_id"):
            # Nothing was stopped (the stop never reached Flink, or failed): production is as it was.
            journal.finish(UNCHANGED, actor, running={"version": "old", "job_id": data["old_job_id"]})
            return Recovery(UNCHANGED, f"nothing was stopped: the old version runs as job {data['old_job_id']}",
                            journal.data["running"])
        stop = find_stop_savepoint(journal)
        if not stop:
            raise UpgradeError(f"the old job {data['old_job_id']} is {old_state or 'gone'} and no stop savepoint "
                               f"is recorded or found in {data['run_dir']}/stop")
        journal.advance(ROLLING_BACK, actor, stop_savepoint=stop)
        new_ids = [data["new_job_id"]] if data.get("new_job_id") else []
        if data.get("restore_path") and journal.entered_at(SUBMITTING):
            new_ids += _jobs_restored_from(client, data["restore_path"], journal.entered_at(SUBMITTING) or 0)
        for job_id in dict.fromkeys(new_ids):
            if _state(client, job_id) not in (None, *TERMINAL_STATES):
                client.cancel(job_id, timeout=timeout)
                steps.append(f"cancelled the new job {job_id}")
        # A rollback that an earlier attempt already started: use it when it runs from the stop savepoint.
        previous = data.get("rollback_job_id")
        if previous and _state(client, previous) == "RUNNING" and \
                same_path(client.checkpoints(previous).restored_from, stop):
            job_id = previous
        else:
            if previous and _state(client, previous) not in (None, *TERMINAL_STATES):
                client.cancel(previous, timeout=timeout)
            job_id = old.submit(client, local_path(stop), allow_non_restored_state=False)
            journal.advance(ROLLING_BACK, actor, rollback_job_id=job_id)
            client.wait_until_running(job_id, timeout=timeout)
        restored = client.checkpoints(job_id).restored_from
        if not same_path(restored, stop):
            raise UpgradeError(f"job {job_id} restored from {restored!r}, not from the stop savepoint {stop}")
        DeploymentRegistry(data["savepoint_base"]).record(data["deployment"], old, job_id, local_path(stop),
                                                          data["run_id"])
        steps.append(f"restarted the old version ({old.jar}) as job {job_id} from {local_path(stop)}")
        journal.finish(ROLLED_BACK, actor, running={"version": "old", "job_id": job_id}, rollback_job_id=job_id)
        return Recovery(ROLLED_BACK, "; ".join(steps), journal.data["running"])
    except JournalConflict:
        raise  # another actor owns the run now: do nothing more (in particular, cancel nothing)
    except (FlinkStateError, OSError) as exc:
        why = f"rollback failed: {exc}"
        # A rollback job that could not run (say, waiting for slots no TaskManager offers) is cancelled, so that it
        # cannot come up later beside the restore a person starts from the alert.
        stuck = data.get("rollback_job_id")
        with contextlib.suppress(FlinkStateError, OSError):
            if stuck and _state(client, stuck) not in (None, *TERMINAL_STATES):
                client.cancel(stuck, timeout=min(timeout, 60))
                steps.append(f"cancelled the rollback job {stuck}, which did not run")
        if reason:
            why = f"{reason}; {why}"
        journal.data["failures"].append(why)
        journal.finish(DOWN, actor, running=None)
        return Recovery(DOWN, "; ".join([*steps, why]), None)


def finish_upgrade(client: FlinkRestClient, journal: UpgradeJournal, actor: str, *, checkpoints: int = 2,
                   timeout: float = 300) -> Recovery:
    """Completes an upgrade whose migrated (or as-is) savepoint was verified before the run died: the new version
    from that savepoint (reusing the job the run started, if it runs from it), health-checked, recorded. Falls
    back to :func:`restore_old` when the new version cannot be made healthy."""
    data = journal.data
    new = JobVersion(**data["new"])
    path = str(data.get("restore_path") or data.get("migrated_savepoint"))
    try:
        job_id = data.get("new_job_id")
        if not job_id and journal.entered_at(SUBMITTING):
            candidates = _jobs_restored_from(client, path, journal.entered_at(SUBMITTING) or 0)
            job_id = candidates[0] if candidates else None
        if not job_id or _state(client, job_id) in (None, *TERMINAL_STATES):
            journal.advance(SUBMITTING, actor, restore_path=path)
            job_id = new.submit(client, local_path(path),
                                allow_non_restored_state=bool(data.get("allow_non_restored_state")))
            journal.advance(SUBMITTED, actor, new_job_id=job_id)
        journal.advance(GATING, actor, new_job_id=job_id)
        _healthy(client, job_id, checkpoints=checkpoints, timeout=timeout)
        if not same_path(client.checkpoints(job_id).restored_from, path):
            raise UpgradeError(f"job {job_id} did not restore from {path}")
        journal.advance(GATE_PASSED, actor)
    except JournalConflict:
        raise  # another actor owns the run now: do nothing more
    except FlinkStateError as exc:
        journal.data["failures"].append(f"finishing the upgrade failed: {exc}")
        return restore_old(client, journal, actor, timeout=timeout, reason=f"finishing the upgrade failed: {exc}")
    DeploymentRegistry(data["savepoint_base"]).record(data["deployment"], new, job_id, local_path(path),
                                                      data["run_id"])
    journal.finish(UPGRADED, actor, running={"version": "new", "job_id": job_id})
    return Recovery(UPGRADED, f"finished the upgrade: the new version ({new.jar}) runs as job {job_id} from "
                              f"{local_path(path)}", journal.data["running"])


def recover(client: FlinkRestClient, journal: UpgradeJournal, actor: str, *, timeout: float = 300) -> Recovery:
    """Acts on an unfinished journal whose run is gone: the decision the run would have made.

    - nothing stopped yet (PLANNED, or STOPPING while the old job still runs): closes it, nothing to do;
    - the upgrade passed its gate: records the new version;
    - the restore path was verified (VERIFIED, or later with a new job): finishes the upgrade;
    - anything else after the stop: restores the old version from the stop savepoint.
    """
    # Claim the run before asking Flink anything: a compare-and-swap write, so that when the run (or another
    # watchdog) wrote the journal after it was read, this actor learns it here and does nothing.
    journal.touch(actor)
    if journal.finished and journal.data.get("outcome") == DOWN:
        # Production is down since a rollback failed (e.g. no TaskManager to run it): try the rollback again.
        return restore_old(client, journal, actor, timeout=timeout)
    if journal.finished:
        running = journal.data.get("running")
        return Recovery(str(journal.data["outcome"]), "already finished", running)
    phase = journal.phase
    if phase == PLANNED:
        journal.finish(UNCHANGED, actor, running={"version": "old", "job_id": journal.data["old_job_id"]})
        return Recovery(UNCHANGED, "the run died before it stopped anything", journal.data["running"])
    if phase == GATE_PASSED:
        data = journal.data
        DeploymentRegistry(data["savepoint_base"]).record(
            data["deployment"], JobVersion(**data["new"]), data["new_job_id"], data["restore_path"], data["run_id"])
        journal.finish(UPGRADED, actor, running={"version": "new", "job_id": data["new_job_id"]})
        return Recovery(UPGRADED, f"the new job {data['new_job_id']} had passed its gate: recorded",
                        journal.data["running"])
    if phase != ROLLING_BACK and journal.reached(VERIFIED) and journal.data.get("restore_path"):
        return finish_upgrade(client, journal, actor, timeout=timeout)
    return restore_old(client, journal, actor, timeout=timeout)


def describe_outcome(journal: UpgradeJournal) -> str:
    """One line on what runs now, for alerts: loud when nothing does."""
    data, running = journal.data, journal.data.get("running")
    if running:
        version = JobVersion(**data[running["version"]])
        return f"RUNNING now: the {running['version']} version ({Path(version.jar).name}) as job {running['job_id']}"
    stop = find_stop_savepoint(journal)
    return (f"PRODUCTION IS DOWN: {data['deployment']} is not running. Restore it from the stop savepoint "
            f"{local_path(stop) if stop else '(none found in ' + data['run_dir'] + '/stop)'} with: "
            f"{journal.restore_command()}")


# ---------------------------------------------------------------------- the watchdog


#: Seconds a dead owner's journal is left alone, for the gap between one task's end and the next one's start.
DEFAULT_GRACE = 60.0


def dead_runs(savepoint_base: str, *, grace: float = DEFAULT_GRACE, stale_after: float = 2 * 3600,
              deployment: str | None = None) -> list[UpgradeJournal]:
    """Unfinished journals whose run is gone: the owner process is dead (same host) or silent for ``stale_after``
    (another host), and nothing was written for ``grace`` seconds."""
    found = []
    for journal in UpgradeJournal.all(savepoint_base):
        if journal.finished or (deployment and journal.data["deployment"] != deployment):
            continue
        quiet = time.time() - float(journal.data.get("updated_epoch") or 0)
        if quiet >= grace and not journal.owner_alive(stale_after=stale_after):
            found.append(journal)
    return found


def recovery_alert(journal: UpgradeJournal, died_in: str, result: Recovery, actor: str) -> str:
    """The one alert for a run recovered by the watchdog (or the CLI): what died, what was done, what runs now."""
    data = journal.data
    if died_in == DONE:  # a run that ended with production DOWN (its rollback failed): the rollback was retried
        head = (f"Flink upgrade of {data['deployment']}: run {data['run_id']} had left production DOWN (its rollback "
                f"failed). The {actor} retried the rollback: {result.outcome}: {result.account}.")
    else:
        head = (f"Flink upgrade of {data['deployment']}: run {data['run_id']} DIED in phase {died_in} (its process "
                f"is gone, so it could not finish or alert). The {actor} acted: {result.outcome}: {result.account}.")
    failures = f" Failures recorded before: {'; '.join(data['failures'])}." if data.get("failures") else ""
    return (f"{head}{failures} {describe_outcome(journal)}.\nRun record: {data['run_dir']}/run.json; journal: "
            f"{journal.uri}.")


def sweep(savepoint_base: str, client: FlinkRestClient, actor: str, *, grace: float = DEFAULT_GRACE,
          stale_after: float = 2 * 3600, deployment: str | None = None, force: bool = False,
          timeout: float = 300) -> list[tuple[UpgradeJournal, Recovery, str]]:
    """Recovers every dead run's journal under ``savepoint_base`` (``force``: every unfinished one, alive owner or
    not: for a person who knows the run is gone). Returns (journal, what was done, the alert) per run."""
    if force:  # also the runs that ended with production DOWN: the alert's command retries their rollback
        journals = [j for j in UpgradeJournal.all(savepoint_base)
                    if (not j.finished or j.data.get("outcome") == DOWN)
                    and (not deployment or j.data["deployment"] == deployment)]
    else:
        journals = dead_runs(savepoint_base, grace=grace, stale_after=stale_after, deployment=deployment)
    done = []
    for journal in journals:
        died_in = journal.phase
        try:
            result = recover(client, journal, actor, timeout=timeout)
            alert = recovery_alert(journal, died_in, result, actor)
            journal.data["alert_sent"] = True
            journal.save()
        except JournalConflict:
            continue  # another actor (the run itself, or a second watchdog) wrote it meanwhile: theirs to finish
        done.append((journal, result, alert))
    return done
