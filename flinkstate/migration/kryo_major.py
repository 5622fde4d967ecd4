"""The value transforms of a Flink 1.x -> 2.x migration (issue 27): Kryo 2.24 records re-encoded as the Kryo 5.6
records of the same objects (:mod:`flinkstate.serializers.kryo_carry`), wherever a Kryo serializer sits in a state's
tree (a whole value, a POJO field, a list element, a map key or value: :func:`flinkstate.migration.transforms.
build_transform` walks the tree and asks here at each Kryo serializer).

Which Kryo reads a snapshot's data is its ``kryo_version``: the savepoint sets its own (from the ``_metadata``
version), and :func:`flinkstate.migration.manifest_targets.targets_from_manifest` sets Kryo 5 on the new version's
snapshots when a 1.x savepoint migrates for a 2.x job. The snapshots' bytes are the same in both majors, so "the
same snapshot" no longer means "the same bytes": :func:`kryo_reads_differ` says so.

A ``java.util`` List, Map or Set that Flink 1.x serialized with Kryo (a POJO field of that interface type) gets Flink
2.x's own List, Map or Set serializer (FLINK-34123): :func:`kryo_collection_transform` converts the Kryo record to
that serializer's value, element by element, each element's Java class checked against the new element type (Kryo
records keep it, Python values do not: an Integer is not a Long), nulls kept where the new type is nullable.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flinkstate.format.keyed_header import StateMetaInfo
from flinkstate.kryo_report import kryo_sample
from flinkstate.major_upgrade import FLINK2_COLLECTIONS
from flinkstate.migration.conversions import ConversionError, MigrationPlanError, Transform
from flinkstate.savepoint import Savepoint
from flinkstate.serializers.base import TypeSerializerSnapshot
from flinkstate.serializers.collections import ListSnapshot, MapSnapshot, SetSnapshot, set_value
from flinkstate.serializers.kryo import KryoSnapshot, OpaqueValue, kryo_snapshots
from flinkstate.serializers.kryo_carry import KryoNode, kryo2_to_kryo5, read_tree
from flinkstate.serializers.kryo_data import KRYO2, KRYO5, KryoCorrupt, KryoMap, KryoOpaque, KryoValue
from flinkstate.serializers.kryo_fields import carry_user_record
from flinkstate.serializers.nullable import NullableSnapshot
from flinkstate.serializers.primitives import SimpleSnapshot

#: Flink's simple serializers (their type names) and the class names a Kryo record gives the values they hold: a
#: boxed value's is the primitive's (Kryo registers int and Integer as one class, under the primitive's name).
_SIMPLE_CLASSES = {"String": ("java.lang.String",), "Long": ("long", "java.lang.Long"),
                   "Integer": ("int", "java.lang.Integer"), "Double": ("double", "java.lang.Double"),
                   "Float": ("float", "java.lang.Float"), "Short": ("short", "java.lang.Short"),
                   "Byte": ("byte", "java.lang.Byte"), "Boolean": ("boolean", "java.lang.Boolean"),
                   "Character": ("char", "java.lang.Character")}
#: The java.util interface a Flink 2.x collection serializer holds.
_INTERFACES: dict[type[TypeSerializerSnapshot], str] = {
    ListSnapshot: "java.util.List", MapSnapshot: "java.util.Map", SetSnapshot: "java.util.Set"}
#: The JDK classes Kryo wrote for each interface (what a field of that type held).
_IMPLEMENTATIONS = {
    "java.util.List": ("java.util.ArrayList", "java.util.LinkedList", "java.util.Arrays$ArrayList",
                       "java.util.Collections$EmptyList", "java.util.Collections$SingletonList"),
    "java.util.Set": ("java.util.HashSet", "java.util.LinkedHashSet", "java.util.TreeSet",
                      "java.util.Collections$EmptySet", "java.util.Collections$SingletonSet"),
    "java.util.Map": ("java.util.HashMap", "java.util.LinkedHashMap", "java.util.TreeMap",
                      "java.util.Collections$EmptyMap", "java.util.Collections$SingletonMap"),
}
#: Converts one node of a Kryo record to the value of a Flink serializer.
_Convert = Callable[[KryoNode | None], Any]


def uncarried_record(savepoint: Savepoint, operator_id: str, state: StateMetaInfo) -> str | None:
    """Why a sample of the state's Kryo records (its first key-group blocks: :func:`flinkstate.kryo_report.
    kryo_sample`) cannot be re-encoded for Kryo 5 (one phrase), or None. A plan is made from headers; this sample is
    what lets ``check`` refuse, as ``migrate`` would fail, a state holding a user class's records."""
    sample = kryo_sample(savepoint, operator_id, state)
    if isinstance(sample, str):
        return None if sample.startswith("Kryo: values not sampled") else sample.removeprefix("Kryo: ")
    found = kryo_snapshots([state.value_serializer, state.user_key_serializer])
    registrations, layouts = found[0].registrations_in_order(), found[0].kryo_layouts
    for value in sample[0]:
        if layouts is not None and isinstance(value, (KryoValue, OpaqueValue)):
            try:  # carried as the migration will: a class without a layout, or changed, is refused here
                carry_user_record(value.data, registrations, registrations, layouts.old, layouts.new)
            except (KryoOpaque, KryoCorrupt) as exc:
                return f"a sampled Kryo record holds {exc}"
        elif isinstance(value, OpaqueValue):
            try:
                read_tree(value.data, registrations)
            except (KryoOpaque, KryoCorrupt) as exc:
                return f"a sampled Kryo record holds {exc}"
            return "a sampled Kryo record could not be decoded"
    return None


def kryo_reads_differ(old: TypeSerializerSnapshot, new: TypeSerializerSnapshot) -> bool:
    """Whether the Kryo data in ``old``'s tree is written by another Kryo than ``new``'s reads (both known)."""
    before = {s.kryo_version for s in kryo_snapshots([old])} - {None}
    after = {s.kryo_version for s in kryo_snapshots([new])} - {None}
    return bool(before and after and before != after)


def kryo_carry_transform(old: TypeSerializerSnapshot, new: TypeSerializerSnapshot, where: str
                         ) -> Transform | None:
    """The transform of one Kryo serializer's values from Kryo 2.24 to Kryo 5.6 records, or None when ``old`` and
    ``new`` are not a Kryo serializer read by another Kryo. Raises :class:`MigrationPlanError` for what cannot be
    carried: Kryo 5 data for a Flink 1.x job, or another Kryo type."""
    if not (isinstance(old, KryoSnapshot) and isinstance(new, KryoSnapshot)) or not kryo_reads_differ(old, new):
        return None
    if (old.kryo_version, new.kryo_version) != (KRYO2, KRYO5):
        raise MigrationPlanError(f"Kryo 5.6 data (Flink 2.x) for a Flink 1.x job{where}: flinkstate carries Kryo "
                                 f"data from Flink 1.x to 2.x only")
    if old.type_class in FLINK2_COLLECTIONS:
        raise MigrationPlanError(f"a {old.type_class} serialized by Kryo{where}, which the new version's schema "
                                 f"keeps as Kryo: Flink 2.x serializes {old.type_class} fields with its own "
                                 f"serializers (FLINK-34123); check against the 2.x job's schema (schema --jar), "
                                 f"whose collection serializer the migration converts to")
    if old.type_class != new.type_class:
        raise MigrationPlanError(f"the Kryo type changed from {old.type_class} to {new.type_class}{where}: declare "
                                 f"a function")
    reading, writing = old.registrations_in_order(), new.registrations_in_order()
    type_name = new.type_name()
    layouts = new.kryo_layouts or old.kryo_layouts

    def carry(value: Any) -> Any:
        if value is None:
            return None
        data = value.data if isinstance(value, (KryoValue, OpaqueValue)) else None
        if data is None:
            raise ConversionError(f"not a Kryo record: {type(value).__name__}")
        try:
            if layouts is None:
                carried = kryo2_to_kryo5(data, reading, writing)
            else:
                carried = carry_user_record(data, reading, writing, layouts.old, layouts.new)
        except KryoOpaque as exc:
            if layouts is not None:
                raise ConversionError(f"a Kryo record of {exc}") from None
            raise ConversionError(f"a Kryo record of {exc}: flinkstate re-encodes for Kryo 5 only the records of "
                                  f"JDK classes with Kryo's built-in serializers (a user class's layout is not "
                                  f"in the savepoint: give the new version's schema --jar)") from None
        except KryoCorrupt as exc:
            raise ConversionError(str(exc)) from None
        java_class = value.java_class if isinstance(value, KryoValue) else "?"
        return KryoValue(type_name, java_class, value.value if isinstance(value, KryoValue) else None, carried, KRYO5)

    return carry


def kryo_collection_transform(old: TypeSerializerSnapshot, new: TypeSerializerSnapshot, where: str
                              ) -> Transform | None:
    """The transform of a Kryo'd ``java.util`` List, Map or Set to Flink's own serializer of it (``new``, possibly
    nullable), or None when ``old`` is not such a Kryo serializer or ``new`` not such a collection. Raises
    :class:`MigrationPlanError` for element types it does not convert."""
    if not isinstance(old, KryoSnapshot) or old.type_class not in FLINK2_COLLECTIONS or old.kryo_version is None:
        return None
    inner = new.nested[0] if isinstance(new, NullableSnapshot) else new
    if _INTERFACES.get(type(inner)) != old.type_class:
        return None
    convert = _converter(new, where)
    registrations, version = old.registrations_in_order(), old.kryo_version

    def collection(value: Any) -> Any:
        if value is None:
            return None
        if not isinstance(value, KryoValue):
            raise ConversionError(f"a Kryo record flinkstate cannot decode ({type(value).__name__})")
        try:
            return convert(read_tree(value.data, registrations, version))
        except (KryoOpaque, KryoCorrupt) as exc:
            raise ConversionError(str(exc)) from None

    return collection


def _converter(new: TypeSerializerSnapshot, where: str, nulls: bool = False) -> _Convert:
    """The conversion of a record's node to ``new``'s value: null where ``new`` holds one (a Nullable, a String)
    or its container writes it (``nulls``: a Map's values and a Set's elements, each behind a null flag)."""
    holds_null = isinstance(new, SimpleSnapshot) and new.type_name() == "String"
    if nulls or holds_null or isinstance(new, NullableSnapshot):
        inner = _non_null_converter(new.nested[0] if isinstance(new, NullableSnapshot) else new, where)
        return lambda node: None if node is None else inner(node)
    return _non_null_converter(new, where)


def _non_null_converter(new: TypeSerializerSnapshot, where: str) -> _Convert:
    """The conversion of a record's node, which must not be null, to ``new``'s value."""
    if isinstance(new, SimpleSnapshot) and new.type_name() in _SIMPLE_CLASSES:
        java_classes = _SIMPLE_CLASSES[new.type_name()]
        return lambda node: _checked(node, java_classes, new).value
    interface = _INTERFACES.get(type(new))
    if interface is None:
        raise MigrationPlanError(f"a Kryo'd collection's elements become {new.type_name()}{where}: flinkstate "
                                 f"converts elements of String, boxed primitives and nested List, Map and Set only")
    if isinstance(new, MapSnapshot):
        key, value = _converter(new.nested[0], where), _converter(new.nested[1], where, nulls=True)

        def to_map(node: KryoNode | None) -> Any:
            entries = _checked(node, _IMPLEMENTATIONS[interface], new).value
            assert isinstance(entries, KryoMap)
            converted = {key(k): value(v) for k, v in entries.entries}
            if len(converted) != len(entries.entries):
                raise ConversionError(f"a {node.java_class if node else 'map'} whose keys are equal in Python")
            return converted

        return to_map
    element = _converter(new.nested[0], where, nulls=isinstance(new, SetSnapshot))
    if isinstance(new, SetSnapshot):  # the value SetSnapshot decodes, elements in the record's order
        return lambda node: set_value([element(e) for e in _checked(node, _IMPLEMENTATIONS[interface], new).value])
    return lambda node: [element(e) for e in _checked(node, _IMPLEMENTATIONS[interface], new).value]


def _checked(node: KryoNode | None, classes: tuple[str, ...], new: TypeSerializerSnapshot) -> KryoNode:
    """``node``, which must be an object of one of ``classes`` (what ``new``'s Java type holds)."""
    if node is None:
        raise ConversionError(f"a null where {new.type_name()} holds no null")
    if node.java_class not in classes:
        raise ConversionError(f"a {node.java_class} where {new.type_name()} holds {' or '.join(classes[:3])}")
    return node


__all__ = ["kryo_carry_transform", "kryo_collection_transform", "kryo_reads_differ", "uncarried_record"]
