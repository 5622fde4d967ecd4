"""The independent verifier: a migrated savepoint is compared with its source, entry by entry, before it is
published (``flinkstate migrate``, the Spark migration job) and again by the upgrade DAG's re-check.

It trusts nothing the migration run reported (no counts, no file names): it re-reads both savepoints and checks

* identity: every operator of the source is in the output under the id the manifest gives it (its uid hashed, its
  32-hex id kept, or the id of ``renamed_from``'s new uid), with the same parallelism, max parallelism, name and
  uid (where the metadata records them), subtasks and finished subtasks; the same checkpoint id and master states;
  no operator the source does not have;
* non-keyed state, byte for byte: operator state (names, distribution modes, offsets and bytes), raw operator and
  raw keyed state, coordinator state, channel state;
* keyed state of an operator the migration does not target: the same key-group offsets and stream bytes;
* keyed state of a targeted operator, per key group: the output's state list is the plan's (renames and drops
  applied); entries of a state whose values are kept have the same key and value bytes; entries of a migrated state
  equal the declared transform applied to the source entry, compared as values decoded from the written bytes with
  the new serializers (dead-lettered and dropped entries excepted, and counted); nothing extra. Every source entry
  so decoded must also re-encode to exactly the bytes Flink wrote, so a codec that loses anything cannot hide
  behind an equal comparison of two equally shortened values.

The entries are compared in :mod:`flinkstate.migration.verify_entries`. A difference raises
:class:`VerificationError` naming the operator, the state, the key group and the entry.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from flinkstate.format.changelog_handles import ChangelogBackendHandle
from flinkstate.format.handles import (
    IncrementalKeyedStateHandle,
    StreamStateHandle,
)
from flinkstate.format.keyed_stream import StreamSource
from flinkstate.format.metadata import AnyKeyedStateHandle, OperatorState
from flinkstate.migration.canonical import canonical
from flinkstate.migration.plan import MigrationPlan, OperatorPlan
from flinkstate.migration.verify_entries import StateVerification, check_state_header, verify_key_groups
from flinkstate.migration.verify_errors import VerificationError
from flinkstate.savepoint import Savepoint


@dataclass
class VerificationReport:
    operators: int = 0
    non_keyed_handles: int = 0
    states: list[StateVerification] = field(default_factory=list)
    untargeted_keyed_streams: int = 0

    @property
    def entries(self) -> int:
        return sum(s.entries for s in self.states)

    @property
    def dead_lettered(self) -> int:
        return sum(s.dead_lettered for s in self.states)

    def lines(self) -> list[str]:
        """What was compared, one line per state plus a summary (the migration report's ``verification``)."""
        lines = [f"{s.operator}/{s.state}: {s.entries} entries equal "
                 + ("byte for byte" if s.mode == "bytes" else "to the declared transform of the source's")
                 + (f", {s.dead_lettered} dead-lettered" if s.dead_lettered else "")
                 + (f", {s.dropped} dropped by the migration function" if s.dropped else "")
                 for s in self.states]
        lines.append(f"verified: {self.operators} operators (ids, uids, parallelism), {self.non_keyed_handles} "
                     f"non-keyed state handles byte for byte, {self.untargeted_keyed_streams} untouched keyed "
                     f"streams byte for byte, {len(self.states)} keyed states with {self.entries} entries")
        return lines


def verify_migration(source: Savepoint, output: Savepoint, plan: MigrationPlan) -> VerificationReport:
    """Compares ``output`` with ``source`` as :mod:`this module <flinkstate.migration.verify>` describes; ``plan``
    supplies what the manifest declares (new ids, renames, drops, transforms), not what a run did."""
    report = verify_metadata_level(source, output, plan)
    for op in source.operators:
        op_plan = plan.operators.get(op.operator_id)
        if op_plan is None or op_plan.old_header is None:
            continue
        report.states += verify_key_groups(source, output, plan, op.operator_id, None)
    return report


def verify_metadata_level(source: Savepoint, output: Savepoint, plan: MigrationPlan) -> VerificationReport:
    """The part of :func:`verify_migration` that reads no key-group block: identity, non-keyed state, untouched
    keyed streams, and every targeted operator's written state list, serializer snapshots and key serializer. The
    entries are compared by :func:`verify_key_groups`, which a distributed run calls per key-group range."""
    try:
        report = VerificationReport()
        _verify_metadata(source, output, plan, report)
        for op in source.operators:
            op_plan = plan.operators.get(op.operator_id)
            if op_plan is None or op_plan.old_header is None:
                continue
            new_op = output.operator(op_plan.new_operator_id)
            for rewrite in op_plan.rewrites:
                if rewrite is not None:
                    check_state_header(output, new_op, op_plan, rewrite)
            # Entries are compared per key-group range of the source's streams: an output stream must cover the
            # same range, or entries outside it would be in no range compared.
            for index, sub in op.subtasks.items():
                old, new = sub.managed_keyed_state, new_op.subtasks[index].managed_keyed_state
                if old is not None and new is not None and old.key_group_range != new.key_group_range:
                    raise VerificationError(f"operator {op_plan.new_uid or op_plan.new_operator_id}, subtask "
                                            f"{index}: key groups {new.key_group_range} in the output, "
                                            f"{old.key_group_range} in the source")
        return report
    except VerificationError as exc:  # say which savepoints were compared
        raise VerificationError(f"{output.location.uri} against its source {source.location.uri}: {exc}") from None


# -- metadata and non-keyed state --------------------------------------------------------------------------------------


def _verify_metadata(source: Savepoint, output: Savepoint, plan: MigrationPlan, report: VerificationReport) -> None:
    src, out = source.metadata, output.metadata
    if src.checkpoint_id != out.checkpoint_id:
        raise VerificationError(f"checkpoint id {out.checkpoint_id}, the source's is {src.checkpoint_id}")
    if [(m.version, m.name, m.payload) for m in src.master_states] != \
            [(m.version, m.name, m.payload) for m in out.master_states]:
        raise VerificationError("the master states differ from the source's")
    written = {op.operator_id: op for op in out.operators}
    expected_ids = set()
    for op in src.operators:
        op_plan = plan.operators.get(op.operator_id)
        new_id = op_plan.new_operator_id if op_plan is not None else op.operator_id
        label = f"operator {op.uid or op.operator_id}"
        if new_id in expected_ids:
            raise VerificationError(f"{label}: two source operators map to operator id {new_id}")
        expected_ids.add(new_id)
        new = written.get(new_id)
        if new is None:
            raise VerificationError(f"{label}: missing from the output (expected operator id {new_id})")
        _verify_operator(source, op, output, new, op_plan, label, report)
    extra = sorted(set(written) - expected_ids)
    if extra:
        raise VerificationError(f"the output has operators the source does not: {', '.join(extra)}")
    report.operators = len(src.operators)


def _verify_operator(source: Savepoint, op: OperatorState, output: Savepoint, new: OperatorState,
                     op_plan: OperatorPlan | None, label: str, report: VerificationReport) -> None:
    for what, a, b in (("parallelism", op.parallelism, new.parallelism),
                       ("max parallelism", op.max_parallelism, new.max_parallelism),
                       ("subtasks", sorted(op.subtasks), sorted(new.subtasks)),
                       ("finished subtasks", sorted(op.finished_subtasks), sorted(new.finished_subtasks)),
                       ("fully finished", op.fully_finished, new.fully_finished)):
        if a != b:
            raise VerificationError(f"{label}: {what} {b!r} in the output, {a!r} in the source")
    if output.metadata.version >= 5 and source.metadata.version >= 5:
        want_uid = op_plan.new_uid if op_plan is not None else op.uid
        if new.uid != want_uid or new.name != op.name:
            raise VerificationError(f"{label}: uid/name {new.uid!r}/{new.name!r} in the output, expected "
                                    f"{want_uid!r}/{op.name!r}")
    if (op.coordinator_state is None) != (new.coordinator_state is None) or (
            op.coordinator_state is not None and new.coordinator_state is not None
            and op.coordinator_state.data != new.coordinator_state.data):
        raise VerificationError(f"{label}: the coordinator state differs from the source's")
    for index, sub in op.subtasks.items():
        new_sub = new.subtasks[index]
        where = f"{label}, subtask {index}"
        for what in ("managed_operator_state", "raw_operator_state"):
            a, b = getattr(sub, what), getattr(new_sub, what)
            if (a is None) != (b is None):
                raise VerificationError(f"{where}: {what.replace('_', ' ')} missing or added")
            if a is not None:
                if a.states != b.states:
                    raise VerificationError(f"{where}: {what.replace('_', ' ')}: state names, modes or offsets "
                                            f"differ from the source's")
                _same_stream(source, a.delegate, output, b.delegate, f"{where}: {what.replace('_', ' ')}")
                report.non_keyed_handles += 1
        _same_keyed(source, sub.raw_keyed_state, output, new_sub.raw_keyed_state, f"{where}: raw keyed state")
        if sub.raw_keyed_state is not None:
            report.non_keyed_handles += 1
        if [_channel_key(c) for c in sub.input_channel_state] != [_channel_key(c) for c in
                                                                   new_sub.input_channel_state] or \
                [_channel_key(c) for c in sub.result_subpartition_state] != \
                [_channel_key(c) for c in new_sub.result_subpartition_state]:
            raise VerificationError(f"{where}: channel state differs from the source's")
        if op_plan is None or op_plan.old_header is None:
            # Not targeted (or no keyed state): its keyed stream is copied as it is.
            _same_keyed(source, sub.managed_keyed_state, output, new_sub.managed_keyed_state,
                        f"{where}: keyed state")
            if sub.managed_keyed_state is not None:
                report.untargeted_keyed_streams += 1
        elif (sub.managed_keyed_state is None) != (new_sub.managed_keyed_state is None):
            raise VerificationError(f"{where}: keyed state missing or added")


def _channel_key(handle: Any) -> Any:
    return (handle.kind, handle.subtask_index, handle.info, handle.offsets, handle.size)


def _read_all(savepoint: Savepoint, handle: StreamStateHandle | None) -> bytes:
    if handle is None:
        return b""
    stream = StreamSource(savepoint.location, handle)
    data = stream.read(0, handle.size)
    if len(data) != handle.size:
        raise VerificationError(f"{stream.path}: {len(data)} bytes, the metadata records {handle.size}")
    return data


def _same_stream(source: Savepoint, a: StreamStateHandle | None, output: Savepoint, b: StreamStateHandle | None,
                 where: str) -> None:
    if (a is None) != (b is None) or _read_all(source, a) != _read_all(output, b):
        raise VerificationError(f"{where}: the bytes differ from the source's")


def _same_keyed(source: Savepoint, a: AnyKeyedStateHandle | None, output: Savepoint,
                b: AnyKeyedStateHandle | None, where: str) -> None:
    if a is None and b is None:
        return
    if isinstance(a, IncrementalKeyedStateHandle) or isinstance(b, IncrementalKeyedStateHandle):
        raise VerificationError(f"{where}: a native RocksDB snapshot, which a migration never writes")
    if isinstance(a, ChangelogBackendHandle) or isinstance(b, ChangelogBackendHandle):
        raise VerificationError(f"{where}: a changelog checkpoint, which a migration never writes")
    if a is None or b is None or a.offsets != b.offsets:
        raise VerificationError(f"{where}: missing, added, or other key-group offsets than the source's")
    _same_stream(source, a.delegate, output, b.delegate, where)


__all__ = ["StateVerification", "VerificationError", "VerificationReport", "canonical", "verify_key_groups",
           "verify_metadata_level", "verify_migration"]

