"""Issue 25's ground truth, shared by the modules whose jobs write savepoints on real Flink: what a jar's schema
(``flinkstate schema --jar``, :func:`flinkstate.engine.jar_schema.inspect_jar`) and ``schema`` of a savepoint the
same jar wrote differ in, operator by operator, state by state and snapshot byte by byte. Each module compares the
savepoints it takes anyway, so the ground truth costs an inspector JVM per jar and no job run of its own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flinkstate.engine.jar_schema import JarSchema
from flinkstate.format.keyed_header import state_meta_bytes
from flinkstate.manifest import OperatorSchema, manifest_from_savepoint
from flinkstate.savepoint import Savepoint
from flinkstate.serializers.registry import snapshot_bytes


def differences(schema: JarSchema, savepoint_dir: Path, *, allow_external_handles: bool = False) -> list[str]:
    """Where the jar's schema and the savepoint's differ: operators (by label and id), each operator's manifest
    entry, and the bytes of the key serializer snapshot and of every keyed and operator state's meta info.
    ``allow_external_handles``: a retained checkpoint's (its files lie outside its folder)."""
    savepoint = Savepoint.open(savepoint_dir, allow_external_handles=allow_external_handles)
    jar_manifest = schema.manifest()
    savepoint_manifest = manifest_from_savepoint(savepoint)
    found = []
    jar_operators = {op.operator_id: op for op in jar_manifest.operators.values()}
    savepoint_operators = {op.operator_id: op for op in savepoint_manifest.operators.values()}
    # by id: a savepoint of Flink 1.x records no uids (its manifest labels operators by id)
    if set(jar_operators) != set(savepoint_operators) or any(
            op.uid is not None and op.label != jar_operators[op.operator_id].label
            for op in savepoint_operators.values() if op.operator_id in jar_operators):
        found.append(f"operators: jar {sorted(jar_manifest.operators)}, "
                     f"savepoint {sorted(savepoint_manifest.operators)}")
    for operator_id, operator in savepoint_operators.items():
        registered = jar_operators.get(operator_id)
        if registered is not None and _entry(registered) != _entry(operator):
            found.append(f"{operator.label}: jar {registered.to_dict()}, savepoint {operator.to_dict()}")
    for inspected in schema.operators:
        op = next((o for o in savepoint.operators if o.operator_id == inspected.operator_id), None)
        if op is None:
            continue
        header = savepoint.keyed_header(op)
        if (inspected.keyed is None) != (header is None):
            found.append(f"{inspected.label}: keyed state in the jar {inspected.keyed is not None}, in the savepoint "
                         f"{header is not None}")
        elif inspected.keyed is not None and header is not None:
            assert inspected.keyed.key_serializer is not None and header.key_serializer is not None
            if snapshot_bytes(inspected.keyed.key_serializer) != snapshot_bytes(header.key_serializer):
                found.append(f"{inspected.label}: key serializer snapshot bytes")
            jar_states = {meta.name: state_meta_bytes(meta) for meta in inspected.keyed.states}
            savepoint_states = {meta.name: state_meta_bytes(meta) for meta in header.states}
            for name in sorted(set(jar_states) | set(savepoint_states)):
                if jar_states.get(name) != savepoint_states.get(name):
                    found.append(f"{inspected.label}, state {name}: meta info bytes")
        streams = savepoint.operator_state_streams(op)
        if (inspected.operator is None) != (not streams):
            found.append(f"{inspected.label}: operator state in the jar {inspected.operator is not None}, in the "
                         f"savepoint {bool(streams)}")
        elif inspected.operator is not None:
            saved = streams[0][1].header()
            jar_metas = [state_meta_bytes(m) for m in [*inspected.operator.list_states,
                                                       *inspected.operator.broadcast_states]]
            saved_metas = [state_meta_bytes(m) for m in [*saved.list_states, *saved.broadcast_states]]
            if jar_metas != saved_metas:
                found.append(f"{inspected.label}: operator state meta info bytes")
    return found


def _entry(operator: OperatorSchema) -> dict[str, Any]:
    """The operator's manifest entry without the id it writes for an operator known by id alone."""
    entry = operator.to_dict()
    entry.pop("id", None)
    return entry
