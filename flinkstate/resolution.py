"""What Flink will do with a savepoint's state when the job version a manifest describes restores it, and why: one
row per state with Flink's verdict and the findings behind it (:func:`flink_rows`). The check a user runs
(:func:`flinkstate.check`, ``flinkstate check``) builds on it in :mod:`flinkstate.migration.verdict`.

The same rules judge a migration's planned output and its written output (``renames=False``): the check's verdict
is the plan ``flinkstate migrate`` runs, and "possible" means that output restores as is or reconfigured.

Only the savepoint's metadata and state headers are read (keyed and operator state: one header per subtask), never
the entries, so the time does not grow with the amount of state. The one exception: an operator of a changelog
checkpoint that records no key serializer, whose logged keys are read with the new key type (Flink would restore
them unchecked).

Rules beyond the serializer families (Flink's backends and ``Checkpoints.loadAndValidateCheckpoint``):

* key serializer: only as is or reconfigured, anything else fails the restore ("The new key serializer ... must be
  compatible"); namespace serializer: no migration either;
* state kind: must be equal ("Incompatible key/value state types");
* MapState on RocksDB: a value migration requires the user key to be compatible as is;
* an operator of the savepoint with state that the new job lacks: the restore fails unless allowNonRestoredState,
  which drops that state; operators without state are skipped by Flink;
* max parallelism: must be equal when the new job sets it;
* a keyed state the new version no longer registers is still restored by Flink (heap deserializes it with the
  snapshot's serializer) and written into later savepoints: no failure, but it is not dropped either;
* a state or operator renamed in the manifest (``renamed_from``) is, for Flink, a new empty state next to the old
  one (or a removed operator): a silent loss unless migrated;
* operator states (list, union list, broadcast): :mod:`flinkstate.operator_state_rules`.
"""

from __future__ import annotations

from typing import Any

from flinkstate.compatibility import (
    AFTER_MIGRATION,
    AS_IS,
    INCOMPATIBLE,
    RECONFIGURED,
    Compatibility,
    Finding,
)
from flinkstate.engine.jar_schema import UnregisteredState
from flinkstate.errors import FlinkStateError
from flinkstate.format.changelog import ChangelogStream
from flinkstate.format.keyed_header import TIMERS, KeyedBackendHeader, StateMetaInfo
from flinkstate.format.metadata import OperatorState, has_state
from flinkstate.format.operator_state import OperatorBackendHeader
from flinkstate.identity import OperatorRef
from flinkstate.major_upgrade import across_majors, flink_major, gone_in_target, layouts_origin, savepoint_flink_major
from flinkstate.manifest import Manifest, OperatorSchema, StateSchema
from flinkstate.operator_state_rules import annotate_row_names, described_states, operator_state_rows
from flinkstate.report import StateRow
from flinkstate.savepoint import Savepoint
from flinkstate.serializers.base import TypeSerializerSnapshot
from flinkstate.serializers.namespaces import VoidNamespaceSnapshot
from flinkstate.serializers.registry import snapshot_bytes
from flinkstate.serializers.ttl import TtlSnapshot

BACKENDS = ("hashmap", "rocksdb")


def flink_rows(savepoint: Any, manifest: Manifest, *, previous: Manifest | None = None, backend: str | None = None,
               allow_non_restored_state: bool = False, renames: bool = True) -> list[StateRow]:
    """Flink's verdict on every state of ``manifest``, one row each, against ``savepoint`` (a :class:`SavepointView`,
    or a migration's planned output; ``renames=False``: its renames are done).

    ``previous`` is the manifest of the version that wrote the savepoint, when known: it supplies what the savepoint
    does not store (Row field names), so that fields swapped by name are caught. ``backend`` ("hashmap" or
    "rocksdb") narrows backend-specific rules; by default the worse of the two applies.
    """
    if backend is not None and backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, not {backend!r}")
    return _Checker(savepoint, previous, backend, allow_non_restored_state, renames).rows(manifest)


class SavepointView:
    """What the checker reads of a savepoint: its operators, their keyed-state headers, and the keys of a changelog
    checkpoint that records no key serializer. The planned output of a migration is another view
    (:class:`flinkstate.migration.verdict.PlannedOutput`)."""

    def __init__(self, savepoint: Savepoint) -> None:
        self.savepoint = savepoint
        self._key_findings: dict[tuple[str, bytes], Finding | None] = {}

    @property
    def operators(self) -> list[OperatorState]:
        return self.savepoint.operators

    def keyed_header(self, op: OperatorState) -> KeyedBackendHeader | None:
        return self.savepoint.keyed_header(op)

    def operator_header(self, op: OperatorState) -> OperatorBackendHeader | None:
        return self.savepoint.operator_header(op)

    @property
    def flink_major(self) -> int:
        """The major of the Flink that wrote the savepoint (its ``_metadata`` version says)."""
        return savepoint_flink_major(self.savepoint.metadata.version)

    def unrecorded_key_finding(self, op: OperatorState, key: TypeSerializerSnapshot) -> Finding | None:
        """The finding on the keys of an operator whose checkpoint records no key serializer (None: it records
        one)."""
        if not self.savepoint.unrecorded_key(op):
            return None
        cache_key = (op.operator_id, snapshot_bytes(key))  # the source and its planned output ask alike
        if cache_key not in self._key_findings:
            self._key_findings[cache_key] = _unrecorded_key(self.savepoint, op, key)
        return self._key_findings[cache_key]


def _with_declared_value(finding: Finding, migration: Any) -> Finding:
    """An added field's finding that says what the declared migration puts there, so that the report does not say
    "null" where the manifest gives a value."""
    if finding.code not in ("POJO_FIELD_ADDED", "ROW_FIELD_ADDED") or not isinstance(migration, dict):
        return finding
    field = finding.path.removeprefix("value.")
    rule = (migration.get("fields") or {}).get(field)
    if isinstance(rule, dict) and "default" in rule:
        return finding.at(message=f"field {field} added; the declared migration sets it to {rule['default']!r}")
    return finding


def operator_label(op: OperatorState) -> str:
    return op.uid or op.operator_id


class _Checker:
    """Flink's verdict on every state of a manifest, against a savepoint (or a migration's planned output, whose
    renames are done: ``renames=False``)."""

    def __init__(self, savepoint: Any, previous: Manifest | None, backend: str | None,
                 allow_non_restored_state: bool, renames: bool = True) -> None:
        self.savepoint = savepoint
        self.previous = previous
        self.backend = backend
        self.allow_non_restored = allow_non_restored_state
        self.renames = renames
        self.jar: str | None = None  # the new manifest's jar, when it is a jar's (see Manifest.jar)
        #: (the savepoint's Flink major, the new version's): unequal, Kryo data is read with the other Kryo.
        self.majors = (1, 1)
        self.kryo_layouts: str | None = None  # where a 1.x -> 2.x migration's user-class layouts come from

    def rows(self, new: Manifest) -> list[StateRow]:
        self.jar = new.jar
        source_major = self.savepoint.flink_major
        self.majors = (source_major, flink_major(new.flink_version) if new.flink_version else source_major)
        self.kryo_layouts = layouts_origin(new.kryo_classes, self.previous.kryo_classes if self.previous else None)
        rows: list[StateRow] = []
        matched: set[str] = set()
        for op_schema in new.operators.values():
            old_op, renamed = self.find_old_operator(op_schema)
            if old_op is None:
                rows += self.added_operator(op_schema)
                continue
            matched.add(old_op.operator_id)
            rows += self.operator(old_op, op_schema, renamed)
        for old_op in self.savepoint.operators:
            if old_op.operator_id not in matched and has_state(old_op):
                rows.append(self.removed_operator(old_op))
        return rows

    # -- operators ---------------------------------------------------------------------------------------------------

    def find_old_operator(self, op: OperatorSchema) -> tuple[OperatorState | None, bool]:
        by_id = {o.operator_id: o for o in self.savepoint.operators}
        if op.operator_id in by_id:
            return by_id[op.operator_id], False
        if op.renamed_from is not None and self.renames:
            old_id = OperatorRef.parse(op.renamed_from).operator_id
            if old_id in by_id:
                return by_id[old_id], True
        return None, False

    def added_operator(self, op: OperatorSchema) -> list[StateRow]:
        note = Finding("OPERATOR_ADDED", "", "new operator: it starts without state", AS_IS, operator=op.label)
        rows = [self._new_state_row(op.label, state) for state in op.states.values()]
        rows += operator_state_rows(op.label, None, described_states(op, self.jar is not None), jar=False,
                                    dropped=[], majors=self.majors)
        if not rows:
            rows = [StateRow(op.label, None, "added")]
        rows[0].findings.insert(0, note)
        return rows

    def removed_operator(self, old: OperatorState) -> StateRow:
        label = operator_label(old)
        row = StateRow(label, None, "operator-removed")
        if self.allow_non_restored:
            finding = Finding("OPERATOR_REMOVED", "", "operator removed: with allowNonRestoredState Flink skips its "
                              "state, which is lost", AS_IS, operator=label, migratable=True)
        else:
            finding = Finding("OPERATOR_REMOVED", "", "operator removed: Flink refuses the savepoint unless "
                              "allowNonRestoredState is set (its state is then dropped)", INCOMPATIBLE,
                              operator=label, migratable=False)
        row.findings.append(finding)
        row.flink_verdict = row.verdict = finding.verdict
        return row

    def operator(self, old: OperatorState, op: OperatorSchema, renamed: bool) -> list[StateRow]:
        label = op.label
        header = self.savepoint.keyed_header(old)
        operator_findings: list[Finding] = []
        if renamed:
            # Flink maps state by operator id: the old id is missing from the new job (state not restored) and the
            # new operator starts empty.
            operator_findings.append(Finding(
                "OPERATOR_RENAMED", "", f"uid {op.renamed_from} -> {label}: Flink cannot map the old state to the "
                f"renamed operator (the restore fails without allowNonRestoredState and the state is lost with it)",
                INCOMPATIBLE, operator=label))
        if op.max_parallelism is not None and op.max_parallelism != old.max_parallelism:
            operator_findings.append(Finding(
                "MAX_PARALLELISM_CHANGED", "", f"max parallelism {old.max_parallelism} -> {op.max_parallelism}: Flink "
                f"cannot map the key groups", INCOMPATIBLE, str(old.max_parallelism), str(op.max_parallelism),
                operator=label))
        key_result = Compatibility.as_is()
        # A key type the checkpoint does not record is judged by its logged keys, even once a plan assumed it.
        unrecorded = self.savepoint.unrecorded_key_finding(old, op.key) \
            if header is not None and op.key is not None else None
        if unrecorded is not None:
            key_result = Compatibility.of(unrecorded)
        elif header is not None and op.key is not None and header.key_serializer is not None:
            key_result = _key_compatibility(op.key, header.key_serializer, label)
        rows: list[StateRow] = []
        old_states = {s.name: s for s in header.states} if header is not None else {}
        used: set[str] = set()
        for state in op.states.values():
            source = (state.renamed_from if self.renames else None) or state.name
            meta = old_states.get(source)
            if meta is None:
                rows.append(self._new_state_row(label, state))
                continue
            used.add(source)
            assert header is not None
            rows.append(self.state(old, header, meta, label, state, key_result))
        for name, meta in old_states.items():
            if name not in used:
                rows.append(self._leftover_state_row(label, meta, header, name in op.dropped_states))
        previous_op = self.previous.find(old.operator_id) if self.previous is not None else None
        state_rows = operator_state_rows(label, self.savepoint.operator_header(old), described_states(
            op, self.jar is not None), jar=self.jar is not None, dropped=op.dropped_states, majors=self.majors,
            previous=previous_op.operator_states if previous_op is not None else None)
        if not rows and not state_rows:
            rows.append(StateRow(label, None, "renamed" if renamed else "kept"))
        # Operator-wide findings go first; the key's findings once (on the first row), its verdict on every keyed
        # row: operator states have no key.
        (rows or state_rows)[0].findings[:0] = operator_findings + [f.at(operator=label) for f in key_result.findings]
        operator_verdict = max([key_result.verdict, *(f.verdict for f in operator_findings)])
        for row in rows:
            row.flink_verdict = max(row.flink_verdict, operator_verdict)
            row.verdict = max(row.verdict, operator_verdict, *(f.effective_verdict for f in row.findings))
        operator_wide = max([AS_IS, *(f.verdict for f in operator_findings)])
        for row in state_rows:
            row.flink_verdict = max(row.flink_verdict, operator_wide)
            row.verdict = max(row.verdict, operator_wide, *(f.effective_verdict for f in row.findings))
        return rows + state_rows

    # -- states ------------------------------------------------------------------------------------------------------

    def state(self, old_op: OperatorState, header: KeyedBackendHeader, meta: StateMetaInfo, label: str,
              new: StateSchema, key_result: Compatibility) -> StateRow:
        row = StateRow(label, new.name, "renamed" if new.renamed_from else "kept", kind=new.kind,
                       old_kind=meta.kind, old_types=_old_types(meta), new_types=_new_types(new))
        result = Compatibility.as_is()
        if meta.kind != new.kind:
            result.add(Finding("STATE_KIND_CHANGED", "", f"state kind {meta.kind} -> {new.kind}: Flink requires the "
                               f"same kind", INCOMPATIBLE, meta.kind, new.kind))
        else:
            result.merge(self._namespace(new, meta))
            if new.kind != TIMERS:
                result.merge(self._values(new, meta, self._previous_state(old_op, meta.name)))
        # Flink 1.x -> 2.x: Kryo bytes the other Kryo reads (keys and namespaces too: every entry holds them).
        parts = [("key", header.key_serializer), ("namespace", meta.namespace_serializer),
                 ("user_key", meta.user_key_serializer), ("value", meta.value_serializer)]
        for finding in [*across_majors(*self.majors, parts, self.kryo_layouts), *gone_in_target(self.majors[1], parts)]:
            result.add(finding)
        if new.renamed_from and self.renames:
            result.add(Finding("STATE_RENAMED", "", f"state {new.renamed_from} -> {new.name}: Flink restores the old "
                               f"state under its old name and starts {new.name} empty", AS_IS, silent_misread=True))
        row.findings = [_with_declared_value(f.at(operator=label, state=new.name), new.migration)
                        for f in result.findings]
        row.flink_verdict = result.verdict
        row.verdict = max([result.verdict, *(f.effective_verdict for f in row.findings)])
        return row

    def _namespace(self, new: StateSchema, meta: StateMetaInfo) -> Compatibility:
        old_ns = meta.namespace_serializer
        if old_ns is None:
            return Compatibility.as_is()
        result = new.namespace.resolve_compatibility(old_ns, "namespace")
        if result.verdict >= AFTER_MIGRATION:
            return Compatibility.of(Finding("NAMESPACE_CHANGED", "namespace", f"namespace {old_ns.type_name()} -> "
                                            f"{new.namespace.type_name()}: namespace serializers cannot be migrated",
                                            INCOMPATIBLE, old_ns.type_name(), new.namespace.type_name()))
        return result

    def _previous_state(self, old_op: OperatorState, name: str) -> StateSchema | None:
        previous_op = self.previous.find(old_op.operator_id) if self.previous is not None else None
        return previous_op.states.get(name) if previous_op is not None else None

    def _values(self, new: StateSchema, meta: StateMetaInfo, previous: StateSchema | None) -> Compatibility:
        result = Compatibility.as_is()
        user_key = Compatibility.as_is()
        if new.kind == "MAP" and new.user_key is not None and meta.user_key_serializer is not None:
            annotate_row_names(meta.user_key_serializer, previous.user_key if previous else None)
            user_key = new.user_key.resolve_compatibility(meta.user_key_serializer, "user_key")
            result.merge(user_key)
        old_value = meta.value_serializer
        if new.value is not None and old_value is not None:
            annotate_row_names(old_value, previous.value if previous else None)
            result.merge(self._resolve_value(new.value, old_value))
        if new.kind == "MAP" and result.verdict is AFTER_MIGRATION and user_key.verdict is not AS_IS \
                and self.backend != "hashmap":
            # RocksDBKeyedStateBackend.migrateStateValues: user keys are part of RocksDB keys and are not rewritten.
            result.add(Finding("MAP_USER_KEY_CHANGED", "user_key", "RocksDB migrates MapState values only; a user key "
                               "that is not compatible as is fails the restore (heap migrates it)", INCOMPATIBLE,
                               meta.user_key_serializer.type_name() if meta.user_key_serializer else None,
                               new.user_key.type_name() if new.user_key else None))
        return result

    def _resolve_value(self, new: TypeSerializerSnapshot, old: TypeSerializerSnapshot) -> Compatibility:
        new_ttl, old_ttl = isinstance(new, TtlSnapshot), isinstance(old, TtlSnapshot)
        if new_ttl == old_ttl:
            return new.resolve_compatibility(old, "value")
        # Flink 2.x (TtlAwareSerializer) migrates state when TTL is switched on or off.
        user_new, user_old = new.nested[1] if new_ttl else new, old.nested[1] if old_ttl else old
        result = user_new.resolve_compatibility(user_old, "value")
        return result.add(Finding("TTL_ENABLED" if new_ttl else "TTL_DISABLED", "value",
                                  f"TTL {'enabled' if new_ttl else 'disabled'}: Flink rewrites the values",
                                  AFTER_MIGRATION, old.type_name(), new.type_name()))

    def _new_state_row(self, label: str, state: StateSchema) -> StateRow:
        row = StateRow(label, state.name, "added", kind=state.kind, new_types=_new_types(state))
        row.findings.append(Finding("STATE_ADDED", "", "new state: it starts empty", AS_IS, operator=label,
                                    state=state.name, migratable=True))
        return row

    def _leftover_state_row(self, label: str, meta: StateMetaInfo, header: KeyedBackendHeader | None,
                            dropped: bool) -> StateRow:
        unregistered = not dropped and self.jar is not None
        row = StateRow(label, meta.name, "dropped" if dropped else "not-registered" if unregistered else
                       "not-declared", old_kind=meta.kind, old_types=_old_types(meta))
        if unregistered:
            # The jar is the new version, and it does not say whether the state is registered lazily (restored,
            # and checked only on first use) or gone: Flink restores it either way (as is), and a state kept or
            # dropped unseen is how state is lost (a renamed one starts empty), so the user says which.
            finding = Finding("STATE_NOT_REGISTERED", "", UnregisteredState(label, meta.name, meta.kind).reason(),
                              AS_IS, operator=label, state=meta.name, silent_misread=True, migratable=False)
        elif dropped:
            finding = Finding("STATE_DROPPED", "", "state dropped by the manifest: Flink itself would still restore "
                              "it (heap deserializes it with its old serializer) and keep it in later savepoints; "
                              "the migration removes it", AS_IS, operator=label, state=meta.name, migratable=True)
        else:
            finding = Finding("STATE_NOT_DECLARED", "", "the new version does not declare this state: Flink still "
                              "restores it (heap deserializes it with its old serializer, whose classes must still "
                              "exist) and keeps it in later savepoints", AS_IS, operator=label, state=meta.name,
                              migratable=True)
        row.findings.append(finding)
        return row


def _unrecorded_key(savepoint: Savepoint, old: OperatorState, key: TypeSerializerSnapshot) -> Finding:
    """The key of an operator whose checkpoint records no key serializer (a changelog checkpoint never materialized,
    without timers). ChangelogKeyedStateBackend restores its log with the new job's key serializer and checks
    nothing, so a wrong key type restores silently misread: here every key of the log is read with the new type
    instead (the one place where check reads entries; the log of these operators bounds it), and must decode to
    exactly its bytes and hash to the key group Flink logged it in."""
    savepoint.assume_key_serializer(old, key)
    what = (f"the checkpoint does not record the key serializer (a changelog checkpoint never materialized, without "
            f"timers), and Flink restores the keys with the new {key.type_name()} unchecked")
    keys = 0
    try:
        for state in savepoint.keyed_states(old):
            keys += sum(len(entries) for _, entries in savepoint.iter_key_groups(old, state.name))
    except FlinkStateError as exc:
        return Finding("KEY_NOT_RECORDED", "key", f"{what}: the logged keys do not read as {key.type_name()}, so "
                       f"Flink would restore them misread ({exc})", AS_IS, None, key.type_name(),
                       silent_misread=True)
    hashed = all(s.key_groups_checked for _, s in savepoint.keyed_streams(old) if isinstance(s, ChangelogStream))
    checked = "decode to exactly their bytes and hash to the key groups Flink logged them in" if hashed else \
        f"decode to exactly their bytes (their key groups cannot be checked: no Java hashCode of {key.type_name()})"
    return Finding("KEY_NOT_RECORDED", "key", f"{what}: the keys of all {keys} logged entries, read as "
                   f"{key.type_name()}, {checked}", AS_IS, None, key.type_name())


def _key_compatibility(new: TypeSerializerSnapshot, old: TypeSerializerSnapshot, label: str) -> Compatibility:
    result = new.resolve_compatibility(old, "key")
    if result.verdict in (AS_IS, RECONFIGURED):
        return result
    return Compatibility.of(Finding("KEY_TYPE_CHANGED", "key", f"key {old.type_name()} -> {new.type_name()}: the "
                                    f"key serializer must be compatible as is or reconfigured (Flink cannot migrate "
                                    f"keys)", INCOMPATIBLE, old.type_name(), new.type_name()))


def _old_types(meta: StateMetaInfo) -> dict[str, str]:
    # The key is the operator's (one key serializer per keyed backend): findings name it when it changes.
    types: dict[str, str] = {}
    namespace = meta.namespace_serializer
    if namespace is not None and not isinstance(namespace, VoidNamespaceSnapshot):
        types["namespace"] = namespace.type_name()
    if meta.user_key_serializer is not None:
        types["user_key"] = meta.user_key_serializer.type_name()
    if meta.kind != TIMERS and meta.value_serializer is not None:
        types["value"] = meta.value_serializer.type_name()
    return types


def _new_types(state: StateSchema) -> dict[str, str]:
    types: dict[str, str] = {}
    if not isinstance(state.namespace, VoidNamespaceSnapshot):
        types["namespace"] = state.namespace.type_name()
    if state.user_key is not None:
        types["user_key"] = state.user_key.type_name()
    if state.value is not None:
        types["value"] = state.value.type_name()
    return types


__all__ = ["BACKENDS", "SavepointView", "flink_rows", "operator_label"]
