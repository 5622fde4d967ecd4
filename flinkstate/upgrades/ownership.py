"""Who owns an upgrade run, and whether that owner still lives.

The owner of a run is what outlives its steps: the orchestrator's run (an Airflow DAG run, whose tasks are each a
process of their own, with gaps of any length between them), or for a run without one the process itself. A
journal's ``owner`` records the process that wrote last (host, pid and its start time, what it did) and, for an
orchestrated run, ``run``: the orchestrator's identity of the run (``dag_id``, ``run_id``) and the task writing.

Liveness is asked of whoever can know: a ``probe`` from the orchestrator (the Airflow plugin asks Airflow for the DAG
run's state and its task's) decides for an orchestrated run; without one (``flinkstate upgrade recover``, which
cannot ask Airflow) such a run counts as alive until it has written nothing for ``stale_after`` seconds, since a dead
task process proves nothing while the DAG run goes on. A plain process owner is alive while its process is (same
host; a zombie is dead), or, on another host, until ``stale_after``. Used by the journal (:meth:`owner_alive`), the
watchdog's sweep and the fence before each irreversible step (:meth:`UpgradeJournal.claim`)."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Liveness:
    """Whether a run's owner may still be working on it, and why, in one line (for logs and ``upgrade recover``)."""

    alive: bool
    why: str


#: The orchestrator's word on the owner of a journal (its data, whose ``owner`` has a ``run``): its verdict, or None
#: when it cannot tell (then the journal's age decides).
RunProbe = Callable[[dict[str, Any]], "Liveness | None"]


def process_start(pid: int) -> str | None:
    """The start time of a process (Linux: /proc/<pid>/stat field 22), so that a reused pid is not taken for ours."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def process_alive(pid: int, pid_start: str | None) -> bool | None:
    """Whether process ``pid`` of this host lives and is the one that started at ``pid_start`` (Linux: field 22 of
    /proc/<pid>/stat; a reused pid is another process). A zombie is dead: it runs nothing, only its parent has not
    reaped it yet. None when this host has no /proc to ask."""
    if not os.path.isdir("/proc"):
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return False
    if fields[0] in ("Z", "X"):  # zombie, or dead and being reaped
        return False
    return pid_start in (None, fields[19])


def same_run(a: dict[str, Any] | None, b: dict[str, Any] | None) -> bool:
    """Whether two owners' ``run`` entries name the same orchestrator run (the task may differ)."""
    return bool(a and b) and (a or {}).get("dag_id") == (b or {}).get("dag_id") and \
        (a or {}).get("run_id") == (b or {}).get("run_id")


def describe_run(run: dict[str, Any]) -> str:
    return f"DAG run {run.get('run_id')} of {run.get('dag_id')}"


def owner_liveness(data: dict[str, Any], *, stale_after: float, probe: RunProbe | None = None) -> Liveness:
    """Whether the owner of the journal ``data`` may still work on it (see the module's docstring)."""
    owner = data.get("owner") or {}
    age = time.time() - float(data.get("updated_epoch") or 0)
    last = f"last write {age:.0f} s ago"
    run = owner.get("run")
    if run:
        verdict = probe(data) if probe is not None else None
        if verdict is not None:
            return verdict
        alive = age < stale_after
        return Liveness(alive, f"owned by {describe_run(run)} (last task {run.get('task_id')}), which cannot be asked "
                               f"from here: {'alive' if alive else 'dead'} by its age ({last}; it counts as dead "
                               f"after {stale_after:.0f} s)")
    where = f"pid {owner.get('pid')} on host {owner.get('host')}"
    if owner.get("host") == socket.gethostname() and owner.get("pid"):
        found = process_alive(int(owner["pid"]), owner.get("pid_start"))
        if found is not None:
            return Liveness(found, f"owner {'alive' if found else 'gone'}: {where} ({owner.get('actor')}), {last}")
    alive = age < stale_after
    return Liveness(alive, f"owner on another host ({where}): {'alive' if alive else 'dead'} by its age ({last}; it "
                           f"counts as dead after {stale_after:.0f} s)")
