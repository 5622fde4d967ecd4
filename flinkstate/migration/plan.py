"""Planning a migration: what each operator's states become (targets), and the plan built from them once, before
any byte is read: per state its new meta info and value transform, per operator whether its keyed streams must be
rewritten and whether entries move between key groups (a changed key). The plan is a plain picklable value, so
the parallel units (one per operator subtask, :mod:`flinkstate.migration.rewrite`) can run anywhere::

    plan = plan_migration(source, targets)                       # MigrationPlan, built once
    for operator_id, subtask in plan.units():                    # the parallel units
        result = migrate_subtask(source, plan, operator_id, subtask, output)   # rewrite.py -> SubtaskResult
    metadata = assemble_metadata(source, plan, results, output, version)       # assemble.py
    verify_output(...)                                                           # runner.py, through verify.py
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace

from flinkstate.binary import KeyGroupRange
from flinkstate.errors import FlinkStateError
from flinkstate.format.keyed_header import TIMERS, VALUE_SERIALIZER, KeyedBackendHeader, StateMetaInfo
from flinkstate.format.metadata import OperatorState
from flinkstate.identity import OperatorRef
from flinkstate.migration.code_policy import CodeNotAllowed, CodePolicy, load_function
from flinkstate.migration.conversions import MigrationPlanError, Transform, conversion
from flinkstate.migration.native import is_native
from flinkstate.migration.spec import NO_MIGRATION, StateMigration
from flinkstate.migration.transforms import RowNames, build_transform, chain
from flinkstate.savepoint import Savepoint
from flinkstate.serializers.base import TypeSerializerSnapshot
from flinkstate.serializers.registry import snapshot_bytes

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
    #: Some subtask's keyed state is in a native format (RocksDB's files, the HashMap backend's blocks): every stream
    #: is written anew in the canonical format, even for an identity migration.
    native: bool = False

    @property
    def rewrites_stream(self) -> bool:
        if self.old_header is None or self.new_header is None:
            return False
        return (self.native or self.key_transform is not None or any(r is None or r.touches_values or r.new_id != i
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
    for op in source.operators:
        # An operator no target names is copied as it is, except native keyed state: a canonical savepoint cannot
        # point at RocksDB's files, so it is planned as an identity migration (its entries' bytes kept).
        if op.operator_id not in plans and any(is_native(stream) for _, stream in source.keyed_streams(op)):
            plans[op.operator_id] = _plan_operator(source, op, OperatorTarget(op.operator_id), False, code)
    return MigrationPlan(plans, compressed)


def _plan_operator(source: Savepoint, op: OperatorState, target: OperatorTarget, reencode: bool,
                   code: CodePolicy) -> OperatorPlan:
    label = f"operator {target.uid}"
    streams = source.keyed_streams(op)
    # Where the savepoint's serializer snapshots were read: a plan that cannot be made names that file.
    where = f"{streams[0][1].source.path}: " if streams else ""
    if source.unrecorded_key(op):
        _assume_target_key(source, op, target, f"{where}{label}")
    header = source.keyed_header(op)
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
    native = any(is_native(stream) for _, stream in streams)  # reads every subtask's header
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
                        bool(key_target and key_target.migration.dead_letter), native)


def _assume_target_key(source: Savepoint, op: OperatorState, target: OperatorTarget, label: str) -> None:
    """The checkpoint records no key serializer for the operator (a changelog checkpoint that never materialized,
    without timers): its keys are read with the new version's key type, as Flink restores such a log with the new
    job's key serializer unchecked. The migration then decodes every key with it and refuses any that does not decode
    to exactly its bytes; a key conversion has no old type to convert from."""
    keys = {snapshot_bytes(t.key): t for t in target.states if t.key is not None}
    if not keys:
        raise MigrationError(f"{label}: the checkpoint does not record the key serializer (a changelog checkpoint "
                             f"that was never materialized and holds no timers): declare the job's key type in the "
                             f"manifest (key:)")
    if len(keys) > 1:
        raise MigrationError(f"{label}: states declare different new key types")
    key_target = next(iter(keys.values()))
    if key_target.migration.key is not None:
        raise MigrationError(f"{label}: key: the checkpoint does not record the old key type, so a key conversion "
                             f"cannot be planned")
    assert key_target.key is not None
    source.assume_key_serializer(op, key_target.key)


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


def localize(plan: OperatorPlan, local: KeyedBackendHeader) -> OperatorPlan:
    """The operator's plan as one subtask's stream sees it. Each stream's header lists the states that subtask
    registered, in its own order, and its blocks use those positions as state ids: a subtask that never saw a key
    may lack a state. The output stream keeps that subtask's own list (with the plan's renames and drops)."""
    assert plan.old_header is not None and plan.new_header is not None
    if [s.name for s in local.states] == [s.name for s in plan.old_header.states]:
        return plan
    union_index = {s.name: i for i, s in enumerate(plan.old_header.states)}
    rewrites: list[StateRewrite | None] = []
    old_states: list[StateMetaInfo] = []
    new_states: list[StateMetaInfo] = []
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


def split_key_groups(key_group_range: KeyGroupRange, pieces: int) -> list[KeyGroupRange]:
    """``key_group_range`` cut into at most ``pieces`` contiguous ranges of near-equal length."""
    total = len(key_group_range)
    pieces = max(1, min(pieces, total))
    bounds = [key_group_range.start + total * i // pieces for i in range(pieces + 1)]
    return [KeyGroupRange(bounds[i], bounds[i + 1] - 1) for i in range(pieces) if bounds[i + 1] > bounds[i]]


__all__ = ["DROP", "CodeRefused", "MigrationError", "MigrationPlan", "OperatorPlan", "OperatorTarget", "StateRewrite",
           "StateTarget", "localize", "plan_migration", "plan_value_migration", "split_key_groups"]
