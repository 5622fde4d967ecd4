"""The readable type notation of schema manifests, from notation to snapshot (the other way,
:func:`flinkstate.snapshotnotation.to_notation`, is its own module):

* :func:`to_snapshot` turns a notation into the exact ``TypeSerializerSnapshot`` Flink writes for that type (current
  snapshot versions; POJO fields sorted like ``PojoTypeInfo``; Row with the RowKind header; ``TupleN`` classes), so
  a savepoint writer can write new states from a manifest;
* :func:`flinkstate.snapshotnotation.to_notation` turns any snapshot the reader parses into a notation
  (``flinkstate schema``).

Notation (YAML values):

* strings: simple types (``Long``, ``Integer``, ``String``, ``Double``, ``Boolean``, ``BigDecimal``, ``LocalDate``,
  ``byte[]``, ``long[]``, ``String[]``, ...), namespaces (``VoidNamespace``, ``TimeWindow``, ``GlobalWindow``),
  generics (``List<Long>``, ``Map<String, Long>``, ``Set<String>``, ``Tuple2<Long, String>``, ``Nullable<Long>``,
  ``TTL<Long>``, ``Timer<String, VoidNamespace>``) and boxed arrays (``Long[]``);
* mappings for structured types: ``{pojo: CLASS, fields: {name: TYPE}}`` (optional ``subclasses: {CLASS: TYPE}``
  for registered subclasses, ``nonregistered_subclasses: {CLASS: TYPE}`` for those the serializer had cached,
  ``declaring_classes: {field: CLASS}`` for inherited fields; a field's type written as a Java primitive, ``long``,
  ``int``, ``double``, ``boolean``, ..., says the field is primitive (an added one holds 0/false), and as the boxed
  class, ``java.lang.Long``, that it is boxed (an added one holds null); ``Long`` says neither),
  ``{row: {name: TYPE}}`` (optional
  ``row_kind: false``), ``{enum: CLASS, constants: [...]}``, ``{avro: CLASS, schema: {...}}``,
  ``{kryo: CLASS}``, and the mapping forms of the generics, needed when an argument is structured:
  ``{list: T}``, ``{set: T}``, ``{map: {key: K, value: V}}``, ``{tuple: [T, ...]}``, ``{nullable: T, padding: N}``,
  ``{ttl: T}``, ``{array: T, component_class: C}``;
* the Table runtime's serializers (RowData and what it nests): ``{table: TYPE, snapshot: BASE64}``, Flink SQL's type
  (e.g. ``ROW<`id` BIGINT NOT NULL, `name` STRING>``) beside the snapshot's exact bytes, which hold Java-serialized
  LogicalTypes this tool cannot build from the text (the two must agree);
* Either, ArrayList, LinkedList, ListView, MapView, TtlAware, Value types and JavaSerializable: see
  :mod:`flinkstate.serializers.familynotation`.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from flinkstate.binary import Reader, Writer
from flinkstate.errors import FlinkStateError
from flinkstate.format_errors import UnknownSerializerSnapshot
from flinkstate.serializers import familynotation, registry
from flinkstate.serializers.avro import GENERIC_RECORD, AvroSnapshot
from flinkstate.serializers.base import TypeSerializerSnapshot, UnknownSnapshot
from flinkstate.serializers.collections import GenericArraySnapshot, ListSnapshot, MapSnapshot, SetSnapshot
from flinkstate.serializers.enum import EnumSnapshot
from flinkstate.serializers.kryo import KryoSnapshot
from flinkstate.serializers.namespaces import GlobalWindowSnapshot, TimeWindowSnapshot, VoidNamespaceSnapshot
from flinkstate.serializers.nullable import NullableSnapshot
from flinkstate.serializers.pojo import OptionalMapEntry, PojoField, PojoSnapshot, java_string_sort_key
from flinkstate.serializers.primitives import SIMPLE_TYPES, SimpleSnapshot
from flinkstate.serializers.row import RowSnapshot
from flinkstate.serializers.rowdata import TABLE_SNAPSHOTS
from flinkstate.serializers.timer import TimerSnapshot
from flinkstate.serializers.ttl import TtlSnapshot
from flinkstate.serializers.tuple import TUPLE_PACKAGE, TupleSnapshot

Notation = str | dict[str, Any]


class TypeNotationError(FlinkStateError):
    """A notation that names no type; ``path`` is where inside the notation (``fields.count``)."""

    def __init__(self, message: str, path: str = "") -> None:
        self.message = message
        self.path = path
        super().__init__(f"{path}: {message}" if path else message)

    def within(self, prefix: str) -> TypeNotationError:
        return TypeNotationError(self.message, f"{prefix}.{self.path}" if self.path else prefix)


# -- names ------------------------------------------------------------------------------------------------------------

_SIMPLE_BY_NAME = {spec.type_name: class_name for class_name, spec in SIMPLE_TYPES.items()}
_ALIASES = {"Int": "Integer", "int": "Integer", "long": "Long", "short": "Short", "byte": "Byte", "float": "Float",
            "double": "Double", "boolean": "Boolean", "char": "Character", "Char": "Character",
            "BigInt": "BigInteger", "java.lang.Long": "Long", "java.lang.Integer": "Integer",
            "java.lang.Short": "Short", "java.lang.Byte": "Byte", "java.lang.Float": "Float",
            "java.lang.Double": "Double", "java.lang.Boolean": "Boolean", "java.lang.Character": "Character"}
_NAMESPACES = {cls.NAME: cls for cls in (VoidNamespaceSnapshot, TimeWindowSnapshot, GlobalWindowSnapshot)}
#: Java classes of the simple types, the component class of their boxed arrays (``Long[]``); both directions.
JAVA_CLASSES = {"Long": "java.lang.Long", "Integer": "java.lang.Integer", "Short": "java.lang.Short",
                 "Byte": "java.lang.Byte", "Float": "java.lang.Float", "Double": "java.lang.Double",
                 "Boolean": "java.lang.Boolean", "Character": "java.lang.Character", "String": "java.lang.String",
                 "BigInteger": "java.math.BigInteger", "BigDecimal": "java.math.BigDecimal",
                 "Date": "java.util.Date", "Instant": "java.time.Instant", "LocalDate": "java.time.LocalDate",
                 "LocalTime": "java.time.LocalTime", "LocalDateTime": "java.time.LocalDateTime"}
_GENERIC_ARITY = {"List": 1, "Set": 1, "Map": 2, "Nullable": 1, "TTL": 1, "Timer": 2}
_TUPLE = re.compile(r"^Tuple(\d+)$")
_TOKEN = re.compile(r"\s*([A-Za-z_$][\w.$]*(?:\[\])*|<|>|,|\[\])")


def simple_type_names() -> list[str]:
    return sorted(_SIMPLE_BY_NAME)


# -- notation -> snapshot ---------------------------------------------------------------------------------------------


def to_snapshot(notation: Any, path: str = "") -> TypeSerializerSnapshot:
    """The snapshot Flink writes for the type ``notation`` names; :class:`TypeNotationError` (located at ``path``)
    if it names none."""
    try:
        if isinstance(notation, str):
            return _parse_string(notation)
        if isinstance(notation, Mapping):
            return _from_mapping(notation)
        raise TypeNotationError(f"a type must be a string or a mapping, not {type(notation).__name__} "
                                f"{notation!r}")
    except TypeNotationError as exc:
        raise exc.within(path) if path else exc from None


def _parse_string(text: str) -> TypeSerializerSnapshot:
    tokens = _tokenize(text)
    snapshot, rest = _parse_tokens(tokens, text)
    if rest:
        raise TypeNotationError(f"unexpected {' '.join(rest)!r} in type {text!r}")
    return snapshot


def _tokenize(text: str) -> list[str]:
    tokens, pos = [], 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        match = _TOKEN.match(text, pos)
        if match is None:
            raise TypeNotationError(f"cannot parse type {text!r} at {text[pos:]!r}")
        tokens.append(match.group(1))
        pos = match.end()
    if not tokens:
        raise TypeNotationError("empty type")
    return tokens


def _parse_tokens(tokens: list[str], text: str) -> tuple[TypeSerializerSnapshot, list[str]]:
    name, rest = tokens[0], tokens[1:]
    args: list[TypeSerializerSnapshot] = []
    if rest and rest[0] == "<":
        rest = rest[1:]
        while True:
            arg, rest = _parse_tokens(rest, text) if rest else (None, rest)
            if arg is None:
                raise TypeNotationError(f"unterminated type arguments in {text!r}")
            args.append(arg)
            if rest and rest[0] == ",":
                rest = rest[1:]
                continue
            if rest and rest[0] == ">":
                rest = rest[1:]
                break
            raise TypeNotationError(f"expected ',' or '>' in {text!r}")
    dims = 0
    while name.endswith("[]") and name not in _SIMPLE_BY_NAME:
        name, dims = name[:-2], dims + 1
    while rest and rest[0] == "[]":
        rest, dims = rest[1:], dims + 1
    snapshot = _named(name, args, text)
    for _ in range(dims):
        snapshot = _boxed_array(snapshot, text)
    return snapshot, rest


def _named(name: str, args: list[TypeSerializerSnapshot], text: str) -> TypeSerializerSnapshot:
    canonical = _ALIASES.get(name, name)
    if canonical in _SIMPLE_BY_NAME or canonical in _NAMESPACES:
        if args:
            raise TypeNotationError(f"{name} takes no type arguments (in {text!r})")
        if canonical in _NAMESPACES:
            return _NAMESPACES[canonical]()
        return SimpleSnapshot(_SIMPLE_BY_NAME[canonical])
    tuple_match = _TUPLE.match(name)
    if tuple_match:
        arity = int(tuple_match.group(1))
        if len(args) != arity or not 0 <= arity <= 25:
            raise TypeNotationError(f"{name} needs {arity} type arguments, got {len(args)} (in {text!r})")
        return tuple_snapshot(args)
    if name in _GENERIC_ARITY:
        if len(args) != _GENERIC_ARITY[name]:
            raise TypeNotationError(f"{name} needs {_GENERIC_ARITY[name]} type argument(s), got {len(args)} "
                                    f"(in {text!r})")
        return _generic(name, args)
    try:
        family = familynotation.named(name, args)
    except familynotation.NotationProblem as exc:
        raise TypeNotationError(f"{exc.message} (in {text!r})") from None
    if family is not None:
        return family
    raise TypeNotationError(f"unknown type {name!r}" + (f" in {text!r}" if text != name else ""))


def _generic(name: str, args: list[TypeSerializerSnapshot], padding: int = 0) -> TypeSerializerSnapshot:
    if name == "List":
        return ListSnapshot(ListSnapshot.CLASS_NAMES[0], args)
    if name == "Set":
        return SetSnapshot(SetSnapshot.CLASS_NAMES[0], args)
    if name == "Map":
        return MapSnapshot(MapSnapshot.CLASS_NAMES[0], args)
    if name == "Nullable":
        return NullableSnapshot(NullableSnapshot.CLASS_NAMES[0], args, null_padding=padding)
    if name == "TTL":
        return TtlSnapshot(TtlSnapshot.CLASS_NAMES[0], [SimpleSnapshot(_SIMPLE_BY_NAME["Long"]), *args])
    return TimerSnapshot(TimerSnapshot.CLASS_NAMES[0], args)


def tuple_snapshot(fields: list[TypeSerializerSnapshot]) -> TupleSnapshot:
    return TupleSnapshot(TupleSnapshot.CLASS_NAMES[0], fields, tuple_class=f"{TUPLE_PACKAGE}Tuple{len(fields)}")


def _boxed_array(component: TypeSerializerSnapshot, text: str) -> GenericArraySnapshot:
    java_class = JAVA_CLASSES.get(component.type_name())
    if java_class is None:
        raise TypeNotationError(f"the component class of {component.type_name()}[] is unknown: write "
                                f"{{array: TYPE, component_class: CLASS}} (in {text!r})")
    return GenericArraySnapshot(GenericArraySnapshot.CLASS_NAMES[0], [component], component_class=java_class)


_FORMS = ("pojo", "row", "enum", "avro", "kryo", "list", "set", "map", "tuple", "nullable", "ttl", "array",
          "table", "plugin", *familynotation.FORMS, "unknown")
_ALLOWED_KEYS = {
    "pojo": {"fields", "subclasses", "nonregistered_subclasses", "declaring_classes"}, "row": {"row_kind"},
    "enum": {"constants"},
    "avro": {"schema"}, "kryo": {"registrations", "default_serializers", "default_serializer_classes"},
    "nullable": {"padding"}, "array": {"component_class"}, "unknown": {"version", "raw"}, "table": {"snapshot"},
    "plugin": {"snapshot"},
    **familynotation.FORMS,
}


def _from_mapping(notation: Mapping[str, Any]) -> TypeSerializerSnapshot:
    forms = [k for k in notation if k in _FORMS]
    if len(forms) != 1:
        found = ", ".join(map(str, notation)) or "nothing"
        raise TypeNotationError(f"a structured type needs exactly one of {', '.join(_FORMS[:-1])} (found {found})")
    form = forms[0]
    extra = set(notation) - {form} - _ALLOWED_KEYS.get(form, set())
    if extra:
        raise TypeNotationError(f"unknown key(s) {', '.join(sorted(map(str, extra)))} in a {form} type")
    if form in familynotation.FORMS:
        try:
            return familynotation.from_mapping(form, notation, to_snapshot)
        except familynotation.NotationProblem as exc:
            raise TypeNotationError(exc.message, exc.path) from None
    return _FORM_BUILDERS[form](notation)


def _require(notation: Mapping[str, Any], key: str, kind: type | tuple[type, ...], what: str) -> Any:
    value = notation.get(key)
    if not isinstance(value, kind):
        raise TypeNotationError(f"{what}, got {value!r}", key)
    return value


def _nested(notation: Any, path: str) -> TypeSerializerSnapshot:
    return to_snapshot(notation, path)


#: Java primitive type names: in a POJO's fields they say the field is primitive (same serializer as the boxed
#: type, but an added primitive field holds 0/false, not null).
_PRIMITIVE_NAMES = {"long", "int", "short", "byte", "float", "double", "boolean", "char"}
PRIMITIVE_BY_TYPE = {"Long": "long", "Integer": "int", "Short": "short", "Byte": "byte", "Float": "float",
                      "Double": "double", "Boolean": "boolean", "Character": "char"}
#: ``java.lang.Long`` and the like: the field is the boxed type (an added one holds null).
_BOXED_NAMES = {f"java.lang.{name}" for name in PRIMITIVE_BY_TYPE}


def _primitive(notation: Any) -> bool | None:
    """Whether a POJO field's notation says primitive (``long``), boxed (``java.lang.Long``) or neither (``Long``:
    what ``schema`` writes, since savepoints do not tell)."""
    if isinstance(notation, str):
        if notation in _PRIMITIVE_NAMES:
            return True
        if notation in _BOXED_NAMES:
            return False
    return None


def _pojo_form(n: Mapping[str, Any]) -> PojoSnapshot:
    pojo_class = _require(n, "pojo", str, "pojo needs the class name")
    fields = _require(n, "fields", Mapping, "pojo needs 'fields', a mapping of field name to type")
    declaring = n.get("declaring_classes") or {}
    if not isinstance(declaring, Mapping) or set(declaring) - set(fields):
        raise TypeNotationError("must map field names of this POJO to class names", "declaring_classes")
    ordered = sorted(fields.items(), key=lambda item: java_string_sort_key(str(item[0])))
    pojo_fields = [PojoField(str(name), str(declaring.get(name, pojo_class)), _nested(t, f"fields.{name}"),
                             _primitive(t)) for name, t in ordered]
    maps = []
    for key in ("subclasses", "nonregistered_subclasses"):
        subclasses = n.get(key) or {}
        if not isinstance(subclasses, Mapping):
            raise TypeNotationError("must map subclass names to their types", key)
        maps.append([OptionalMapEntry(str(name), (), _nested(t, f"{key}.{name}")) for name, t in subclasses.items()])
    return PojoSnapshot(PojoSnapshot.CLASS_NAMES[0], 2, pojo_class, pojo_fields, maps[0], maps[1])


def _row_form(n: Mapping[str, Any]) -> RowSnapshot:
    fields = _require(n, "row", Mapping, "row needs a mapping of field name to type")
    row_kind = n.get("row_kind", True)
    if not isinstance(row_kind, bool):
        raise TypeNotationError(f"must be true or false, got {row_kind!r}", "row_kind")
    nested = [_nested(t, f"row.{name}") for name, t in fields.items()]
    return RowSnapshot(RowSnapshot.CLASS_NAMES[0], nested, supports_row_kind=row_kind,
                       field_names=[str(name) for name in fields])


def _enum_form(n: Mapping[str, Any]) -> EnumSnapshot:
    enum_class = _require(n, "enum", str, "enum needs the class name")
    constants = _require(n, "constants", list, "enum needs 'constants', the list of constant names")
    if not all(isinstance(c, str) for c in constants) or len(set(constants)) != len(constants):
        raise TypeNotationError("constants must be distinct names", "constants")
    return EnumSnapshot(EnumSnapshot.CLASS_NAMES[0], 3, enum_class, list(constants))


def _avro_form(n: Mapping[str, Any]) -> AvroSnapshot:
    runtime = _require(n, "avro", str, f"avro needs the record class (or {GENERIC_RECORD})")
    schema = n.get("schema")
    if isinstance(schema, (Mapping, list)):
        # Avro's Schema.toString(false): compact JSON in declaration order.
        schema_json = json.dumps(schema, separators=(",", ":"), ensure_ascii=False)
    elif isinstance(schema, str):
        schema_json = schema
    else:
        raise TypeNotationError("avro needs 'schema', the Avro schema (a mapping or its JSON text)", "schema")
    try:
        return AvroSnapshot(AvroSnapshot.CLASS_NAMES[0], 3, runtime, schema_json)
    except Exception as exc:  # fastavro raises several types for bad schemas
        raise TypeNotationError(f"invalid Avro schema: {exc}", "schema") from None


def _kryo_form(n: Mapping[str, Any]) -> KryoSnapshot:
    type_class = _require(n, "kryo", str, "kryo needs the class name")
    maps = []
    for key in ("registrations", "default_serializers", "default_serializer_classes"):
        entries = n.get(key) or {}
        if not isinstance(entries, Mapping):
            raise TypeNotationError("must map class names to base64 configuration frames", key)
        maps.append([OptionalMapEntry(str(name), _utf(str(name)), _b64(frame, f"{key}.{name}"))
                     for name, frame in entries.items()])
    return KryoSnapshot(KryoSnapshot.CLASS_NAMES[0], 2, type_class, tuple(maps))  # type: ignore[arg-type]


def _utf(text: str) -> bytes:
    writer = Writer()
    writer.utf(text)
    return writer.getvalue()


def _b64(value: Any, path: str) -> bytes:
    try:
        return base64.b64decode(str(value), validate=True)
    except ValueError:
        raise TypeNotationError("must be base64", path) from None


def _list_form(n: Mapping[str, Any]) -> TypeSerializerSnapshot:
    return _generic("List", [_nested(n["list"], "list")])


def _set_form(n: Mapping[str, Any]) -> TypeSerializerSnapshot:
    return _generic("Set", [_nested(n["set"], "set")])


def _ttl_form(n: Mapping[str, Any]) -> TypeSerializerSnapshot:
    return _generic("TTL", [_nested(n["ttl"], "ttl")])


def _map_form(n: Mapping[str, Any]) -> TypeSerializerSnapshot:
    spec = _require(n, "map", Mapping, "map needs {key: TYPE, value: TYPE}")
    if set(spec) != {"key", "value"}:
        raise TypeNotationError("map needs exactly 'key' and 'value'", "map")
    return _generic("Map", [_nested(spec["key"], "map.key"), _nested(spec["value"], "map.value")])


def _tuple_form(n: Mapping[str, Any]) -> TypeSerializerSnapshot:
    fields = _require(n, "tuple", list, "tuple needs the list of field types")
    return tuple_snapshot([_nested(t, f"tuple.{i}") for i, t in enumerate(fields)])


def _nullable_form(n: Mapping[str, Any]) -> TypeSerializerSnapshot:
    padding = n.get("padding", 0)
    if not isinstance(padding, int) or padding < 0:
        raise TypeNotationError(f"must be a byte count, got {padding!r}", "padding")
    return _generic("Nullable", [_nested(n["nullable"], "nullable")], padding)


def _array_form(n: Mapping[str, Any]) -> TypeSerializerSnapshot:
    component = _nested(n["array"], "array")
    component_class = n.get("component_class") or JAVA_CLASSES.get(component.type_name())
    if not isinstance(component_class, str):
        raise TypeNotationError("needs the Java class of the elements", "component_class")
    return GenericArraySnapshot(GenericArraySnapshot.CLASS_NAMES[0], [component], component_class=component_class)


def _unknown_form(n: Mapping[str, Any]) -> TypeSerializerSnapshot:
    class_name = _require(n, "unknown", str, "unknown needs the snapshot class name")
    version = n.get("version", 1)
    return UnknownSnapshot(class_name, int(version), _b64(n.get("raw", ""), "raw"))


def _table_form(notation: Mapping[str, Any]) -> TypeSerializerSnapshot:
    text = _require(notation, "table", str, "must be the Table type's text")
    try:
        snapshot = snapshot_from_bytes(_b64(notation.get("snapshot", ""), "snapshot"))
    except FlinkStateError as exc:
        raise TypeNotationError(f"bad Table serializer snapshot ({exc})", "snapshot") from None
    if not isinstance(snapshot, TABLE_SNAPSHOTS):
        raise TypeNotationError(f"{snapshot.class_name} is no Table runtime serializer", "snapshot")
    if snapshot.type_name() != text:
        raise TypeNotationError(f"the type {text!r} is not the snapshot's {snapshot.type_name()!r} (a Table type is "
                                f"changed by changing the SQL job, not its notation)", "table")
    return snapshot


def _plugin_form(notation: Mapping[str, Any]) -> TypeSerializerSnapshot:
    text = _require(notation, "plugin", str, "must be the plugin type's name")
    try:
        snapshot = snapshot_from_bytes(_b64(notation.get("snapshot", ""), "snapshot"))
    except UnknownSerializerSnapshot as exc:
        raise TypeNotationError(f"{exc.class_name} is read by no serializer plugin installed here (entry point "
                                f"group {registry.PLUGIN_GROUP})", "snapshot") from None
    except FlinkStateError as exc:
        raise TypeNotationError(f"bad plugin serializer snapshot ({exc})", "snapshot") from None
    if not registry.from_plugin(snapshot.class_name):
        raise TypeNotationError(f"{snapshot.class_name} is read by no serializer plugin", "snapshot")
    if snapshot.type_name() != text:
        raise TypeNotationError(f"the type {text!r} is not the snapshot's {snapshot.type_name()!r}", "plugin")
    return snapshot


#: The builder of each mapping form (``_from_mapping`` has checked that the mapping names exactly one).
_FORM_BUILDERS: dict[str, Callable[[Mapping[str, Any]], TypeSerializerSnapshot]] = {
    "pojo": _pojo_form, "row": _row_form, "enum": _enum_form, "avro": _avro_form, "kryo": _kryo_form,
    "list": _list_form, "set": _set_form, "map": _map_form, "tuple": _tuple_form, "nullable": _nullable_form,
    "ttl": _ttl_form, "array": _array_form, "unknown": _unknown_form, "table": _table_form,
    "plugin": _plugin_form,
}


def snapshot_from_bytes(data: bytes) -> TypeSerializerSnapshot:
    """A nested (bare) snapshot from its bytes; used by tests and tools comparing encodings."""
    return registry.read_snapshot(Reader(data, 0, "<bytes>", 0))


__all__ = ["JAVA_CLASSES", "PRIMITIVE_BY_TYPE", "Notation", "TypeNotationError", "simple_type_names",
           "snapshot_from_bytes", "to_snapshot", "tuple_snapshot"]
