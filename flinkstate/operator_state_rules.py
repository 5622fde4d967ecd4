"""What Flink does with an operator's operator states (split and union list states, broadcast states) when the new
version restores a savepoint: one report row per state (:func:`operator_state_rows`), beside the keyed states'
(:mod:`flinkstate.resolution`).

Flink's ``OperatorStateRestoreOperation`` and ``DefaultOperatorStateBackend`` (read in Flink 2.3's sources):

* restore: every state of the savepoint's header is recreated with the serializer restored from its snapshot, and
  every element is deserialized with it at once (the old classes must still load and read the bytes: a POJO field
  whose type changed fails here, e.g. ``IllegalArgumentException: Can not set ... field``);
* registration (``getListState``, ``getUnionListState``, ``getBroadcastState``, in ``initializeState()`` or a
  broadcast operator's ``open()``): a restored state of that name must have the same distribution mode
  (``IllegalStateException: Incompatible state assignment modes``), and the new serializer's
  ``resolveSchemaCompatibility`` against the restored snapshot (a list state's element serializer; a broadcast
  state's key and value serializers) must not be incompatible (``StateMigrationException``). As is, reconfigured or
  after migration all restore: the values are objects already, written with the new serializer at the next
  snapshot. List and broadcast states are kept apart: a broadcast state registered under a list state's name (or
  the other way round) starts empty;
* a restored state the operator never registers stays in the backend, unseen by the operator, and is written into
  every later snapshot with its old serializer: Flink neither fails nor drops it.

flinkstate copies operator state as it is (``migrate`` rewrites keyed state only): what Flink would have to migrate
is refused by the plan (:mod:`flinkstate.migration.verdict`). A manifest that does not describe an operator's
operator states (``operator_states`` absent: one written before they were recorded) leaves them unjudged; a jar's
schema always describes them.
"""

from __future__ import annotations

from flinkstate.compatibility import AS_IS, INCOMPATIBLE, Compatibility, Finding
from flinkstate.format.keyed_header import OPERATOR_STATE_DISTRIBUTION_MODE, StateMetaInfo
from flinkstate.format.operator_state import OperatorBackendHeader
from flinkstate.major_upgrade import across_majors, gone_in_target
from flinkstate.manifest import OperatorSchema
from flinkstate.manifest_operator_states import BROADCAST, KEY_SERIALIZER, OPERATOR_STATE_KINDS, OperatorStateSchema
from flinkstate.report import StateRow
from flinkstate.serializers.base import TypeSerializerSnapshot
from flinkstate.serializers.row import RowSnapshot

#: The report's kinds of operator states (a row of another kind is a keyed state's).
OPERATOR_KINDS = frozenset(OPERATOR_STATE_KINDS.values())


def described_states(op: OperatorSchema, jar: bool) -> dict[str, OperatorStateSchema] | None:
    """The operator states the new version registers on ``op``; None: the manifest does not describe them. A jar's
    manifest (``Manifest.jar``) always does: an operator it lists without any registers none."""
    if op.operator_states is None and jar:
        return {}
    return op.operator_states


def operator_state_rows(label: str, old: OperatorBackendHeader | None, new: dict[str, OperatorStateSchema] | None,
                        *, jar: bool, dropped: list[str], majors: tuple[int, int],
                        previous: dict[str, OperatorStateSchema] | None = None) -> list[StateRow]:
    """One row per operator state of the savepoint's operator (``old``: its header, None when it has none) and of the
    new version's (``new``: :func:`described_states`; None: not judged, no rows). ``jar``: the new version is a jar's
    schema; ``dropped``: the operator's ``dropped_states``; ``majors``: the savepoint's Flink major and the new
    version's; ``previous``: the operator states of the version that wrote the savepoint (Row field names)."""
    if new is None:
        return []
    old_states = {meta.name: meta for meta in [*old.list_states, *old.broadcast_states]} if old is not None else {}
    rows = []
    for name, state in new.items():
        meta = old_states.get(name)
        if meta is None:
            row = StateRow(label, name, "added", kind=state.kind, new_types=_types(state.user_key, state.value))
            row.findings.append(Finding("STATE_ADDED", "", f"new operator state ({state.kind}): it starts empty",
                                        AS_IS, operator=label, state=name, migratable=True))
            rows.append(row)
        else:
            rows.append(_restored(label, meta, state, majors, (previous or {}).get(name)))
    for name, meta in old_states.items():
        if name not in new:
            rows.append(_leftover(label, meta, jar, name in dropped))
    return rows


def _restored(label: str, meta: StateMetaInfo, new: OperatorStateSchema, majors: tuple[int, int],
              previous: OperatorStateSchema | None) -> StateRow:
    old_mode = meta.option(OPERATOR_STATE_DISTRIBUTION_MODE) or ""
    old_key, old_value = meta.serializer(KEY_SERIALIZER), meta.value_serializer
    row = StateRow(label, new.name, "kept", kind=new.kind, old_kind=OPERATOR_STATE_KINDS.get(old_mode, old_mode),
                   old_types=_types(old_key, old_value), new_types=_types(new.user_key, new.value))
    result = Compatibility.as_is()
    if (old_mode == BROADCAST) != (new.mode == BROADCAST):
        result.add(Finding("OPERATOR_STATE_KIND_CHANGED", "", f"{row.old_kind} -> {new.kind}: Flink keeps list and "
                           f"broadcast states apart, so the restored state is never given to the operator (kept "
                           f"unseen) and the one it registers starts empty", AS_IS, row.old_kind, new.kind,
                           silent_misread=True))
    elif old_mode != new.mode:
        result.add(Finding("OPERATOR_STATE_MODE_CHANGED", "", f"distribution mode {old_mode} -> {new.mode}: Flink "
                           f"fails when the operator registers it (IllegalStateException: Incompatible state "
                           f"assignment modes)", INCOMPATIBLE, old_mode, new.mode))
    else:
        if new.user_key is not None and old_key is not None:
            annotate_row_names(old_key, previous.user_key if previous is not None else None)
            result.merge(new.user_key.resolve_compatibility(old_key, "user_key"))
        if old_value is not None:
            annotate_row_names(old_value, previous.value if previous is not None else None)
            result.merge(new.value.resolve_compatibility(old_value, "value"))
    # Flink 1.x -> 2.x: Kryo bytes the other Kryo reads
    parts = [("user_key", old_key), ("value", old_value)]
    for finding in [*across_majors(*majors, parts), *gone_in_target(majors[1], parts)]:
        result.add(finding)
    row.findings = [f.at(operator=label, state=new.name) for f in result.findings]
    row.flink_verdict = result.verdict
    row.verdict = result.effective_verdict
    return row


def _leftover(label: str, meta: StateMetaInfo, jar: bool, dropped: bool) -> StateRow:
    """A state of the savepoint the new version does not register: Flink restores it and keeps it."""
    mode = meta.option(OPERATOR_STATE_DISTRIBUTION_MODE) or ""
    kind = OPERATOR_STATE_KINDS.get(mode, mode)
    kept = ("Flink still restores it (every element read with its old serializer, whose classes must still load), "
            "keeps it unseen by the operator and writes it into every later savepoint")
    unregistered = jar and not dropped
    row = StateRow(label, meta.name, "dropped" if dropped else "not-registered" if unregistered else "not-declared",
                   old_kind=kind, old_types=_types(meta.serializer(KEY_SERIALIZER), meta.value_serializer))
    if unregistered:
        # As for keyed state: a renamed state would start empty under its new name, so the user says it goes.
        finding = Finding("OPERATOR_STATE_NOT_REGISTERED", "", f"the savepoint holds it but the jar does not register "
                          f"it when the operator initializes: {kept}; if it was renamed, the new name starts empty "
                          f"(flinkstate does not rename operator state): register it, or declare it in "
                          f"dropped_states", AS_IS, operator=label, state=meta.name, silent_misread=True,
                          migratable=False)
    elif dropped:
        finding = Finding("OPERATOR_STATE_DROPPED", "", f"declared dropped, but {kept} (flinkstate does not remove "
                          f"operator state)", AS_IS, operator=label, state=meta.name)
    else:
        finding = Finding("OPERATOR_STATE_NOT_DECLARED", "", f"the new version does not declare it: {kept}", AS_IS,
                          operator=label, state=meta.name)
    row.findings.append(finding)
    row.verdict = finding.effective_verdict
    return row


def _types(user_key: TypeSerializerSnapshot | None, value: TypeSerializerSnapshot | None) -> dict[str, str]:
    types = {"user_key": user_key.type_name()} if user_key is not None else {}
    if value is not None:
        types["value"] = value.type_name()
    return types


def annotate_row_names(old: TypeSerializerSnapshot, previous: TypeSerializerSnapshot | None) -> None:
    """Copies Row field names from the previous manifest's type onto the savepoint's snapshot (which has none) where
    the two have the same shape, so that fields swapped by name are caught."""
    if previous is None or type(previous) is not type(old) or len(previous.nested) != len(old.nested):
        return
    if isinstance(old, RowSnapshot) and isinstance(previous, RowSnapshot) and previous.field_names:
        old.field_names = list(previous.field_names)
    for old_nested, previous_nested in zip(old.nested, previous.nested, strict=True):
        annotate_row_names(old_nested, previous_nested)


__all__ = ["OPERATOR_KINDS", "annotate_row_names", "described_states", "operator_state_rows"]
