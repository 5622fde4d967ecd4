"""A migration split by key-group ranges, for runners with many workers (the Spark job).

A subtask's keyed stream is a header and one block per non-empty key group, at offsets the metadata records; blocks
are rewritten independently of each other. So a unit of work is (operator, subtask, key-group sub-range), however
many subtasks the savepoint has: a parallelism-1 savepoint splits into as many units as the workers want.

1. :func:`split_units` cuts every rewritten stream into contiguous key-group ranges of about equal bytes.
2. :func:`migrate_unit` (a worker) rewrites one range's blocks into a part file of a scratch output (header, then
   the range's blocks), returning its handle (offsets, size), counts and dead letters.
3. :func:`assemble_streams` (the driver) concatenates each subtask's parts in key-group order into the stream file
   ``flinkstate migrate`` writes, with the offsets moved by where each part's blocks land: the same bytes, since a
   block's bytes depend on the block alone.
4. After ``_metadata`` is assembled, :func:`verify_unit` (a worker) compares one range's entries with the source
   (:func:`flinkstate.migration.verify.verify_key_groups`); the driver checks the metadata level
   (:func:`~flinkstate.migration.verify.verify_metadata_level`) and that every unit verified exactly once
   (:func:`verify_in_units`).

An operator whose key changes (entries move between key groups and subtasks) is one unit per subtask, migrated
straight into the output, and verified whole. :func:`migrate_in_units` runs the lot with any ``map`` (in order).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol, TypeVar

from flinkstate.binary import KeyGroupRange
from flinkstate.format.handles import (
    SAVEPOINT_KEY_GROUPS,
    IncrementalKeyedStateHandle,
    KeyGroupRangeOffsets,
    KeyGroupsStateHandle,
    RelativeFileStateHandle,
)
from flinkstate.format.keyed_stream import KeyedStateStream, keyed_stream_file_name
from flinkstate.migration.assemble import assemble_metadata, check_metadata_version
from flinkstate.migration.plan import MigrationError, MigrationPlan
from flinkstate.migration.rewrite import StateCount, SubtaskResult, migrate_subtask
from flinkstate.migration.runner import MigrationReport, check_run_counts, merge_counts
from flinkstate.migration.verify import (
    StateVerification,
    VerificationError,
    VerificationReport,
    verify_key_groups,
    verify_metadata_level,
)
from flinkstate.savepoint import Savepoint
from flinkstate.storage.outputs import SavepointOutput
from flinkstate.storage.uri import open_output

T = TypeVar("T")
R = TypeVar("R")

#: Runs ``task`` on every unit and returns the results in the units' order: ``list(map(...))`` locally, a Spark
#: ``parallelize(...).map(...).collect()`` on a cluster.
MapUnits = Callable[[Callable[[Any], Any], list[Any]], list[Any]]

#: Read buffer of the driver's concatenation of part files.
_CHUNK = 8 << 20


def map_locally(task: Callable[[T], R], units: list[T]) -> list[R]:
    return [task(unit) for unit in units]


class PlanSource(Protocol):
    """What a worker rebuilds the plan from (:class:`flinkstate.migration.job.MigrationJob`): the same inputs give
    the same plan (planning reads headers only)."""

    @property
    def savepoint(self) -> str: ...

    def plan(self, source: Savepoint) -> MigrationPlan: ...


@dataclass(frozen=True)
class Unit:
    """(source operator id, subtask, key-group range). ``key_groups`` None: the whole operator's key space (an
    operator whose key changes); ``subtask`` -1 then for verification, which compares such an operator whole."""

    operator_id: str
    subtask: int
    key_groups: KeyGroupRange | None

    def describe(self) -> str:
        where = "" if self.key_groups is None else f", key groups {self.key_groups}"
        subtask = "" if self.subtask < 0 else f", subtask {self.subtask}"
        return f"operator {self.operator_id}{subtask}{where}"

    def part_name(self) -> str:
        """The part file of a split unit in the scratch output (deterministic, like every file name here)."""
        assert self.key_groups is not None
        return f"{keyed_stream_file_name(self.operator_id, self.subtask)}.kg-{self.key_groups.start:05d}"


def default_unit_count(workers: int) -> int:
    """Three units per worker: enough to keep every core busy when units differ in cost, few enough that a unit's
    fixed cost (opening the savepoint, planning, a part file) stays small."""
    return max(1, 3 * workers)


def _split_stream(stream: KeyedStateStream, operator_id: str, subtask: int, parts: int) -> list[Unit]:
    """Contiguous key-group ranges covering the subtask's whole range, cut at block boundaries so that each holds
    about the same number of stored bytes."""
    full = stream.key_group_range
    blocks = stream.blocks
    # A native RocksDB snapshot's blocks have no stored size (its entries are in RocksDB's files): each key group
    # weighs one there, so its range is cut into equal numbers of key groups.
    total = sum(max(end - start, 1) for _, start, end in blocks)
    parts = max(1, min(parts, len(blocks)))
    starts = [full.start]
    done, cut = 0, 1
    for key_group, start, end in blocks:
        if cut < parts and done >= total * cut / parts and key_group > starts[-1]:
            starts.append(key_group)
            cut += 1
        done += max(end - start, 1)
    bounds = [*starts[1:], full.end + 1]
    return [Unit(operator_id, subtask, KeyGroupRange(a, b - 1)) for a, b in zip(starts, bounds, strict=True)]


def _stream_sizes(source: Savepoint, plan: MigrationPlan, streams: Sequence[tuple[str, int]]) -> list[int]:
    sizes = []
    for operator_id, subtask in streams:
        handle = plan.operators[operator_id].source.subtasks[subtask].managed_keyed_state
        if isinstance(handle, IncrementalKeyedStateHandle):  # native RocksDB: the size of its files
            sizes.append(sum(f.handle.size for f in (*handle.shared, *handle.private) if f.handle is not None))
        else:
            sizes.append(handle.delegate.size
                         if isinstance(handle, KeyGroupsStateHandle) and handle.delegate is not None else 0)
    return sizes


def split_units(source: Savepoint, plan: MigrationPlan, target: int, streams: Sequence[tuple[str, int]] | None = None
                ) -> list[Unit]:
    """About ``target`` units over ``streams`` (default: the plan's rewritten streams), each stream getting a share
    proportional to its size (at least one). Deterministic for the same source, plan and target."""
    streams = list(plan.units() if streams is None else streams)
    sizes = _stream_sizes(source, plan, streams)
    total = sum(sizes) or 1
    units: list[Unit] = []
    opened: dict[str, dict[int, KeyedStateStream]] = {}  # each operator's streams opened once, not per subtask
    for (operator_id, subtask), size in zip(streams, sizes, strict=True):
        op_plan = plan.operators[operator_id]
        if op_plan.key_transform is not None:
            units.append(Unit(operator_id, subtask, None))
            continue
        if operator_id not in opened:
            opened[operator_id] = dict(source.keyed_streams(op_plan.source))
        units += _split_stream(opened[operator_id][subtask], operator_id, subtask,
                               max(1, round(target * size / total)))
    return units


def verification_units(source: Savepoint, plan: MigrationPlan, target: int) -> list[Unit]:
    """The verifier's units, from the source and the plan alone (not from what the run did): every subtask with
    keyed state of every targeted operator, split like :func:`split_units`; an operator whose key changes whole."""
    streams: list[tuple[str, int]] = []
    units: list[Unit] = []
    for op in source.operators:
        op_plan = plan.operators.get(op.operator_id)
        if op_plan is None or op_plan.old_header is None:
            continue
        if op_plan.key_transform is not None:
            units.append(Unit(op.operator_id, -1, None))
            continue
        streams += [(op.operator_id, index) for index, _ in source.keyed_streams(op)]
    return units + split_units(source, plan, target, streams)


# --------------------------------------------------------------------------------------------------------------------
# Workers
# --------------------------------------------------------------------------------------------------------------------


@dataclass
class UnitPiece:
    """What a migration unit hands back: its part's handle (offsets within the part file) or, for a whole-stream
    unit, the final stream's; counts and dead letters."""

    unit: Unit
    result: SubtaskResult


@dataclass
class UnitVerification:
    unit: Unit
    states: list[StateVerification]


#: Per Python worker: the source opened and the plan built once per job, not once per unit (Spark reuses workers).
_PLANS: dict[str, tuple[Savepoint, MigrationPlan]] = {}


def _source_and_plan(job: PlanSource) -> tuple[Savepoint, MigrationPlan]:
    key = repr(job)
    if key not in _PLANS:
        source = Savepoint.open(job.savepoint)
        _PLANS.clear()  # one job at a time per worker: keep the memory of one plan
        _PLANS[key] = (source, job.plan(source))
    return _PLANS[key]


def migrate_unit(job: PlanSource, output: SavepointOutput, scratch: SavepointOutput, unit: Unit) -> UnitPiece:
    """One worker's unit: a split range into a part file of ``scratch``; a whole stream into ``output``."""
    source, plan = _source_and_plan(job)
    if unit.key_groups is None:
        return UnitPiece(unit, migrate_subtask(source, plan, unit.operator_id, unit.subtask, output))
    return UnitPiece(unit, migrate_subtask(source, plan, unit.operator_id, unit.subtask, scratch, unit.key_groups,
                                           unit.part_name()))


def verify_unit(job: PlanSource, output: SavepointOutput | str, unit: Unit) -> UnitVerification:
    """One worker's verification: the unit's entries in ``output`` (a staged output, or a published savepoint's
    path or URI) against the source."""
    source, plan = _source_and_plan(job)
    migrated = Savepoint(output.staged()) if isinstance(output, SavepointOutput) else Savepoint.open(output)
    return UnitVerification(unit, verify_key_groups(source, migrated, plan, unit.operator_id, unit.key_groups))


def verify_published(job: PlanSource, migrated_path: str, map_units: MapUnits, target_units: int
                     ) -> VerificationReport:
    """The independent verifier on a published migration of ``job.savepoint`` (the pipeline's re-check), its
    entries compared per unit through ``map_units``."""
    _PLANS.clear()  # a new run reads its inputs afresh (the savepoint may have been rewritten since an earlier one)
    source, plan = _source_and_plan(job)
    checks = verification_units(source, plan, target_units)
    verified: list[UnitVerification] = map_units(partial(verify_unit, job, migrated_path), checks)
    return verify_in_units(source, Savepoint.open(migrated_path), plan, checks, verified)


# --------------------------------------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------------------------------------


def _part_header_length(handle: KeyGroupsStateHandle) -> int:
    """Where a part's blocks start: its first block's offset (the writer writes the header, then the blocks), or
    its whole size when the range holds no block."""
    present = [offset for offset in handle.offsets.offsets if offset]
    assert handle.delegate is not None
    return min(present) if present else handle.delegate.size


def assemble_streams(plan: MigrationPlan, pieces: list[UnitPiece], scratch: SavepointOutput,
                     output: SavepointOutput) -> list[SubtaskResult]:
    """One stream file per (operator, subtask) from its parts, in key-group order: the first part's header, then
    every part's blocks; offsets moved to where the blocks land. Whole-stream pieces are already in ``output``."""
    results: list[SubtaskResult] = []
    by_stream: dict[tuple[str, int], list[UnitPiece]] = {}
    for piece in pieces:
        if piece.unit.key_groups is None:
            results.append(piece.result)
        else:
            by_stream.setdefault((piece.unit.operator_id, piece.unit.subtask), []).append(piece)
    parts = scratch.staged()
    for (operator_id, subtask), stream_pieces in sorted(by_stream.items()):
        op_plan = plan.operators[operator_id]
        handle = op_plan.source.subtasks[subtask].managed_keyed_state
        assert handle is not None
        full = handle.key_group_range
        stream_pieces.sort(key=lambda p: p.unit.key_groups.start if p.unit.key_groups is not None else 0)
        covered = [(p.unit.key_groups.start, p.unit.key_groups.end) for p in stream_pieces
                   if p.unit.key_groups is not None]
        expected_starts = [full.start, *(end + 1 for _, end in covered[:-1])]
        if [start for start, _ in covered] != expected_starts or covered[-1][1] != full.end:
            raise MigrationError(f"operator {operator_id}, subtask {subtask}: the units' key-group ranges {covered} "
                                 f"do not cover {full} exactly once")
        name = keyed_stream_file_name(op_plan.new_operator_id, subtask)
        offsets: list[int] = []
        counts: dict[str, StateCount] = {}
        dead_letters: list[dict[str, Any]] = []
        with output.open(name) as sink:
            position = 0
            for index, piece in enumerate(stream_pieces):
                part = piece.result.handle
                assert part is not None and part.delegate is not None and piece.unit.key_groups is not None
                header_length = _part_header_length(part)
                start = 0 if index == 0 else header_length  # the header once, from the first part
                shift = position - start
                offsets += [offset + shift if offset else 0 for offset in part.offsets.offsets]
                for chunk in range(start, part.delegate.size, _CHUNK):
                    data = parts.read_range(piece.unit.part_name(), chunk, min(_CHUNK, part.delegate.size - chunk))
                    sink.write(data)
                    position += len(data)
                for state, count in piece.result.counts.items():
                    total = counts.setdefault(state, StateCount())
                    total.read += count.read
                    total.written += count.written
                    total.dead_lettered += count.dead_lettered
                dead_letters += piece.result.dead_letters
        stream = KeyGroupsStateHandle(SAVEPOINT_KEY_GROUPS, KeyGroupRangeOffsets(full, tuple(offsets)),
                                      RelativeFileStateHandle(position, name))
        results.append(SubtaskResult(operator_id, subtask, stream, counts, dead_letters))
    return results


def verify_in_units(source: Savepoint, staged: Savepoint, plan: MigrationPlan, units: list[Unit],
                    results: list[UnitVerification]) -> VerificationReport:
    """The driver's share of a distributed verification: the metadata level, and every unit verified exactly once;
    the states' figures summed in the order :func:`~flinkstate.migration.verify.verify_migration` reports them."""
    report = verify_metadata_level(source, staged, plan)
    done = [r.unit for r in results]
    if sorted(done, key=repr) != sorted(units, key=repr):
        missing = [u.describe() for u in units if u not in done]
        raise VerificationError(f"{staged.location.uri}: not every unit was verified exactly once (missing: "
                                f"{', '.join(missing) or 'none'}; {len(done)} results for {len(units)} units)")
    totals: dict[tuple[str, str], StateVerification] = {}
    for result in results:
        for state in result.states:
            total = totals.setdefault((state.operator, state.state), StateVerification(state.operator, state.state,
                                                                                       state.mode))
            total.entries += state.entries
            total.dead_lettered += state.dead_lettered
            total.dropped += state.dropped
    for op in source.operators:
        op_plan = plan.operators.get(op.operator_id)
        if op_plan is None or op_plan.old_header is None:
            continue
        label = op_plan.new_uid or op_plan.new_operator_id  # as the verifier names it
        for rewrite in op_plan.rewrites:
            if rewrite is not None:
                # A state no unit saw (an operator without keyed streams) holds no entry.
                report.states.append(totals.get((label, rewrite.new_name)) or StateVerification(
                    label, rewrite.new_name, "bytes"))
    return report


@dataclass
class UnitRun:
    """What :func:`migrate_in_units` did, for the report and the benchmark."""

    units: int
    verification_units: int
    seconds: dict[str, float] = field(default_factory=dict)


def migrate_in_units(job: PlanSource, output_uri: str, map_units: MapUnits, target_units: int, *,
                     metadata_version: int | None = None, max_dead_letters: int = 0,
                     extra_check: Callable[[Savepoint], list[str]] | None = None) -> tuple[MigrationReport, UnitRun]:
    """The whole migration with its work split by key-group ranges: units migrated through ``map_units``, streams
    and ``_metadata`` assembled here, units verified through ``map_units``, then published. The output is removed on
    any failure; so is the scratch output (``OUTPUT.parts``) that holds the parts while they are assembled."""
    # "migrate" and "verify" as the single process reports them, and where their time goes (phases named
    # "units: ..." run on the workers, the others in the driver).
    timings: dict[str, float] = {}
    start = time.perf_counter()
    _PLANS.clear()  # a new run reads its inputs afresh (the savepoint may have been rewritten since an earlier one)
    source, plan = _source_and_plan(job)
    check_metadata_version(source, metadata_version, plan.kryo_carried)
    output = open_output(output_uri)
    try:
        scratch = open_output(f"{output_uri.rstrip('/')}.parts")
        try:
            units = split_units(source, plan, target_units)
            timings["plan"] = time.perf_counter() - start
            pieces: list[UnitPiece] = map_units(partial(migrate_unit, job, output, scratch), units)
            timings["units: migrate"] = time.perf_counter() - start - timings["plan"]
            dead_lettered = sum(c.dead_lettered for p in pieces for c in p.result.counts.values())
            if dead_lettered > max_dead_letters:
                raise MigrationError(f"{dead_lettered} entries failed and would be dead-lettered, more than the "
                                     f"limit of {max_dead_letters} (--max-dead-letters); nothing was published")
            results = assemble_streams(plan, pieces, scratch, output)
        finally:
            scratch.abort()
        metadata = assemble_metadata(source, plan, results, output, metadata_version)
        timings["migrate"] = time.perf_counter() - start
        timings["assemble"] = timings["migrate"] - timings["plan"] - timings["units: migrate"]
        verify_start = time.perf_counter()
        staged = Savepoint(output.staged())
        checks = verification_units(source, plan, target_units)
        verified: list[UnitVerification] = map_units(partial(verify_unit, job, output), checks)
        timings["units: verify"] = time.perf_counter() - verify_start
        try:
            verification = verify_in_units(source, staged, plan, checks, verified)
        except VerificationError as exc:
            raise MigrationError(f"verification: {exc}") from None
        checked = check_run_counts(plan, results, verification)
        if extra_check is not None:
            checked += extra_check(staged)
        timings["verify"] = time.perf_counter() - verify_start
        timings["verify in the driver"] = timings["verify"] - timings["units: verify"]
        output.publish()
    except BaseException:
        output.abort()
        raise
    dead = [d for r in sorted(results, key=lambda r: (r.operator_id, r.subtask)) for d in r.dead_letters]
    report = MigrationReport(source.location.uri, output.uri, metadata.version, merge_counts(plan, results), dead,
                             checked, timings)
    return report, UnitRun(len(units), len(checks), timings)


__all__ = ["MapUnits", "PlanSource", "Unit", "UnitPiece", "UnitRun", "UnitVerification", "assemble_streams",
           "default_unit_count", "map_locally", "migrate_in_units", "migrate_unit", "split_units",
           "verification_units", "verify_in_units", "verify_published", "verify_unit"]
