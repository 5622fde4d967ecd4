"""The ``SimpleTypeSerializerSnapshot`` family: primitives and their boxed forms, String, the ``*Value`` types,
primitive arrays, String[], dates and times, BigInteger/BigDecimal, Void and NullValue.

Snapshot payload: empty at version 3; version 2 (pre-1.7 style) carried ``UTF serializerClassName``, kept verbatim.
Python values: Long/Int/Short/Byte → int; Float/Double → float; Boolean → bool; Char → 1-char str; String → str;
byte[] → bytes; other arrays → list; BigInteger → int; BigDecimal → Decimal; Date/SqlDate/SqlTime/SqlTimestamp/
Instant → aware UTC datetime (nanoseconds beyond microseconds are truncated); LocalDate/LocalTime/LocalDateTime →
date/time/naive datetime; Java null sentinels → None.
"""

from __future__ import annotations

import datetime as dt
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
    _leb128_tail,
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
)
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
    n, off = (b, off + 1) if b < 0x80 else _leb128_tail(buf, off + 1, b & 0x7F)
    return decode_sv_body(buf, off, n)


def _encode_string_value(value: str, out: bytearray) -> None:
    encoded = encode_sv(value)
    n, start = _leb128_value(encoded)
    out += encode_leb128(n - 1) + encoded[start:]


def _leb128_value(data: bytes) -> tuple[int, int]:
    b = data[0]
    return (b, 1) if b < 0x80 else _leb128_tail(data, 1, b & 0x7F)


def _decode_nothing(buf: bytes, off: int) -> tuple[None, int]:
    return None, off


def _encode_nothing(value: Any, out: bytearray) -> None:
    pass


def _decode_void(buf: bytes, off: int) -> tuple[None, int]:
    return None, off + 1  # VoidSerializer writes one 0 byte


def _encode_void(value: Any, out: bytearray) -> None:
    out.append(0)


# -- big numbers -----------------------------------------------------------------------------------------------------

_BIGINT_SHORTCUTS = {1: 0, 2: 1, 3: 10}


def decode_big_integer(buf: bytes, off: int) -> tuple[int | None, int]:
    code = I32.unpack_from(buf, off)[0]
    off += 4
    if code == 0:
        return None, off
    if code in _BIGINT_SHORTCUTS:
        return _BIGINT_SHORTCUTS[code], off
    n = code - 4
    return int.from_bytes(buf[off:off + n], "big", signed=True), off + n


def encode_big_integer(value: int | None, out: bytearray) -> None:
    # Flink writes the shortcut codes only for the BigInteger.ZERO/ONE/TEN *instances*; equal values written through
    # the general form read back identically, so the general form is always correct.
    if value is None:
        out += I32.pack(0)
        return
    raw = value.to_bytes(max(1, (value + (value < 0)).bit_length() // 8 + 1), "big", signed=True)
    out += I32.pack(len(raw) + 4) + raw


def _decode_big_decimal(buf: bytes, off: int) -> tuple[Decimal | None, int]:
    unscaled, off = decode_big_integer(buf, off)
    if unscaled is None:
        return None, off
    scale = I32.unpack_from(buf, off)[0]
    return Decimal(unscaled).scaleb(-scale), off + 4


def _encode_big_decimal(value: Decimal | None, out: bytearray) -> None:
    if value is None:
        encode_big_integer(None, out)
        return
    sign, digits, exponent = value.as_tuple()
    unscaled = int("".join(map(str, digits)) or "0") * (-1 if sign else 1)
    encode_big_integer(unscaled, out)
    out += I32.pack(-int(exponent))


# -- dates and times -------------------------------------------------------------------------------------------------

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def _millis_to_datetime(millis: int) -> dt.datetime:
    return _EPOCH + dt.timedelta(milliseconds=millis)


def _datetime_to_millis(value: dt.datetime) -> int:
    delta = value - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def _decode_date(buf: bytes, off: int) -> tuple[dt.datetime | None, int]:
    millis = I64.unpack_from(buf, off)[0]
    return (None if millis == LONG_MIN else _millis_to_datetime(millis)), off + 8


def _encode_date(value: dt.datetime | None, out: bytearray) -> None:
    out += I64.pack(LONG_MIN if value is None else _datetime_to_millis(value))


_I64_I32 = struct.Struct(">qi")


def _decode_sql_timestamp(buf: bytes, off: int) -> tuple[dt.datetime | None, int]:
    millis, nanos = _I64_I32.unpack_from(buf, off)
    if millis == LONG_MIN:
        return None, off + 12
    # getTime() already holds the whole milliseconds; nanos repeats them plus the sub-millisecond part.
    seconds = millis // 1000
    return _EPOCH + dt.timedelta(seconds=seconds, microseconds=nanos // 1000), off + 12


def _encode_sql_timestamp(value: dt.datetime | None, out: bytearray) -> None:
    if value is None:
        out += _I64_I32.pack(LONG_MIN, 0)
    else:
        out += _I64_I32.pack(_datetime_to_millis(value), value.microsecond * 1000)


def _decode_instant(buf: bytes, off: int) -> tuple[dt.datetime | None, int]:
    seconds, nanos = _I64_I32.unpack_from(buf, off)
    if seconds == LONG_MIN and nanos == INT_MIN:
        return None, off + 12
    return _EPOCH + dt.timedelta(seconds=seconds, microseconds=nanos // 1000), off + 12


def _encode_instant(value: dt.datetime | None, out: bytearray) -> None:
    if value is None:
        out += _I64_I32.pack(LONG_MIN, INT_MIN)
        return
    delta = value - _EPOCH
    out += _I64_I32.pack(delta.days * 86_400 + delta.seconds, delta.microseconds * 1000)


_LOCAL_DATE = struct.Struct(">ibb")
_LOCAL_TIME = struct.Struct(">bbbi")


def _decode_local_date(buf: bytes, off: int) -> tuple[dt.date | None, int]:
    year, month, day = _LOCAL_DATE.unpack_from(buf, off)
    return (None if year == INT_MIN else dt.date(year, month, day)), off + 6


def _encode_local_date(value: dt.date | None, out: bytearray) -> None:
    out += I32.pack(INT_MIN) + I16.pack(-(1 << 15)) if value is None else _LOCAL_DATE.pack(
        value.year, value.month, value.day)


def _decode_local_time(buf: bytes, off: int) -> tuple[dt.time | None, int]:
    hour, minute, second, nano = _LOCAL_TIME.unpack_from(buf, off)
    return (None if hour == -128 else dt.time(hour, minute, second, nano // 1000)), off + 7


def _encode_local_time(value: dt.time | None, out: bytearray) -> None:
    if value is None:
        out += I8.pack(-128) + I16.pack(-(1 << 15)) + I32.pack(INT_MIN)
    else:
        out += _LOCAL_TIME.pack(value.hour, value.minute, value.second, value.microsecond * 1000)


def _decode_local_date_time(buf: bytes, off: int) -> tuple[dt.datetime | None, int]:
    date, off = _decode_local_date(buf, off)
    time, off = _decode_local_time(buf, off)
    return (None if date is None or time is None else dt.datetime.combine(date, time)), off


def _encode_local_date_time(value: dt.datetime | None, out: bytearray) -> None:
    _encode_local_date(None if value is None else value.date(), out)
    _encode_local_time(None if value is None else value.time(), out)


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
    numbers = {
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
    for stem, name in (("Date", "Date"), ("SqlDate", "java.sql.Date"), ("SqlTime", "java.sql.Time")):
        table[f"{BASE}{stem}Serializer${stem}SerializerSnapshot"] = SimpleType(name, 8, _decode_date, _encode_date)
    table[f"{BASE}SqlTimestampSerializer$SqlTimestampSerializerSnapshot"] = SimpleType(
        "java.sql.Timestamp", 12, _decode_sql_timestamp, _encode_sql_timestamp)
    table[f"{BASE}InstantSerializer$InstantSerializerSnapshot"] = SimpleType(
        "Instant", 12, _decode_instant, _encode_instant)
    table[f"{BASE}LocalDateSerializer$LocalDateSerializerSnapshot"] = SimpleType(
        "LocalDate", 6, _decode_local_date, _encode_local_date)
    table[f"{BASE}LocalTimeSerializer$LocalTimeSerializerSnapshot"] = SimpleType(
        "LocalTime", 7, _decode_local_time, _encode_local_time)
    table[f"{BASE}LocalDateTimeSerializer$LocalDateTimeSerializerSnapshot"] = SimpleType(
        "LocalDateTime", 13, _decode_local_date_time, _encode_local_date_time)
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
