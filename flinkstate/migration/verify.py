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

A difference raises :class:`VerificationError` naming the operator, the state, the key group and the entry.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from flinkstate._speedups import (
    fast_canonical,
    fast_same_entries,
    reencode_checker,
    same_entries_reference,
    scan_compiled,
    state_pairs,
    state_span,
)
from flinkstate.binary import KeyGroupRange, assign_key_group
from flinkstate.errors import FlinkStateError, printable
from flinkstate.format.handles import (
    IncrementalKeyedStateHandle,
    KeyedStateHandle,
    StreamStateHandle,
)
from flinkstate.format.keyed_header import KeyedBackendHeader
from flinkstate.format.keyed_stream import StreamSource, raw_key
from flinkstate.format.metadata import OperatorState
from flinkstate.migration.canonical import canonical, show, uncanonical
from flinkstate.migration.plan import MigrationPlan, OperatorPlan, StateRewrite
from flinkstate.migration.rewrite import StateCodec, migrate_entry
from flinkstate.migration.verify_errors import VerificationError
from flinkstate.migration.verify_native import native_source, native_source_entries
from flinkstate.progress import track
from flinkstate.savepoint import Savepoint
from flinkstate.serializers.registry import snapshot_bytes


@dataclass
class StateVerification:
    operator: str
    state: str
    mode: str  # "bytes" (kept) or "values" (migrated)
    entries: int = 0
    dead_lettered: int = 0
    dropped: int = 0


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
                    _check_state_header(output, new_op, op_plan, rewrite)
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


def verify_key_groups(source: Savepoint, output: Savepoint, plan: MigrationPlan, operator_id: str,
                      key_groups: KeyGroupRange | None) -> list[StateVerification]:
    """The entries of one targeted operator (source operator id) in ``key_groups`` (None: all), per state: kept
    states byte for byte, migrated ones as values against the declared transform of the source's, and nothing
    stored in the range that no state accounts for. Key-group ranges of subtasks are disjoint, so a range inside one
    subtask's reads that subtask's stream only. An operator whose key changes is compared whole (entries move
    between key groups): ``key_groups`` must be None for it."""
    op_plan = plan.operators[operator_id]
    op = op_plan.source
    label = printable(op_plan.new_uid or op_plan.new_operator_id)
    try:
        if key_groups is not None and op_plan.key_transform is not None:
            raise VerificationError(f"operator {label}: its key changes, so it is verified whole, not by key-group "
                                    f"range")
        new_op = output.operator(op_plan.new_operator_id)
        states, verified = [], 0
        rewrites = op_plan.rewrites if key_groups is not None else track(
            op_plan.rewrites, total=len(op_plan.rewrites), description=f"verify {label}", unit="states")
        for rewrite in rewrites:
            if rewrite is not None:
                state = _verify_state(source, op, output, new_op, op_plan, rewrite, key_groups)
                states.append(state)
                verified += state.entries
        # Nothing extra: every stored entry belongs to a state just compared.
        stored = sum(len(entries) for _, entries in _raw_entries_by_group(output, new_op, None, key_groups))
        if stored != verified:
            where = "" if key_groups is None else f", key groups {key_groups}"
            raise VerificationError(f"operator {label}{where}: {stored} entries stored, {verified} accounted for by "
                                    f"its states")
        return states
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


def _same_keyed(source: Savepoint, a: KeyedStateHandle | None, output: Savepoint,
                b: KeyedStateHandle | None, where: str) -> None:
    if a is None and b is None:
        return
    if isinstance(a, IncrementalKeyedStateHandle) or isinstance(b, IncrementalKeyedStateHandle):
        raise VerificationError(f"{where}: a native RocksDB snapshot, which a migration never writes")
    if a is None or b is None or a.offsets != b.offsets:
        raise VerificationError(f"{where}: missing, added, or other key-group offsets than the source's")
    _same_stream(source, a.delegate, output, b.delegate, where)


# -- keyed state -------------------------------------------------------------------------------------------------------


def _raw_entries_by_group(savepoint: Savepoint, op: OperatorState, state_name: str | None,
                          key_groups: KeyGroupRange | None = None
                          ) -> Iterator[tuple[int, list[tuple[bytes, bytes]]]]:
    """(key group, [(key bytes, value bytes)]) of one state (None: all), in key-group order, without decoding,
    within ``key_groups`` (None: all). Each stream's blocks use its own header's state ids; a malformed block is an
    error naming its file."""
    for _, stream in savepoint.keyed_streams(op):
        if key_groups is not None and not len(stream.key_group_range.intersection(key_groups)):
            continue  # another subtask's range: not even its header is read
        state_id = stream.header().state_index(state_name) if state_name is not None else None
        if state_name is not None and state_id is None:
            continue  # this subtask never registered the state
        for key_group, start, end in stream.blocks:
            if key_groups is not None and key_group not in key_groups:
                continue
            data = stream.read_block(key_group, start, end)
            pairs = state_pairs(stream, data, key_group, start, state_id)  # compiled, else raw_entries + raw_key
            if pairs:
                yield key_group, pairs


def _merge(left: Iterable[tuple[int, list[Any]]], right: Iterable[tuple[int, list[Any]]]
           ) -> Iterator[tuple[int, list[Any], list[Any]]]:
    """Joins two key-group-ordered streams of ``(key group, items)`` on the key group."""
    lit, rit = iter(left), iter(right)
    lcur, rcur = next(lit, None), next(rit, None)
    last = -1
    while lcur is not None or rcur is not None:
        kg = min(c[0] for c in (lcur, rcur) if c is not None)
        if kg <= last:
            raise VerificationError(f"key group {kg} appears twice or out of order")
        last = kg
        litems = lcur[1] if lcur is not None and lcur[0] == kg else []
        ritems = rcur[1] if rcur is not None and rcur[0] == kg else []
        if lcur is not None and lcur[0] == kg:
            lcur = next(lit, None)
        if rcur is not None and rcur[0] == kg:
            rcur = next(rit, None)
        yield kg, litems, ritems


def _key_serializer_bytes(header: KeyedBackendHeader) -> bytes | None:
    # None only for a header still being built; compared as such rather than failing with an AttributeError.
    return None if header.key_serializer is None else snapshot_bytes(header.key_serializer)


def _check_state_header(output: Savepoint, new_op: OperatorState, op_plan: OperatorPlan, rewrite: StateRewrite
                        ) -> bool:
    """The output's state list, this state's serializer snapshots and the key serializer are the declared ones;
    returns whether the state's entries are compared as bytes (kept) rather than values."""
    label = f"operator {op_plan.new_uid or op_plan.new_operator_id}"
    where = f"{label}, state {rewrite.new_name}"
    header = output.keyed_header(new_op)
    assert op_plan.new_header is not None and op_plan.old_header is not None
    if header is None:
        raise VerificationError(f"{label}: the output has no keyed state")
    if [s.name for s in header.states] != [s.name for s in op_plan.new_header.states]:
        raise VerificationError(f"{label}: states {[s.name for s in header.states]} in the output, expected "
                                f"{[s.name for s in op_plan.new_header.states]}")
    got, want = header.states[rewrite.new_id], op_plan.new_header.states[rewrite.new_id]
    if [(k, snapshot_bytes(s)) for k, s in got.serializers] != [(k, snapshot_bytes(s)) for k, s in want.serializers] \
            or got.backend_type != want.backend_type or list(got.options) != list(want.options):
        raise VerificationError(f"{where}: the written serializer snapshots or options are not the declared ones")
    if _key_serializer_bytes(header) != _key_serializer_bytes(op_plan.new_header):
        raise VerificationError(f"{label}: the written key serializer is not the declared one")
    return not rewrite.touches_values and op_plan.key_transform is None and \
        _key_serializer_bytes(op_plan.old_header) == _key_serializer_bytes(header)


def _verify_state(source: Savepoint, op: OperatorState, output: Savepoint, new_op: OperatorState,
                  op_plan: OperatorPlan, rewrite: StateRewrite, key_groups: KeyGroupRange | None = None
                  ) -> StateVerification:
    label = f"operator {op_plan.new_uid or op_plan.new_operator_id}"
    where = f"{label}, state {rewrite.new_name}"
    # a native source's entries have no canonical bytes to compare with: compared as values
    kept = _check_state_header(output, new_op, op_plan, rewrite) and not native_source(source, op)
    result = StateVerification(label.removeprefix("operator "), rewrite.new_name, "bytes" if kept else "values")
    if kept:
        blocks = _merge(_state_blocks(source, op, rewrite.old_name, key_groups),
                        _state_blocks(output, new_op, rewrite.new_name, key_groups))
        for kg, src_blocks, out_blocks in blocks:
            # A kept state's entries are one run per key group on both sides (Flink's writer emits a key group
            # state by state; the rewrite copies the run): equal runs of bytes are equal entries, in order. Any
            # other case is judged entry by entry, as multisets of (key, value) bytes.
            if len(src_blocks) == len(out_blocks) == 1:
                src_run, out_run = _span(src_blocks[0]), _span(out_blocks[0])
                if src_run is not None and src_run == out_run:
                    result.entries += src_run[1]
                    continue
            src_items = [pair for block in src_blocks for pair in state_pairs(*block)]
            out_items = [pair for block in out_blocks for pair in state_pairs(*block)]
            # Kept entries keep their order: equal lists are the common case, judged as multisets otherwise.
            if src_items != out_items and Counter(src_items) != Counter(out_items):
                missing = Counter(src_items) - Counter(out_items)
                extra = Counter(out_items) - Counter(src_items)
                raise VerificationError(f"{where}, key group {kg}: {sum(missing.values())} source entries missing "
                                        f"or changed, {sum(extra.values())} entries not in the source (stored "
                                        f"bytes compared)")
            result.entries += len(out_items)
        return result
    _verify_values(source, op, output, new_op, op_plan, rewrite, where, result, key_groups)
    return result


def _state_blocks(savepoint: Savepoint, op: OperatorState, state_name: str, key_groups: KeyGroupRange | None
                  ) -> Iterator[tuple[int, list[tuple[Any, bytes, int, int, int]]]]:
    """``(key group, [(stream, block bytes, key group, block offset, state id)])`` of the blocks that may hold one
    state, in key-group order, within ``key_groups`` (None: all): the arguments of :func:`state_pairs` (one block
    per key group: key-group ranges of subtasks are disjoint)."""
    for _, stream in savepoint.keyed_streams(op):
        if key_groups is not None and not len(stream.key_group_range.intersection(key_groups)):
            continue  # another subtask's range: not even its header is read
        state_id = stream.header().state_index(state_name)
        if state_id is None:
            continue  # this subtask never registered the state
        for key_group, start, end in stream.blocks:
            if key_groups is None or key_group in key_groups:
                yield key_group, [(stream, stream.read_block(key_group, start, end), key_group, start, state_id)]


def _span(block: tuple[Any, ...]) -> tuple[bytes, int] | None:
    """The bytes of one kept state's run of entries in a block and their number (compiled: None when the fast path
    is off or the entries are not one run)."""
    stream, data, key_group, _, state_id = block
    span = state_span(stream, data, key_group, state_id)
    return None if span is None else (data[span[0]:span[1]], span[2])


def _expected(op_plan: OperatorPlan, rewrite: StateRewrite, entry: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """The entry the declared migration makes of a source entry (None: dropped, or an emptied list, which is not
    stored). Raises what the transform raises (the entry is dead-lettered or the migration fails)."""
    if op_plan.key_transform is not None:
        entry = (op_plan.key_transform(entry[0]), *entry[1:])
    new = migrate_entry(rewrite, entry)
    if new is not None and rewrite.kind == "LIST" and not new[2]:
        return None
    return new


def _exact_source_entries(source: Savepoint, op: OperatorState, op_plan: OperatorPlan, rewrite: StateRewrite,
                          where: str, key_groups: KeyGroupRange | None = None
                          ) -> Iterator[tuple[int, list[tuple[Any, ...]]]]:
    """The source's entries of one state, decoded, each checked to re-encode to exactly the bytes Flink wrote: a
    codec that loses anything (a nanosecond, a NaN payload, a subclass) is caught here, before a migration that
    decodes the state can publish changed values that comparing decoded values alone would call equal."""
    assert op_plan.old_header is not None
    meta = op_plan.old_header.states[op_plan.rewrites.index(rewrite)]
    type_name = meta.value_serializer.type_name() if meta.value_serializer is not None else meta.kind
    for _, stream in source.keyed_streams(op):
        if key_groups is not None and not len(stream.key_group_range.intersection(key_groups)):
            continue
        local = stream.header()
        old_id = local.state_index(rewrite.old_name)
        if old_id is None:
            continue  # this subtask never registered the state
        identity = OperatorPlan(op_plan.source, op_plan.source.operator_id, op_plan.source.uid, local, local,
                                [StateRewrite(m.name, m.name, i, m.kind, None, None, False, True)
                                 for i, m in enumerate(local.states)])
        codec = StateCodec(identity, identity.rewrites[old_id], stream.prefix_bytes)  # type: ignore[arg-type]
        state_count = len(local.states)
        # Compiled (when built): a block's entries decoded in one pass, then re-encoded and compared with the
        # block's bytes in one pass. It only ever says "all exact"; anything else (a difference, a block it cannot
        # walk, the fast path off) reruns the reference below, entry by entry, which reports it.
        checker = reencode_checker(local.key_serializer, local.states[old_id], stream.prefix_bytes) \
            if local.key_serializer is not None else None
        for kg, start, end in stream.blocks:
            if key_groups is not None and kg not in key_groups:
                continue
            data = stream.read_block(kg, start, end, rewrite.old_name)
            if checker is not None:
                decoded = scan_compiled(codec.decode, data, kg, old_id, state_count, stream.prefix_bytes)
                try:
                    exact = decoded is not None and checker(data, kg, old_id, state_count, decoded) == -1
                except Exception:
                    exact = False
                if exact and decoded is not None:
                    if decoded:
                        yield kg, decoded
                    continue
            entries = []
            for sid, ks, ke, vs, ve in stream.raw_entries(data, kg, start):
                if sid != old_id:
                    continue
                try:
                    entry = codec.decode(data, ks, ke, vs, ve)
                    again = codec.encode_entry(entry, kg)
                except FlinkStateError:
                    raise
                except Exception as exc:
                    raise VerificationError(f"{where}, key group {kg}: a source entry cannot be decoded and "
                                            f"re-encoded ({type(exc).__name__}: {exc})") from None
                if again != (raw_key(data, ks, ke), data[vs:ve]):
                    raise VerificationError(f"{where}, key group {kg}: the source entry {show(entry)} does not "
                                            f"re-encode to the bytes Flink wrote: this tool's codec for {type_name} "
                                            f"would change it, so the state cannot be migrated exactly")
                entries.append(entry)
            if entries:
                yield kg, entries


def _verify_values(source: Savepoint, op: OperatorState, output: Savepoint, new_op: OperatorState,
                   op_plan: OperatorPlan, rewrite: StateRewrite, where: str, result: StateVerification,
                   key_groups: KeyGroupRange | None = None) -> None:
    canon = fast_canonical(canonical) or canonical  # compiled when built: the same forms
    # Written and expected entries compared pair by pair without building canonical forms (compiled when built;
    # it only says "equal" when the canonical forms are), canonical forms as multisets on any difference.
    same = fast_same_entries(canonical) or (lambda want, got: same_entries_reference(want, got, canon))
    rekeyed = op_plan.key_transform is not None
    key_snapshot = op_plan.new_header.key_serializer if op_plan.new_header is not None else None

    def expected_groups() -> Iterator[tuple[int, list[Any]]]:
        # a native source's entries are read by its own readers (verify_native), each checked exact as below
        entries_of = native_source_entries if native_source(source, op) else _exact_source_entries
        for kg, entries in entries_of(source, op, op_plan, rewrite, where, key_groups):
            items = []
            for entry in entries:
                try:
                    new_entry = _expected(op_plan, rewrite, entry)
                except Exception as exc:
                    if not (rewrite.dead_letter or (rekeyed and op_plan.key_dead_letter)):
                        raise VerificationError(f"{where}, key group {kg}: the declared migration fails on the "
                                                f"source entry {show(entry)} ({type(exc).__name__}: {exc}) and "
                                                f"the state's policy is fail") from None
                    result.dead_lettered += 1
                    continue
                if new_entry is None:
                    result.dropped += 1
                    continue
                items.append(new_entry)
            yield kg, items

    def written_groups() -> Iterator[tuple[int, list[Any]]]:
        for kg, entries in output.iter_key_groups(new_op, rewrite.new_name, key_groups):
            if rekeyed and key_snapshot is not None:
                for entry in entries:
                    want = assign_key_group(key_snapshot.hash_code(entry[0]), new_op.max_parallelism)
                    if want != kg:
                        raise VerificationError(f"{where}: key {show(entry[0])} is stored in key group {kg}, "
                                                f"Flink assigns it to {want}")
            yield kg, entries

    if rekeyed:
        # Keys move between key groups: compare the whole state (its size bounds the memory, as the rekey does).
        want_all = Counter(canon(item) for _, items in expected_groups() for item in items)
        got_all = Counter(canon(item) for _, items in written_groups() for item in items)
        _compare(want_all, got_all, where)
        result.entries = sum(got_all.values())
        return
    for kg, want, got in _merge(expected_groups(), written_groups()):
        # The rewrite keeps the source's order within a key group, so equal lists are the common case and cost a
        # fraction of two multisets; any difference (or another order) is judged as multisets of canonical forms.
        if same(want, got) != -1:
            _compare(Counter(map(canon, want)), Counter(map(canon, got)), f"{where}, key group {kg}")
        result.entries += len(got)


def _compare(want: Counter[Any], got: Counter[Any], where: str) -> None:
    if want == got:
        return
    missing, extra = want - got, got - want
    detail = []
    if missing:
        example = show(uncanonical(next(iter(missing))))
        detail.append(f"expected {sum(missing.values())} entries not found (e.g. {example})")
    if extra:
        detail.append(f"{sum(extra.values())} written entries not expected (e.g. "
                      f"{show(uncanonical(next(iter(extra))))})")
    raise VerificationError(f"{where}: {'; '.join(detail)} (values decoded from the written bytes compared with "
                            f"the declared migration of the source's)")


__all__ = ["StateVerification", "VerificationError", "VerificationReport", "canonical", "verify_key_groups",
           "verify_metadata_level", "verify_migration"]

