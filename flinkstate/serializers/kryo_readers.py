"""The readers of the JDK classes Kryo serializes with built-in serializers (Kryo 2.24 and 5.6 defaults, Chill's
and Flink's registrations), one per class name: each reads its serializer's data from a
:class:`~flinkstate.serializers.kryo_data.KryoRecord` positioned after the class and reference markers."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any, Protocol

from flinkstate.serializers.kryo_values import (
    COLLECTIONS,
    JDK_ENUMS,
    MAPS,
    KryoCorrupt,
    KryoDuration,
    KryoEnum,
    KryoMap,
    KryoOpaque,
    KryoText,
)
from flinkstate.serializers.times import Date, Instant, LocalDate, LocalDateTime, LocalTime, SqlDate, SqlTimestamp


class KryoRecord(Protocol):
    """What a reader uses of :class:`flinkstate.serializers.kryo_data.KryoRecord` (one record being read)."""

    pos: int
    end: int
    v5: bool

    def take(self, n: int) -> bytes: ...
    def byte(self) -> int: ...
    def varint(self, max_bytes: int = 5) -> int: ...
    def zigzag(self, long: bool = False) -> int: ...
    def positive(self, long: bool = False) -> int: ...
    def length(self) -> int: ...
    def varint_flag(self) -> tuple[bool, int]: ...
    def collection_header(self, name: str) -> tuple[bool, int]: ...
    def string(self) -> str | None: ...
    def fixed(self, fmt: str) -> Any: ...
    def read_class(self) -> tuple[str, bool] | None: ...
    def class_and_object(self) -> Any: ...
    def object(self, cls: tuple[str, bool], may_be_null: bool) -> Any: ...

# -- serializers -----------------------------------------------------------------------------------------------------

def _int(r: KryoRecord, _: str) -> int:
    return r.zigzag()


def _long(r: KryoRecord, _: str) -> int:
    return r.zigzag(long=True)


def _string(r: KryoRecord, _: str) -> str | None:
    return r.string()


def _float(r: KryoRecord, _: str) -> float:
    return float(r.fixed("f"))


def _double(r: KryoRecord, _: str) -> float:
    return float(r.fixed("d"))


def _boolean(r: KryoRecord, _: str) -> bool:
    return r.byte() == 1


def _byte(r: KryoRecord, _: str) -> int:
    b = r.byte()
    return b - 256 if b > 127 else b


def _char(r: KryoRecord, _: str) -> str:
    return chr(r.fixed("H"))


def _short(r: KryoRecord, _: str) -> int:
    return int(r.fixed("h"))


def _big_integer(r: KryoRecord, _: str) -> int | None:
    n = r.length()
    if n == 0:
        return None
    return int.from_bytes(r.take(n - 1), "big", signed=True)


def _big_decimal(r: KryoRecord, name: str) -> Decimal | None:
    unscaled = _big_integer(r, name)
    if unscaled is None:
        return None
    scale = r.zigzag()
    # Built from the digits: Decimal arithmetic (scaleb) would round to the context's 28 digits.
    sign, digits, _ = Decimal(unscaled).as_tuple()
    return Decimal((sign, digits, -scale))


def _date(r: KryoRecord, _: str) -> Date:
    return Date(r.positive(long=True))


def _sql_date(r: KryoRecord, _: str) -> SqlDate:
    return SqlDate(r.positive(long=True))


def _timestamp(r: KryoRecord, _: str) -> SqlTimestamp:
    millis, nanos = r.positive(long=True), r.positive()
    if r.v5:  # Kryo 5 stores the whole seconds' milliseconds (integralTimeComponent), 2.24 getTime()
        millis += nanos // 1_000_000
    try:
        return SqlTimestamp(millis, nanos)
    except ValueError as e:
        raise KryoCorrupt(f"Kryo Timestamp: {e}") from None


def _uuid(r: KryoRecord, _: str) -> KryoText:
    if r.v5:
        msb, lsb = r.fixed("q"), r.fixed("q")
    else:  # Chill's UUIDSerializer: two zigzag varlongs
        msb, lsb = r.zigzag(long=True), r.zigzag(long=True)
    h = f"{(msb & (1 << 64) - 1):016x}{(lsb & (1 << 64) - 1):016x}"
    return KryoText("java.util.UUID", f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}")


def read_enum(r: KryoRecord, name: str) -> KryoEnum:
    ordinal = r.varint() - 1
    constants = JDK_ENUMS.get(name, ())
    if not 0 <= ordinal < len(constants):
        raise KryoCorrupt(f"Kryo enum {name}: ordinal {ordinal} out of range")
    return KryoEnum(name, ordinal, constants[ordinal])


def read_text(r: KryoRecord, name: str) -> KryoText:
    text = r.string()
    if text is None:
        raise KryoCorrupt(f"Kryo {name}: null text")
    return KryoText(name if not name.startswith("sun.nio.cs.") else "java.nio.charset.Charset", text)


def _locale(r: KryoRecord, name: str) -> KryoText:
    parts = [r.string() or "" for _ in range(3)]
    return KryoText(name, "_".join(parts).rstrip("_"))


def _no_comparator(r: KryoRecord, name: str) -> None:
    """TreeMap/TreeSet write their comparator first: only a natural order (null) is decoded."""
    if r.read_class() is not None:
        raise KryoOpaque(name, "a comparator is stored")


def _collection(r: KryoRecord, name: str) -> list[Any]:
    if not r.v5:
        if name == "java.util.TreeSet":
            _no_comparator(r, name)
        return [r.class_and_object() for _ in range(r.length())]
    same_type, size = r.collection_header(name)
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


def _arrays_as_list(r: KryoRecord, name: str) -> list[Any]:
    if r.v5:
        return _collection(r, name)
    # Chill's ArraysAsListSerializer: the length, the backing array's component class, each element with its class.
    size = r.length()
    r.read_class()
    return [r.class_and_object() for _ in range(size)]


def _map(r: KryoRecord, name: str) -> KryoMap:
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


def _empty_list(r: KryoRecord, _: str) -> list[Any]:
    return []


def _empty_map(r: KryoRecord, name: str) -> KryoMap:
    return KryoMap(name, ())


def _singleton(r: KryoRecord, _: str) -> list[Any]:
    return [r.class_and_object()]


def _singleton_map(r: KryoRecord, name: str) -> KryoMap:
    return KryoMap(name, ((r.class_and_object(), r.class_and_object()),))


def _array_of(read: Callable[[KryoRecord, str], Any]) -> Callable[[KryoRecord, str], Any]:
    def decode(r: KryoRecord, name: str) -> list[Any] | None:
        n = r.length()
        return None if n == 0 else [read(r, name) for _ in range(n - 1)]

    return decode


def _byte_array(r: KryoRecord, _: str) -> bytes | None:
    n = r.length()
    return None if n == 0 else bytes(r.take(n - 1))


def _string_array(r: KryoRecord, _: str) -> list[str | None] | None:
    n = r.length()
    if n == 0:
        return None
    return [r.object(("java.lang.String", True), may_be_null=True) for _ in range(n - 1)]


def _instant(r: KryoRecord, _: str) -> Instant:
    seconds, nanos = r.positive(long=True), r.positive()
    try:
        return Instant(seconds, nanos)
    except ValueError as e:
        raise KryoCorrupt(f"Kryo Instant: {e}") from None


def _read_local_date(r: KryoRecord) -> tuple[int, int, int]:
    return r.positive(), r.byte(), r.byte()


def _read_local_time(r: KryoRecord) -> tuple[int, int, int, int]:
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


def _local(build: Callable[[KryoRecord], Any], what: str) -> Callable[[KryoRecord, str], Any]:
    def decode(r: KryoRecord, _: str) -> Any:
        try:
            return build(r)
        except ValueError as e:
            raise KryoCorrupt(f"Kryo {what}: {e}") from None

    return decode


def _duration(r: KryoRecord, _: str) -> KryoDuration:
    seconds = r.fixed("q")
    return KryoDuration(int(seconds), r.positive())


READERS: dict[str, Callable[[KryoRecord, str], Any]] = {
    "int": _int, "java.lang.Integer": _int, "long": _long, "java.lang.Long": _long,
    "java.lang.String": _string, "float": _float, "java.lang.Float": _float, "double": _double,
    "java.lang.Double": _double, "boolean": _boolean, "java.lang.Boolean": _boolean, "byte": _byte,
    "java.lang.Byte": _byte, "char": _char, "java.lang.Character": _char, "short": _short, "java.lang.Short": _short,
    "java.math.BigInteger": _big_integer, "java.math.BigDecimal": _big_decimal, "java.util.Date": _date,
    "java.sql.Date": _sql_date, "java.sql.Timestamp": _timestamp, "java.util.UUID": _uuid,
    "java.util.Currency": read_text, "java.util.Arrays$ArrayList": _arrays_as_list,
    "java.util.Collections$EmptyList": _empty_list, "java.util.Collections$EmptySet": _empty_list,
    "java.util.Collections$EmptyMap": _empty_map, "java.util.Collections$SingletonList": _singleton,
    "java.util.Collections$SingletonSet": _singleton, "java.util.Collections$SingletonMap": _singleton_map,
    "[I": _array_of(_int), "[J": _array_of(_long), "[B": _byte_array, "[D": _array_of(_double),
    "[F": _array_of(_float), "[S": _array_of(_short), "[C": _array_of(_char), "[Z": _array_of(_boolean),
    "[Ljava.lang.String;": _string_array,
    **{name: _collection for name in COLLECTIONS},
    **{name: _map for name in MAPS},
}
#: Kryo 5's additional defaults (TimeSerializers, LocaleSerializer, CharsetSerializer); in Kryo 2.24 these classes
#: fall to FieldSerializer (java.time) or Chill's Java serialization (Locale), which stay opaque.
READERS_5: dict[str, Callable[[KryoRecord, str], Any]] = {
    "java.time.Instant": _instant,
    "java.time.LocalDate": _local(lambda r: LocalDate(*_read_local_date(r)), "LocalDate"),
    "java.time.LocalTime": _local(lambda r: LocalTime(*_read_local_time(r)), "LocalTime"),
    "java.time.LocalDateTime": _local(lambda r: LocalDateTime(*_read_local_date(r), *_read_local_time(r)),
                                      "LocalDateTime"),
    "java.time.Duration": _duration, "java.util.Locale": _locale,
}
