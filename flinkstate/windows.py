"""A window operator whose window changed between the version that wrote the savepoint and the new one.

The savepoint does not record an operator's window: the jar inspector reads it from the operator (its assigner's
class and scalar fields, ``KIND:Assigner(size=..., ...)``), and a manifest carries it as ``window:``. Flink restores
such a change as it is, so only a comparison of the two versions can see it:

* ``slice:`` (SQL window TVF aggregates, ranks, deduplications: a ``SliceAssigner``): the state's namespace is only a
  slice's end timestamp. The new window's size and slide reinterpret it: the restored job emits windows no job of
  either version can produce and loses rows of the real ones (a TUMBLE of 30 s restored as 60 s emits
  ``[22:32:30, 22:33:30)``). A silent misread: ``check`` calls it incompatible, ``migrate`` refuses it.
* ``window:`` (DataStream windows, SQL group windows): the namespace is the window with its bounds. Open windows keep
  them and fire at their old end; new records go to the new windows. Flink does this exactly: a finding to read,
  not a refusal.
"""

from __future__ import annotations

from flinkstate.compatibility import AS_IS, INCOMPATIBLE, Finding
from flinkstate.manifest import Manifest
from flinkstate.report import StateRow

SLICED = "slice:"


def window_changes(new: Manifest, previous: Manifest | None) -> dict[str, Finding]:
    """The operator label (the new manifest's) -> its WINDOW_CHANGED finding, for every operator whose window both
    versions know and which differs."""
    if previous is None:
        return {}
    changes: dict[str, Finding] = {}
    for label, op in new.operators.items():
        old = previous.find(op.operator_id)
        if old is None and op.renamed_from is not None:
            old = next((o for o in previous.operators.values() if op.renamed_from in (o.label, o.operator_id)), None)
        if old is None or old.window is None or op.window is None or old.window == op.window:
            continue
        if old.window.startswith(SLICED) or op.window.startswith(SLICED):
            changes[label] = Finding(
                "WINDOW_CHANGED", "", f"window {old.window} -> {op.window}: the state holds slices by their end "
                f"only; Flink restores it as is and reads the old slices with the new window (wrong window bounds, "
                f"rows missing). Let the windows fire before the upgrade, or start the operator without state",
                AS_IS, old.window, op.window, operator=label, silent_misread=True, migratable=False)
        else:
            changes[label] = Finding(
                "WINDOW_CHANGED", "", f"window {old.window} -> {op.window}: open windows keep their bounds and fire "
                f"at their old end; new records go to the new windows", AS_IS, old.window, op.window,
                operator=label)
    return changes


def flag_window_changes(rows: list[StateRow], new: Manifest, previous: Manifest | None) -> None:
    """Adds each changed window's finding to the first row of its operator; a misread makes every row of the
    operator incompatible (no migration can restore what the slices meant)."""
    changes = window_changes(new, previous)
    flagged: set[str] = set()
    for row in rows:
        finding = changes.get(row.operator)
        if finding is None:
            continue
        if row.operator not in flagged:
            row.findings.insert(0, finding)
            flagged.add(row.operator)
        if finding.silent_misread:
            row.verdict = max(row.verdict, INCOMPATIBLE)
            row.migration = None


__all__ = ["flag_window_changes", "window_changes"]
