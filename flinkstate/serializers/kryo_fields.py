"""Kryo records of user classes (Kryo's FieldSerializer, user enums) carried from Kryo 2.24 (Flink 1.x) to Kryo 5.6
(Flink 2.x) with the classes' layouts (:mod:`flinkstate.serializers.kryo_layout`): the old Kryo's layouts read the
record, the new Kryo's write it, field by field by name.

A FieldSerializer writes its fields one after the other in its cached order, with nothing around them: a primitive
as its number (int and long variable-length unless the field says otherwise; fixed-width numbers big-endian in Kryo
2.24, little-endian in Kryo 5); a field of a known class (final: String, a boxed number, an enum, an array, a final
user class) as ``writeObjectOrNull`` with that class's serializer (no class id); any other as class and object. The
field's type arguments go to its value's serializer: a collection of a final element class writes its elements
without class ids (Kryo 2.24: the length, then each element or null; Kryo 5: the length + 1 flagged when an element
is null, then each element), a map likewise for a final key or value class; Kryo 5 passes nested type arguments on
(``List<List<Long>>``'s inner lists), Kryo 2.24 one level. References (a shared or enclosing user object) are kept:
the tree keeps each object's identity (:class:`flinkstate.serializers.kryo_carry.KryoNode`).

An object array (``Point[]``, ``Object[]``, ``Point[][]``) is Kryo's ObjectArraySerializer, the same in both
versions: the length + 1, then each element written with the element class's serializer (``writeObjectOrNull``, no
class id) when that class's modifier is final (an array class always is), else with its class
(``writeClassAndObject``); the element class's finality comes from its layout. A generic class (``Box<T>``) is read
and written with its unbound layout (a ``T`` field: class and object), which is what both Kryos write wherever T is
bound to a class that is not final; where T is bound to a final class (``Box<String>`` in a field, or in Kryo 5
nested type arguments) Kryo writes that field without the class, and Kryo 2.24's serializer keeps that binding for
later uses of the class (``setGenerics`` is sticky): such a class is refused in one line wherever it is met.

The same class must have the same fields in both layouts, of the same declared types: a field added, removed or of
another type has no Kryo meaning for the old bytes (FieldSerializer records carry no field names or versions), so it
is refused in one line naming the class and the field. An enum constant is carried by name (Kryo writes ordinals).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from flinkstate.serializers.kryo_carry import WRITERS, Kryo5Output, KryoNode, TypedRecord, read_whole
from flinkstate.serializers.kryo_data import KRYO2, KRYO5, KryoCorrupt, KryoEnum, KryoMap, KryoOpaque, KryoRecord
from flinkstate.serializers.kryo_field_types import (
    FIXED,
    GENERIC_COLLECTIONS,
    GENERIC_MAPS,
    HEADED,
    WRAPPER_OF,
    array_component,
    bound_to_final,
    check_array,
    check_generic,
    element_argument,
    elements_final,
)
from flinkstate.serializers.kryo_layout import PRIMITIVE_TYPES, KryoClassLayout, KryoField, KryoGeneric, KryoLayouts
from flinkstate.serializers.kryo_readers import READERS
from flinkstate.serializers.kryo_values import registration_table


class UserObject:
    """A FieldSerializer object's field values by name (nodes, or nodes of primitives), in the old layout's order."""

    __slots__ = ("fields",)

    def __init__(self) -> None:
        self.fields: dict[str, KryoNode | None] = {}


def _layout(layouts: KryoLayouts, name: str, which: str) -> KryoClassLayout | None:
    layout = layouts.get(name)
    if layout is not None:
        why = layout.carried_as()
        if why is not None:
            raise KryoOpaque(name, f"{why} ({which} layout)")
    return layout


class LayoutRecord(TypedRecord):
    """The Kryo reader with one Kryo's layouts (Kryo 2.24's to carry a record, Kryo 5's to verify the carried one):
    user classes and enums are read, and a field's type arguments reach its value's serializer (``generics``, set
    just before the value is read and taken by its reader) as that Kryo passes them."""

    __slots__ = ("bound", "generics", "layouts")

    def __init__(self, data: bytes, registrations: list[tuple[str, bool]], layouts: KryoLayouts,
                 start: int = 0, version: int = KRYO2) -> None:
        super().__init__(data, start, len(data), version, registration_table(version, registrations))
        self.layouts = layouts
        self.generics: tuple[KryoGeneric, ...] | None = None
        self.bound: frozenset[str] | None = None  # bound_to_final(layouts), when a generic class is met

    def _bound(self) -> frozenset[str]:
        if self.bound is None:
            self.bound = bound_to_final(self.layouts)
        return self.bound

    def uses_references(self, name: str) -> bool:
        layout = self.layouts.get(name)  # Kryo 5 gives enums no reference marker, Kryo 2.24 does
        return super().uses_references(name) and not (self.v5 and layout is not None and layout.constants is not None)

    def _reader(self, name: str) -> Callable[[KryoRecord, str], Any]:
        generics, self.generics = self.generics, None
        layout = _layout(self.layouts, name, "the old")
        if layout is not None and layout.constants is not None:
            constants = layout.constants
            return lambda record, java_class: _read_enum(record, java_class, constants)
        if layout is not None:
            check_generic(name, layout, generics, self._bound)
            return lambda record, java_class: self._read_fields(java_class, layout)
        component = array_component(name)
        if component is not None and name not in READERS:
            check_array(name, generics)
            final = elements_final(name, component, self.layouts)
            return lambda record, java_class: self._read_object_array(java_class, component, final)
        if self.v5 and generics and name in GENERIC_COLLECTIONS:
            return lambda record, java_class: self._read_collection5(java_class, generics)
        if self.v5 and generics and name in GENERIC_MAPS:
            return lambda record, java_class: self._read_map5(java_class, generics)
        if self.v5 and generics and name in HEADED:
            raise KryoOpaque(name, "in a field with type arguments: not carried")
        if name in GENERIC_COLLECTIONS and element_argument(generics, 0) is not None:
            element = element_argument(generics, 0)
            assert element is not None
            return lambda record, java_class: KryoNode(java_class, [
                self._known(element, True) for _ in range(self.length())])
        if name in GENERIC_MAPS and (element_argument(generics, 0) or element_argument(generics, 1)) is not None:
            assert generics is not None
            return lambda record, java_class: self._read_map(java_class, generics)
        if name in HEADED and (element_argument(generics, 0) or element_argument(generics, 1)) is not None:
            raise KryoOpaque(name, "with a final element type from a field's generics: not carried")
        return super()._reader(name)

    def _typed(self, cls: tuple[str, bool] | None, may_be_null: bool, generics: tuple[KryoGeneric, ...] | None) -> Any:
        if cls is None:
            return None
        self.generics = generics
        return self.object(cls, may_be_null=may_be_null)

    def _read_collection5(self, name: str, generics: tuple[KryoGeneric, ...]) -> KryoNode:
        """Kryo 5's CollectionSerializer with type arguments (:meth:`LayoutOutput._write_collection`)."""
        flag, size = self.collection_header(name)
        element, nested = element_argument(generics, 0), generics[0].generics
        if size == 0:
            return KryoNode(name, [])
        if element is not None:
            assert element.java_class is not None
            cls = (element.java_class, True)
            return KryoNode(name, [self._typed(cls, flag, nested) for _ in range(size)])
        if not flag:
            return KryoNode(name, [self._typed(self.read_class(), False, nested) for _ in range(size)])
        common = self.read_class()
        if common is None:
            return KryoNode(name, [None] * size)
        has_null = self.byte() == 1
        return KryoNode(name, [self._typed(common, has_null, nested) for _ in range(size)])

    def _read_map5(self, name: str, generics: tuple[KryoGeneric, ...]) -> KryoNode:
        size = self.length() - 1
        if size < 0:
            raise KryoCorrupt(f"Kryo {name}: null map inside its own record")
        key, value = element_argument(generics, 0), element_argument(generics, 1)
        args = (generics[0].generics, generics[1].generics if len(generics) > 1 else None)
        entries = []
        for _ in range(size):
            parts = []
            for element, nested in zip((key, value), args, strict=True):
                if element is not None:
                    assert element.java_class is not None
                    parts.append(self._typed((element.java_class, True), True, nested))
                else:
                    parts.append(self._typed(self.read_class(), False, nested))
            entries.append((parts[0], parts[1]))
        return KryoNode(name, KryoMap(name, tuple(entries)))

    def _known(self, element: KryoGeneric, may_be_null: bool) -> Any:
        """An object of a class the serializer knows (no class id): ``writeObject(OrNull)``."""
        assert element.java_class is not None
        default = next((d for n, d in self.registered.values() if n == element.java_class), True)
        return self.object((element.java_class, default), may_be_null=may_be_null)

    def _read_map(self, name: str, generics: tuple[KryoGeneric, ...]) -> KryoNode:
        key, value = element_argument(generics, 0), element_argument(generics, 1)
        entries = []
        for _ in range(self.length()):
            k = self._known(key, True) if key is not None else self.class_and_object()
            v = self._known(value, True) if value is not None else self.class_and_object()
            entries.append((k, v))
        return KryoNode(name, KryoMap(name, tuple(entries)))

    def _read_object_array(self, name: str, component: str, final: bool) -> KryoNode:
        """Kryo's ObjectArraySerializer (both versions): the length + 1, the elements with or without classes."""
        elements: list[KryoNode | None] = []
        node = KryoNode(name, elements)
        self.refs[-1] = node  # arrays take a reference: an element naming the array reads this node
        size = self.length() - 1
        if size < 0:
            raise KryoCorrupt(f"Kryo {name}: null array inside its own record")
        element = KryoGeneric(component, True, None)
        for _ in range(size):
            elements.append(self._known(element, True) if final else self.class_and_object())
        return node

    def _read_fields(self, name: str, layout: KryoClassLayout) -> KryoNode:
        obj = UserObject()
        node = KryoNode(name, obj)
        self.refs[-1] = node  # the slot object() reserved for it: a reference back to it inside reads this node
        assert layout.fields is not None
        for field in layout.fields:
            obj.fields[field.name] = self._field(field)
        return node

    def _field(self, field: KryoField) -> KryoNode | None:
        if field.type in PRIMITIVE_TYPES:
            return KryoNode(field.type, _read_primitive(self, field))
        if field.value_class is not None:
            self.generics = field.generics
            return self._known(KryoGeneric(field.value_class, True, None), field.can_be_null)  # type: ignore[no-any-return]
        cls = self.read_class()
        if cls is None:
            return None
        self.generics = field.generics
        return self.object(cls, may_be_null=False)  # type: ignore[no-any-return]


def _read_enum(record: KryoRecord, name: str, constants: tuple[str, ...]) -> KryoNode:
    ordinal = record.varint() - 1
    if not 0 <= ordinal < len(constants):
        raise KryoCorrupt(f"Kryo enum {name}: ordinal {ordinal} out of range")
    return KryoNode(name, KryoEnum(name, ordinal, constants[ordinal]))


def _read_primitive(record: KryoRecord, field: KryoField) -> Any:
    kind = field.type
    if kind == "int":
        return record.zigzag() if field.var_int else record.fixed("i")
    if kind == "long":
        return record.zigzag(long=True) if field.var_int else record.fixed("q")
    if kind == "boolean":
        return record.byte() != 0
    if kind == "byte":
        return record.fixed("b")
    if kind == "char":
        return chr(record.fixed("H"))
    return record.fixed(FIXED[kind])


class LayoutOutput(Kryo5Output):
    """Kryo 5.6's output with the new layouts (user classes, user enums, type arguments as Kryo 5 passes them)."""

    def __init__(self, registrations: list[tuple[str, bool]], old: KryoLayouts, new: KryoLayouts) -> None:
        super().__init__(registrations)
        self.old, self.new = old, new
        self.generics: tuple[KryoGeneric, ...] | None = None
        self.bound: frozenset[str] | None = None

    def _bound(self) -> frozenset[str]:
        if self.bound is None:
            self.bound = bound_to_final(self.new)
        return self.bound

    def typed(self, node: KryoNode | None, may_be_null: bool, generics: tuple[KryoGeneric, ...] | None) -> None:
        """``writeObject(OrNull)`` with the type arguments Kryo 5 pushed for this object."""
        self.generics = generics
        try:
            self.object(node, may_be_null)
        finally:
            self.generics = None

    def no_references(self, name: str) -> bool:
        layout = self.new.get(name)
        return super().no_references(name) or (layout is not None and layout.constants is not None)

    def writer(self, name: str) -> Callable[[Kryo5Output, KryoNode], None]:
        generics, self.generics = self.generics, None
        layout = _layout(self.new, name, "the new")
        if layout is not None:
            check_generic(name, layout, generics, self._bound)
            return lambda out, node: self._write_user(node, layout)
        component = array_component(name)
        if component is not None and name not in WRITERS:
            check_array(name, generics)
            final = elements_final(name, component, self.new)
            return lambda out, node: self._write_object_array(node, component, final)
        if name in GENERIC_COLLECTIONS and generics:
            return lambda out, node: self._write_collection(node, generics)
        if name in GENERIC_MAPS and generics:
            return lambda out, node: self._write_map(node, generics)
        return super().writer(name)

    def _write_user(self, node: KryoNode, layout: KryoClassLayout) -> None:
        name = node.java_class
        old = self.old.get(name)
        if old is None:
            raise KryoOpaque(name, "no layout of the old version's class")
        if layout.constants is not None:
            if not isinstance(node.value, KryoEnum) or old.constants is None:
                raise KryoOpaque(name, "an enum in the new version, not in the old")
            if node.value.name not in layout.constants:
                raise KryoOpaque(name, f"enum constant {node.value.name} is not in the new version's enum")
            self.varint(layout.constants.index(node.value.name) + 1)
            return
        if not isinstance(node.value, UserObject) or old.fields is None or layout.fields is None:
            raise KryoOpaque(name, "a FieldSerializer class in the new version, not in the old")
        _same_fields(name, old.fields, layout.fields)
        for field in layout.fields:
            self._field(field, node.value.fields[field.name])

    def _field(self, field: KryoField, value: KryoNode | None) -> None:
        if field.type in PRIMITIVE_TYPES:
            assert value is not None
            _write_primitive(self, field, value.value)
        elif field.value_class is not None:
            self.typed(value, field.can_be_null, field.generics)
        elif value is None:
            self.write_class(None)
        else:
            self.write_class(value.java_class)
            self.typed(value, False, field.generics)

    def _write_object_array(self, node: KryoNode, component: str, final: bool) -> None:
        """Kryo's ObjectArraySerializer (:meth:`LayoutRecord._read_object_array`)."""
        elements = node.value
        if not isinstance(elements, list):
            raise KryoCorrupt(f"Kryo {node.java_class}: elements expected")
        self.varint(len(elements) + 1)
        element = KryoGeneric(component, True, None)
        for e in elements:
            if final:
                _all_of(node, [e], element)
                self.typed(e, True, None)
            else:
                self.class_and_object(e)

    def _write_collection(self, node: KryoNode, generics: tuple[KryoGeneric, ...]) -> None:
        """Kryo 5's CollectionSerializer with the type arguments: a final element class writes the elements with
        its serializer; otherwise as without them, each element given the element type's own arguments."""
        elements = node.value
        if not isinstance(elements, list):
            raise KryoCorrupt(f"Kryo {node.java_class}: elements expected")
        if not elements:
            self.out.append(1)
            return
        element = element_argument(generics, 0)
        nested = generics[0].generics
        if element is None:
            classes = {e.java_class for e in elements if e is not None}
            same = len(classes) <= 1
            self.varint_flag(same, len(elements) + 1)
            if not same:
                for e in elements:
                    self.write_class(None if e is None else e.java_class)
                    if e is not None:
                        self.typed(e, False, nested)
                return
            if not classes:
                self.out.append(0)
                return
            self.write_class(classes.pop())
            has_null = any(e is None for e in elements)
            self.out.append(1 if has_null else 0)
        else:
            has_null = any(e is None for e in elements)
            self.varint_flag(has_null, len(elements) + 1)
            _all_of(node, elements, element)
        for e in elements:
            self.typed(e, has_null, nested)

    def _write_map(self, node: KryoNode, generics: tuple[KryoGeneric, ...]) -> None:
        """Kryo 5's MapSerializer with the type arguments: the key's pushed per entry, the value's for the map."""
        if not isinstance(node.value, KryoMap):
            raise KryoCorrupt(f"Kryo {node.java_class}: entries expected")
        entries = node.value.entries
        self.varint(len(entries) + 1)
        if not entries:
            return
        key, value = element_argument(generics, 0), element_argument(generics, 1)
        key_args = generics[0].generics
        value_args = generics[1].generics if len(generics) > 1 else None
        for k, v in entries:
            for item, element, args in ((k, key, key_args), (v, value, value_args)):
                if element is not None:
                    _all_of(node, [item], element)
                    self.typed(item, True, args)
                elif item is None:
                    self.write_class(None)
                else:
                    self.write_class(item.java_class)
                    self.typed(item, False, args)


def _all_of(node: KryoNode, elements: list[KryoNode | None], element: KryoGeneric) -> None:
    for e in elements:  # Kryo registers a primitive and its wrapper under one id, named by the primitive
        if e is not None and WRAPPER_OF.get(e.java_class, e.java_class) != element.java_class:
            raise KryoCorrupt(f"Kryo {node.java_class}: a {e.java_class} where the type says {element.java_class}")


def _same_fields(name: str, old: tuple[KryoField, ...], new: tuple[KryoField, ...]) -> None:
    """The one-line refusal of a class whose fields differ between the layouts."""
    before, after = {f.name: f for f in old}, {f.name: f for f in new}
    for field in new:
        if field.name not in before:
            raise KryoOpaque(name, f"field '{field.name}' ({field.type}) added in the new version: Kryo's "
                                   f"FieldSerializer records carry no field names, so the old bytes give it no value")
        if before[field.name].type != field.type:
            raise KryoOpaque(name, f"field '{field.name}' changed type from {before[field.name].type} to "
                                   f"{field.type}")
    for field in old:
        if field.name not in after:
            raise KryoOpaque(name, f"field '{field.name}' ({field.type}) removed in the new version")


def _write_primitive(out: Kryo5Output, field: KryoField, value: Any) -> None:
    kind = field.type
    if kind in ("int", "long"):
        if field.var_int:
            out.zigzag(value, long=kind == "long")
        else:
            out.fixed("i" if kind == "int" else "q", value)
    elif kind == "boolean":
        out.out.append(1 if value else 0)
    elif kind == "byte":
        out.out.append(value & 0xFF)
    elif kind == "char":
        out.fixed("H", ord(value))
    else:
        out.fixed(FIXED[kind], value)


def read_user_record(buf: bytes, start: int, registrations: list[tuple[str, bool]], layouts: KryoLayouts,
                     version: int) -> tuple[KryoNode | None, int]:
    """The record at ``buf[start:]`` read with one Kryo's ``layouts`` (a record carries no length: a user class's
    record inside a POJO or a list is delimited by reading it): its tree and its end. Raises :class:`KryoOpaque` or
    :class:`KryoCorrupt`."""
    record = LayoutRecord(buf, registrations, layouts, start, version)
    try:
        cls = record.read_class()
        node = None if cls is None else record.object(cls, may_be_null=False)
    except (ValueError, UnicodeDecodeError, struct.error, OverflowError) as e:
        raise KryoCorrupt(f"Kryo record at byte {start}: {e}") from None
    return node, record.pos


def tree_value(node: KryoNode | None) -> Any:
    """A record's tree as plain values, the same whichever Kryo wrote it (what verification compares): a user
    object as {"@class", field: value, ...} by field name, an enum as its constant's name, an object met again
    (shared, or enclosing) as {"@ref": n}, the n-th object met in this walk."""
    seen: dict[int, int] = {}

    def walk(item: Any) -> Any:
        if isinstance(item, KryoNode):
            if isinstance(item.value, (UserObject, list, KryoMap)):
                if id(item) in seen:
                    return {"@ref": seen[id(item)]}
                seen[id(item)] = len(seen)
            value = item.value
            if isinstance(value, UserObject):
                return {"@class": item.java_class, **{k: walk(value.fields[k]) for k in sorted(value.fields)}}
            if isinstance(value, KryoEnum):
                return value.name
            if isinstance(value, KryoMap):
                return {"@map": item.java_class, "entries": [[walk(k), walk(v)] for k, v in value.entries]}
            if isinstance(value, list):
                return {"@list": item.java_class, "elements": [walk(e) for e in value]}
            return walk(value)
        if isinstance(item, float) and item != item:
            return "NaN"  # equal to itself, as Kryo's bits are
        return item

    return walk(node)


def carry_user_record(data: bytes, registrations: list[tuple[str, bool]], new_registrations: list[tuple[str, bool]],
                      old: KryoLayouts, new: KryoLayouts) -> bytes:
    """The Kryo 5.6 record of the object Kryo 2.24 wrote as ``data``, user classes read with the ``old`` layouts
    (the old version's classes on Flink 1.x) and written with the ``new`` ones (the new version's on Flink 2.x).
    Raises :class:`KryoOpaque` (a class without a layout, a layout change: one line naming the class and field)
    or :class:`KryoCorrupt`."""
    tree = read_whole(LayoutRecord(data, registrations, old), data)
    return carry_tree(tree, new_registrations, old, new)


def carry_tree(tree: KryoNode | None, new_registrations: list[tuple[str, bool]], old: KryoLayouts,
               new: KryoLayouts) -> bytes:
    """The Kryo 5.6 record of ``tree`` (read with the ``old`` layouts), written with the ``new`` ones."""
    out = LayoutOutput(new_registrations, old, new)
    out.class_and_object(tree)
    return bytes(out.out)


__all__ = ["KRYO5", "LayoutOutput", "LayoutRecord", "UserObject", "carry_tree", "carry_user_record",
           "read_user_record", "tree_value"]
