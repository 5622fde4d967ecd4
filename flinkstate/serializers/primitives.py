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

import math
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from flinkstate.binary import (
    F32,
    F64,
    I8,
    I16,
    I32,
    I64,
    U16,
    Reader,
    Writer,
    decode_sv,
    decode_sv_body,
    encode_leb128,
    encode_sv,
    java_bool_hash,
    java_double_hash,
    java_float_hash,
    java_int_hash,
    java_long_hash,
    java_string_hash,
    leb128_tail,
)
from flinkstate.serializers.base import VARIABLE_LENGTH, Decoder, Encoder, TypeSerializerSnapshot
from flinkstate.serializers.bignumbers import (
    decode_big_decimal,
    decode_big_integer,
    encode_big_decimal,
    encode_big_integer,
)
from flinkstate.serializers.primitivearrays import ARRAY_SERIALIZERS
from flinkstate.serializers.registry import register
from flinkstate.serializers.timecodecs import TIME_SERIALIZERS

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
        "BigDecimal", VARIABLE_LENGTH, decode_big_decimal, encode_big_decimal)
    for stem, name, length, dec, enc, hasher in TIME_SERIALIZERS:
        table[f"{BASE}{stem}Serializer${stem}SerializerSnapshot"] = SimpleType(name, length, dec, enc, hasher)
    for stem, name, dec, enc in ARRAY_SERIALIZERS:
        table[f"{ARRAY}{stem}Serializer${stem}SerializerSnapshot"] = SimpleType(name, VARIABLE_LENGTH, dec, enc)
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


__all__ = ["ARRAY", "BASE", "SIMPLE_TYPES", "SimpleSnapshot", "SimpleType", "simple", "struct_codec"]
