"""A deployment's savepoint history and its retention.

Every upgrade run leaves a folder ``<savepoint_base>/<deployment>/<run>/`` (names as :func:`safe_name` maps them):
``run.json`` (the plan, each stage, the check's outcome and verdict, the run's outcome), and the savepoints the run
took or wrote, ``preflight/savepoint-*``, ``stop/savepoint-*`` and ``migrated/savepoint``. The history is read from
those folders, oldest run first, so it holds every run whatever the registry says now; the registry
(``deployments.json``) says which savepoint the running job started from, the journal which run is unfinished.

Retention keeps the savepoints of the newest ``keep`` runs and never removes one that is still needed: the one the
running job was restored from (the registry's), nor any of an unfinished run (its stop savepoint is the rollback
point). A removed savepoint's run keeps its ``run.json`` and reports, so the history still shows the run."""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from flinkstate.errors import FlinkStateError
from flinkstate.storage.locations import local_path
from flinkstate.storage.s3 import s3_client, split_s3_uri
from flinkstate.storage.uri import read_file
from flinkstate.upgrades.journal import UpgradeJournal, same_path
from flinkstate.upgrades.names import safe_name
from flinkstate.upgrades.registry import DeploymentRegistry

#: The folders of a run that hold savepoints, and what each savepoint is.
SAVEPOINT_KINDS = ("preflight", "stop", "migrated")


@dataclass(frozen=True)
class RunSavepoint:
    kind: str  # preflight, stop or migrated
    location: str
    #: Why retention keeps it whatever ``keep`` says (empty: it may be removed once the run is old enough).
    needed: str = ""


@dataclass(frozen=True)
class RunHistory:
    run_id: str
    run_dir: str
    planned_at: str
    stage: str
    outcome: str | None
    check_outcome: str | None
    verdict: str | None
    version: str  # the new version's jar
    savepoints: list[RunSavepoint] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class HistoryError(FlinkStateError):
    """A run folder that cannot be read as one."""


def deployment_history(savepoint_base: str, deployment: str) -> list[RunHistory]:
    """Every run of ``deployment`` under ``savepoint_base`` (local or ``s3://``), oldest first."""
    folder = f"{savepoint_base.rstrip('/')}/{safe_name(deployment)}"
    running = (DeploymentRegistry(savepoint_base).load().get(deployment) or {}).get("savepoint")
    journal = UpgradeJournal.for_deployment(savepoint_base, deployment)
    unfinished = journal.data["run_id"] if journal is not None and not journal.finished else None
    runs = []
    for run_dir, names in _run_folders(folder).items():
        record = read_run_record(f"{run_dir}/run.json")
        plan = record.get("plan") or {}
        events = record.get("events") or []
        checked: dict[str, Any] = next((e for e in events if e.get("stage") == "checked"), {})
        run_id = str(plan.get("run_id") or run_dir.rsplit("/", 1)[-1])
        savepoints = []
        for name in sorted(names):
            kind = name.split("/", 1)[0]
            location = f"{run_dir}/{name}"
            needed = ("the running job was restored from it" if same_path(location, running) else
                      "its run is unfinished" if run_id == unfinished else "")
            savepoints.append(RunSavepoint(kind, location, needed))
        runs.append(RunHistory(run_id, run_dir, str(events[0].get("at", "")) if events else "",
                               str(record.get("stage", "")), record.get("outcome"), checked.get("check_outcome"),
                               checked.get("verdict"), str((plan.get("new") or {}).get("jar", "")), savepoints))
    return sorted(runs, key=lambda r: (r.planned_at, r.run_id))


def retention(history: list[RunHistory], keep: int) -> list[RunSavepoint]:
    """The savepoints to remove to keep those of the newest ``keep`` runs (and every one still needed)."""
    if keep < 1:
        raise HistoryError(f"--keep {keep}: keep at least the newest run's savepoints")
    older = history[:-keep]
    return [s for run in older for s in run.savepoints if not s.needed]


def remove_savepoint(location: str) -> None:
    """Removes one savepoint folder (local, never through a symbolic link, or every object under an ``s3://``
    prefix)."""
    if urlparse(location).scheme in ("s3", "s3a"):
        bucket, prefix = split_s3_uri(location)
        client = s3_client()
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/"):
            keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
            if keys:
                client.delete_objects(Bucket=bucket, Delete={"Objects": keys})
        return
    path = Path(local_path(location))
    if path.is_symlink() or not path.is_dir():
        raise HistoryError(f"{location}: not a savepoint folder (a link or a file): left as it is")
    shutil.rmtree(path)


def _run_folders(folder: str) -> dict[str, list[str]]:
    """run folder -> the savepoints in it, as ``<kind>`` or ``<kind>/<name>`` (those with a ``_metadata``)."""
    found: dict[str, list[str]] = {}
    if urlparse(folder).scheme in ("s3", "s3a"):
        bucket, prefix = split_s3_uri(folder)
        recorded = set()
        pages = s3_client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/")
        for key in (o["Key"] for page in pages for o in page.get("Contents", [])):
            parts = key[len(prefix) + 1:].split("/")
            run_dir = f"s3://{bucket}/{prefix}/{parts[0]}"
            if parts[1:] == ["run.json"]:
                recorded.add(run_dir)
            elif len(parts) >= 3 and parts[1] in SAVEPOINT_KINDS and parts[-1] == "_metadata":
                found.setdefault(run_dir, []).append("/".join(parts[1:-1]))
        return {run: sorted(found.get(run, [])) for run in sorted(recorded)}
    root = Path(local_path(folder))
    if not root.is_dir():
        return {}
    for run in sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink()):
        if not (run / "run.json").is_file():
            continue
        names = [str(m.parent.relative_to(run)) for kind in SAVEPOINT_KINDS
                 for m in (run / kind).glob("**/_metadata") if not any(p.is_symlink() for p in m.parents)]
        found[str(run)] = names
    return found


def read_run_record(uri: str) -> dict[str, Any]:
    """An upgrade run's ``run.json`` (local or ``s3://``); a file that is not one is a :class:`HistoryError` naming
    it."""
    try:
        record = json.loads(read_file(uri))
    except ValueError as exc:
        raise HistoryError(f"{uri}: not a run record ({exc})") from None
    if not isinstance(record, dict):
        raise HistoryError(f"{uri}: not a run record (a JSON object is expected)")
    return record


__all__ = ["HistoryError", "RunHistory", "RunSavepoint", "deployment_history", "read_run_record", "remove_savepoint",
           "retention"]
