"""Value transforms: plain functions ``old value -> new value`` built once per state from the old snapshot, the new
snapshot and the state's migration rules, fastavro-style (small dispatch tables, closures, no per-entry lookups).

:func:`build_transform` returns ``None`` when the two snapshots are byte-identical and no rule applies (the stored
bytes can be copied as they are), a function otherwise, and raises :class:`MigrationPlanError` with the reason when
the change cannot be migrated with the given rules (that reason is what the compatibility check reports).

Values are in the reader's Python representation: POJO → dict, Row/Tuple → tuple, Avro record → dict, ...
"""

from __future__ import annotations

from typing import Any

from flinkstate._speedups.runs import fast_record_map
from flinkstate.compatibility import RECONFIGURED
from flinkstate.errors import printable
from flinkstate.migration.conversions import (
    PRIMITIVE_NAMES,
    ConversionError,
    MigrationPlanError,
    Transform,
    chain,
    conversion,
    identity,
)
from flinkstate.migration.kryo_major import kryo_carry_transform, kryo_collection_transform, kryo_reads_differ
from flinkstate.migration.spec import FieldRule
from flinkstate.serializers.avro import AvroSnapshot
from flinkstate.serializers.base import TypeSerializerSnapshot, UnknownSnapshot
from flinkstate.serializers.binaryrow import RowDataValue
from flinkstate.serializers.pojo import PojoSnapshot
from flinkstate.serializers.primitives import SimpleSnapshot
from flinkstate.serializers.registry import snapshot_bytes
from flinkstate.serializers.row import KindedRow, RowSnapshot
from flinkstate.serializers.rowdata import RowDataSnapshot
from flinkstate.serializers.ttl import TtlSnapshot, TtlValue

#: Row field names by field path ("" = the value itself): (old names, new names). Row snapshots store no names, so
#: they come from the manifests.
RowNames = dict[str, tuple[list[str], list[str]]]

TTL_NEEDS_LAST_ACCESS = ("TTL is switched on: the values need a last-access time (migration: {ttl_last_access: "
                         "EPOCH_MILLIS}, or the migration's time)")


def _same(old: TypeSerializerSnapshot, new: TypeSerializerSnapshot) -> bool:
    return snapshot_bytes(old) == snapshot_bytes(new)


def _same_pojo_values(old: TypeSerializerSnapshot, new: TypeSerializerSnapshot) -> bool:
    """POJO snapshots that store values alike although their bytes differ: only the non-registered subclasses
    differ, a cache of the subclasses the serializer had met (a value of one names its class, so the bytes do not
    depend on the cache; the HashMap backend even writes it empty)."""
    if not (isinstance(old, PojoSnapshot) and isinstance(new, PojoSnapshot)) or old.pojo_class != new.pojo_class:
        return False

    def fields(snapshot: PojoSnapshot) -> list[Any]:
        return [(f.name, f.declaring_class, snapshot_bytes(f.snapshot) if f.snapshot else None)
                for f in snapshot.fields]

    def registered(snapshot: PojoSnapshot) -> list[Any]:
        return [(e.name, snapshot_bytes(e.value) if e.value is not None else None)
                for e in snapshot.registered_subclasses]

    return fields(old) == fields(new) and registered(old) == registered(new)


def _rules_under(rules: dict[str, FieldRule], name: str) -> dict[str, FieldRule]:
    prefix = f"{name}."
    return {k[len(prefix):]: v for k, v in rules.items() if k.startswith(prefix)}


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def restored_unaided(old: TypeSerializerSnapshot, new: TypeSerializerSnapshot) -> bool:
    """Whether Flink reads ``old``'s bytes with ``new``'s serializer exactly, without migrating: compatible as is or
    after reconfiguration (an enum constant added or reordered, Kryo registrations changed, ...), and no silent
    misread. Such values keep their bytes; a state whose values keep their bytes keeps its old snapshot, as Flink's
    restored (reconfigured) serializer does."""
    if kryo_reads_differ(old, new):  # the same snapshot bytes, read by another Kryo (Flink 1.x -> 2.x)
        return False
    if _same(old, new) or _same_pojo_values(old, new):
        return True
    result = new.resolve_compatibility(old, "value")
    return result.verdict <= RECONFIGURED and not any(f.silent_misread for f in result.findings)


def _inert(old: TypeSerializerSnapshot, new: TypeSerializerSnapshot, rules: dict[str, FieldRule]) -> bool:
    """Whether field rules change nothing in a value whose old and new types are alike: each only converts a field
    whose old type already is its new one (a built-in conversion to a value's own type is the identity), as when a
    manifest that carried a version's migration is deployed again on a savepoint that version wrote. A rename, a
    default or a nested rule is never inert."""
    if not rules:
        return True
    if not isinstance(old, PojoSnapshot) or not isinstance(new, PojoSnapshot):
        return False
    old_fields = {f.name: f.snapshot for f in old.fields}
    new_fields = {f.name: f.snapshot for f in new.fields}
    for name, rule in rules.items():
        before, after = old_fields.get(name), new_fields.get(name)
        if "." in name or rule.source is not None or rule.has_default or before is None or after is None:
            return False
        if not restored_unaided(before, after):
            return False
    return True


def _rows_reordered(row_names: RowNames, path: str) -> bool:
    """Whether a Row at or below ``path`` has other field names (or order) in the new version: Row snapshots store
    no names, so equal bytes do not mean equal values there."""
    prefix = f"{path}." if path else ""
    return any(old_names != new_names for where, (old_names, new_names) in row_names.items()
               if where == path or where.startswith(prefix))


def build_transform(old: TypeSerializerSnapshot, new: TypeSerializerSnapshot, *,
                    rules: dict[str, FieldRule] | None = None, convert: str | None = None,
                    row_names: RowNames | None = None, path: str = "",
                    ttl_last_access: int | None = None) -> Transform | None:
    """The transform of one stored value; see the module docstring. ``ttl_last_access`` is the last-access time
    (epoch milliseconds) a value gets when TTL is switched on (Flink 2.x: the restore's current time)."""
    rules = rules or {}
    row_names = row_names or {}
    where = f" (field {path})" if path else ""
    if isinstance(old, TtlSnapshot) != isinstance(new, TtlSnapshot):
        return _ttl_transform(old, new, rules, convert, row_names, path, ttl_last_access)
    if isinstance(old, TtlSnapshot) and isinstance(new, TtlSnapshot) and (rules or convert or not restored_unaided(
            old, new) or _rows_reordered(row_names, path)):
        # TTL on both sides: the user value migrates by the rules, its last access is kept (TtlAwareSerializer)
        user = build_transform(old.user, new.user, rules=rules, convert=convert, row_names=row_names, path=path)
        if user is None:
            return identity
        return lambda value: TtlValue(user(value.value), value.last_access)
    if convert is not None:
        try:
            return conversion(convert, old, new)
        except MigrationPlanError as exc:
            raise MigrationPlanError(f"{exc}{where}") from None
    if (carry := kryo_carry_transform(old, new, where) or kryo_collection_transform(old, new, where)) is not None:
        return carry
    if restored_unaided(old, new) and not _rows_reordered(row_names, path) and _inert(old, new, rules):
        return None
    for snapshot, side in ((old, "savepoint's"), (new, "manifest's")):
        if isinstance(snapshot, UnknownSnapshot):
            raise MigrationPlanError(f"the {side} serializer snapshot class {printable(snapshot.class_name)} is "
                                     f"unknown (not a serializer this tool reads, or a corrupted name){where}: its "
                                     f"values cannot be migrated")
    if isinstance(new, PojoSnapshot) and isinstance(old, PojoSnapshot):
        return _record_transform([f.name for f in old.fields], [f.snapshot for f in old.fields],
                                 [f.name for f in new.fields], [f.snapshot for f in new.fields],
                                 rules, row_names, path, as_dict=True,
                                 implicit=[f.java_default() for f in new.fields])
    if isinstance(new, RowSnapshot) and isinstance(old, RowSnapshot):
        return _row_transform(old, new, rules, row_names, path)
    if isinstance(new, RowDataSnapshot) and isinstance(old, RowDataSnapshot):
        return _rowdata_transform(old, new, rules, row_names, path)
    if isinstance(new, AvroSnapshot) and isinstance(old, AvroSnapshot):
        return avro_transform(old.schema, new.schema, rules, path)
    if rules:
        # Field rules match old and new fields by name: both sides must be records of one family.
        side = (f"the old type {old.type_name()}" if isinstance(new, (PojoSnapshot, RowSnapshot, AvroSnapshot))
                else f"the new type {new.type_name()}")
        raise MigrationPlanError(f"field rules {', '.join(sorted(rules))} are given, but {side} has no fields of "
                                 f"the same kind to match them to{where}: declare a function for the "
                                 f"{old.type_name()} -> {new.type_name()} change")
    if type(old) is type(new) and old.nested and len(old.nested) == len(new.nested) and \
            not isinstance(new, SimpleSnapshot):
        parts = [build_transform(o, n, row_names=row_names, path=_join(path, f"[{i}]"))
                 for i, (o, n) in enumerate(zip(old.nested, new.nested, strict=True))]
        return _positional_transform(new, parts)
    if old.type_name() == new.type_name():
        # Same name, other serializer configuration (an enum constant removed, ...): say what differs.
        reason = "; ".join(f.message for f in new.resolve_compatibility(old, path or "value").findings)
        raise MigrationPlanError(f"{new.type_name()} changed in a way Flink cannot restore"
                                 f"{': ' + reason if reason else ''}{where}: declare a function")
    raise MigrationPlanError(f"the type changed from {old.type_name()} to {new.type_name()}{where}: declare a "
                             f"conversion (convert: ...) or a function")


def _ttl_transform(old: TypeSerializerSnapshot, new: TypeSerializerSnapshot, rules: dict[str, FieldRule],
                   convert: str | None, row_names: RowNames, path: str, last_access: int | None) -> Transform:
    """TTL switched on (the value wrapped with a last-access time) or off (unwrapped), the user value migrated by
    the same rules: what Flink 2.x's ``TtlAwareSerializer.migrateValueFromPriorSerializer`` does on restore."""
    if isinstance(new, TtlSnapshot):
        if last_access is None:
            raise MigrationPlanError(TTL_NEEDS_LAST_ACCESS)
        wrap = build_transform(old, new.user, rules=rules, convert=convert, row_names=row_names, path=path)
        stamp = last_access
        if wrap is None:
            return lambda value: TtlValue(value, stamp)
        return lambda value: TtlValue(wrap(value), stamp)
    assert isinstance(old, TtlSnapshot)
    unwrap = build_transform(old.user, new, rules=rules, convert=convert, row_names=row_names, path=path)
    if unwrap is None:
        return lambda value: value.value
    return lambda value: unwrap(value.value)


def _positional_transform(new: TypeSerializerSnapshot, parts: list[Transform | None]) -> Transform:
    """Composite types whose nested serializers map by position: List, Map, Set, Nullable, Tuple, ..."""
    kind = type(new).__name__
    if all(p is None for p in parts):
        return identity  # the snapshot itself changed (outer payload) but the values stay as they are
    funcs = [p or identity for p in parts]
    if kind in ("ListSnapshot", "SetSnapshot", "GenericArraySnapshot"):
        element = funcs[0]
        return lambda v: None if v is None else type(v)(element(x) for x in v)
    if kind == "MapSnapshot":
        key_f, value_f = funcs
        return lambda v: None if v is None else {key_f(k): value_f(x) for k, x in v.items()}
    if kind == "NullableSnapshot":
        inner = funcs[0]
        return lambda v: None if v is None else inner(v)
    if kind == "TupleSnapshot":
        return lambda v: None if v is None else tuple(f(x) for f, x in zip(funcs, v, strict=True))
    raise MigrationPlanError(f"cannot migrate the nested types of {new.type_name()}")


def _record_transform(old_names: list[str], old_types: list[Any], new_names: list[str], new_types: list[Any],
                      rules: dict[str, FieldRule], row_names: RowNames, path: str, *, as_dict: bool,
                      implicit: list[tuple[bool, Any]] | None = None) -> Transform:
    """POJO (``as_dict``) or Row (tuple) fields matched by name, with renames, defaults and conversions. An added
    field without a ``default`` rule gets ``implicit`` (POJO: what Flink's own migration leaves in it, the Java
    default), or null (Row); a POJO field whose Java default is unknown (``Long``: a primitive or not?) refuses."""
    old_index = {name: i for i, name in enumerate(old_names)}
    for name in {k.split(".", 1)[0] for k in rules}:
        if name not in new_names:
            raise MigrationPlanError(f"a rule names field {_join(path, name)}, which the new type does not have")
    # (new name, old index or None, the field's transform, an added field's value)
    steps: list[tuple[str, int | None, Transform | None, Any]] = []
    for position, (name, new_type) in enumerate(zip(new_names, new_types, strict=True)):
        rule = rules.get(name, FieldRule())
        source = rule.source or name
        if source in old_index and not rule.has_default:
            old_type = old_types[old_index[source]]
            if old_type is None or new_type is None:
                raise MigrationPlanError(f"field {_join(path, name)} has no serializer snapshot")
            part = build_transform(old_type, new_type, rules=_rules_under(rules, name), convert=rule.convert,
                                   row_names=row_names, path=_join(path, name))
            steps.append((name, old_index[source], part, None))
        elif rule.source is not None:
            raise MigrationPlanError(f"field {_join(path, name)} comes from {rule.source}, which the old type "
                                     f"does not have")
        elif rule.has_default or implicit is None:
            steps.append((name, None, None, rule.default))  # added field: its default, or null
        else:
            known, default = implicit[position]
            if not known:
                type_name = new_type.type_name() if new_type is not None else "?"
                primitive = PRIMITIVE_NAMES.get(type_name, type_name.lower())
                raise MigrationPlanError(
                    f"field {_join(path, name)} is added with type {type_name}: Flink fills an added field with "
                    f"its Java default, which is {'false' if primitive == 'boolean' else '0'} for a primitive "
                    f"{primitive} and null for a boxed {type_name}; the manifest must say which: write its type as "
                    f"'{primitive}' if the field is primitive or 'java.lang.{type_name}' if it is boxed, or give it "
                    f"a value (default: ...)")
            steps.append((name, None, None, default))
    if as_dict:
        old_keys = old_names

        def pojo(value: Any) -> Any:
            if value is None:
                return None
            if "@class" in value:
                raise ConversionError(f"a value of the subclass {value['@class']}: subclass values of a changed "
                                      f"POJO cannot be migrated")
            out = {}
            for name, index, part, constant in steps:
                if index is None:
                    out[name] = constant
                else:
                    item = value.get(old_keys[index])
                    out[name] = item if part is None or item is None else part(item)
            return out

        # compiled when built (the hot path of a POJO migration); it hands pojo what it does not take
        return fast_record_map([s[0] for s in steps], [None if s[1] is None else old_keys[s[1]] for s in steps],
                               [s[2] for s in steps], [s[3] for s in steps], pojo) or pojo

    def row(value: Any) -> Any:
        if value is None:
            return None
        items = []
        for _, index, part, constant in steps:
            if index is None:
                items.append(constant)
            else:
                item = value[index]
                items.append(item if part is None or item is None else part(item))
        kind = getattr(value, "kind", 0)
        return KindedRow(items, kind) if kind else tuple(items)

    return row


def _row_transform(old: RowSnapshot, new: RowSnapshot, rules: dict[str, FieldRule], row_names: RowNames,
                   path: str) -> Transform:
    names = row_names.get(path)
    if names is None:
        if rules or len(old.nested) != len(new.nested):
            raise MigrationPlanError(f"Row{' ' + path if path else ''} changed its fields, but Row snapshots store "
                                     f"no field names: the old version's manifest must name them")
        names = ([f"f{i}" for i in range(len(old.nested))], [f"f{i}" for i in range(len(new.nested))])
    old_names, new_names = names
    if len(old_names) != len(old.nested) or len(new_names) != len(new.nested):
        raise MigrationPlanError(f"Row{' ' + path if path else ''}: field names do not match the arity")
    return _record_transform(old_names, list(old.nested), new_names, list(new.nested), rules, row_names, path,
                             as_dict=False)


def _rowdata_transform(old: RowDataSnapshot, new: RowDataSnapshot, rules: dict[str, FieldRule],
                       row_names: RowNames, path: str) -> Transform:
    """A Table runtime RowData (a SQL operator's accumulator or row) by field name: the names the snapshot stores
    (version 4), else the planner's positional ``f0``, ``f1``, ... that ``describe`` shows, so an accumulator that
    gains a field (a SQL aggregate gaining ``SUM``) is migrated with ``fields: {f7: {default: 0}}``. Without stored
    names a change of arity needs rules: positions alone would say nothing about which field is new."""
    if (old.field_names is None or new.field_names is None) and len(old.nested) != len(new.nested) and not rules:
        raise MigrationPlanError(f"{new.type_name()}{' at ' + path if path else ''}: the RowData's fields changed "
                                 f"from {old.type_name()}, and the snapshot stores no field names: name the new "
                                 f"fields in the migration (fields: {{fN: {{default: ...}}}} or {{from: fM}}), or "
                                 f"declare a function")
    old_names, new_names = old.names(), new.names()
    record = _record_transform(old_names, list(old.nested), new_names, list(new.nested), rules, row_names, path,
                               as_dict=False)
    new_index = {name: i for i, name in enumerate(new_names)}
    moved = {i: new_index[name] for i, name in enumerate(old_names)
             if name in new_index and (rules.get(name) or FieldRule()).source is None}

    def rowdata(value: Any) -> Any:
        if value is None:
            return None
        out = record(value)
        reserved = getattr(value, "reserved", ())
        kind = getattr(value, "kind", 0)
        if reserved:  # var-part space Flink reserved for null wide fields stays with its field
            return RowDataValue(list(out), kind, tuple(sorted(moved[i] for i in reserved if i in moved)))
        return out

    return rowdata


# --------------------------------------------------------------------------------------------------------------------
# Avro: reader/writer schema resolution (the Avro specification's rules, on decoded values)
# --------------------------------------------------------------------------------------------------------------------

_AVRO_PROMOTIONS = {("int", "long"), ("int", "float"), ("int", "double"), ("long", "float"), ("long", "double"),
                    ("float", "double"), ("string", "bytes"), ("bytes", "string")}


def avro_transform(writer: Any, reader: Any, rules: dict[str, FieldRule] | None = None, path: str = "") -> Transform:
    """Resolves values written with ``writer`` schema into ``reader`` schema (parsed fastavro schemas); ``rules``
    add renames (``from``) and defaults for top-level record fields."""
    named: dict[str, Any] = {}
    _collect_named(writer, named)
    _collect_named(reader, named)
    return _avro_resolver(writer, reader, named, rules or {}, path)


def _collect_named(schema: Any, named: dict[str, Any]) -> None:
    if isinstance(schema, list):
        for branch in schema:
            _collect_named(branch, named)
    elif isinstance(schema, dict):
        if "name" in schema and schema.get("type") in ("record", "enum", "fixed"):
            named.setdefault(schema["name"], schema)
        for field in schema.get("fields", ()):
            _collect_named(field["type"], named)
        for key in ("items", "values"):
            if key in schema:
                _collect_named(schema[key], named)


def _avro_type(schema: Any, named: dict[str, Any]) -> Any:
    if isinstance(schema, str) and schema in named:
        return named[schema]
    if isinstance(schema, dict) and schema.get("type") in ("record", "enum", "fixed", "array", "map"):
        return schema
    if isinstance(schema, dict):
        return _avro_type(schema["type"], named)
    return schema


def _kind(schema: Any) -> str:
    if isinstance(schema, list):
        return "union"
    if isinstance(schema, dict):
        return str(schema["type"])
    return str(schema)


def _avro_resolver(writer: Any, reader: Any, named: dict[str, Any], rules: dict[str, FieldRule],
                   path: str) -> Transform:
    writer, reader = _avro_type(writer, named), _avro_type(reader, named)
    wk, rk = _kind(writer), _kind(reader)
    where = f" (field {path})" if path else ""
    if wk == "union" or rk == "union":
        # A decoded union value carries no branch: resolve it against the first branch that accepts it.
        writer_branches = writer if wk == "union" else [writer]
        reader_branches = reader if rk == "union" else [reader]
        candidates = []
        for wb in writer_branches:
            for rb in reader_branches:
                try:
                    candidates.append(_avro_resolver(wb, rb, named, {}, path))
                    break
                except MigrationPlanError:
                    continue
        if not candidates:
            raise MigrationPlanError(f"Avro union {writer} cannot be read as {reader}{where}")
        nullable = any(_kind(_avro_type(b, named)) == "null" for b in reader_branches)

        def union(value: Any) -> Any:
            if value is None:
                if nullable:
                    return None
                raise ConversionError(f"null where the reader schema does not allow it{where}")
            for candidate in candidates:
                try:
                    return candidate(value)
                except (ConversionError, TypeError, KeyError, AttributeError):
                    continue
            raise ConversionError(f"value {value!r} matches no reader union branch{where}")

        return union
    if wk == "record" and rk == "record":
        return _avro_record(writer, reader, named, rules, path)
    if wk != rk:
        if (wk, rk) not in _AVRO_PROMOTIONS:
            raise MigrationPlanError(f"Avro {wk} cannot be read as {rk}{where}")
        if rk in ("float", "double"):
            return float
        if rk == "string":
            return lambda v: v.decode("utf-8")
        if rk == "bytes":
            return lambda v: v.encode("utf-8")
        return identity
    if rk == "array":
        item = _avro_resolver(writer["items"], reader["items"], named, {}, path)
        return lambda v: [item(x) for x in v]
    if rk == "map":
        value_f = _avro_resolver(writer["values"], reader["values"], named, {}, path)
        return lambda v: {k: value_f(x) for k, x in v.items()}
    if rk == "enum":
        symbols = set(reader["symbols"])
        default = reader.get("default")

        def enum(value: Any) -> Any:
            if value in symbols:
                return value
            if default is not None:
                return default
            raise ConversionError(f"enum symbol {value!r} is not in the reader schema{where}")

        return enum
    if rk == "fixed" and writer.get("size") != reader.get("size"):
        raise MigrationPlanError(f"Avro fixed size changed{where}")
    return identity


def _avro_record(writer: dict[str, Any], reader: dict[str, Any], named: dict[str, Any],
                 rules: dict[str, FieldRule], path: str) -> Transform:
    writer_fields = {f["name"]: f for f in writer["fields"]}
    for name in rules:
        if name not in {f["name"] for f in reader["fields"]}:
            raise MigrationPlanError(f"a rule names field {_join(path, name)}, which the new schema does not have")
    steps: list[tuple[str, str | None, Transform | None, Any]] = []
    for field in reader["fields"]:
        name = field["name"]
        rule = rules.get(name, FieldRule())
        sources = [rule.source] if rule.source else [name, *field.get("aliases", ())]
        source = next((s for s in sources if s in writer_fields), None)
        if source is not None and not rule.has_default:
            part = _avro_resolver(writer_fields[source]["type"], field["type"], named, {}, _join(path, name))
            steps.append((name, source, part, None))
        elif rule.has_default:
            steps.append((name, None, None, rule.default))
        elif "default" in field:
            steps.append((name, None, None, field["default"]))
        else:
            raise MigrationPlanError(f"Avro field {_join(path, name)} is new and has no default")

    def record(value: Any) -> Any:
        if value is None:
            return None
        out = {}
        for name, source, part, default in steps:
            if source is None:
                out[name] = default
            else:
                item = value.get(source)
                out[name] = part(item) if part is not None else item
        return out

    return record


__all__ = ["TTL_NEEDS_LAST_ACCESS", "RowNames", "avro_transform", "build_transform", "chain", "restored_unaided"]
