"""The migration engine: "migrate one (operator, subtask) keyed stream" + "assemble the metadata".

Both halves are deterministic functions of (source savepoint, plan), so a Spark job can run
:func:`migrate_subtask` once per (operator, subtask) in parallel and :func:`assemble_metadata` once on the driver,
and get the same bytes as :func:`migrate_savepoint`, which does everything in one process::

    plan = plan_migration(source, targets)                       # MigrationPlan, built once
    for operator_id, subtask in plan.units():                    # the parallel units
        result = migrate_subtask(source, plan, operator_id, subtask, output)   # -> SubtaskResult
    metadata = assemble_metadata(source, plan, results, output, version)       # copies the rest, writes _metadata

Keyed streams are rewritten block by block in the source's order: entries of states that are not migrated keep
their bytes, migrated states are decoded with the old snapshot's codec, transformed, and encoded with the new one.
When the key changes, entries move to the key group Flink hashes the new key to, which may belong to another
subtask: then each subtask reads the operator's every stream and keeps its own key groups.
"""

from __future__ import annotations

import copy
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from flinkstate.binary import KeyGroupRange, assign_key_group, encode_varint_le
from flinkstate.errors import FlinkStateError
from flinkstate.format.handles import KeyGroupsStateHandle
from flinkstate.format.keyed_entries import KeyLayout, make_entry_decoder
from flinkstate.format.keyed_header import TIMERS, VALUE_SERIALIZER, KeyedBackendHeader, StateMetaInfo
from flinkstate.format.keyed_stream import (
    KeyedStateStream,
    KeyedStreamWriter,
    encode_block,
    keyed_stream_file_name,
    raw_key,
)
from flinkstate.format.metadata import CheckpointMetadata, OperatorState, OperatorSubtaskState, write_metadata
from flinkstate.format_errors import SavepointFormatError
from flinkstate.identity import OperatorRef
from flinkstate.jsonify import to_json
from flinkstate.migration.assemble import CopiedFile, copy_stream_handle
from flinkstate.migration.spec import NO_MIGRATION, StateMigration
from flinkstate.migration.transforms import (
    CodeNotAllowed,
    CodePolicy,
    MigrationPlanError,
    RowNames,
    Transform,
    build_transform,
    chain,
    conversion,
    load_function,
)
from flinkstate.savepoint import Savepoint
from flinkstate.serializers.base import TypeSerializerSnapshot
from flinkstate.serializers.registry import snapshot_bytes
from flinkstate.serializers.timer import Timer
from flinkstate.storage.outputs import SavepointOutput

#: A user function returns this to drop an entry.
DROP = object()


class MigrationError(FlinkStateError):
    """A migration run failed (bad plan, or an entry failed under the ``fail`` policy)."""


class CodeRefused(MigrationError):
    """The manifest names a migration function that the code policy does not allow (nothing was imported)."""


# --------------------------------------------------------------------------------------------------------------------
# What the new version wants (built from the manifest, or directly in Python)
# --------------------------------------------------------------------------------------------------------------------


@dataclass
class StateTarget:
    """One keyed state of the new version. ``value`` / ``user_key`` are the new snapshots of the stored value
    (the element for LIST, the user value for MAP) and of MapState user keys; None keeps the old ones. ``key`` is
    the operator's new key snapshot (every state of the operator must agree)."""

    name: str
    value: TypeSerializerSnapshot | None = None
    user_key: TypeSerializerSnapshot | None = None
    key: TypeSerializerSnapshot | None = None
    migration: StateMigration = NO_MIGRATION
    renamed_from: str | None = None
    row_names: RowNames = field(default_factory=dict)


@dataclass
class OperatorTarget:
    """One operator of the new version. ``uid`` names it as a user does: a uid, or a 32-hex operator id (kept as
    it is, never hashed: see :mod:`flinkstate.identity`)."""

    uid: str
    renamed_from: str | None = None  # the old uid (or 32-hex operator id)
    states: list[StateTarget] = field(default_factory=list)
    dropped_states: list[str] = field(default_factory=list)

    @property
    def ref(self) -> OperatorRef:
        return OperatorRef.parse(self.uid)


# --------------------------------------------------------------------------------------------------------------------
# The compiled plan
# --------------------------------------------------------------------------------------------------------------------


@dataclass
class StateRewrite:
    """How one old state becomes one new state."""

    old_name: str
    new_name: str
    new_id: int
    kind: str
    transform: Transform | None  # None: values keep their bytes
    user_key_transform: Transform | None
    dead_letter: bool
    reencode: bool  # decode and encode even without a transform (identity rewrite)

    @property
    def touches_values(self) -> bool:
        return self.reencode or self.transform is not None or self.user_key_transform is not None


@dataclass
class OperatorPlan:
    source: OperatorState
    new_operator_id: str
    new_uid: str | None
    old_header: KeyedBackendHeader | None
    new_header: KeyedBackendHeader | None
    rewrites: list[StateRewrite | None]  # by old state id; None = dropped
    key_transform: Transform | None = None
    key_dead_letter: bool = False

    @property
    def rewrites_stream(self) -> bool:
        if self.old_header is None or self.new_header is None:
            return False
        return (self.key_transform is not None or any(r is None or r.touches_values or r.new_id != i
                                                      for i, r in enumerate(self.rewrites))
                or self.old_header.write() != self.new_header.write())


@dataclass
class MigrationPlan:
    operators: dict[str, OperatorPlan]  # by source operator id; only operators with a target
    compressed: bool | None = None  # None: as the source

    def units(self) -> list[tuple[str, int]]:
        """(source operator id, subtask) of every keyed stream that is rewritten: the parallel work units."""
        return [(op_id, subtask) for op_id, plan in sorted(self.operators.items()) if plan.rewrites_stream
                for subtask in sorted(plan.source.subtasks) if plan.source.subtasks[subtask].managed_keyed_state]


def _with_nested(snapshot: TypeSerializerSnapshot, nested: list[TypeSerializerSnapshot]) -> TypeSerializerSnapshot:
    """A copy of a composite snapshot (List, Map, Timer) with other nested snapshots."""
    clone = copy.copy(snapshot)
    clone._nested = list(nested)  # type: ignore[attr-defined]
    clone._decoder = clone._encoder = None
    return clone


def _new_meta(meta: StateMetaInfo, name: str, value: TypeSerializerSnapshot | None,
              user_key: TypeSerializerSnapshot | None, key: TypeSerializerSnapshot | None) -> StateMetaInfo:
    serializers = []
    for skey, snap in meta.serializers:
        if skey == VALUE_SERIALIZER and meta.kind == TIMERS and key is not None:
            snap = _with_nested(snap, [key, snap.nested[1]])
        elif skey == VALUE_SERIALIZER and meta.backend_type == "KEY_VALUE" and meta.kind == "LIST" and value:
            snap = _with_nested(snap, [value])
        elif skey == VALUE_SERIALIZER and meta.backend_type == "KEY_VALUE" and meta.kind == "MAP" \
                and (value or user_key):
            snap = _with_nested(snap, [user_key or snap.nested[0], value or snap.nested[1]])
        elif skey == VALUE_SERIALIZER and value is not None:
            snap = value
        elif skey == "USER_KEY_SERIALIZER" and user_key is not None:
            snap = user_key
        serializers.append((skey, snap))
    return StateMetaInfo(name, meta.backend_type, list(meta.options), serializers)


def plan_migration(source: Savepoint, targets: list[OperatorTarget], *, compressed: bool | None = None,
                   reencode: bool = False, code: CodePolicy | None = None) -> MigrationPlan:
    """Compiles the targets against the source savepoint. ``reencode`` decodes and re-encodes every entry of every
    targeted operator even where nothing changes (the identity rewrite). ``code`` says which migration functions
    may be imported (default: ``$FLINKSTATE_ALLOW_CODE``, else none): a manifest is data, its functions are code."""
    code = CodePolicy.resolve(None) if code is None else code
    plans: dict[str, OperatorPlan] = {}
    for target in targets:
        old_ref = target.renamed_from or target.uid
        op = source.operator(old_ref)
        if op.operator_id in plans:
            raise MigrationError(f"operator {old_ref} is the target of two entries")
        plans[op.operator_id] = _plan_operator(source, op, target, reencode, code)
    return MigrationPlan(plans, compressed)


def _plan_operator(source: Savepoint, op: OperatorState, target: OperatorTarget, reencode: bool,
                   code: CodePolicy) -> OperatorPlan:
    label = f"operator {target.uid}"
    header = source.keyed_header(op)
    streams = source.keyed_streams(op)
    # Where the savepoint's serializer snapshots were read: a plan that cannot be made names that file.
    where = f"{streams[0][1].source.path}: " if streams else ""
    new_ref = target.ref
    new_id = new_ref.operator_id
    if new_ref.uid is None:
        # Named by its id: the uid the metadata records (V5+) stays while the id does.
        new_uid = op.uid if new_id == op.operator_id else None
    else:
        new_uid = new_ref.uid if (op.uid is not None or target.renamed_from) else op.uid
    if header is None:
        if target.states or target.dropped_states:
            raise MigrationError(f"{label}: the savepoint holds no keyed state for it")
        return OperatorPlan(op, new_id, new_uid, None, None, [])
    by_old_name = {(t.renamed_from or t.name): t for t in target.states}
    known = {s.name for s in header.states}
    for name in [*by_old_name, *target.dropped_states]:
        if name not in known:
            raise MigrationError(f"{label}: no state {name!r} in the savepoint (states: {', '.join(sorted(known))})")
    keys = {snapshot_bytes(t.key): t for t in target.states if t.key is not None}
    if len(keys) > 1:
        raise MigrationError(f"{label}: states declare different new key types")
    key_target = next(iter(keys.values()), None)
    new_key = key_target.key if key_target is not None else None
    key_transform: Transform | None = None
    if new_key is not None and header.key_serializer is not None:
        assert key_target is not None
        try:
            if key_target.migration.key is not None:
                key_transform = conversion(key_target.migration.key, header.key_serializer, new_key)
            elif snapshot_bytes(new_key) != snapshot_bytes(header.key_serializer):
                raise MigrationPlanError(f"the key type changed from {header.key_serializer.type_name()} to "
                                         f"{new_key.type_name()}: declare key: {{convert: ...}}")
        except MigrationPlanError as exc:
            raise MigrationError(f"{where}{label}: key: {exc}") from None
    rewrites: list[StateRewrite | None] = []
    new_states: list[StateMetaInfo] = []
    for meta in header.states:
        if meta.name in target.dropped_states:
            rewrites.append(None)
            continue
        t = by_old_name.get(meta.name)
        new_name = t.name if t is not None else meta.name
        value_t = user_key_t = None
        if t is not None and meta.kind != TIMERS:
            try:
                value_t, user_key_t = _state_transforms(meta, t, code)
            except CodeNotAllowed as exc:
                raise CodeRefused(f"{label}, state {meta.name}: {exc}") from None
            except MigrationPlanError as exc:
                raise MigrationError(f"{where}{label}, state {meta.name}: {exc}") from None
        rewrites.append(StateRewrite(meta.name, new_name, len(new_states), meta.kind, value_t, user_key_t,
                                     bool(t and t.migration.dead_letter), reencode))
        new_states.append(_new_meta(meta, new_name, t.value if t else None, t.user_key if t else None, new_key))
    names = [s.name for s in new_states]
    if len(set(names)) != len(names):
        raise MigrationError(f"{label}: two states would be named alike after renaming: {names}")
    new_header = KeyedBackendHeader(header.version, header.compressed, new_key or header.key_serializer, new_states)
    return OperatorPlan(op, new_id, new_uid, header, new_header, rewrites, key_transform,
                        bool(key_target and key_target.migration.dead_letter))


def _state_transforms(meta: StateMetaInfo, target: StateTarget,
                      code: CodePolicy) -> tuple[Transform | None, Transform | None]:
    old_value = meta.value_serializer
    assert old_value is not None
    spec = target.migration
    value_t = build_transform(old_value, target.value or old_value, rules=spec.fields, convert=spec.value,
                              row_names=target.row_names)
    if spec.function is not None:
        value_t = chain(value_t, load_function(spec.function, code))
    user_key_t = None
    if meta.kind == "MAP":
        old_uk = meta.user_key_serializer
        assert old_uk is not None
        user_key_t = build_transform(old_uk, target.user_key or old_uk, convert=spec.user_key)
    elif spec.user_key is not None:
        raise MigrationPlanError("user_key applies to MapState only")
    return value_t, user_key_t


def plan_value_migration(old: TypeSerializerSnapshot, new: TypeSerializerSnapshot, migration: StateMigration,
                         row_names: RowNames | None = None) -> tuple[bool, str]:
    """Whether ``migration`` turns stored values of ``old`` into ``new``, and why (not). A migration function is
    not imported here (the check runs no user code): it is judged at ``migrate`` time and by the dry run."""
    try:
        transform = build_transform(old, new, rules=migration.fields, convert=migration.value, row_names=row_names)
    except MigrationPlanError as exc:
        if migration.function is not None and "cannot load" not in str(exc):
            return True, f"the function {migration.function} maps old values to new ones"
        return False, str(exc)
    if transform is None and migration.function is None:
        return True, "no change"
    # Values are decoded with the old serializer and encoded with the new one: both codecs must exist.
    try:
        old.decoder()
        new.encoder()
    except (NotImplementedError, FlinkStateError) as exc:
        return False, f"the values must be decoded and re-encoded, which this tool cannot do: {exc}"
    if migration.function is not None:
        return True, (f"the function {migration.function} maps old values to new ones (it is code: imported only "
                      f"by migrate or a dry run given --allow-code)")
    return True, "migrated by flinkstate migrate"


# --------------------------------------------------------------------------------------------------------------------
# One subtask
# --------------------------------------------------------------------------------------------------------------------


@dataclass
class StateCount:
    read: int = 0
    written: int = 0
    dead_lettered: int = 0


@dataclass
class SubtaskResult:
    operator_id: str  # the source operator id
    subtask: int
    handle: KeyGroupsStateHandle | None
    counts: dict[str, StateCount]  # by new state name
    dead_letters: list[dict[str, Any]]


def migrate_entry(rewrite: StateRewrite, entry: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """The declared migration of one entry tuple (the reader's shape, its key already rewritten if the key changes):
    the new entry, or None when a function dropped it. Raises what a transform raises. The engine writes what this
    returns, and the verifier compares the written entries with it."""
    if rewrite.kind == TIMERS:
        return entry
    if rewrite.kind == "MAP":
        key, ns, user_key, value = entry
        if rewrite.user_key_transform is not None:
            user_key = rewrite.user_key_transform(user_key)
        if rewrite.transform is not None and value is not None:
            value = rewrite.transform(value)
            if value is DROP:
                return None
        return key, ns, user_key, value
    key, ns, value = entry
    if rewrite.transform is not None:
        if rewrite.kind == "LIST":
            value = [v for v in map(rewrite.transform, value) if v is not DROP]
        else:
            value = rewrite.transform(value)
            if value is DROP:
                return None
    return key, ns, value


class _Rekeyed(Exception):
    """Internal: an entry's new key group is outside this subtask (rekey mode)."""


class StateCodec:
    """Decode (old) and encode (new) of one state's entries: the reader's entry decoder and its mirror. With a plan
    whose old and new headers are the same, it is the state's own codec (the verifier's round-trip check)."""

    def __init__(self, plan: OperatorPlan, rewrite: StateRewrite, prefix_bytes: int) -> None:
        assert plan.old_header is not None and plan.new_header is not None
        old_meta = plan.old_header.states[plan.rewrites.index(rewrite)]
        new_meta = plan.new_header.states[rewrite.new_id]
        self.rewrite = rewrite
        self.prefix_bytes = prefix_bytes
        self.decode = make_entry_decoder(old_meta, _layout(plan.old_header, old_meta, prefix_bytes))
        key_snap, ns_snap = plan.new_header.key_serializer, new_meta.namespace_serializer
        assert key_snap is not None and ns_snap is not None
        self.key_hash = key_snap.hash_code
        key_enc, ns_enc = key_snap.encoder(), ns_snap.encoder()
        ambiguous = key_snap.fixed_length < 0 and ns_snap.fixed_length < 0

        def key_ns(key: Any, namespace: Any, out: bytearray) -> None:
            start = len(out)
            key_enc(key, out)
            if ambiguous:
                out += encode_varint_le(len(out) - start)
            start = len(out)
            ns_enc(namespace, out)
            if ambiguous:
                out += encode_varint_le(len(out) - start)

        self.key_ns = key_ns
        value = new_meta.value_serializer
        assert value is not None
        self.value_enc = value.encoder()
        user_key = new_meta.user_key_serializer
        self.user_key_enc = user_key.encoder() if user_key is not None else None

    def prefix(self, key_group: int) -> bytes:
        return key_group.to_bytes(self.prefix_bytes, "big")

    def encode_entry(self, entry: tuple[Any, ...], key_group: int, raw_key: bytes | None = None
                     ) -> tuple[bytes, bytes] | None:
        """The stored (key, value) bytes of an entry tuple (the reader's shape); ``raw_key`` keeps a key's bytes.
        None when nothing is stored (an empty list)."""
        kind = self.rewrite.kind
        if kind == TIMERS:
            key, ns, timestamp = entry
            out = bytearray(self.prefix(key_group))
            self.value_enc(Timer(timestamp, key, ns), out)  # the timer serializer encodes the whole key
            return bytes(out), b""
        value = entry[3] if kind == "MAP" else entry[2]
        value_bytes = self.encode_value(value)
        if value_bytes is None:
            return None
        if raw_key is not None:
            return raw_key, value_bytes
        out = bytearray(self.prefix(key_group))
        self.key_ns(entry[0], entry[1], out)
        if kind == "MAP":
            assert self.user_key_enc is not None
            self.user_key_enc(entry[2], out)
        return bytes(out), value_bytes

    def encode_value(self, value: Any) -> bytes | None:
        """The stored value bytes; None when nothing is stored (an empty list)."""
        out = bytearray()
        kind = self.rewrite.kind
        if kind == "LIST":
            if not value:
                return None
            enc = self.value_enc
            for i, item in enumerate(value):
                if i:
                    out.append(0x2C)
                enc(item, out)
        elif kind == "MAP":
            if value is None:
                out.append(1)
            else:
                out.append(0)
                self.value_enc(value, out)
        elif kind == TIMERS:
            return b""
        else:
            self.value_enc(value, out)
        return bytes(out)


def _layout(header: KeyedBackendHeader, meta: StateMetaInfo, prefix_bytes: int) -> KeyLayout:
    key, namespace = header.key_serializer, meta.namespace_serializer
    assert key is not None and namespace is not None
    return KeyLayout(prefix_bytes, key.decoder(), namespace.decoder(),
                     key.fixed_length < 0 and namespace.fixed_length < 0)


class _SubtaskMigrator:
    def __init__(self, source: Savepoint, plan: OperatorPlan, subtask: int) -> None:
        self.source = source
        self.subtask = subtask
        self.streams = dict(source.keyed_streams(plan.source))
        self.stream = self.streams[subtask]
        # Each stream's blocks use its own header's state ids. In place, a subtask keeps its own state list; rekeyed,
        # entries come from every stream, so the output lists every state and each stream's ids are mapped.
        if plan.key_transform is None:
            plan = localize(plan, self.stream.header())
        assert plan.old_header is not None
        union_index = {state.name: i for i, state in enumerate(plan.old_header.states)}
        self.stream_ids = {index: [union_index[state.name] for state in stream.header().states]
                           for index, stream in self.streams.items()} if plan.key_transform is not None else {}
        self.plan = plan
        self.prefix_bytes = self.stream.prefix_bytes
        # Only states whose entries are decoded need codecs: a state kept as bytes may have none (Kryo, unknown).
        self.codecs = [StateCodec(plan, r, self.prefix_bytes) if r is not None and (r.touches_values or
                       plan.key_transform is not None) else None for r in plan.rewrites]
        assert plan.new_header is not None
        self.counts = {s.name: StateCount() for s in plan.new_header.states}
        self.dead_letters: list[dict[str, Any]] = []
        self.label = f"operator {plan.new_uid or plan.new_operator_id}"
        #: Dry runs count every failure, whatever the error policy, and keep only the first few as examples.
        self.collect_failures = False
        self.max_examples: int | None = None

    def _failed(self, rewrite: StateRewrite, entry: tuple[Any, ...] | None, key_group: int, exc: Exception,
                dead_letter: bool) -> None:
        key = entry[0] if entry else None
        if not dead_letter and not self.collect_failures:
            raise MigrationError(f"{self.label}, state {rewrite.old_name}, key {to_json(key)!r} (key group "
                                 f"{key_group}): {type(exc).__name__}: {exc}") from exc
        record = {"operator": self.plan.new_uid or self.plan.new_operator_id, "state": rewrite.old_name,
                  "key_group": key_group, "key": to_json(key),
                  "namespace": to_json(entry[1]) if entry else None, "error": f"{type(exc).__name__}: {exc}"}
        if entry is not None and rewrite.kind == "MAP":
            record["user_key"] = to_json(entry[2])
        if self.collect_failures:
            record["on_error"] = "dead-letter" if dead_letter else "fail"
        if self.max_examples is None or len(self.dead_letters) < self.max_examples:
            self.dead_letters.append(record)
        self.counts[rewrite.new_name].dead_lettered += 1

    def _decode(self, codec: StateCodec, data: bytes, span: tuple[int, int, int, int], key_group: int,
                stream: KeyedStateStream | None = None) -> tuple[Any, ...]:
        """One stored entry, decoded with the old serializers. Bytes that do not decode are a format error naming
        the file, the operator, the state and the key group: never a failed conversion (no dead letter hides it)."""
        try:
            return codec.decode(data, *span)
        except SavepointFormatError as exc:
            what = exc.what
        except (struct.error, IndexError, ValueError, UnicodeDecodeError, KeyError, OverflowError) as exc:
            what = f"undecodable entry ({type(exc).__name__}: {exc})"
        source = (stream or self.stream).source.path
        raise SavepointFormatError(f"{self.label}, state {codec.rewrite.old_name}, key group {key_group}: {what}",
                                   source) from None

    def _convert(self, codec: StateCodec, entry: tuple[Any, ...]) -> tuple[Any, ...] | None:
        return migrate_entry(codec.rewrite, entry)

    def _encode(self, codec: StateCodec, entry: tuple[Any, ...], key_group: int, raw_key: bytes | None
                ) -> tuple[bytes, bytes] | None:
        return codec.encode_entry(entry, key_group, raw_key)

    # -- the common case: keys stay where they are ---------------------------------------------------------------

    def run_in_place(self, writer: KeyedStreamWriter) -> None:
        stream, plan = self.stream, self.plan
        recompress = plan.new_header.compressed != plan.old_header.compressed  # type: ignore[union-attr]
        only_copies = not recompress and all(r is not None and not r.touches_values and r.new_id == i
                                             for i, r in enumerate(plan.rewrites))
        for key_group, start, end in stream.blocks:
            if only_copies:
                # No state of this operator changes its bytes: the stored block is copied as it is (only the
                # header changed), but still scanned for the entry counts.
                raw = stream.source.read(start, end - start)
                self._count_block(stream.read_block(key_group, start, end), key_group, start)
                writer.write_raw_block(key_group, raw)
                continue
            data = stream.read_block(key_group, start, end)
            writer.write_block(key_group, encode_block(self._rewrite_block(data, key_group, start)))

    def _count_block(self, data: bytes, key_group: int, block_offset: int) -> None:
        for state_id, *_ in self.stream.raw_entries(data, key_group, block_offset):
            rewrite = self.plan.rewrites[state_id]
            assert rewrite is not None
            count = self.counts[rewrite.new_name]
            count.read += 1
            count.written += 1

    def _rewrite_block(self, data: bytes, key_group: int, block_offset: int
                       ) -> list[tuple[int, list[tuple[bytes, bytes]]]]:
        runs: list[tuple[int, list[tuple[bytes, bytes]]]] = []
        rewrites, codecs = self.plan.rewrites, self.codecs
        for state_id, ks, ke, vs, ve in self.stream.raw_entries(data, key_group, block_offset):
            rewrite = rewrites[state_id]
            if rewrite is None:
                continue
            count = self.counts[rewrite.new_name]
            count.read += 1
            if not rewrite.touches_values:
                pair = (raw_key(data, ks, ke), data[vs:ve])
            else:
                codec = codecs[state_id]
                assert codec is not None
                entry = self._decode(codec, data, (ks, ke, vs, ve), key_group)
                try:
                    new_entry = self._convert(codec, entry)
                    if new_entry is None:
                        continue
                    # Keys keep their bytes unless a MapState user key was rewritten.
                    kept_key = None if rewrite.user_key_transform is not None or rewrite.reencode \
                        else raw_key(data, ks, ke)
                    encoded = self._encode(codec, new_entry, key_group, kept_key)
                except MigrationError:
                    raise
                except SavepointFormatError as exc:
                    # Offsets in a decompressed block are not file offsets: name the block instead.
                    raise SavepointFormatError(f"{self.label}, state {rewrite.old_name}, key group {key_group}: "
                                               f"{exc.what}", self.stream.source.path) from None
                except Exception as exc:  # conversions raise ConversionError, user functions anything
                    self._failed(rewrite, entry, key_group, exc, rewrite.dead_letter)
                    continue
                if encoded is None:
                    continue
                pair = encoded
            count.written += 1
            if runs and runs[-1][0] == rewrite.new_id:
                runs[-1][1].append(pair)
            else:
                runs.append((rewrite.new_id, [pair]))
        return runs

    # -- key changes: entries move between key groups (and subtasks) -------------------------------------------------

    def run_rekeyed(self, writer: KeyedStreamWriter, key_group_range: KeyGroupRange,
                    max_parallelism: int) -> None:
        plan = self.plan
        key_f = plan.key_transform
        assert key_f is not None
        buckets: dict[int, dict[int, list[tuple[bytes, bytes]]]] = {}
        for index, stream in sorted(self.streams.items()):
            ids = self.stream_ids[index]
            for key_group, start, end in stream.blocks:
                data = stream.read_block(key_group, start, end)
                for local_id, ks, ke, vs, ve in stream.raw_entries(data, key_group, start):
                    state_id = ids[local_id]
                    rewrite = plan.rewrites[state_id]
                    codec = self.codecs[state_id]
                    if rewrite is None or codec is None:
                        continue
                    entry = self._decode(codec, data, (ks, ke, vs, ve), key_group, stream)
                    count = self.counts[rewrite.new_name]
                    dead_letter = rewrite.dead_letter or plan.key_dead_letter
                    try:
                        new_key = key_f(entry[0])
                    except Exception as exc:
                        if key_group in key_group_range:  # reported once: by the subtask owning the old key group
                            count.read += 1
                            self._failed(rewrite, entry, key_group, exc, dead_letter)
                        continue
                    new_group = assign_key_group(codec.key_hash(new_key), max_parallelism)
                    if new_group not in key_group_range:
                        continue  # another subtask's
                    count.read += 1
                    try:
                        new_entry = self._convert(codec, (new_key, *entry[1:]))
                        encoded = self._encode(codec, new_entry, new_group, None) if new_entry else None
                    except MigrationError:
                        raise
                    except Exception as exc:  # a user function may raise anything
                        self._failed(rewrite, entry, new_group, exc, dead_letter)
                        continue
                    if encoded is None:
                        continue
                    self.counts[rewrite.new_name].written += 1
                    buckets.setdefault(new_group, {}).setdefault(rewrite.new_id, []).append(encoded)
        for key_group in key_group_range:
            runs = buckets.get(key_group)
            if runs:
                # RocksDB writes a key group's states by id and keys in byte order: do the same, deterministically.
                writer.write_block(key_group, encode_block((sid, sorted(runs[sid])) for sid in sorted(runs)))


def localize(plan: OperatorPlan, local: KeyedBackendHeader) -> OperatorPlan:
    """The operator's plan as one subtask's stream sees it. Each stream's header lists the states that subtask
    registered, in its own order, and its blocks use those positions as state ids: a subtask that never saw a key
    may lack a state. The output stream keeps that subtask's own list (with the plan's renames and drops)."""
    assert plan.old_header is not None and plan.new_header is not None
    if [s.name for s in local.states] == [s.name for s in plan.old_header.states]:
        return plan
    union_index = {s.name: i for i, s in enumerate(plan.old_header.states)}
    rewrites: list[StateRewrite | None] = []
    old_states, new_states = [], []
    for meta in local.states:
        rewrite = plan.rewrites[union_index[meta.name]]
        old_states.append(plan.old_header.states[union_index[meta.name]])
        if rewrite is None:
            rewrites.append(None)
            continue
        rewrites.append(replace(rewrite, new_id=len(new_states)))
        new_states.append(plan.new_header.states[rewrite.new_id])
    old_local = KeyedBackendHeader(local.version, local.compressed, local.key_serializer, old_states)
    new_local = KeyedBackendHeader(plan.new_header.version, plan.new_header.compressed,
                                   plan.new_header.key_serializer, new_states)
    return replace(plan, old_header=old_local, new_header=new_local, rewrites=rewrites)


def migrate_subtask(source: Savepoint, plan: MigrationPlan, operator_id: str, subtask: int,
                    output: SavepointOutput) -> SubtaskResult:
    """Rewrites the keyed stream of one (source operator id, subtask) into ``output``; the file name derives from
    the new operator id and the subtask, so the result does not depend on who runs it."""
    op_plan = plan.operators[operator_id]
    assert op_plan.new_header is not None
    op_plan_for_run = copy.copy(op_plan)
    if plan.compressed is not None:
        header = copy.copy(op_plan.new_header)
        header.compressed = plan.compressed
        op_plan_for_run.new_header = header
    migrator = _SubtaskMigrator(source, op_plan_for_run, subtask)
    header = migrator.plan.new_header
    assert header is not None
    name = keyed_stream_file_name(op_plan.new_operator_id, subtask)
    kg_range = migrator.stream.key_group_range
    with output.open(name) as sink:
        writer = KeyedStreamWriter(sink, header, kg_range, name)
        if op_plan.key_transform is not None:
            migrator.run_rekeyed(writer, kg_range, op_plan.source.max_parallelism)
        else:
            migrator.run_in_place(writer)
        handle = writer.finish()
    return SubtaskResult(operator_id, subtask, handle, migrator.counts, migrator.dead_letters)


@dataclass
class DryRunResult:
    """What migrating one (operator, subtask[, key-group range]) would do: per new state, entries read, converted
    (``written``) and failed (``dead_lettered``), and the first failing entries as examples."""

    operator_id: str
    subtask: int
    key_group_range: KeyGroupRange | None
    counts: dict[str, StateCount]
    examples: list[dict[str, Any]]

    @property
    def failed_under_fail_policy(self) -> bool:
        return any(example.get("on_error") == "fail" for example in self.examples)


def dry_run_subtask(source: Savepoint, plan: MigrationPlan, operator_id: str, subtask: int,
                    key_group_range: KeyGroupRange | None = None, max_examples: int = 5) -> DryRunResult:
    """Decodes every entry of one subtask's keyed stream (or of one key-group range of it) with the old serializers
    and applies the planned migration in memory, encoding the new values and throwing them away. Nothing is
    written. Every failure is counted whatever the state's error policy; the first ``max_examples`` are kept."""
    op_plan = plan.operators[operator_id]
    migrator = _SubtaskMigrator(source, op_plan, subtask)
    migrator.collect_failures, migrator.max_examples = True, max_examples
    if op_plan.key_transform is not None:
        # New keys move between key groups: the whole operator is read by one task, as a real run does.
        with open(os.devnull, "wb") as sink:
            writer = KeyedStreamWriter(sink, migrator.plan.new_header, migrator.stream.key_group_range, os.devnull)
            migrator.run_rekeyed(writer, migrator.stream.key_group_range, op_plan.source.max_parallelism)
    else:
        stream = migrator.stream
        for key_group, start, end in stream.blocks:
            if key_group_range is None or key_group in key_group_range:
                migrator._rewrite_block(stream.read_block(key_group, start, end), key_group, start)
    return DryRunResult(operator_id, subtask, key_group_range, migrator.counts, migrator.dead_letters)


def split_key_groups(key_group_range: KeyGroupRange, pieces: int) -> list[KeyGroupRange]:
    """``key_group_range`` cut into at most ``pieces`` contiguous ranges of near-equal length."""
    total = len(key_group_range)
    pieces = max(1, min(pieces, total))
    bounds = [key_group_range.start + total * i // pieces for i in range(pieces + 1)]
    return [KeyGroupRange(bounds[i], bounds[i + 1] - 1) for i in range(pieces) if bounds[i + 1] > bounds[i]]


# --------------------------------------------------------------------------------------------------------------------
# Assembly
# --------------------------------------------------------------------------------------------------------------------


def assemble_metadata(source: Savepoint, plan: MigrationPlan, results: list[SubtaskResult],
                      output: SavepointOutput, version: int | None = None) -> CheckpointMetadata:
    """Copies every state file that is not rewritten into ``output`` byte for byte, writes ``_metadata`` (last, so
    a directory without it is visibly unfinished) and returns the new metadata."""
    by_unit = {(r.operator_id, r.subtask): r for r in results}
    missing = [u for u in plan.units() if u not in by_unit]
    if missing:
        raise MigrationError(f"results missing for (operator, subtask) {missing}")
    copied: dict[str, CopiedFile] = {}
    old = source.metadata
    operators = []
    new_ids = {p.new_operator_id for p in plan.operators.values()}
    for op in old.operators:
        op_plan = plan.operators.get(op.operator_id)
        if op_plan is None and op.operator_id in new_ids:
            raise MigrationError(f"operator {op.uid or op.operator_id} clashes with a renamed operator's new id")
        new_op = OperatorState(op.operator_id, op.parallelism, op.max_parallelism, op.name, op.uid,
                               op.coordinator_state, {}, set(op.finished_subtasks), op.fully_finished)
        if op_plan is not None:
            new_op.operator_id = op_plan.new_operator_id
            new_op.uid = op_plan.new_uid
        for index, sub in sorted(op.subtasks.items()):
            result = by_unit.get((op.operator_id, index))
            keyed = result.handle if result is not None else _copy_keyed(sub.managed_keyed_state, source, output,
                                                                           copied)
            new_op.subtasks[index] = OperatorSubtaskState(
                _copy_operator_handle(sub.managed_operator_state, source, output, copied),
                _copy_operator_handle(sub.raw_operator_state, source, output, copied),
                keyed,
                _copy_keyed(sub.raw_keyed_state, source, output, copied),
                list(sub.input_channel_state), list(sub.result_subpartition_state))
        operators.append(new_op)
    metadata = CheckpointMetadata(version or old.version, old.checkpoint_id, list(old.master_states), operators,
                                  old.trailer if (version or old.version) >= 4 else b"")
    output.write_bytes("_metadata", write_metadata(metadata))
    return metadata


def _copy_keyed(handle: KeyGroupsStateHandle | None, source: Savepoint, output: SavepointOutput,
                copied: dict[str, CopiedFile]) -> KeyGroupsStateHandle | None:
    if handle is None:
        return None
    return KeyGroupsStateHandle(handle.code, handle.offsets,
                                copy_stream_handle(handle.delegate, source.location, output, copied),
                                handle.state_handle_id)


def _copy_operator_handle(handle: Any, source: Savepoint, output: SavepointOutput,
                          copied: dict[str, CopiedFile]) -> Any:
    if handle is None:
        return None
    return type(handle)(handle.states, copy_stream_handle(handle.delegate, source.location, output, copied))


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
    totals = merge_counts(plan, results)
    for state in verification.states:
        count = totals.get(state.operator, {}).get(state.state)
        if count is not None and (count.written != state.entries or count.dead_lettered != state.dead_lettered):
            raise MigrationError(f"verification: operator {state.operator}, state {state.state}: the run wrote "
                                 f"{count.written} entries and dead-lettered {count.dead_lettered}, the output "
                                 f"holds {state.entries} and the migration dead-letters {state.dead_lettered}")
    checked = verification.lines()
    if extra_check is not None:
        checked += extra_check(staged)
    return checked


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
                      code: CodePolicy | None = None) -> MigrationReport:
    """The whole migration: plan, rewrite every (operator, subtask) stream through ``run_units``, assemble
    ``_metadata``, verify, publish. The output is published only after verification and removed on any failure.
    The result does not depend on how the units are run: file names and contents derive from the input only."""
    import time

    timings: dict[str, float] = {}
    start = time.perf_counter()
    try:
        source = Savepoint.open(source_path)
        plan = plan_migration(source, targets, compressed=compressed, reencode=reencode, code=code)
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
