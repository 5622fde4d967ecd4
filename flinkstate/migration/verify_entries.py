"""The keyed-entry half of the verifier (:mod:`flinkstate.migration.verify`): the entries of one targeted operator,
per state and key group. Kept states are compared as stored bytes (one run per key group when both sides have one,
multisets of (key, value) bytes otherwise); migrated states as values decoded from the written bytes against the
declared transform of the source's entries, each source entry checked to re-encode to exactly Flink's bytes; and
nothing stored that no state accounts for."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from flinkstate._speedups import (
    block_runs,
    fast_canonical,
    fast_same_entries,
    reencode_checker,
    same_entries_reference,
    scan_compiled,
    state_pairs,
    state_span,
)
from flinkstate._speedups.runs import block_comparer, expected_blocker, expected_run
from flinkstate.binary import KeyGroupRange, assign_key_group
from flinkstate.errors import FlinkStateError, printable
from flinkstate.format.keyed_header import KeyedBackendHeader
from flinkstate.format.keyed_stream import raw_key
from flinkstate.format.metadata import OperatorState
from flinkstate.format_errors import SavepointFormatError
from flinkstate.migration.canonical import canonical, show, uncanonical
from flinkstate.migration.collector import collector_deferred
from flinkstate.migration.entry_codec import StateCodec, migrate_entry
from flinkstate.migration.plan import DROP, MigrationPlan, OperatorPlan, StateRewrite
from flinkstate.migration.verify_errors import VerificationError
from flinkstate.migration.verify_native import native_source, native_source_entries
from flinkstate.progress import track
from flinkstate.savepoint import Savepoint
from flinkstate.serializers.kryo import kryo_snapshots, set_kryo_layouts
from flinkstate.serializers.registry import snapshot_bytes


@dataclass
class StateVerification:
    operator: str
    state: str
    mode: str  # "bytes" (kept) or "values" (migrated)
    entries: int = 0
    dead_lettered: int = 0
    dropped: int = 0


@collector_deferred()  # the hot loop: no full collections walking its lists (see the module)
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
        _share_kryo_layouts(output, new_op, op_plan)
        states, verified = [], 0
        rewrites = op_plan.rewrites if key_groups is not None else track(
            op_plan.rewrites, total=len(op_plan.rewrites), description=f"verify {label}", unit="states")
        for rewrite in rewrites:
            if rewrite is not None:
                state = _verify_state(source, op, output, new_op, op_plan, rewrite, key_groups)
                states.append(state)
                verified += state.entries
        # Nothing extra: every stored entry belongs to a state just compared.
        stored = _stored_entries(output, new_op, key_groups)
        if stored != verified:
            where = "" if key_groups is None else f", key groups {key_groups}"
            raise VerificationError(f"operator {label}{where}: {stored} entries stored, {verified} accounted for by "
                                    f"its states")
        return states
    except VerificationError as exc:  # say which savepoints were compared
        raise VerificationError(f"{output.location.uri} against its source {source.location.uri}: {exc}") from None
    except SavepointFormatError as exc:
        # An output block that does not decode is a difference too (the error names its file); the source's own
        # errors (a block over the decompression budget, say) stay what they are: the source's, not the output's.
        written = output.location.describe("_metadata").rsplit("/", 1)[0] + "/"
        if exc.path is None or not str(exc.path).startswith(written):
            raise
        raise VerificationError(f"{output.location.uri} against its source {source.location.uri}: operator "
                                f"{label}: unreadable: {exc}") from None



def _share_kryo_layouts(output: Savepoint, new_op: OperatorState, op_plan: OperatorPlan) -> None:
    """A Flink 1.x -> 2.x migration's user-class layouts (an input, as the manifest is) on the output's Kryo
    serializers, so that its Kryo 5 records of user classes are read with the new version's layouts, as Flink 2.x
    reads them, and their values compared with the source's read with the old ones."""
    if op_plan.new_header is None:
        return
    planned = {meta.name: meta for meta in op_plan.new_header.states}
    for _, stream in output.keyed_streams(new_op):
        for meta in stream.header().states:
            plan_meta = planned.get(meta.name)
            serializers = [plan_meta.value_serializer, plan_meta.user_key_serializer] if plan_meta else []
            layouts = next((k.kryo_layouts for k in kryo_snapshots(serializers) if k.kryo_layouts), None)
            if layouts is not None:
                set_kryo_layouts([meta.value_serializer, meta.user_key_serializer], layouts)


def _stored_entries(savepoint: Savepoint, op: OperatorState, key_groups: KeyGroupRange | None) -> int:
    """How many entries the operator's blocks store within ``key_groups`` (None: all), whatever their state: counted
    run by run in one compiled walk per block, without building any bytes, else (the fast path off, or a block it
    refuses) as the reference walk finds them, which reports a malformed block naming its file."""
    total = 0
    for _, stream in savepoint.keyed_streams(op):
        if key_groups is not None and not len(stream.key_group_range.intersection(key_groups)):
            continue  # another subtask's range: not even its header is read
        for key_group, start, end in stream.blocks:
            if key_groups is not None and key_group not in key_groups:
                continue
            data = stream.read_block(key_group, start, end)
            runs = block_runs(stream, data, key_group)
            total += sum(run[3] for run in runs) if runs is not None else \
                len(state_pairs(stream, data, key_group, start, None))
    return total


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


def check_state_header(output: Savepoint, new_op: OperatorState, op_plan: OperatorPlan, rewrite: StateRewrite
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
    kept = check_state_header(output, new_op, op_plan, rewrite) and not native_source(source, op)
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
                          where: str, key_groups: KeyGroupRange | None = None, migrated: bool = False
                          ) -> Iterator[tuple[int, list[tuple[Any, ...]], bool]]:
    """The source's entries of one state, decoded, each checked to re-encode to exactly the bytes Flink wrote: a
    codec that loses anything (a nanosecond, a NaN payload, a subclass) is caught here, before a migration that
    decodes the state can publish changed values that comparing decoded values alone would call equal. With
    ``migrated``, a block whose every entry the compiled step decodes, checks and migrates (``rewrite``'s
    transform) in one pass comes migrated (True: the expected entries), any other as its source entries (False)."""
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
        expect = expected_blocker(local.key_serializer, local.states[old_id], stream.prefix_bytes) \
            if migrated and local.key_serializer is not None else None
        for kg, start, end in stream.blocks:
            if key_groups is not None and kg not in key_groups:
                continue
            data = stream.read_block(kg, start, end, rewrite.old_name)
            if expect is not None:
                expected = expect(codec.decode, data, kg, old_id, state_count, rewrite.transform, DROP)
                if expected is not None:
                    if expected:
                        yield kg, expected, True
                    continue
            if checker is not None:
                decoded = scan_compiled(codec.decode, data, kg, old_id, state_count, stream.prefix_bytes)
                try:
                    exact = decoded is not None and checker(data, kg, old_id, state_count, decoded) == -1
                except Exception:
                    exact = False
                if exact and decoded is not None:
                    if decoded:
                        yield kg, decoded, False
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
                stored = (raw_key(data, ks, ke), data[vs:ve])
                # a null MAP value: Flink's HashMap savepoints may hold the serializer's null after the flag
                if again != stored and not (again == (stored[0], b"\x01") and stored[1] in codec.null_map_values()):
                    raise VerificationError(f"{where}, key group {kg}: the source entry {show(entry)} does not "
                                            f"re-encode to the bytes Flink wrote: this tool's codec for {type_name} "
                                            f"would change it, so the state cannot be migrated exactly")
                entries.append(entry)
            if entries:
                yield kg, entries, False


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
        # compiled: the declared migration of a block's entries in one pass (None leaves them to the loop below)
        compiled = not rekeyed and rewrite.user_key_transform is None and not rewrite.runs_code
        # a native source's entries are read by its own readers (verify_native), each checked exact as below
        groups = ((kg, entries, False) for kg, entries in native_source_entries(
            source, op, op_plan, rewrite, where, key_groups)) if native_source(source, op) else \
            _exact_source_entries(source, op, op_plan, rewrite, where, key_groups, migrated=compiled)
        for kg, entries, migrated in groups:
            if migrated:
                yield kg, entries
                continue
            expected = expected_run(entries, rewrite.kind, rewrite.transform, DROP) if compiled else None
            if expected is not None:
                yield kg, expected
                continue
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
    def written_blocks() -> Iterator[tuple[int, list[tuple[Any, ...]]]]:
        """(key group, [(stream, block bytes, state id, entry decoder)]) of the output's blocks (one per key group:
        key-group ranges of subtasks are disjoint), decoded only where the compiled comparison does not decide."""
        for _, stream in output.keyed_streams(new_op):
            if key_groups is not None and not len(stream.key_group_range.intersection(key_groups)):
                continue
            state_id = stream.header().state_index(rewrite.new_name)
            if state_id is None:
                continue
            decoder = None if stream.heap_format else stream.entry_decoder(rewrite.new_name)
            for kg, start, end in ([] if decoder is None else stream.blocks):
                if key_groups is None or kg in key_groups:
                    yield kg, [(stream, stream.read_block(kg, start, end, rewrite.new_name), state_id, decoder)]
            if decoder is None:  # not this tool's output: decoded by the reference
                yield from ((kg, [(stream, None, state_id, None)])
                            for kg, _ in stream.iter_blocks(rewrite.new_name, key_groups))

    compare = block_comparer(canonical)
    for kg, want, blocks in _merge(expected_groups(), written_blocks()):
        # The rewrite keeps the source's order within a key group, so equal lists are the common case: compared
        # entry by entry as the block is decoded (compiled), else as decoded lists, and any difference (or another
        # order) is judged as multisets of canonical forms.
        if compare is not None and len(blocks) == 1 and blocks[0][3] is not None:
            stream, data, state_id, decoder = blocks[0]
            if compare(decoder, data, kg, state_id, len(stream.header().states), stream.prefix_bytes, want) == -1:
                result.entries += len(want)
                continue
        got = [entry for stream, *_ in blocks
               for _, entries in stream.iter_blocks(rewrite.new_name, KeyGroupRange(kg, kg)) for entry in entries]
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


__all__ = ["StateVerification", "check_state_header", "verify_key_groups"]
