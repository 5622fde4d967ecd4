"""The data-level dry run of a migration, shared by ``flinkstate check --dry-run`` (one process) and the Spark check
job (one Spark task per unit): every entry of the states a migration touches is decoded with the old serializers,
migrated and encoded in memory, and thrown away. Failures are counted whatever the state's error policy; the
outcome turns ``incompatible`` when an entry fails under the ``fail`` policy or more entries would be dead-lettered
than allowed (``max_dead_letters``, default 0): the migration would not get through.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flinkstate.binary import KeyGroupRange
from flinkstate.migration.plan import MigrationPlan, split_key_groups
from flinkstate.migration.rewrite import DryRunResult, StateCount, dry_run_subtask
from flinkstate.savepoint import Savepoint

#: (source operator id, subtask, first key group, last key group): one dry-run task.
DryRunUnit = tuple[str, int, int, int]


def dry_run_units(source: Savepoint, plan: MigrationPlan, slices: int = 1) -> list[DryRunUnit]:
    """The plan's keyed streams cut into about ``slices`` key-group ranges in all."""
    units: list[DryRunUnit] = []
    streams = plan.units()
    for operator_id, subtask in streams:
        stream = dict(source.keyed_streams(plan.operators[operator_id].source))[subtask]
        for piece in split_key_groups(stream.key_group_range, max(1, slices // max(1, len(streams)))):
            units.append((operator_id, subtask, piece.start, piece.end))
    return units


def run_dry_run_unit(source: Savepoint, plan: MigrationPlan, unit: DryRunUnit, examples: int) -> DryRunResult:
    operator_id, subtask, start, end = unit
    return dry_run_subtask(source, plan, operator_id, subtask, KeyGroupRange(start, end), examples)


def summarize(plan: MigrationPlan, results: list[DryRunResult], *, tasks: int, seconds: float, examples: int,
              max_dead_letters: int = 0) -> dict[str, Any]:
    """The report's ``dry_run`` section."""
    totals: dict[str, StateCount] = {}
    found: list[dict[str, Any]] = []
    failed_under_fail = False
    dead_letters = 0
    for result in results:
        op_plan = plan.operators[result.operator_id]
        label = op_plan.new_uid or op_plan.new_operator_id
        # The state's error policy decides what its failures mean: dead letters (limited) or a failed migration.
        dead_letter = {r.new_name: r.dead_letter and (op_plan.key_transform is None or op_plan.key_dead_letter)
                       for r in op_plan.rewrites if r is not None}
        for name, count in result.counts.items():
            total = totals.setdefault(f"{label}/{name}", StateCount())
            total.read += count.read
            total.written += count.written
            total.dead_lettered += count.dead_lettered
            if count.dead_lettered:
                if dead_letter.get(name, False):
                    dead_letters += count.dead_lettered
                else:
                    failed_under_fail = True
        found += result.examples
    return {
        "ran": True,
        "tasks": tasks,
        "entries": sum(c.read for c in totals.values()),
        "failures": sum(c.dead_lettered for c in totals.values()),
        "failed_under_fail_policy": failed_under_fail,
        "dead_letters": dead_letters,
        "max_dead_letters": max_dead_letters,
        "too_many_dead_letters": dead_letters > max_dead_letters,
        "states": {name: {"read": c.read, "converted": c.written, "failed": c.dead_lettered}
                   for name, c in sorted(totals.items())},
        "examples": found[:examples],
        "seconds": round(seconds, 3),
    }


def run_dry_run(source: Savepoint, plan: MigrationPlan, *, examples: int = 5, max_dead_letters: int = 0,
                map_units: Callable[[list[DryRunUnit]], list[DryRunResult]] | None = None,
                slices: int = 1) -> dict[str, Any]:
    """Runs every unit (in this process, or through ``map_units``, e.g. Spark) and summarizes."""
    import time

    started = time.perf_counter()
    units = dry_run_units(source, plan, slices)
    if map_units is None:
        results = [run_dry_run_unit(source, plan, unit, examples) for unit in units]
    else:
        results = map_units(units) if units else []
    return summarize(plan, results, tasks=len(units), seconds=time.perf_counter() - started, examples=examples,
                     max_dead_letters=max_dead_letters)


__all__ = ["DryRunUnit", "dry_run_units", "run_dry_run",
           "run_dry_run_unit", "summarize"]
