"""The primitive arrays (``long[]``, ``int[]``, ``short[]``, ``float[]``, ``double[]``, ``byte[]``, ``boolean[]``,
``char[]``) and ``String[]`` as the serializers of ``org.apache.flink.api.common.typeutils.base.array`` write them:
``i32 n`` then the elements (members of the ``SimpleTypeSerializerSnapshot`` family, whose table is
:mod:`flinkstate.serializers.primitives`). Python values: ``byte[]`` -> bytes, ``char[]`` -> str, others -> list."""

from __future__ import annotations

import struct
from typing import Any

from flinkstate.binary import F32, F64, I16, I32, I64, decode_sv, encode_sv
from flinkstate.serializers.base import Decoder, Encoder


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


def _encode_string(value: str | None, out: bytearray) -> None:
    out += encode_sv(value)


def _array_serializers() -> tuple[tuple[str, str, Decoder, Encoder], ...]:
    fixed = (("LongPrimitiveArray", "long[]", I64), ("IntPrimitiveArray", "int[]", I32),
             ("ShortPrimitiveArray", "short[]", I16), ("FloatPrimitiveArray", "float[]", F32),
             ("DoublePrimitiveArray", "double[]", F64))
    return (*((stem, name, *_array_codec(st)) for stem, name, st in fixed),
            ("BytePrimitiveArray", "byte[]", _decode_bytes, _encode_bytes),
            ("BooleanPrimitiveArray", "boolean[]", *_bool_array()),
            ("CharPrimitiveArray", "char[]", *_char_array()),
            ("StringArray", "String[]", *_array_codec(None, decode_sv, _encode_string)))


#: (serializer stem, type name, decoder, encoder) of each array serializer (all variable-length):
#: ``<stem>Serializer$<stem>SerializerSnapshot`` in ``org.apache.flink.api.common.typeutils.base.array``.
ARRAY_SERIALIZERS = _array_serializers()

__all__ = ["ARRAY_SERIALIZERS"]
