"""A serializer snapshot's readable type notation (``flinkstate schema`` writes manifests with it): the reverse of
:func:`flinkstate.typenotation.to_snapshot`, whose module describes the notation. A string when the type fits on one
line, else a mapping; the Table runtime's snapshots carry their exact bytes."""

from __future__ import annotations

import base64
import json
from typing import Any

from flinkstate.serializers import familynotation, registry
from flinkstate.serializers.avro import GENERIC_RECORD, AvroSnapshot
from flinkstate.serializers.base import TypeSerializerSnapshot, UnknownSnapshot
from flinkstate.serializers.collections import GenericArraySnapshot, ListSnapshot, MapSnapshot, SetSnapshot
from flinkstate.serializers.enum import EnumSnapshot
from flinkstate.serializers.kryo import KryoSnapshot
from flinkstate.serializers.namespaces import GlobalWindowSnapshot, TimeWindowSnapshot, VoidNamespaceSnapshot
from flinkstate.serializers.nullable import NullableSnapshot
from flinkstate.serializers.pojo import PojoSnapshot
from flinkstate.serializers.primitives import SimpleSnapshot
from flinkstate.serializers.row import RowSnapshot
from flinkstate.serializers.rowdata import TABLE_SNAPSHOTS
from flinkstate.serializers.timer import TimerSnapshot
from flinkstate.serializers.ttl import TtlSnapshot
from flinkstate.serializers.tuple import TUPLE_PACKAGE, TupleSnapshot
from flinkstate.typenotation import JAVA_CLASSES, PRIMITIVE_BY_TYPE, Notation, TypeNotationError


def to_notation(snapshot: TypeSerializerSnapshot) -> Notation:
    """The notation of a snapshot: a string when it fits on one line, else a mapping."""
    if isinstance(snapshot, TABLE_SNAPSHOTS):
        return _table_notation(snapshot)
    family = familynotation.notation_of(snapshot, to_notation)
    if family is not None:
        return family
    if isinstance(snapshot, SimpleSnapshot):
        return snapshot.type_name()
    if isinstance(snapshot, (VoidNamespaceSnapshot, TimeWindowSnapshot, GlobalWindowSnapshot)):
        return snapshot.type_name()
    if isinstance(snapshot, PojoSnapshot):
        return _pojo_notation(snapshot)
    if isinstance(snapshot, RowSnapshot):
        result: dict[str, Any] = {"row": {name: to_notation(n) for name, n in zip(snapshot.names(),
                                                                                    snapshot.nested, strict=True)}}
        if not snapshot.supports_row_kind:
            result["row_kind"] = False
        return result
    if isinstance(snapshot, EnumSnapshot):
        return {"enum": snapshot.enum_class, "constants": list(snapshot.constants)}
    if isinstance(snapshot, AvroSnapshot):
        return _avro_notation(snapshot)
    if isinstance(snapshot, KryoSnapshot):
        return _kryo_notation(snapshot)
    if isinstance(snapshot, UnknownSnapshot):
        return {"unknown": snapshot.class_name, "version": snapshot.version,
                "raw": base64.b64encode(snapshot.raw).decode()}
    if registry.from_plugin(snapshot.class_name):
        return _plugin_notation(snapshot)
    return _composite_notation(snapshot)


def _composite_notation(snapshot: TypeSerializerSnapshot) -> Notation:
    args = [to_notation(n) for n in snapshot.nested]
    inline = all(isinstance(a, str) for a in args)
    if isinstance(snapshot, TupleSnapshot):
        if snapshot.tuple_class != f"{TUPLE_PACKAGE}Tuple{len(args)}":
            raise TypeNotationError(f"tuple class {snapshot.tuple_class} has no notation")
        return f"Tuple{len(args)}<{', '.join(args)}>" if inline else {"tuple": args}  # type: ignore[arg-type]
    if isinstance(snapshot, NullableSnapshot):
        if snapshot.null_padding or not inline:
            return {"nullable": args[0], **({"padding": snapshot.null_padding} if snapshot.null_padding else {})}
        return f"Nullable<{args[0]}>"
    if isinstance(snapshot, GenericArraySnapshot):
        if inline and JAVA_CLASSES.get(snapshot.nested[0].type_name()) == snapshot.component_class:
            return f"{args[0]}[]"
        return {"array": args[0], "component_class": snapshot.component_class}
    if isinstance(snapshot, TtlSnapshot):
        return f"TTL<{args[1]}>" if inline else {"ttl": args[1]}
    if isinstance(snapshot, (ListSnapshot, SetSnapshot)):
        name = "List" if isinstance(snapshot, ListSnapshot) else "Set"
        return f"{name}<{args[0]}>" if inline else {name.lower(): args[0]}
    if isinstance(snapshot, MapSnapshot):
        return f"Map<{args[0]}, {args[1]}>" if inline else {"map": {"key": args[0], "value": args[1]}}
    if isinstance(snapshot, TimerSnapshot):
        return f"Timer<{args[0]}, {args[1]}>"
    raise TypeNotationError(f"no notation for serializer snapshot {snapshot.class_name}")


def _pojo_notation(snapshot: PojoSnapshot) -> dict[str, Any]:
    fields, declaring = {}, {}
    for field in snapshot.fields:
        if field.snapshot is None:
            raise TypeNotationError(f"POJO {snapshot.pojo_class}: field {field.name} has no serializer snapshot")
        notation = to_notation(field.snapshot)
        if field.primitive is not None and isinstance(notation, str) and notation in PRIMITIVE_BY_TYPE:
            notation = PRIMITIVE_BY_TYPE[notation] if field.primitive else f"java.lang.{notation}"
        fields[field.name] = notation
        if field.declaring_class != snapshot.pojo_class:
            declaring[field.name] = field.declaring_class
    result: dict[str, Any] = {"pojo": snapshot.pojo_class, "fields": fields}
    if declaring:
        result["declaring_classes"] = declaring
    for key, entries in (("subclasses", snapshot.registered_subclasses),
                         ("nonregistered_subclasses", snapshot.nonregistered_subclasses)):
        if not entries:
            continue
        if any(e.value is None or e.key is None for e in entries):
            raise TypeNotationError(f"POJO {snapshot.pojo_class}: a subclass in {key} is no longer loadable")
        result[key] = {e.name: to_notation(e.value) for e in entries}
    return result


def _avro_notation(snapshot: AvroSnapshot) -> dict[str, Any]:
    schema: Any = json.loads(snapshot.schema_json)
    if json.dumps(schema, separators=(",", ":"), ensure_ascii=False) != snapshot.schema_json:
        schema = snapshot.schema_json  # keep Avro's exact text when JSON re-encoding would change it
    return {"avro": snapshot.runtime_type or GENERIC_RECORD, "schema": schema}


def _kryo_notation(snapshot: KryoSnapshot) -> dict[str, Any]:
    result: dict[str, Any] = {"kryo": snapshot.type_class}
    for key, entries in (("registrations", snapshot.registrations),
                         ("default_serializers", snapshot.default_serializers),
                         ("default_serializer_classes", snapshot.default_serializer_classes)):
        if entries:
            result[key] = {e.name: base64.b64encode(e.value or b"").decode() for e in entries}
    return result


def _table_notation(snapshot: TypeSerializerSnapshot) -> dict[str, Any]:
    # The Table runtime's snapshots hold Java-serialized LogicalTypes, which this tool reads but cannot build from
    # a type's text: the notation shows Flink SQL's type and carries the snapshot's exact bytes.
    return {"table": snapshot.type_name(), "snapshot": base64.b64encode(registry.snapshot_bytes(snapshot)).decode()}


def _plugin_notation(snapshot: TypeSerializerSnapshot) -> dict[str, Any]:
    # A plugin's snapshot (a job's own serializer): its type name, and its exact bytes, which only the plugin reads.
    return {"plugin": snapshot.type_name(), "snapshot": base64.b64encode(registry.snapshot_bytes(snapshot)).decode()}


__all__ = ["to_notation"]
