"""Kryo 2.24 records (Flink 1.x) re-encoded as the Kryo 5.6 records (Flink 2.x) of the same objects: what a 1.x -> 2.x
migration does with Kryo data, which Flink 2.x reads with Kryo 5 (FLINK-3154).

A record is read with the Kryo 2 reader of :mod:`flinkstate.serializers.kryo_data` into a tree that keeps every
object's class (:class:`KryoNode`: a list of Integers and one of Longs decode to the same Python list) and its
identity (a back-reference is the same node), then written as Kryo 5's ``writeClassAndObject`` with the same
configuration as Flink's KryoSerializer (references on, the same registrations): class ids and names, reference
markers (Kryo 5 gives enums none), and each built-in serializer's Kryo 5 format (fixed-width numbers little-endian,
UUID as two longs, collections with their same-type header, ...). Only records the reader decodes can be carried:
a user class (FieldSerializer) or a custom serializer has no layout here, and is refused in one line.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from typing import Any

from flinkstate.serializers.kryo_data import KryoRecord
from flinkstate.serializers.kryo_values import (
    COLLECTIONS,
    JDK_ENUMS,
    KRYO2,
    KRYO5,
    MAPS,
    KryoCorrupt,
    KryoEnum,
    KryoMap,
    KryoOpaque,
    registration_table,
)

_WRAPPERS = frozenset({"int", "long", "float", "double", "boolean", "byte", "char", "short", "java.lang.Integer",
                       "java.lang.Long", "java.lang.Float", "java.lang.Double", "java.lang.Boolean", "java.lang.Byte",
                       "java.lang.Character", "java.lang.Short"})


class KryoNode:
    """One object of a record: its class and its value as the reader gives it, with the objects inside it (list
    elements, map keys and values) as nodes too. Compared by identity, as Kryo's references are."""

    __slots__ = ("java_class", "value")

    def __init__(self, java_class: str, value: Any) -> None:
        self.java_class = java_class
        self.value = value


class TypedRecord(KryoRecord):
    """The Kryo reader with every object it reads kept as a :class:`KryoNode` (the reference table then holds the
    nodes, so a back-reference gives the very node it names)."""

    __slots__ = ()

    def _reader(self, name: str) -> Callable[[KryoRecord, str], Any]:
        read = super()._reader(name)
        return lambda record, java_class: KryoNode(java_class, read(record, java_class))


def read_tree(data: bytes, registrations: list[tuple[str, bool]], version: int = KRYO2) -> KryoNode | None:
    """The whole record ``data`` (one ``writeClassAndObject``) as a tree of nodes; None for a null record. Raises
    :class:`KryoOpaque` for a class the reader does not decode, :class:`KryoCorrupt` for bytes that are not one
    record to their end."""
    return read_whole(TypedRecord(data, 0, len(data), version, registration_table(version, registrations)), data)


def read_whole(record: TypedRecord, data: bytes) -> KryoNode | None:
    """The record ``data`` read to its end by ``record`` (a reader over all of it), as :func:`read_tree` says."""
    try:
        cls = record.read_class()
        node = None if cls is None else record.object(cls, may_be_null=False)
    except (ValueError, UnicodeDecodeError, struct.error, OverflowError) as e:
        raise KryoCorrupt(f"Kryo record: {e}") from None
    if record.pos != len(data):
        raise KryoCorrupt(f"Kryo record ends at byte {record.pos} of {len(data)}")
    return node


class Kryo5Output:
    """Kryo 5.6's ``Output`` and the parts of ``Kryo`` a record needs: class names and references, per record."""

    def __init__(self, registrations: list[tuple[str, bool]]) -> None:
        self.out = bytearray()
        self.ids: dict[str, int] = {}
        for rid, (name, _) in sorted(registration_table(KRYO5, registrations).items(), reverse=True):
            self.ids[name] = rid  # the lowest id of a class registered twice, as Kryo's class-to-id map keeps
        self.names: dict[str, int] = {}
        self.written: dict[int, int] = {}  # id(node) -> reference id

    def varint(self, value: int) -> None:
        value &= 0xFFFFFFFF
        while value > 0x7F:
            self.out.append(value & 0x7F | 0x80)
            value >>= 7
        self.out.append(value)

    def varlong(self, value: int) -> None:
        value &= (1 << 64) - 1
        for _ in range(8):
            if value <= 0x7F:
                self.out.append(value)
                return
            self.out.append(value & 0x7F | 0x80)
            value >>= 7
        self.out.append(value)  # the 9th byte takes the last 8 bits whole

    def zigzag(self, value: int, long: bool = False) -> None:
        if long:
            self.varlong((value << 1) ^ (value >> 63))
        else:
            self.varint((value << 1) ^ (value >> 31))

    def varint_flag(self, flag: bool, value: int) -> None:
        first = (value & 0x3F) | (0x80 if flag else 0)
        if value >> 6:
            self.out.append(first | 0x40)
            self.varint(value >> 6)
        else:
            self.out.append(first)

    def fixed(self, fmt: str, value: Any) -> None:
        self.out += struct.pack("<" + fmt, value)

    def string(self, value: str | None) -> None:
        if value is None:
            self.out.append(0x80)
            return
        if not value:
            self.out.append(0x81)
            return
        if 1 < len(value) <= 32 and value.isascii():
            self.out += value.encode("ascii")
            self.out[-1] |= 0x80
            return
        units = value.encode("utf-16-le", "surrogatepass")
        chars = struct.unpack(f"<{len(units) // 2}H", units)
        self.varint_flag(True, len(chars) + 1)
        for c in chars:  # Kryo's UTF-8 of UTF-16 units (a NUL is one byte)
            if c <= 0x7F:
                self.out.append(c)
            elif c > 0x7FF:
                self.out += bytes((0xE0 | c >> 12 & 0x0F, 0x80 | c >> 6 & 0x3F, 0x80 | c & 0x3F))
            else:
                self.out += bytes((0xC0 | c >> 6 & 0x1F, 0x80 | c & 0x3F))

    def ascii(self, value: str) -> None:
        if len(value) < 2 or not value.isascii():
            self.string(value)
            return
        self.out += value.encode("ascii")
        self.out[-1] |= 0x80

    def write_class(self, name: str | None) -> None:
        if name is None:
            self.out.append(0)
            return
        rid = self.ids.get(name)
        if rid is not None:
            self.varint(rid + 2)
            return
        self.out.append(1)
        if name in self.names:
            self.varint(self.names[name])
            return
        self.names[name] = len(self.names)
        self.varint(self.names[name])
        self.ascii(name)  # Kryo writes class names with writeAscii, whatever their length

    def class_and_object(self, node: KryoNode | None) -> None:
        self.write_class(None if node is None else node.java_class)
        if node is not None:
            self.object(node, may_be_null=False)

    def object(self, node: KryoNode | None, may_be_null: bool) -> None:
        """``writeObject``/``writeObjectOrNull`` with references: Kryo 5 gives wrappers and enums none."""
        if node is None:
            self.out.append(0)
            return
        if self.no_references(node.java_class):
            if may_be_null:
                self.out.append(1)
        elif id(node) in self.written:
            self.varint(self.written[id(node)] + 2)
            return
        else:
            self.written[id(node)] = len(self.written)
            self.out.append(1)
        self.writer(node.java_class)(self, node)

    def no_references(self, name: str) -> bool:
        """Whether Kryo 5 writes objects of this class without a reference marker: wrappers and enums."""
        return name in _WRAPPERS or name in JDK_ENUMS

    def writer(self, name: str) -> Callable[[Kryo5Output, KryoNode], None]:
        """The Kryo 5 writer of a class's data (a subclass adds user classes: :mod:`.kryo_fields`)."""
        return _writer(name)


def _nodes(value: Any, name: str) -> list[KryoNode | None]:
    if not isinstance(value, list) or not all(v is None or isinstance(v, KryoNode) for v in value):
        raise KryoCorrupt(f"Kryo {name}: elements expected")
    return value


def _collection(out: Kryo5Output, node: KryoNode) -> None:
    """Kryo 5's CollectionSerializer without generics: the same-type flag and length + 1, the comparator (TreeSet,
    PriorityQueue), then the common class and a has-null flag, or each element with its class."""
    elements = _nodes(node.value, node.java_class)
    comparator = node.java_class in ("java.util.TreeSet", "java.util.PriorityQueue")
    if not elements:
        out.out.append(1)
        if comparator:
            out.write_class(None)
        return
    classes = {e.java_class for e in elements if e is not None}
    same = len(classes) <= 1
    out.varint_flag(same, len(elements) + 1)
    if comparator:
        out.write_class(None)
    if not same:
        for element in elements:
            out.class_and_object(element)
        return
    if not classes:
        out.out.append(0)  # every element null
        return
    out.write_class(classes.pop())
    has_null = any(e is None for e in elements)
    out.out.append(1 if has_null else 0)
    for element in elements:
        out.object(element, may_be_null=has_null)


def _map(out: Kryo5Output, node: KryoNode) -> None:
    if not isinstance(node.value, KryoMap):
        raise KryoCorrupt(f"Kryo {node.java_class}: entries expected")
    out.varint(len(node.value.entries) + 1)
    if node.java_class == "java.util.TreeMap":
        out.write_class(None)
    for key, value in node.value.entries:
        out.class_and_object(key)
        out.class_and_object(value)


def _big_integer(out: Kryo5Output, value: int) -> None:
    data = value.to_bytes((value if value >= 0 else ~value).bit_length() // 8 + 1, "big", signed=True)
    out.varint(len(data) + 1)
    out.out += data


def _uuid(out: Kryo5Output, node: KryoNode) -> None:
    number = uuid.UUID(node.value.text).int
    out.fixed("Q", number >> 64)
    out.fixed("Q", number & (1 << 64) - 1)


def _array(write: Callable[[Kryo5Output, Any], None]) -> Callable[[Kryo5Output, KryoNode], None]:
    def encode(out: Kryo5Output, node: KryoNode) -> None:
        if node.value is None:
            out.out.append(0)
            return
        out.varint(len(node.value) + 1)
        for item in node.value:
            write(out, item)

    return encode


def _byte_array(out: Kryo5Output, node: KryoNode) -> None:
    if node.value is None:
        out.out.append(0)
        return
    out.varint(len(node.value) + 1)
    out.out += node.value


def _string_array(out: Kryo5Output, node: KryoNode) -> None:
    if node.value is None:
        out.out.append(0)
        return
    out.varint(len(node.value) + 1)
    for element in _nodes(node.value, node.java_class):
        out.object(element, may_be_null=True)


def _text(out: Kryo5Output, node: KryoNode) -> None:
    out.string(node.value.text)


def _enum(out: Kryo5Output, node: KryoNode) -> None:
    if not isinstance(node.value, KryoEnum):
        raise KryoCorrupt(f"Kryo {node.java_class}: an enum constant expected")
    out.varint(node.value.ordinal + 1)


def _timestamp(out: Kryo5Output, node: KryoNode) -> None:
    # Kryo 5's TimestampSerializer stores the whole seconds' milliseconds, then the nanos
    out.varlong(node.value.millis - node.value.nanos // 1_000_000)
    out.varint(node.value.nanos)


def _value(write: Callable[[Kryo5Output, Any], None]) -> Callable[[Kryo5Output, KryoNode], None]:
    return lambda out, node: write(out, node.value)


def _big_decimal(out: Kryo5Output, value: Any) -> None:
    if value is None:
        out.out.append(0)
        return
    sign, digits, exponent = value.as_tuple()
    unscaled = int("".join(map(str, digits)) or "0") * (-1 if sign else 1)
    _big_integer(out, unscaled)
    out.zigzag(-exponent)


def _scalar(fmt: str) -> Callable[[Kryo5Output, Any], None]:
    return lambda out, value: out.fixed(fmt, value)


_INT: Callable[[Kryo5Output, Any], None] = lambda out, value: out.zigzag(value)  # noqa: E731
_LONG: Callable[[Kryo5Output, Any], None] = lambda out, value: out.zigzag(value, long=True)  # noqa: E731
_BOOLEAN: Callable[[Kryo5Output, Any], None] = lambda out, value: out.out.append(1 if value else 0)  # noqa: E731
_BYTE: Callable[[Kryo5Output, Any], None] = lambda out, value: out.out.append(value & 0xFF)  # noqa: E731
_CHAR: Callable[[Kryo5Output, Any], None] = lambda out, value: out.fixed("H", ord(value))  # noqa: E731
_EPOCH: Callable[[Kryo5Output, Any], None] = lambda out, value: out.varlong(value.millis)  # noqa: E731


def _big_integer_or_null(out: Kryo5Output, value: int | None) -> None:
    if value is None:
        out.out.append(0)
    else:
        _big_integer(out, value)


def _singleton_map(out: Kryo5Output, node: KryoNode) -> None:
    entries = node.value.entries
    out.class_and_object(entries[0][0])
    out.class_and_object(entries[0][1])


#: Kryo 5's serializer data per class (the classes :mod:`flinkstate.serializers.kryo_readers` reads in Kryo 2.24).
WRITERS: dict[str, Callable[[Kryo5Output, KryoNode], None]] = {
    **{name: _value(_INT) for name in ("int", "java.lang.Integer")},
    **{name: _value(_LONG) for name in ("long", "java.lang.Long")},
    **{name: _value(_scalar("f")) for name in ("float", "java.lang.Float")},
    **{name: _value(_scalar("d")) for name in ("double", "java.lang.Double")},
    **{name: _value(_BOOLEAN) for name in ("boolean", "java.lang.Boolean")},
    **{name: _value(_BYTE) for name in ("byte", "java.lang.Byte")},
    **{name: _value(_CHAR) for name in ("char", "java.lang.Character")},
    **{name: _value(_scalar("h")) for name in ("short", "java.lang.Short")},
    "java.lang.String": _value(lambda out, value: out.string(value)),
    "java.math.BigInteger": _value(_big_integer_or_null), "java.math.BigDecimal": _value(_big_decimal),
    "java.util.Date": _value(_EPOCH), "java.sql.Date": _value(_EPOCH), "java.sql.Timestamp": _timestamp,
    "java.util.UUID": _uuid, "java.util.Currency": _text, "java.util.Arrays$ArrayList": _collection,
    "java.util.Collections$EmptyList": lambda out, node: None, "java.util.Collections$EmptySet": lambda out, node: None,
    "java.util.Collections$EmptyMap": lambda out, node: None,
    "java.util.Collections$SingletonList": lambda out, node: out.class_and_object(_nodes(node.value, "list")[0]),
    "java.util.Collections$SingletonSet": lambda out, node: out.class_and_object(_nodes(node.value, "set")[0]),
    "java.util.Collections$SingletonMap": _singleton_map,
    "[I": _array(_INT), "[J": _array(_LONG), "[B": _byte_array, "[D": _array(_scalar("d")),
    "[F": _array(_scalar("f")), "[S": _array(_scalar("h")), "[C": _array(_CHAR), "[Z": _array(_BOOLEAN),
    "[Ljava.lang.String;": _string_array,
    **{name: _collection for name in COLLECTIONS},
    **{name: _map for name in MAPS},
    **{name: _enum for name in JDK_ENUMS},
}


def _writer(name: str) -> Callable[[Kryo5Output, KryoNode], None]:
    writer = WRITERS.get(name)
    if writer is None:
        raise KryoOpaque(name, "flinkstate does not write it for Kryo 5")
    return writer


def write_kryo5(node: KryoNode | None, registrations: list[tuple[str, bool]]) -> bytes:
    """The Kryo 5 record of ``node`` (Flink's KryoSerializer with ``registrations``, its snapshot's)."""
    out = Kryo5Output(registrations)
    out.class_and_object(node)
    return bytes(out.out)


def kryo2_to_kryo5(data: bytes, registrations: list[tuple[str, bool]],
                   new_registrations: list[tuple[str, bool]] | None = None) -> bytes:
    """The Kryo 5.6 record of the object Kryo 2.24 wrote as ``data`` with ``registrations`` (the savepoint's Kryo
    snapshot's), written with ``new_registrations`` (the new version's; default: the same). Raises
    :class:`KryoOpaque` (a class flinkstate cannot decode or write) or :class:`KryoCorrupt`."""
    tree = read_tree(data, registrations, KRYO2)
    return write_kryo5(tree, registrations if new_registrations is None else new_registrations)


__all__ = ["WRITERS", "Kryo5Output", "KryoNode", "TypedRecord", "kryo2_to_kryo5", "read_tree", "read_whole",
           "write_kryo5"]
