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
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from flinkstate.binary import KeyGroupRange
from flinkstate.errors import FlinkStateError
from flinkstate.format.keyed_header import TIMERS, VALUE_SERIALIZER, KeyedBackendHeader, StateMetaInfo
from flinkstate.format.metadata import OperatorState
from flinkstate.identity import OperatorRef
from flinkstate.migration.code_policy import CodeNotAllowed, CodePolicy, load_function
from flinkstate.migration.conversions import MigrationPlanError, Transform, conversion
from flinkstate.migration.kryo_major import uncarried_record
from flinkstate.migration.native import is_native
from flinkstate.migration.spec import NO_MIGRATION, StateMigration
from flinkstate.migration.transforms import (
    TTL_NEEDS_LAST_ACCESS,
    RowNames,
    build_transform,
    chain,
    restored_unaided,
)
from flinkstate.savepoint import Savepoint
from flinkstate.serializers.base import TypeSerializerSnapshot
from flinkstate.serializers.kryo import kryo_snapshots, set_kryo_layouts
from flinkstate.serializers.registry import snapshot_bytes
from flinkstate.serializers.ttl import TtlSnapshot, TtlValue

#: A user function returns this to drop an entry.
DROP = object()


class MigrationError(FlinkStateError):
    """A migration run failed (bad plan, or an entry failed under the ``fail`` policy). ``operator`` (the target's
    uid or id) and ``state`` say what a planning error is about, for the check's report."""

    def __init__(self, message: str, operator: str | None = None, state: str | None = None) -> None:
        super().__init__(message)
        self.operator = operator
        self.state = state


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
    #: The operator's key type in the new version (None: the states' ``key``, else the old one) and its conversion,
    #: declared once per operator (``migration: {key: {convert: ...}}`` of the operator in a manifest).
    key: TypeSerializerSnapshot | None = None
    key_migration: StateMigration = NO_MIGRATION
    #: The new version's max parallelism (None: not declared, the savepoint's is kept).
    max_parallelism: int | None = None
    #: A Flink 1.x savepoint for a Flink 2.x job: every Kryo record is re-encoded for Kryo 5 (the targets' Kryo
    #: serializers say Kryo 5), and a state whose Kryo data the plan would keep as it is is refused.
    carry_kryo: bool = False

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
    #: A declared migration function is in the transform: its entries go through the reference loop only, which
    #: calls it once per entry (the compiled runs rerun a run they give up on).
    runs_code: bool = False

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
    #: Kryo 2.24 records re-encoded for Kryo 5.6: the output needs a Flink 2.x ``_metadata`` version.
    kryo_carried: bool = False

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
                   reencode: bool = False, code: CodePolicy | None = None, now_ms: int | None = None
                   ) -> MigrationPlan:
    """Compiles the targets against the source savepoint. ``reencode`` decodes and re-encodes every entry of every
    targeted operator even where nothing changes (the identity rewrite). ``code`` says which migration functions
    may be imported (default: ``$FLINKSTATE_ALLOW_CODE``, else none): a manifest is data, its functions are code.
    ``now_ms`` is the migration's time (epoch milliseconds), the last access of values whose TTL is switched on
    unless the manifest gives one. Raises the first planning error (:func:`plan_operators` collects them all)."""
    plans, errors = plan_operators(source, targets, reencode=reencode, code=code, now_ms=now_ms)
    if errors:
        raise errors[0]
    return MigrationPlan(plans, compressed, any(t.carry_kryo for t in targets))


def plan_operators(source: Savepoint, targets: list[OperatorTarget], *, reencode: bool = False,
                   code: CodePolicy | None = None, now_ms: int | None = None, load_code: bool = True
                   ) -> tuple[dict[str, OperatorPlan], list[MigrationError]]:
    """The plan of every operator, by source operator id, and the planning error of each operator that cannot be
    planned (what ``migrate`` refuses with, and what ``check`` reports). ``load_code=False`` plans a declared
    function without importing it (``check`` runs no code): its transform stands in for it and is never called."""
    code = CodePolicy.resolve(None) if code is None else code
    plans: dict[str, OperatorPlan] = {}
    errors: list[MigrationError] = []
    for target in targets:
        old_ref = target.renamed_from or target.uid
        try:
            op = source.operator(old_ref)
            if op.operator_id in plans:
                raise MigrationError(f"operator {old_ref} is the target of two entries", target.uid)
            plans[op.operator_id] = _plan_operator(source, op, target, reencode, code, now_ms, load_code)
        except MigrationError as exc:
            if exc.operator is None:
                exc.operator = target.uid
            errors.append(exc)
    for op in source.operators:
        # An operator no target names is copied as it is, except native keyed state: a canonical savepoint cannot
        # point at RocksDB's files, so it is planned as an identity migration (its entries' bytes kept).
        if op.operator_id not in plans and any(is_native(stream) for _, stream in source.keyed_streams(op)):
            plans[op.operator_id] = _plan_operator(source, op, OperatorTarget(op.operator_id), False, code, now_ms,
                                                   load_code)
    return plans, errors


def _plan_operator(source: Savepoint, op: OperatorState, target: OperatorTarget, reencode: bool,
                   code: CodePolicy, now_ms: int | None, load_code: bool) -> OperatorPlan:
    label = f"operator {target.uid}"
    streams = source.keyed_streams(op)
    # Where the savepoint's serializer snapshots were read: a plan that cannot be made names that file.
    where = f"{streams[0][1].source.path}: " if streams else ""

    def refuse(what: str, state: str | None = None) -> MigrationError:
        return MigrationError(f"{where}{label}{f', state {state}' if state else ''}: {what}", target.uid, state)

    if target.max_parallelism is not None and target.max_parallelism != op.max_parallelism:
        # Every key would move to the key group its hash gives under the new max parallelism; Flink refuses the
        # change (FLINK-5052) and this tool does not rewrite it either: publishing the old value would be wrong.
        raise refuse(f"the max parallelism changes from {op.max_parallelism} to {target.max_parallelism}: Flink "
                     f"cannot restore key groups of another max parallelism, and flinkstate does not re-distribute "
                     f"them; keep the job's max parallelism at {op.max_parallelism} (setMaxParallelism)")
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
            raise refuse("the savepoint holds no keyed state for it")
        return OperatorPlan(op, new_id, new_uid, None, None, [])
    native = any(is_native(stream) for _, stream in streams)  # reads every subtask's header
    by_old_name = {(t.renamed_from or t.name): t for t in target.states}
    known = {s.name for s in header.states}
    for name in [*by_old_name, *target.dropped_states]:
        if name not in known:
            raise refuse(f"no state {name!r} in the savepoint (states: {', '.join(sorted(known))})")
    new_key = _target_key(target, refuse)
    key_transform: Transform | None = None
    if new_key is not None and header.key_serializer is not None:
        try:
            if target.key_migration.key is not None:
                key_transform = conversion(target.key_migration.key, header.key_serializer, new_key)
            elif not restored_unaided(header.key_serializer, new_key):
                raise MigrationPlanError(f"the key type changed from {header.key_serializer.type_name()} to "
                                         f"{new_key.type_name()}: declare the conversion once for the operator "
                                         f"(migration: {{key: {{convert: ...}}}})")
            else:
                new_key = None  # keys keep their bytes, and the operator its key serializer (reconfigured by Flink)
        except MigrationPlanError as exc:
            raise refuse(f"key: {exc}") from None
    rewrites: list[StateRewrite | None] = []
    new_states: list[StateMetaInfo] = []
    for meta in header.states:
        if meta.name in target.dropped_states:
            rewrites.append(None)
            continue
        t = by_old_name.get(meta.name)
        new_name = t.name if t is not None else meta.name
        value_t = user_key_t = None
        new_value = new_user_key = None
        if t is not None and meta.kind != TIMERS:
            if target.carry_kryo:  # the savepoint's user-class records are delimited with the migration's layouts
                layouts = next((k.kryo_layouts for k in kryo_snapshots([t.value, t.user_key]) if k.kryo_layouts), None)
                if layouts is not None:
                    set_kryo_layouts([meta.value_serializer, meta.user_key_serializer], layouts)
            try:
                value_t, user_key_t = _state_transforms(meta, t, code, now_ms, load_code)
            except CodeNotAllowed as exc:
                raise CodeRefused(f"{label}, state {meta.name}: {exc}", target.uid, t.name) from None
            except MigrationPlanError as exc:
                raise refuse(str(exc), t.name) from None
            # Values that keep their bytes keep the snapshot they were written with (Flink reconfigures its
            # serializer from it); rewritten ones get the new version's.
            new_value = t.value if value_t is not None else None
            new_user_key = t.user_key if user_key_t is not None else None
        rewrites.append(StateRewrite(meta.name, new_name, len(new_states), meta.kind, value_t, user_key_t,
                                     bool(t and t.migration.dead_letter), reencode,
                                     runs_code=t is not None and t.migration.function is not None))
        new_states.append(_new_meta(meta, new_name, new_value, new_user_key, new_key))
    if target.carry_kryo:
        _refuse_uncarried_kryo(source, op, header, rewrites, refuse)
    names = [s.name for s in new_states]
    if len(set(names)) != len(names):
        raise refuse(f"two states would be named alike after renaming: {names}")
    new_header = KeyedBackendHeader(header.version, header.compressed, new_key or header.key_serializer, new_states)
    return OperatorPlan(op, new_id, new_uid, header, new_header, rewrites, key_transform,
                        target.key_migration.dead_letter, native)


def _refuse_uncarried_kryo(source: Savepoint, op: OperatorState, header: KeyedBackendHeader,
                           rewrites: list[StateRewrite | None], refuse: Callable[..., MigrationError]) -> None:
    """Flink 1.x -> 2.x: Kryo data the plan would keep as Kryo 2.24 bytes, which Flink 2.x reads with Kryo 5, or
    whose sampled records it cannot re-encode (a user class)."""
    for kind, snapshot in (("key", header.key_serializer),
                           *(("namespace", s.namespace_serializer) for s in header.states if s.kind != TIMERS)):
        if kryo_snapshots([snapshot]):
            raise refuse(f"the {kind} is Kryo data of Flink 1.x (Kryo 2.24), which Flink 2.x reads with Kryo 5.6; "
                         f"flinkstate re-encodes Kryo values, not keys or namespaces")
    for meta, rewrite in zip(header.states, rewrites, strict=True):
        if rewrite is None or meta.kind == TIMERS:
            continue
        kept = [s for s, t in ((meta.value_serializer, rewrite.transform),
                               (meta.user_key_serializer, rewrite.user_key_transform)) if t is None]
        if kryo_snapshots(kept):
            raise refuse("its Kryo data of Flink 1.x (Kryo 2.24) would be kept as it is, and Flink 2.x reads it with "
                         "Kryo 5.6: declare the state's type in the manifest (its records are then re-encoded), or "
                         "drop it", meta.name)
        why = uncarried_record(source, op.operator_id, meta) if kryo_snapshots([meta.value_serializer,
                                                                                 meta.user_key_serializer]) else None
        if why is not None:
            raise refuse(f"its Kryo records cannot be re-encoded for Flink 2.x (Kryo 5.6): {why}; flinkstate "
                         f"re-encodes records of JDK classes, and of user classes with both versions' layouts "
                         f"(kryo_classes, schema --jar): drop the state, or declare a function", meta.name)


def _target_key(target: OperatorTarget, refuse: Callable[[str], MigrationError]) -> TypeSerializerSnapshot | None:
    """The operator's new key type: the target's, or the one its states agree on."""
    keys = {snapshot_bytes(k): k for k in [target.key, *(t.key for t in target.states)] if k is not None}
    if len(keys) > 1:
        raise refuse("the operator and its states declare different new key types")
    return next(iter(keys.values()), None)


def _assume_target_key(source: Savepoint, op: OperatorState, target: OperatorTarget, label: str) -> None:
    """The checkpoint records no key serializer for the operator (a changelog checkpoint that never materialized,
    without timers): its keys are read with the new version's key type, as Flink restores such a log with the new
    job's key serializer unchecked. The migration then decodes every key with it and refuses any that does not decode
    to exactly its bytes; a key conversion has no old type to convert from."""

    def refuse(what: str) -> MigrationError:
        return MigrationError(f"{label}: {what}", target.uid)

    key = _target_key(target, refuse)
    if key is None:
        raise refuse("the checkpoint does not record the key serializer (a changelog checkpoint that was never "
                     "materialized and holds no timers): declare the job's key type in the manifest (key:)")
    if target.key_migration.key is not None:
        raise refuse("key: the checkpoint does not record the old key type, so a key conversion cannot be planned")
    source.assume_key_serializer(op, key)


class DeclaredFunction:
    """A manifest's migration function as ``check`` plans it: named, never imported (a manifest is data; ``migrate``
    and the dry run import it under the code policy). Calling it is a bug: a check runs no entry through a plan."""

    def __init__(self, reference: str) -> None:
        self.reference = reference

    def __call__(self, value: Any) -> Any:
        raise AssertionError(f"the function {self.reference} was planned by a check, which imports no code")


def _state_transforms(meta: StateMetaInfo, target: StateTarget, code: CodePolicy, now_ms: int | None,
                      load_code: bool) -> tuple[Transform | None, Transform | None]:
    """The value and user-key transforms of one state. A declared function maps old values to new ones after the
    rules; where the rules cannot make the new type, the function alone does (it is given the decoded old value).
    Values that are transformed are decoded with the old serializer and encoded with the new one: both codecs must
    exist."""
    old_value = meta.value_serializer
    assert old_value is not None
    new_value = target.value or old_value
    spec = target.migration
    last_access = spec.ttl_last_access if spec.ttl_last_access is not None else now_ms
    # A declared function maps user values: where TTL is on either side, it runs inside the TTL wrapper, which the
    # plan switches on (stamped), off or keeps, as it does without a function.
    ttl = isinstance(old_value, TtlSnapshot) or isinstance(new_value, TtlSnapshot)
    old_user = old_value.user if spec.function is not None and isinstance(old_value, TtlSnapshot) else old_value
    new_user = new_value.user if spec.function is not None and isinstance(new_value, TtlSnapshot) else new_value
    try:
        value_t = build_transform(old_user, new_user, rules=spec.fields, convert=spec.value,
                                  row_names=target.row_names, ttl_last_access=last_access)
    except MigrationPlanError:
        if spec.function is None:
            raise
        value_t = None
    if spec.function is not None:
        function = load_function(spec.function, code) if load_code else DeclaredFunction(spec.function)
        value_t = chain(value_t, function) or function
        if ttl:
            value_t = _in_ttl(value_t, old_value, new_value, last_access)
    if value_t is not None:
        _need_codecs(old_value, new_value)
    user_key_t = None
    if meta.kind == "MAP":
        old_uk = meta.user_key_serializer
        assert old_uk is not None
        user_key_t = build_transform(old_uk, target.user_key or old_uk, convert=spec.user_key)
        if user_key_t is not None:
            _need_codecs(old_uk, target.user_key or old_uk)
    elif spec.user_key is not None:
        raise MigrationPlanError("user_key applies to MapState only")
    return value_t, user_key_t


def _in_ttl(user_t: Transform, old: TypeSerializerSnapshot, new: TypeSerializerSnapshot,
            last_access: int | None) -> Transform:
    """``user_t`` (user value -> user value) applied inside TTL: switched on (each value stamped with
    ``last_access``), off (unwrapped) or kept on (its last access kept), as Flink's ``TtlAwareSerializer`` does."""
    if isinstance(old, TtlSnapshot) and isinstance(new, TtlSnapshot):
        return lambda value: TtlValue(user_t(value.value), value.last_access)
    if isinstance(old, TtlSnapshot):
        return lambda value: user_t(value.value)
    if last_access is None:
        raise MigrationPlanError(TTL_NEEDS_LAST_ACCESS)
    stamp = last_access
    return lambda value: TtlValue(user_t(value), stamp)


def _need_codecs(old: TypeSerializerSnapshot, new: TypeSerializerSnapshot) -> None:
    try:
        old.decoder()
        new.encoder()
    except (NotImplementedError, FlinkStateError) as exc:
        raise MigrationPlanError(f"the values must be decoded and re-encoded, which this tool cannot do: "
                                 f"{exc}") from None


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


__all__ = ["DROP", "CodeRefused", "DeclaredFunction", "MigrationError", "MigrationPlan", "OperatorPlan",
           "OperatorTarget", "StateRewrite", "StateTarget", "localize", "plan_migration", "plan_operators",
           "split_key_groups"]
