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
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from flinkstate.format_errors import SavepointFormatError
from flinkstate.serializers.times import Date, Instant, LocalDate, LocalDateTime, LocalTime, SqlDate, SqlTimestamp

KRYO2, KRYO5 = 2, 5
#: The first id of Flink's own registrations (``FlinkChillPackageRegistrar.getNextRegistrationId``).
FIRST_FLINK_REGISTRATION = 85
#: Nesting bound: a corrupted record must not recurse without end.
MAX_DEPTH = 64

_PRIMITIVE_IDS = ("int", "java.lang.String", "float", "boolean", "byte", "char", "short", "long", "double")
_CHILL_IDS = ("java.util.Arrays$ArrayList", "java.util.BitSet", "java.util.PriorityQueue", "java.util.regex.Pattern",
              "java.sql.Date", "java.sql.Time", "java.sql.Timestamp", "java.net.URI", "java.net.InetSocketAddress",
              "java.util.UUID", "java.util.Locale", "java.text.SimpleDateFormat")
_WRAPPERS = {"int": "java.lang.Integer", "float": "java.lang.Float", "boolean": "java.lang.Boolean",
             "byte": "java.lang.Byte", "char": "java.lang.Character", "short": "java.lang.Short",
             "long": "java.lang.Long", "double": "java.lang.Double"}
_WRAPPER_CLASSES = frozenset(_WRAPPERS) | frozenset(_WRAPPERS.values())
_COLLECTIONS = frozenset({"java.util.ArrayList", "java.util.LinkedList", "java.util.HashSet", "java.util.LinkedHashSet",
                          "java.util.ArrayDeque", "java.util.TreeSet"})
_MAPS = frozenset({"java.util.HashMap", "java.util.LinkedHashMap", "java.util.TreeMap"})
#: JDK enums whose constants are known (EnumSerializer stores only the ordinal); a user's enum cannot be told from a
#: user class by its name, so it stays opaque.
JDK_ENUMS: dict[str, tuple[str, ...]] = {
    "java.util.concurrent.TimeUnit": ("NANOSECONDS", "MICROSECONDS", "MILLISECONDS", "SECONDS", "MINUTES", "HOURS",
                                      "DAYS"),
    "java.time.DayOfWeek": ("MONDAY", "TUESDAY", "WEDNESDAY", "THURSDAY", "FRIDAY", "SATURDAY", "SUNDAY"),
    "java.time.Month": ("JANUARY", "FEBRUARY", "MARCH", "APRIL", "MAY", "JUNE", "JULY", "AUGUST", "SEPTEMBER",
                        "OCTOBER", "NOVEMBER", "DECEMBER"),
    "java.math.RoundingMode": ("UP", "DOWN", "CEILING", "FLOOR", "HALF_UP", "HALF_DOWN", "HALF_EVEN", "UNNECESSARY"),
}


class KryoOpaque(Exception):
    """The record holds a class this module cannot decode: it is passed through whole."""

    def __init__(self, class_name: str, why: str = "no built-in serializer decoded here") -> None:
        # The name comes from the data: escaped, so a corrupted one cannot break the one-line message.
        shown = class_name if class_name.isprintable() else class_name.encode("unicode_escape").decode("ascii")
        super().__init__(f"{shown}: {why}")
        self.class_name = class_name


class KryoCorrupt(SavepointFormatError):
    """The bytes are not a Kryo record of the version tried (truncated, an impossible value)."""


@dataclass(frozen=True)
class KryoEnum:
    """An enum constant: Kryo stores its ordinal only; ``name`` is known for JDK enums."""

    enum_class: str
    ordinal: int
    name: str | None


@dataclass(frozen=True)
class KryoMap:
    """A map's entries in the stored order (keys may be any value, so not a dict)."""

    map_class: str
    entries: tuple[tuple[Any, Any], ...]


@dataclass(frozen=True)
class KryoDuration:
    seconds: int
    nanos: int


@dataclass(frozen=True)
class KryoText:
    """A value Java renders as text (UUID, Currency, Locale, Charset): its class and that text."""

    java_class: str
    text: str


@dataclass(frozen=True)
class KryoValue:
    """A decoded Kryo record: the declared Kryo type, the record's class, the value, and the original bytes (written
    back unchanged, so a migration stays byte exact)."""

    type_name: str
    java_class: str
    value: Any
    data: bytes
    kryo_version: int


def registration_table(version: int, registrations: list[tuple[str, bool]]) -> dict[int, tuple[str, bool]]:
    """Registration id -> (class name, uses its default serializer) for a Flink KryoSerializer whose snapshot lists
    ``registrations`` (class name, registered without a serializer of its own) in order."""
    table: dict[int, tuple[str, bool]] = {i: (name, True) for i, name in enumerate(_PRIMITIVE_IDS)}
    if version == KRYO2:
        table[9] = ("void", True)
    for i, name in enumerate(_CHILL_IDS):
        table[73 + i] = (name, True)
    for i, (name, default) in enumerate(registrations):
        table[FIRST_FLINK_REGISTRATION + i] = (name, default)
    return table


class _Record:
    """One record being read: position, the name table, the reference table."""

    __slots__ = ("buf", "depth", "end", "names", "pos", "refs", "registered", "v5")

    def __init__(self, buf: bytes, pos: int, end: int, version: int, registered: dict[int, tuple[str, bool]]) -> None:
        self.buf, self.pos, self.end, self.v5, self.registered = buf, pos, end, version == KRYO5, registered
        self.names: dict[int, str] = {}
        self.refs: list[Any] = []
        self.depth = 0

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
                return self.refs[index]
        slot = len(self.refs)
        if refs:
            self.refs.append(None)
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise KryoCorrupt(f"Kryo record nested deeper than {MAX_DEPTH} at byte {self.pos}")
        value = read(self, name)
        self.depth -= 1
        if refs:
            self.refs[slot] = value
        return value

    def _reader(self, name: str) -> Callable[[_Record, str], Any]:
        reader = _READERS.get(name)
        if reader is None and name in JDK_ENUMS:
            reader = _enum
        elif reader is None and self.v5:
            reader = _READERS_5.get(name)
            if reader is None and name.startswith("sun.nio.cs."):  # Charset subclasses: CharsetSerializer
                reader = _text
        if reader is None:
            raise KryoOpaque(name)
        return reader


# -- serializers -----------------------------------------------------------------------------------------------------

def _int(r: _Record, _: str) -> int:
    return r.zigzag()


def _long(r: _Record, _: str) -> int:
    return r.zigzag(long=True)


def _string(r: _Record, _: str) -> str | None:
    return r.string()


def _float(r: _Record, _: str) -> float:
    return float(r.fixed("f"))


def _double(r: _Record, _: str) -> float:
    return float(r.fixed("d"))


def _boolean(r: _Record, _: str) -> bool:
    return r.byte() == 1


def _byte(r: _Record, _: str) -> int:
    b = r.byte()
    return b - 256 if b > 127 else b


def _char(r: _Record, _: str) -> str:
    return chr(r.fixed("H"))


def _short(r: _Record, _: str) -> int:
    return int(r.fixed("h"))


def _big_integer(r: _Record, _: str) -> int | None:
    n = r.length()
    if n == 0:
        return None
    return int.from_bytes(r.take(n - 1), "big", signed=True)


def _big_decimal(r: _Record, name: str) -> Decimal | None:
    unscaled = _big_integer(r, name)
    if unscaled is None:
        return None
    scale = r.zigzag()
    # Built from the digits: Decimal arithmetic (scaleb) would round to the context's 28 digits.
    sign, digits, _ = Decimal(unscaled).as_tuple()
    return Decimal((sign, digits, -scale))


def _date(r: _Record, _: str) -> Date:
    return Date(r.positive(long=True))


def _sql_date(r: _Record, _: str) -> SqlDate:
    return SqlDate(r.positive(long=True))


def _timestamp(r: _Record, _: str) -> SqlTimestamp:
    millis, nanos = r.positive(long=True), r.positive()
    if r.v5:  # Kryo 5 stores the whole seconds' milliseconds (integralTimeComponent), 2.24 getTime()
        millis += nanos // 1_000_000
    try:
        return SqlTimestamp(millis, nanos)
    except ValueError as e:
        raise KryoCorrupt(f"Kryo Timestamp: {e}") from None


def _uuid(r: _Record, _: str) -> KryoText:
    if r.v5:
        msb, lsb = r.fixed("q"), r.fixed("q")
    else:  # Chill's UUIDSerializer: two zigzag varlongs
        msb, lsb = r.zigzag(long=True), r.zigzag(long=True)
    h = f"{(msb & (1 << 64) - 1):016x}{(lsb & (1 << 64) - 1):016x}"
    return KryoText("java.util.UUID", f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}")


def _enum(r: _Record, name: str) -> KryoEnum:
    ordinal = r.varint() - 1
    constants = JDK_ENUMS.get(name, ())
    if not 0 <= ordinal < len(constants):
        raise KryoCorrupt(f"Kryo enum {name}: ordinal {ordinal} out of range")
    return KryoEnum(name, ordinal, constants[ordinal])


def _text(r: _Record, name: str) -> KryoText:
    text = r.string()
    if text is None:
        raise KryoCorrupt(f"Kryo {name}: null text")
    return KryoText(name if not name.startswith("sun.nio.cs.") else "java.nio.charset.Charset", text)


def _locale(r: _Record, name: str) -> KryoText:
    parts = [r.string() or "" for _ in range(3)]
    return KryoText(name, "_".join(parts).rstrip("_"))


def _no_comparator(r: _Record, name: str) -> None:
    """TreeMap/TreeSet write their comparator first: only a natural order (null) is decoded."""
    if r.read_class() is not None:
        raise KryoOpaque(name, "a comparator is stored")


def _collection(r: _Record, name: str) -> list[Any]:
    if not r.v5:
        if name == "java.util.TreeSet":
            _no_comparator(r, name)
        return [r.class_and_object() for _ in range(r.length())]
    same_type, size = r.varint_flag()
    if size == 0:
        raise KryoCorrupt(f"Kryo {name}: null collection inside its own record")
    size -= 1
    if size > r.end - r.pos:
        raise KryoCorrupt(f"Kryo length {size} at byte {r.pos} exceeds the record")
    if name in ("java.util.TreeSet", "java.util.PriorityQueue"):
        _no_comparator(r, name)
    if size == 0:
        return []
    if not same_type:
        return [r.class_and_object() for _ in range(size)]
    cls = r.read_class()
    if cls is None:
        return [None] * size
    has_null = r.byte() == 1
    return [r.object(cls, may_be_null=has_null) for _ in range(size)]


def _arrays_as_list(r: _Record, name: str) -> list[Any]:
    if r.v5:
        return _collection(r, name)
    # Chill's ArraysAsListSerializer: the length, the backing array's component class, each element with its class.
    size = r.length()
    r.read_class()
    return [r.class_and_object() for _ in range(size)]


def _map(r: _Record, name: str) -> KryoMap:
    if not r.v5:
        if name == "java.util.TreeMap":
            _no_comparator(r, name)
        size = r.length()
    else:
        size = r.length()
        if size == 0:
            raise KryoCorrupt(f"Kryo {name}: null map inside its own record")
        size -= 1
        if name == "java.util.TreeMap":
            _no_comparator(r, name)
    return KryoMap(name, tuple((r.class_and_object(), r.class_and_object()) for _ in range(size)))


def _empty_list(r: _Record, _: str) -> list[Any]:
    return []


def _empty_map(r: _Record, name: str) -> KryoMap:
    return KryoMap(name, ())


def _singleton(r: _Record, _: str) -> list[Any]:
    return [r.class_and_object()]


def _singleton_map(r: _Record, name: str) -> KryoMap:
    return KryoMap(name, ((r.class_and_object(), r.class_and_object()),))


def _array_of(read: Callable[[_Record, str], Any]) -> Callable[[_Record, str], Any]:
    def decode(r: _Record, name: str) -> list[Any] | None:
        n = r.length()
        return None if n == 0 else [read(r, name) for _ in range(n - 1)]

    return decode


def _byte_array(r: _Record, _: str) -> bytes | None:
    n = r.length()
    return None if n == 0 else bytes(r.take(n - 1))


def _string_array(r: _Record, _: str) -> list[str | None] | None:
    n = r.length()
    if n == 0:
        return None
    return [r.object(("java.lang.String", True), may_be_null=True) for _ in range(n - 1)]


def _instant(r: _Record, _: str) -> Instant:
    seconds, nanos = r.positive(long=True), r.positive()
    try:
        return Instant(seconds, nanos)
    except ValueError as e:
        raise KryoCorrupt(f"Kryo Instant: {e}") from None


def _read_local_date(r: _Record) -> tuple[int, int, int]:
    return r.positive(), r.byte(), r.byte()


def _read_local_time(r: _Record) -> tuple[int, int, int, int]:
    """Kryo 5's LocalTimeSerializer: trailing zero parts are cut, the last written part is complemented."""
    def signed(b: int) -> int:
        return b - 256 if b > 127 else b

    hour = signed(r.byte())
    if hour < 0:
        return ~hour, 0, 0, 0
    minute = signed(r.byte())
    if minute < 0:
        return hour, ~minute, 0, 0
    second = signed(r.byte())
    if second < 0:
        return hour, minute, ~second, 0
    return hour, minute, second, r.positive()


def _local(build: Callable[[_Record], Any], what: str) -> Callable[[_Record, str], Any]:
    def decode(r: _Record, _: str) -> Any:
        try:
            return build(r)
        except ValueError as e:
            raise KryoCorrupt(f"Kryo {what}: {e}") from None

    return decode


def _duration(r: _Record, _: str) -> KryoDuration:
    seconds = r.fixed("q")
    return KryoDuration(int(seconds), r.positive())


_READERS: dict[str, Callable[[_Record, str], Any]] = {
    "int": _int, "java.lang.Integer": _int, "long": _long, "java.lang.Long": _long,
    "java.lang.String": _string, "float": _float, "java.lang.Float": _float, "double": _double,
    "java.lang.Double": _double, "boolean": _boolean, "java.lang.Boolean": _boolean, "byte": _byte,
    "java.lang.Byte": _byte, "char": _char, "java.lang.Character": _char, "short": _short, "java.lang.Short": _short,
    "java.math.BigInteger": _big_integer, "java.math.BigDecimal": _big_decimal, "java.util.Date": _date,
    "java.sql.Date": _sql_date, "java.sql.Timestamp": _timestamp, "java.util.UUID": _uuid,
    "java.util.Currency": _text, "java.util.Arrays$ArrayList": _arrays_as_list,
    "java.util.Collections$EmptyList": _empty_list, "java.util.Collections$EmptySet": _empty_list,
    "java.util.Collections$EmptyMap": _empty_map, "java.util.Collections$SingletonList": _singleton,
    "java.util.Collections$SingletonSet": _singleton, "java.util.Collections$SingletonMap": _singleton_map,
    "[I": _array_of(_int), "[J": _array_of(_long), "[B": _byte_array, "[D": _array_of(_double),
    "[F": _array_of(_float), "[S": _array_of(_short), "[C": _array_of(_char), "[Z": _array_of(_boolean),
    "[Ljava.lang.String;": _string_array,
    **{name: _collection for name in _COLLECTIONS},
    **{name: _map for name in _MAPS},
}
#: Kryo 5's additional defaults (TimeSerializers, LocaleSerializer, CharsetSerializer); in Kryo 2.24 these classes
#: fall to FieldSerializer (java.time) or Chill's Java serialization (Locale), which stay opaque.
_READERS_5: dict[str, Callable[[_Record, str], Any]] = {
    "java.time.Instant": _instant,
    "java.time.LocalDate": _local(lambda r: LocalDate(*_read_local_date(r)), "LocalDate"),
    "java.time.LocalTime": _local(lambda r: LocalTime(*_read_local_time(r)), "LocalTime"),
    "java.time.LocalDateTime": _local(lambda r: LocalDateTime(*_read_local_date(r), *_read_local_time(r)),
                                      "LocalDateTime"),
    "java.time.Duration": _duration, "java.util.Locale": _locale,
}


def read_record(buf: bytes, start: int, end: int, version: int,
                registered: dict[int, tuple[str, bool]]) -> tuple[str, Any, int]:
    """Reads one ``writeClassAndObject`` record from ``buf[start:end]``: (class name, value, end offset).
    Raises :class:`KryoOpaque` or :class:`KryoCorrupt`."""
    r = _Record(buf, start, end, version, registered)
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


def plain(value: Any) -> Any:
    """A decoded Kryo value as plain Python for ``dump`` (the rest, Decimal, dates, bytes, goes through
    :func:`flinkstate.jsonify.to_json`): a map is an object when its keys are strings, else a list of [key, value]
    pairs; an enum is its constant's name (or {"enum", "ordinal"} when the name is not known); UUID, Currency,
    Locale and Charset are their text; a Duration is {"seconds", "nanos"}."""
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, KryoMap):
        if all(isinstance(k, str) for k, _ in value.entries):
            return {k: plain(v) for k, v in value.entries}
        return [[plain(k), plain(v)] for k, v in value.entries]
    if isinstance(value, KryoEnum):
        return value.name if value.name is not None else {"enum": value.enum_class, "ordinal": value.ordinal}
    if isinstance(value, KryoText):
        return value.text
    if isinstance(value, KryoDuration):
        return {"seconds": value.seconds, "nanos": value.nanos}
    return value
