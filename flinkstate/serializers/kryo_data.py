"""Kryo's data format (``Kryo.writeClassAndObject``) for the JDK classes Kryo and Flink serialize with built-in
serializers, in both Kryo versions Flink uses: Kryo 2.24 (Flink 1.x) and Kryo 5.6 (Flink 2.x).

What Flink's ``KryoSerializer`` configures (``checkKryoInitialized``), the same in 1.20 and 2.x: references on
(``MapReferenceResolver``), registration not required (unregistered classes are written by name), Kryo's own
registrations (ids 0..8 the primitives and String, 9 ``void`` in 2.24 only), then ``FlinkChillPackageRegistrar`` at
fixed ids 73..84 (``Arrays$ArrayList``, BitSet, PriorityQueue, Pattern, java.sql Date/Time/Timestamp, URI,
InetSocketAddress, UUID, Locale, SimpleDateFormat; in 1.x Chill's Scala registrations fill 10..72), then the
snapshot's registrations in order from id 85 (the serialized type itself first).

A record: ``varint classId`` (0 null; 1 by name: ``varint nameId`` and, the first time in the record, the class
name; otherwise registration id + 2), then the reference marker (``varint``: 0 null, 1 a new object, n+2 the
object read as the n-th one) for every class but the eight primitive wrappers (and, in Kryo 5, enums), then the
serializer's data. Which serializer a class gets follows each version's ``Kryo()`` default-serializer table; a class
this module does not know (a user class under FieldSerializer, a custom serializer, Java serialization) makes the
whole record opaque (:class:`KryoOpaque`), since its bytes carry no length.

Flink 2.x and 1.x write the same snapshot, so the version is taken from the caller when known (``version``), else a
record is accepted only where the two readings agree or, for a whole stored value, where exactly one reads it to its
end (:func:`decode_record`).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from flinkstate.limits import VALUE_NODES
from flinkstate.serializers.kryo_readers import READERS, READERS_5, read_enum, read_text
from flinkstate.serializers.kryo_values import (
    FIRST_FLINK_REGISTRATION,
    JDK_ENUMS,
    KRYO2,
    KRYO5,
    MAX_DEPTH,
    KryoCorrupt,
    KryoDuration,
    KryoEnum,
    KryoMap,
    KryoOpaque,
    KryoText,
    KryoValue,
    plain,
    registration_table,
)

_WRAPPERS = {"int": "java.lang.Integer", "float": "java.lang.Float", "boolean": "java.lang.Boolean",
             "byte": "java.lang.Byte", "char": "java.lang.Character", "short": "java.lang.Short",
             "long": "java.lang.Long", "double": "java.lang.Double"}
_WRAPPER_CLASSES = frozenset(_WRAPPERS) | frozenset(_WRAPPERS.values())


class KryoRecord:
    """One record being read: position, the name table, the reference table, and the nodes the value expands to.

    A back-reference costs a few bytes but stands for the whole object it names: written out (JSON, a comparison),
    ten references to a list of ten references to ... expand exponentially. So each object's expanded size is kept
    beside it, every reference counts as that size, and a record past ``VALUE_NODES`` is refused while it is read."""

    __slots__ = ("buf", "depth", "end", "max_nodes", "names", "nodes", "pos", "refs", "registered", "sizes", "v5")

    def __init__(self, buf: bytes, pos: int, end: int, version: int, registered: dict[int, tuple[str, bool]]) -> None:
        self.buf, self.pos, self.end, self.v5, self.registered = buf, pos, end, version == KRYO5, registered
        self.names: dict[int, str] = {}
        self.refs: list[Any] = []
        self.sizes: list[int] = []  # the expanded node count of each object in ``refs``
        self.depth = 0
        self.nodes = 0
        self.max_nodes = VALUE_NODES.value()

    # -- primitives ----------------------------------------------------------------------------------------------

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > self.end:
            raise KryoCorrupt(f"Kryo record truncated at byte {self.pos} (needs {n} more)")
        data = self.buf[self.pos:self.pos + n]
        self.pos += n
        return data

    def byte(self) -> int:
        if self.pos >= self.end:
            raise KryoCorrupt(f"Kryo record truncated at byte {self.pos}")
        b = self.buf[self.pos]
        self.pos += 1
        return b

    def varint(self, max_bytes: int = 5) -> int:
        """Kryo's unsigned varint (7 bits a byte, low first); 5 bytes for an int, 9 for a long (Kryo stops there and
        takes the 9th byte whole)."""
        result = shift = 0
        for i in range(max_bytes):
            b = self.byte()
            if i == 8:
                return result | (b << 56)
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
        if max_bytes == 5:
            return result & 0xFFFFFFFF
        raise KryoCorrupt(f"Kryo varint too long at byte {self.pos}")

    def signed32(self, value: int) -> int:
        return value - (1 << 32) if value & 0x80000000 else value

    def zigzag(self, long: bool = False) -> int:
        raw = self.varint(9 if long else 5)
        return (raw >> 1) ^ -(raw & 1)

    def positive(self, long: bool = False) -> int:
        raw = self.varint(9 if long else 5)
        bits = 64 if long else 32
        return raw - (1 << bits) if raw >> (bits - 1) else raw

    def length(self) -> int:
        """A count (elements, bytes) bounded by what the record can still hold, so a corrupt count fails at once
        instead of allocating."""
        n = self.positive()
        if n < 0 or n > self.end - self.pos + 1:
            raise KryoCorrupt(f"Kryo length {n} at byte {self.pos} exceeds the record")
        return n

    def varint_flag(self) -> tuple[bool, int]:
        """Kryo 5's ``readVarIntFlag``: the flag is bit 7 of the first byte, 6 value bits follow."""
        b = self.byte()
        flag, result = bool(b & 0x80), b & 0x3F
        if b & 0x40:
            result |= self.varint() << 6
        return flag, result & 0xFFFFFFFF

    def collection_header(self, name: str) -> tuple[bool, int]:
        """Kryo 5's CollectionSerializer header: (its flag, the element count), the count bounded by the record (a
        collection written by ``writeClassAndObject`` is never null inside its own record)."""
        flag, size = self.varint_flag()
        if size == 0:
            raise KryoCorrupt(f"Kryo {name}: null collection inside its own record")
        size -= 1
        if size > self.end - self.pos:
            raise KryoCorrupt(f"Kryo length {size} at byte {self.pos} exceeds the record")
        return flag, size

    def string(self) -> str | None:
        """``Output.writeString``: ASCII with the last byte's bit 7 set, or a UTF-8 char count + 1 (bit 7 of the first
        byte flags it, 6 value bits) and the chars in Java's modified UTF-8."""
        b = self.byte()
        if not b & 0x80:  # ASCII
            start = self.pos - 1
            while True:
                if b & 0x80:
                    break
                b = self.byte()
            raw = bytearray(self.buf[start:self.pos])
            raw[-1] &= 0x7F
            return raw.decode("ascii")
        count = b & 0x3F
        if b & 0x40:
            count |= self.varint() << 6
        if count == 0:
            return None
        count -= 1
        if count > self.end - self.pos:
            raise KryoCorrupt(f"Kryo string of {count} chars at byte {self.pos} exceeds the record")
        units: list[int] = []
        for _ in range(count):
            c = self.byte()
            if c >> 4 in (12, 13):
                c = (c & 0x1F) << 6 | (self.byte() & 0x3F)
            elif c >> 4 == 14:
                c = (c & 0x0F) << 12 | (self.byte() & 0x3F) << 6 | (self.byte() & 0x3F)
            units.append(c)
        return struct.pack(f"<{len(units)}H", *units).decode("utf-16-le", "surrogatepass")

    def fixed(self, fmt: str) -> Any:
        """A fixed-width number: big-endian in Kryo 2.24, little-endian in Kryo 5."""
        fmt = ("<" if self.v5 else ">") + fmt
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    # -- classes, references, objects ----------------------------------------------------------------------------

    def read_class(self) -> tuple[str, bool] | None:
        cid = self.varint()
        if cid == 0:
            return None
        if cid == 1:
            name_id = self.varint()
            if name_id in self.names:
                return self.names[name_id], True
            name = self.string()
            if not name:
                raise KryoCorrupt(f"Kryo class name missing at byte {self.pos}")
            self.names[name_id] = name
            return name, True
        found = self.registered.get(cid - 2)
        if found is None:
            raise KryoOpaque(f"registration {cid - 2}", "a class registered by id outside the known registrations")
        return found

    def class_and_object(self) -> Any:
        cls = self.read_class()
        if cls is None:
            return None
        return self.object(cls, may_be_null=False)

    def uses_references(self, name: str) -> bool:
        if name in _WRAPPER_CLASSES:
            return False
        return not (self.v5 and name in JDK_ENUMS)

    def object(self, cls: tuple[str, bool], may_be_null: bool) -> Any:
        name, default = cls
        if not default:
            raise KryoOpaque(name, "registered with its own serializer")
        read = self._reader(name)
        refs = self.uses_references(name)
        if may_be_null or refs:
            marker = self.varint()
            if marker == 0:
                return None
            if refs and marker != 1:
                index = marker - 2
                if index >= len(self.refs):
                    raise KryoCorrupt(f"Kryo reference {index} at byte {self.pos} to an object not read yet")
                self.count(self.sizes[index])
                return self.refs[index]
        slot = len(self.refs)
        if refs:
            self.refs.append(None)
            self.sizes.append(1)  # until it is read: a reference back to an enclosing object is cut to one node
        before = self.nodes
        self.count(1)
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise KryoCorrupt(f"Kryo record nested deeper than {MAX_DEPTH} at byte {self.pos}")
        value = read(self, name)
        self.depth -= 1
        if refs:
            self.refs[slot] = value
            self.sizes[slot] = self.nodes - before
        return value

    def count(self, nodes: int) -> None:
        self.nodes += nodes
        if self.nodes > self.max_nodes:
            raise VALUE_NODES.exceeded(f"Kryo record expands to more nodes than allowed through shared references "
                                       f"(at byte {self.pos})")

    def _reader(self, name: str) -> Callable[[KryoRecord, str], Any]:
        reader = READERS.get(name)
        if reader is None and name in JDK_ENUMS:
            reader = read_enum
        elif reader is None and self.v5:
            reader = READERS_5.get(name)
            if reader is None and name.startswith("sun.nio.cs."):  # Charset subclasses: CharsetSerializer
                reader = read_text
        if reader is None:
            raise KryoOpaque(name)
        return reader


def read_record(buf: bytes, start: int, end: int, version: int,
                registered: dict[int, tuple[str, bool]]) -> tuple[str, Any, int]:
    """Reads one ``writeClassAndObject`` record from ``buf[start:end]``: (class name, value, end offset).
    Raises :class:`KryoOpaque` or :class:`KryoCorrupt`."""
    r = KryoRecord(buf, start, end, version, registered)
    try:
        cls = r.read_class()
        value = None if cls is None else r.object(cls, may_be_null=False)
    except (ValueError, UnicodeDecodeError, struct.error, OverflowError) as e:
        raise KryoCorrupt(f"Kryo record at byte {start}: {e}") from None
    return ("null" if cls is None else cls[0]), value, r.pos


def decode_record(buf: bytes, start: int, end: int, versions: tuple[int, ...],
                  tables: dict[int, dict[int, tuple[str, bool]]], whole: bool) -> tuple[int, str, Any, int]:
    """Reads a record under the candidate Kryo versions: (version, class, value, end). With one version, its reading.
    With both (version unknown), a whole stored value (``whole``) is taken from the version that reads it exactly to
    its end if only one does; otherwise the readings must agree (same class, value and end). Raises
    :class:`KryoOpaque` (no unambiguous decodable reading) or :class:`KryoCorrupt`."""
    readings: list[tuple[int, str, Any, int]] = []
    failures: list[KryoOpaque | KryoCorrupt] = []
    for version in versions:
        try:
            cls, value, stop = read_record(buf, start, end, version, tables[version])
        except (KryoOpaque, KryoCorrupt) as e:
            failures.append(e)
            continue
        if whole and stop != end:
            failures.append(KryoCorrupt(f"Kryo record ends at byte {stop}, its value at {end}"))
            continue
        readings.append((version, cls, value, stop))
    opaque = [f for f in failures if isinstance(f, KryoOpaque)]
    if not readings:
        raise opaque[0] if opaque else failures[0]
    first = readings[0]
    if len(readings) > 1 and any(r[1:] != first[1:] for r in readings[1:]):
        raise KryoOpaque(first[1], "Kryo 2.24 and 5 read these bytes differently and the savepoint's Kryo version "
                                   "is not known here")
    if opaque:
        # The other version met a class it cannot decode, so it is not ruled out: its reading may be the true one.
        raise KryoOpaque(opaque[0].class_name, "only one Kryo version decodes these bytes and the savepoint's Kryo "
                                               "version is not known here")
    return first


#: Re-exported: the values and errors live in :mod:`flinkstate.serializers.kryo_values`.
__all__ = ["FIRST_FLINK_REGISTRATION", "JDK_ENUMS", "KRYO2", "KRYO5", "MAX_DEPTH", "KryoCorrupt", "KryoDuration",
           "KryoEnum", "KryoMap", "KryoOpaque", "KryoText", "KryoValue", "decode_record", "plain", "read_record",
           "registration_table"]
