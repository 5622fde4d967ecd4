"""The ``SimpleTypeSerializerSnapshot`` family: primitives and their boxed forms, String, the ``*Value`` types,
primitive arrays, String[], dates and times, BigInteger/BigDecimal, Void and NullValue.

Snapshot payload: empty at version 3; version 2 (pre-1.7 style) carried ``UTF serializerClassName``, kept verbatim.
Python values: Long/Int/Short/Byte → int; Float/Double → float; Boolean → bool; Char → 1-char str; String → str;
byte[] → bytes; char[] → str; other arrays → list; BigInteger → int; BigDecimal → Decimal (exact, any precision);
dates and times → the exact models of :mod:`flinkstate.serializers.times` (Date, SqlDate, SqlTime, SqlTimestamp,
Instant, LocalDate, LocalTime, LocalDateTime: nanoseconds and Java's full year range kept; encoders also accept
Python datetime/date/time and convert them exactly); Java null sentinels → None.
Float/Double NaN is written as Java's canonical NaN (``floatToIntBits``/``doubleToLongBits``, which Flink uses).
"""

from __future__ import annotations

import datetime as dt
import math
import struct
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from flinkstate.binary import (
    F32,
    F64,
    I8,
    I16,
    I32,
    I64,
    INT_MIN,
    LONG_MIN,
    U16,
    Reader,
    Writer,
    decode_sv,
    decode_sv_body,
    encode_leb128,
    encode_sv,
    java_bool_hash,
    java_combine_hashes,
    java_double_hash,
    java_float_hash,
    java_int_hash,
    java_long_hash,
    java_string_hash,
    leb128_tail,
    to_int32,
)
from flinkstate.format_errors import SavepointFormatError
from flinkstate.serializers import times
from flinkstate.serializers.base import VARIABLE_LENGTH, Decoder, Encoder, TypeSerializerSnapshot
from flinkstate.serializers.registry import register

BASE = "org.apache.flink.api.common.typeutils.base."
ARRAY = BASE + "array."


@dataclass(frozen=True)
class SimpleType:
    """Codec and description of one simple serializer."""

    type_name: str
    length: int
    decode: Decoder
    encode: Encoder
    hash_code: Callable[[Any], int] | None = None


# -- fixed-width numbers ---------------------------------------------------------------------------------------------


def struct_codec(st: struct.Struct) -> tuple[Decoder, Encoder]:
    """The codec of a fixed-width big-endian number (Java's DataOutput, and Flink's Avro encoder too)."""
    unpack, pack, size = st.unpack_from, st.pack, st.size

    def decode(buf: bytes, off: int) -> tuple[Any, int]:
        return unpack(buf, off)[0], off + size

    if st.format[-1] in "fd":
        # Java writes floatToIntBits/doubleToLongBits: every NaN as the canonical one (Python keeps a NaN's sign).
        canonical_nan = pack(math.nan)

        def encode_float(value: Any, out: bytearray) -> None:
            out += pack(value) if value == value else canonical_nan

        return decode, encode_float

    def encode(value: Any, out: bytearray) -> None:
        out += pack(value)

    return decode, encode


def _decode_bool(buf: bytes, off: int) -> tuple[bool, int]:
    return buf[off] != 0, off + 1


def _encode_bool(value: bool, out: bytearray) -> None:
    out.append(1 if value else 0)


def _decode_char(buf: bytes, off: int) -> tuple[str, int]:
    return chr(U16.unpack_from(buf, off)[0]), off + 2


def _encode_char(value: str, out: bytearray) -> None:
    out += U16.pack(ord(value))


def _encode_string(value: str | None, out: bytearray) -> None:
    out += encode_sv(value)


def _decode_string_value(buf: bytes, off: int) -> tuple[str, int]:
    # StringValue.write: LEB128 length (no +1, never null) then the units, i.e. StringSerializer's form of len+1.
    b = buf[off]
    n, off = (b, off + 1) if b < 0x80 else leb128_tail(buf, off + 1, b & 0x7F)
    return decode_sv_body(buf, off, n)


def _encode_string_value(value: str, out: bytearray) -> None:
    encoded = encode_sv(value)
    n, start = _leb128_value(encoded)
    out += encode_leb128(n - 1) + encoded[start:]


def _leb128_value(data: bytes) -> tuple[int, int]:
    b = data[0]
    return (b, 1) if b < 0x80 else leb128_tail(data, 1, b & 0x7F)


def _decode_nothing(buf: bytes, off: int) -> tuple[None, int]:
    return None, off


def _encode_nothing(value: Any, out: bytearray) -> None:
    pass


def _decode_void(buf: bytes, off: int) -> tuple[None, int]:
    return None, off + 1  # VoidSerializer writes one 0 byte


def _encode_void(value: Any, out: bytearray) -> None:
    out.append(0)


# -- big numbers -----------------------------------------------------------------------------------------------------

# BigIntSerializer writes the codes 1, 2, 3 for the BigInteger.ZERO/ONE/TEN *instances* (reference equality), the
# general form (i32 len+4, two's complement bytes) for every other instance, equal values included. The instances are
# what Java nearly always has (BigInteger.valueOf, arithmetic results, BigDecimal.unscaledValue() of a small decimal),
# so 0, 1 and 10 are written as the codes; a 0, 1 or 10 read in the general form is decoded as a
# NonCanonicalBigInteger (an int) or NonCanonicalBigDecimal (a Decimal) whose encoding keeps that form, so that
# re-encoding writes back the very bytes that were read.
_BIGINT_SHORTCUTS = {1: 0, 2: 1, 3: 10}
_BIGINT_CODES = {0: I32.pack(1), 1: I32.pack(2), 10: I32.pack(3)}


class NonCanonicalBigInteger(int):
    """0, 1 or 10 stored in BigIntSerializer's general form (not as the shortcut code)."""


class NonCanonicalBigDecimal(Decimal):
    """A BigDecimal whose unscaled value 0, 1 or 10 was stored in the general form."""


def decode_big_integer(buf: bytes, off: int) -> tuple[int | None, int]:
    code = I32.unpack_from(buf, off)[0]
    off += 4
    if code == 0:
        return None, off
    if code in _BIGINT_SHORTCUTS:
        return _BIGINT_SHORTCUTS[code], off
    if code < 4:
        raise SavepointFormatError(f"BigInteger length code {code} is negative", offset=off - 4)
    n = code - 4
    if off + n > len(buf):
        raise SavepointFormatError(f"BigInteger of {n} bytes runs past the end of the record", offset=off - 4)
    value = int.from_bytes(buf[off:off + n], "big", signed=True)
    return (NonCanonicalBigInteger(value) if value in _BIGINT_CODES else value), off + n


def encode_big_integer(value: int | None, out: bytearray) -> None:
    if value is None:
        out += I32.pack(0)
        return
    if value in _BIGINT_CODES and type(value) is not NonCanonicalBigInteger:
        out += _BIGINT_CODES[value]
        return
    # BigInteger.toByteArray: the minimal two's complement, at least one byte.
    raw = value.to_bytes((value if value >= 0 else ~value).bit_length() // 8 + 1, "big", signed=True)
    out += I32.pack(len(raw) + 4) + raw


def _decode_big_decimal(buf: bytes, off: int) -> tuple[Decimal | None, int]:
    unscaled, off = decode_big_integer(buf, off)
    if unscaled is None:
        return None, off
    scale = I32.unpack_from(buf, off)[0]
    # Built from the digits: Decimal arithmetic (scaleb) would round to the context's 28 digits.
    # (Decimal(int) and int(Decimal) are exact and, unlike str(), know no 4300-digit limit.)
    cls = NonCanonicalBigDecimal if type(unscaled) is NonCanonicalBigInteger else Decimal
    sign, digits, _ = Decimal(unscaled).as_tuple()
    return cls((sign, digits, -scale)), off + 4


def _encode_big_decimal(value: Decimal | None, out: bytearray) -> None:
    if value is None:
        encode_big_integer(None, out)
        return
    sign, digits, exponent = value.as_tuple()
    if not isinstance(exponent, int):
        raise ValueError(f"BigDecimal has no {value}")
    unscaled = int(Decimal((sign, digits, 0)))
    if type(value) is NonCanonicalBigDecimal:
        unscaled = NonCanonicalBigInteger(unscaled)
    encode_big_integer(unscaled, out)
    out += I32.pack(-exponent)


# -- dates and times -------------------------------------------------------------------------------------------------
# Exact models (times.py): nanoseconds and Java's whole year range survive decoding, so re-encoding writes the very
# bytes Flink wrote. Encoders also take Python datetime/date/time values (converted exactly, or refused).

_I64_I32 = struct.Struct(">qi")
_LOCAL_DATE = struct.Struct(">ibb")
_LOCAL_TIME = struct.Struct(">bbbi")
_LOCAL_DATE_TIME = struct.Struct(">ibbbbbi")
_NANOS = 1_000_000_000
_LOCAL_DATE_NULL = I32.pack(INT_MIN) + I16.pack(-(1 << 15))
_LOCAL_TIME_NULL = I8.pack(-128) + I16.pack(-(1 << 15)) + I32.pack(INT_MIN)


def _bad(what: str, off: int) -> SavepointFormatError:
    return SavepointFormatError(what, offset=off)


def _coerce(value: Any, model: type, from_python: Callable[[Any], Any], python_type: type | tuple[type, ...]) -> Any:
    """A model value from ``value``: the model itself, or a Python date/time converted exactly."""
    if isinstance(value, model):
        return value
    if isinstance(value, python_type):
        return from_python(value)
    raise TypeError(f"expected a {model.__name__}, got {type(value).__name__}")


def _epoch_millis_codec(model: type[times.EpochMillis]) -> tuple[Decoder, Encoder]:
    """java.util.Date, java.sql.Date, java.sql.Time: ``i64 getTime()``, Long.MIN_VALUE for null."""
    make = times.unchecked_epoch_millis[model]
    unpack, pack = I64.unpack_from, I64.pack
    null = pack(LONG_MIN)

    def decode(buf: bytes, off: int) -> tuple[Any, int]:
        millis = unpack(buf, off)[0]
        return (None if millis == LONG_MIN else make(millis)), off + 8

    def encode(value: Any, out: bytearray) -> None:
        if value is None:
            out += null
        elif isinstance(value, times.EpochMillis):  # the three share the stored form
            out += pack(value.millis)
        else:
            out += pack(_coerce(value, model, model.from_datetime, dt.datetime).millis)

    return decode, encode


def _decode_sql_timestamp(buf: bytes, off: int) -> tuple[times.SqlTimestamp | None, int]:
    millis, nanos = _I64_I32.unpack_from(buf, off)
    if millis == LONG_MIN:  # null: the nanos int is a 0 placeholder
        return None, off + 12
    if not 0 <= nanos < _NANOS:
        raise _bad(f"java.sql.Timestamp nanos {nanos} outside 0..999999999", off + 8)
    # new Timestamp(millis).setNanos(nanos): the whole seconds come from millis, the fraction from nanos (Flink
    # writes getTime(), which already agrees with nanos; this is what Java reads from any bytes).
    return _make_sql_timestamp(millis - millis % 1000 + nanos // 1_000_000, nanos), off + 12


def _encode_sql_timestamp(value: times.SqlTimestamp | None, out: bytearray) -> None:
    if value is None:
        out += _SQL_TIMESTAMP_NULL
        return
    if type(value) is not times.SqlTimestamp:
        value = _coerce(value, times.SqlTimestamp, times.SqlTimestamp.from_datetime, dt.datetime)
    out += _I64_I32.pack(value.millis, value.nanos)


def _decode_instant(buf: bytes, off: int) -> tuple[times.Instant | None, int]:
    seconds, nanos = _I64_I32.unpack_from(buf, off)
    if 0 <= nanos < _NANOS and _INSTANT_MIN <= seconds <= _INSTANT_MAX:
        return _make_instant(seconds, nanos), off + 12
    if seconds == LONG_MIN and nanos == INT_MIN:
        return None, off + 12
    try:  # Instant.ofEpochSecond(seconds, nanoAdjustment) normalises the nanos, then checks the range
        return times.Instant.of_epoch_nanos(seconds * _NANOS + nanos), off + 12
    except ValueError as e:
        raise _bad(f"Instant ({seconds} s, {nanos} ns): {e}", off) from None


def _encode_instant(value: times.Instant | None, out: bytearray) -> None:
    if value is None:
        out += _INSTANT_NULL
        return
    if type(value) is not times.Instant:
        value = _coerce(value, times.Instant, times.Instant.from_datetime, dt.datetime)
    out += _I64_I32.pack(value.seconds, value.nanos)


def _decode_local_date(buf: bytes, off: int) -> tuple[times.LocalDate | None, int]:
    year, month, day = _LOCAL_DATE.unpack_from(buf, off)
    if 1 <= month <= 12 and 1 <= day <= _MONTH_DAYS[month] and _YEAR_MIN <= year <= _YEAR_MAX:
        return _make_local_date(year, month, day), off + 6
    if year == INT_MIN:
        return None, off + 6
    try:  # February 29 and invalid values: the full check
        return times.LocalDate(year, month, day), off + 6
    except ValueError as e:
        raise _bad(f"LocalDate: {e}", off) from None


def _encode_local_date(value: times.LocalDate | None, out: bytearray) -> None:
    if value is None:
        out += _LOCAL_DATE_NULL
        return
    if type(value) is not times.LocalDate:
        value = _coerce(value, times.LocalDate, times.LocalDate.from_date, dt.date)
    out += _LOCAL_DATE.pack(value.year, value.month, value.day)


def _decode_local_time(buf: bytes, off: int) -> tuple[times.LocalTime | None, int]:
    hour, minute, second, nano = _LOCAL_TIME.unpack_from(buf, off)
    if 0 <= hour < 24 and 0 <= minute < 60 and 0 <= second < 60 and 0 <= nano < _NANOS:
        return _make_local_time(hour, minute, second, nano), off + 7
    if hour == -128:
        return None, off + 7
    raise _bad(f"LocalTime: invalid time {hour}:{minute}:{second}.{nano}", off)


def _encode_local_time(value: times.LocalTime | None, out: bytearray) -> None:
    if value is None:
        out += _LOCAL_TIME_NULL
        return
    if type(value) is not times.LocalTime:
        value = _coerce(value, times.LocalTime, times.LocalTime.from_time, dt.time)
    out += _LOCAL_TIME.pack(value.hour, value.minute, value.second, value.nano)


def _decode_local_date_time(buf: bytes, off: int) -> tuple[times.LocalDateTime | None, int]:
    year, month, day, hour, minute, second, nano = _LOCAL_DATE_TIME.unpack_from(buf, off)
    if 1 <= month <= 12 and 1 <= day <= _MONTH_DAYS[month] and _YEAR_MIN <= year <= _YEAR_MAX and 0 <= hour < 24 \
            and 0 <= minute < 60 and 0 <= second < 60 and 0 <= nano < _NANOS:
        return _make_local_date_time(year, month, day, hour, minute, second, nano), off + 13
    if year == INT_MIN and hour == -128:
        return None, off + 13
    if year == INT_MIN or hour == -128:
        raise _bad("LocalDateTime: exactly one of LocalDate and LocalTime is null", off)
    try:  # February 29 and invalid values: the full check
        return times.LocalDateTime(year, month, day, hour, minute, second, nano), off + 13
    except ValueError as e:
        raise _bad(f"LocalDateTime: {e}", off) from None


def _encode_local_date_time(value: times.LocalDateTime | None, out: bytearray) -> None:
    if value is None:
        out += _LOCAL_DATE_TIME_NULL
        return
    if type(value) is not times.LocalDateTime:
        value = _coerce(value, times.LocalDateTime, times.LocalDateTime.from_datetime, dt.datetime)
    out += _LOCAL_DATE_TIME.pack(value.year, value.month, value.day, value.hour, value.minute, value.second,
                                 value.nano)


_make_instant = times.unchecked_instant
_make_sql_timestamp = times.unchecked_sql_timestamp
_make_local_time = times.unchecked_local_time
_make_local_date = times.unchecked_local_date
_make_local_date_time = times.unchecked_local_date_time
_INSTANT_MIN, _INSTANT_MAX = times.INSTANT_MIN_SECONDS, times.INSTANT_MAX_SECONDS
_YEAR_MIN, _YEAR_MAX = times.YEAR_MIN, times.YEAR_MAX
_INSTANT_NULL = _I64_I32.pack(LONG_MIN, INT_MIN)
_SQL_TIMESTAMP_NULL = _I64_I32.pack(LONG_MIN, 0)
_LOCAL_DATE_TIME_NULL = _LOCAL_DATE_NULL + _LOCAL_TIME_NULL
#: Days per month (index 1..12) valid in every year; February 29 takes the full (leap year) check.
_MONTH_DAYS = (0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def _instant_hash(value: times.Instant) -> int:
    # Instant.hashCode: ((int) (seconds ^ (seconds >>> 32))) + 51 * nanos
    return to_int32(java_long_hash(value.seconds) + 51 * value.nanos)


def _local_date_hash(value: times.LocalDate) -> int:
    # LocalDate.hashCode: (year & 0xFFFFF800) ^ ((year << 11) + (month << 6) + day)
    year = value.year
    return to_int32((year & 0xFFFFF800) ^ ((year << 11) + (value.month << 6) + value.day))


def _local_time_hash(value: times.LocalTime) -> int:
    # LocalTime.hashCode: Long.hashCode(toNanoOfDay())
    return java_long_hash(((value.hour * 60 + value.minute) * 60 + value.second) * _NANOS + value.nano)


def _local_date_time_hash(value: times.LocalDateTime) -> int:
    return to_int32(_local_date_hash(value.date) ^ _local_time_hash(value.time))


def _millis_hash(value: Any) -> int:
    # Date.hashCode (and Timestamp's, inherited): Long.hashCode(getTime())
    return java_long_hash(value.millis)


# -- arrays ----------------------------------------------------------------------------------------------------------


def _array_codec(element: struct.Struct | None, elem_decode: Decoder | None = None,
                 elem_encode: Encoder | None = None) -> tuple[Decoder, Encoder]:
    """``i32 n`` then n elements; fixed-width elements are unpacked in one call."""
    if element is not None:
        code = element.format[1:]

        def decode(buf: bytes, off: int) -> tuple[list[Any], int]:
            n = I32.unpack_from(buf, off)[0]
            off += 4
            return list(struct.unpack_from(f">{n}{code}", buf, off)), off + n * element.size

        def encode(value: list[Any], out: bytearray) -> None:
            out += I32.pack(len(value)) + struct.pack(f">{len(value)}{code}", *value)

        return decode, encode
    assert elem_decode is not None and elem_encode is not None

    def decode_each(buf: bytes, off: int) -> tuple[list[Any], int]:
        n = I32.unpack_from(buf, off)[0]
        off += 4
        items = []
        for _ in range(n):
            item, off = elem_decode(buf, off)
            items.append(item)
        return items, off

    def encode_each(value: list[Any], out: bytearray) -> None:
        out += I32.pack(len(value))
        for item in value:
            elem_encode(item, out)

    return decode_each, encode_each


def _decode_bytes(buf: bytes, off: int) -> tuple[bytes, int]:
    n = I32.unpack_from(buf, off)[0]
    off += 4
    return bytes(buf[off:off + n]), off + n


def _encode_bytes(value: bytes, out: bytearray) -> None:
    out += I32.pack(len(value)) + value


def _bool_array() -> tuple[Decoder, Encoder]:
    def decode(buf: bytes, off: int) -> tuple[list[bool], int]:
        n = I32.unpack_from(buf, off)[0]
        return [b != 0 for b in buf[off + 4:off + 4 + n]], off + 4 + n

    def encode(value: list[bool], out: bytearray) -> None:
        out += I32.pack(len(value)) + bytes(1 if v else 0 for v in value)

    return decode, encode


def _char_array() -> tuple[Decoder, Encoder]:
    def decode(buf: bytes, off: int) -> tuple[str, int]:
        n = I32.unpack_from(buf, off)[0]
        units = struct.unpack_from(f">{n}H", buf, off + 4)
        return "".join(map(chr, units)), off + 4 + 2 * n

    def encode(value: str, out: bytearray) -> None:
        raw = value.encode("utf-16-be", "surrogatepass")
        out += I32.pack(len(raw) // 2) + raw

    return decode, encode


# -- the table -------------------------------------------------------------------------------------------------------


def _table() -> dict[str, SimpleType]:
    long_c, int_c, short_c, byte_c = (struct_codec(s) for s in (I64, I32, I16, I8))
    float_c, double_c = struct_codec(F32), struct_codec(F64)
    numbers: dict[str, tuple[str, int, tuple[Decoder, Encoder], Callable[[Any], int]]] = {
        "Long": ("Long", 8, long_c, java_long_hash), "Int": ("Integer", 4, int_c, java_int_hash),
        "Short": ("Short", 2, short_c, java_int_hash), "Byte": ("Byte", 1, byte_c, java_int_hash),
        "Float": ("Float", 4, float_c, java_float_hash), "Double": ("Double", 8, double_c, java_double_hash),
        "Boolean": ("Boolean", 1, (_decode_bool, _encode_bool), java_bool_hash),
        "Char": ("Character", 2, (_decode_char, _encode_char), lambda c: ord(c)),
    }
    table: dict[str, SimpleType] = {}
    for stem, (name, length, (dec, enc), hasher) in numbers.items():
        table[f"{BASE}{stem}Serializer${stem}SerializerSnapshot"] = SimpleType(name, length, dec, enc, hasher)
        table[f"{BASE}{stem}ValueSerializer${stem}ValueSerializerSnapshot"] = SimpleType(
            f"{stem}Value", length, dec, enc, hasher)
    table[f"{BASE}StringSerializer$StringSerializerSnapshot"] = SimpleType(
        "String", VARIABLE_LENGTH, decode_sv, _encode_string, java_string_hash)
    table[f"{BASE}StringValueSerializer$StringValueSerializerSnapshot"] = SimpleType(
        "StringValue", VARIABLE_LENGTH, _decode_string_value, _encode_string_value, java_string_hash)
    table[f"{BASE}VoidSerializer$VoidSerializerSnapshot"] = SimpleType("Void", 1, _decode_void, _encode_void)
    table[f"{BASE}NullValueSerializer$NullValueSerializerSnapshot"] = SimpleType(
        "NullValue", 0, _decode_nothing, _encode_nothing)
    table[f"{BASE}BigIntSerializer$BigIntSerializerSnapshot"] = SimpleType(
        "BigInteger", VARIABLE_LENGTH, decode_big_integer, encode_big_integer)
    table[f"{BASE}BigDecSerializer$BigDecSerializerSnapshot"] = SimpleType(
        "BigDecimal", VARIABLE_LENGTH, _decode_big_decimal, _encode_big_decimal)
    epoch_millis: tuple[tuple[str, str, type[times.EpochMillis]], ...] = (
        ("Date", "Date", times.Date), ("SqlDate", "java.sql.Date", times.SqlDate),
        ("SqlTime", "java.sql.Time", times.SqlTime))
    for stem, name, model in epoch_millis:
        table[f"{BASE}{stem}Serializer${stem}SerializerSnapshot"] = SimpleType(
            name, 8, *_epoch_millis_codec(model), _millis_hash)
    table[f"{BASE}SqlTimestampSerializer$SqlTimestampSerializerSnapshot"] = SimpleType(
        "java.sql.Timestamp", 12, _decode_sql_timestamp, _encode_sql_timestamp, _millis_hash)
    table[f"{BASE}InstantSerializer$InstantSerializerSnapshot"] = SimpleType(
        "Instant", 12, _decode_instant, _encode_instant, _instant_hash)
    table[f"{BASE}LocalDateSerializer$LocalDateSerializerSnapshot"] = SimpleType(
        "LocalDate", 6, _decode_local_date, _encode_local_date, _local_date_hash)
    table[f"{BASE}LocalTimeSerializer$LocalTimeSerializerSnapshot"] = SimpleType(
        "LocalTime", 7, _decode_local_time, _encode_local_time, _local_time_hash)
    table[f"{BASE}LocalDateTimeSerializer$LocalDateTimeSerializerSnapshot"] = SimpleType(
        "LocalDateTime", 13, _decode_local_date_time, _encode_local_date_time, _local_date_time_hash)
    arrays = {"Long": (I64, "long[]"), "Int": (I32, "int[]"), "Short": (I16, "short[]"),
              "Float": (F32, "float[]"), "Double": (F64, "double[]")}
    for stem, (st, name) in arrays.items():
        dec, enc = _array_codec(st)
        table[f"{ARRAY}{stem}PrimitiveArraySerializer${stem}PrimitiveArraySerializerSnapshot"] = SimpleType(
            name, VARIABLE_LENGTH, dec, enc)
    for stem, name, (dec, enc) in (("Byte", "byte[]", (_decode_bytes, _encode_bytes)),
                                   ("Boolean", "boolean[]", _bool_array()), ("Char", "char[]", _char_array())):
        table[f"{ARRAY}{stem}PrimitiveArraySerializer${stem}PrimitiveArraySerializerSnapshot"] = SimpleType(
            name, VARIABLE_LENGTH, dec, enc)
    dec, enc = _array_codec(None, decode_sv, _encode_string)
    table[f"{ARRAY}StringArraySerializer$StringArraySerializerSnapshot"] = SimpleType(
        "String[]", VARIABLE_LENGTH, dec, enc)
    return table


SIMPLE_TYPES = _table()


@register
class SimpleSnapshot(TypeSerializerSnapshot):
    """Any ``SimpleTypeSerializerSnapshot``: the class name alone identifies the serializer."""

    CLASS_NAMES = tuple(SIMPLE_TYPES)

    def __init__(self, class_name: str, version: int = 3, legacy_serializer_class: str | None = None) -> None:
        super().__init__(class_name, version)
        self.spec = SIMPLE_TYPES[class_name]
        self.legacy_serializer_class = legacy_serializer_class

    @classmethod
    def read_payload(cls, class_name: str, version: int, reader: Reader) -> SimpleSnapshot:
        # Version 2 wrote the serializer class name; version 3 writes nothing.
        legacy = reader.utf() if version < 3 else None
        return cls(class_name, version, legacy)

    def write_payload(self, writer: Writer) -> None:
        if self.version < 3:
            writer.utf(self.legacy_serializer_class or "")

    @property
    def fixed_length(self) -> int:
        return self.spec.length

    def make_decoder(self) -> Decoder:
        return self.spec.decode

    def make_encoder(self) -> Encoder:
        return self.spec.encode

    def type_name(self) -> str:
        return self.spec.type_name

    def hash_code(self, value: Any) -> int:
        if self.spec.hash_code is None or value is None:
            return super().hash_code(value)
        return self.spec.hash_code(value)


def simple(stem: str) -> SimpleSnapshot:
    """The snapshot of a ``base`` serializer by its stem, e.g. ``simple("Long")``, ``simple("String")``."""
    return SimpleSnapshot(f"{BASE}{stem}Serializer${stem}SerializerSnapshot")


__all__ = ["SIMPLE_TYPES", "SimpleSnapshot", "SimpleType", "decode_big_integer", "encode_big_integer",
           "java_combine_hashes", "simple"]
