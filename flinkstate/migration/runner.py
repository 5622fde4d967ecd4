"""Running a whole migration in one process (``flinkstate migrate``): plan, run every unit (or hand them to
another runner, such as the Spark job), assemble, re-read and verify the staged result, then publish it; and the
report of what was done.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from flinkstate.errors import printable
from flinkstate.migration.assemble import assemble_metadata, check_metadata_version
from flinkstate.migration.code_policy import CodePolicy
from flinkstate.migration.plan import MigrationError, MigrationPlan, OperatorTarget, plan_migration
from flinkstate.migration.rewrite import StateCount, SubtaskResult, migrate_subtask
from flinkstate.savepoint import Savepoint
from flinkstate.storage.outputs import SavepointOutput

if TYPE_CHECKING:
    from flinkstate.migration.verify import VerificationReport

# --------------------------------------------------------------------------------------------------------------------
# Single process: plan, migrate, assemble, verify, publish
# --------------------------------------------------------------------------------------------------------------------


@dataclass
class MigrationReport:
    source: str
    output: str
    metadata_version: int
    counts: dict[str, dict[str, StateCount]]  # operator label -> state -> counts
    dead_letters: list[dict[str, Any]]
    verification: list[str]
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def entries_written(self) -> int:
        return sum(c.written for states in self.counts.values() for c in states.values())

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "output": self.output, "metadata_version": self.metadata_version,
                "states": {op: {name: c.__dict__ for name, c in states.items()}
                           for op, states in self.counts.items()},
                "dead_letters": len(self.dead_letters), "verification": self.verification,
                "seconds": self.seconds}

    def render_text(self, report_dir: str) -> str:
        """What ``flinkstate migrate`` and the Spark migration job print: counts per state, what the verification
        compared, and where the report (``report_dir``) is."""
        lines = [f"migrated {self.source}", f"  -> {self.output} (_metadata version {self.metadata_version})"]
        for operator, states in self.counts.items():
            for name, count in states.items():
                dead = f", {count.dead_lettered} dead-lettered" if count.dead_lettered else ""
                lines.append(f"  {operator}/{name}: {count.read} read, {count.written} written{dead}")
        lines.append("  verification against the source:")
        lines += [f"    {line}" for line in self.verification]
        lines.append(f"  report: {report_dir}/report.json ({len(self.dead_letters)} dead letters in "
                     f"dead-letters.jsonl)")
        # Names from the savepoint are in these lines: printed as one printable line each (no escape sequence
        # reaches the terminal, no name starts a line of its own), as describe, check and errors print them.
        return "\n".join(printable(line) for line in lines)


def merge_counts(plan: MigrationPlan, results: list[SubtaskResult]) -> dict[str, dict[str, StateCount]]:
    totals: dict[str, dict[str, StateCount]] = {}
    for result in results:
        op_plan = plan.operators[result.operator_id]
        states = totals.setdefault(op_plan.new_uid or op_plan.new_operator_id, {})
        for name, count in result.counts.items():
            total = states.setdefault(name, StateCount())
            total.read += count.read
            total.written += count.written
            total.dead_lettered += count.dead_lettered
    return totals


def verify_output(source: Savepoint, staged: Savepoint, plan: MigrationPlan, results: list[SubtaskResult],
                  extra_check: Callable[[Savepoint], list[str]] | None = None) -> list[str]:
    """The gate before publishing: the independent verifier (:mod:`flinkstate.migration.verify`) compares the
    staged savepoint with the source, the run's own counts must agree with what it found, and ``extra_check`` (the
    manifest's snapshots) must pass. Raises MigrationError; returns what was compared."""
    from flinkstate.migration.verify import VerificationError, verify_migration

    try:
        verification = verify_migration(source, staged, plan)
    except VerificationError as exc:
        raise MigrationError(f"verification: {exc}") from None
    checked = check_run_counts(plan, results, verification)
    if extra_check is not None:
        checked += extra_check(staged)
    return checked


def check_run_counts(plan: MigrationPlan, results: list[SubtaskResult], verification: VerificationReport
                     ) -> list[str]:
    """The run's own counts must agree with what the verifier found; returns the verification's lines."""
    totals = merge_counts(plan, results)
    for state in verification.states:
        count = totals.get(state.operator, {}).get(state.state)
        if count is not None and (count.written != state.entries or count.dead_lettered != state.dead_lettered):
            raise MigrationError(f"verification: operator {state.operator}, state {state.state}: the run wrote "
                                 f"{count.written} entries and dead-lettered {count.dead_lettered}, the output "
                                 f"holds {state.entries} and the migration dead-letters {state.dead_lettered}")
    return verification.lines()


#: Runs the (source operator id, subtask) units of a plan and returns their results, in any order. The default runs
#: them one after the other in this process; the Spark job runs them as Spark tasks.
UnitRunner = Callable[[Savepoint, MigrationPlan, list[tuple[str, int]], SavepointOutput], list[SubtaskResult]]


def run_units_locally(source: Savepoint, plan: MigrationPlan, units: list[tuple[str, int]],
                      output: SavepointOutput) -> list[SubtaskResult]:
    from flinkstate.progress import track

    return [migrate_subtask(source, plan, op_id, subtask, output)
            for op_id, subtask in track(units, total=len(units), description="migrate", unit="keyed streams")]


def migrate_savepoint(source_path: str, targets: list[OperatorTarget], output: SavepointOutput, *,
                      metadata_version: int | None = None, compressed: bool | None = None, reencode: bool = False,
                      extra_check: Callable[[Savepoint], list[str]] | None = None,
                      run_units: UnitRunner = run_units_locally, max_dead_letters: int = 0,
                      code: CodePolicy | None = None, allow_external_handles: bool | None = None,
                      now_ms: int | None = None) -> MigrationReport:
    """The whole migration: plan, rewrite every (operator, subtask) stream through ``run_units``, assemble
    ``_metadata``, verify, publish. The output is published only after verification and removed on any failure.
    The result does not depend on how the units are run: file names and contents derive from the input only.
    ``allow_external_handles``: read a source whose handles point outside its directory (a retained incremental
    checkpoint's ``shared/`` files; default: the process-wide policy, off); the output holds copies of them."""
    import time

    timings: dict[str, float] = {}
    start = time.perf_counter()
    try:
        source = Savepoint.open(source_path, allow_external_handles)
        plan = plan_migration(source, targets, compressed=compressed, reencode=reencode, code=code, now_ms=now_ms)
        check_metadata_version(source, metadata_version, plan.kryo_carried)  # planning writes nothing
        results = run_units(source, plan, plan.units(), output)
        dead_lettered = sum(c.dead_lettered for r in results for c in r.counts.values())
        if dead_lettered > max_dead_letters:
            raise MigrationError(f"{dead_lettered} entries failed and would be dead-lettered, more than the limit "
                                 f"of {max_dead_letters} (--max-dead-letters); nothing was published")
        metadata = assemble_metadata(source, plan, results, output, metadata_version)
        timings["migrate"] = time.perf_counter() - start
        verify_start = time.perf_counter()
        checked = verify_output(source, Savepoint(output.staged()), plan, results, extra_check)
        timings["verify"] = time.perf_counter() - verify_start
        output.publish()
    except BaseException:
        output.abort()
        raise
    dead = [d for r in results for d in r.dead_letters]
    return MigrationReport(source.location.uri, output.uri, metadata.version, merge_counts(plan, results), dead,
                           checked, timings)


__all__ = ["MigrationReport", "UnitRunner", "check_run_counts", "merge_counts", "migrate_savepoint",
           "run_units_locally", "verify_output"]
