"""Flink 2.x's ``Bitmap`` and ``Variant`` types (``SimpleTypeSerializerSnapshot``s, empty payload):

* ``BitmapSerializer$BitmapSerializerSnapshot``. Record: ``i32 length`` then a 32-bit RoaringBitmap in the portable
  format (``RoaringBitmapData.toBytes``: run-optimized, then serialized). Python value: :class:`BitmapValue`, the
  members as Java's ``int``s in the bitmap's (unsigned) order. The bitmap is read and written with ``pyroaring``
  (CRoaring, the same format and run optimization); a value read from a savepoint is written back byte for byte.
* ``VariantSerializer$VariantSerializerSnapshot``. Record: ``i32 valueLength; i32 metadataLength``; the value, then
  the metadata bytes of a binary variant (``BinaryVariant``, the semi-structured encoding Spark and Parquet share).
  Python value: :class:`VariantValue`, ``{"variant": view}`` where the view is the variant as JSON-ready data
  (objects in stored field order, arrays, numbers, strings, DECIMAL as Decimal, DATE/TIMESTAMP as the exact time
  models, BINARY as bytes), bounded like Java values; the record's bytes are kept and written back as they were (a
  migration that would change a variant is refused in one line).

Compatibility: same class, compatible as is.
"""

from __future__ import annotations

import struct
from decimal import Decimal
from typing import Any

from pyroaring import BitMap

from flinkstate.binary import I32
from flinkstate.format_errors import SavepointFormatError, UnsupportedFormat
from flinkstate.serializers.base import Decoder, Encoder
from flinkstate.serializers.namespaces import EmptyPayloadSnapshot
from flinkstate.serializers.registry import register
from flinkstate.serializers.times import Instant, LocalDate, LocalDateTime, LocalTime

BASE = "org.apache.flink.api.common.typeutils.base."
_unpack_i32 = I32.unpack_from
MAX_VIEW_DEPTH = 64
TRUNCATED = "<truncated>"


class BitmapValue(list[int]):
    """A decoded ``Bitmap``: its members (Java ints, in unsigned order), and the bytes they were read from."""

    __slots__ = ("data",)

    def __init__(self, members: Any = (), data: bytes | None = None) -> None:
        super().__init__(members)
        self.data = data


@register
class BitmapSnapshot(EmptyPayloadSnapshot):
    CLASS_NAMES = (BASE + "BitmapSerializer$BitmapSerializerSnapshot",)
    NAME = "Bitmap"
    LENGTH = -1

    def make_decoder(self) -> Decoder:
        def decode(buf: bytes, off: int) -> tuple[BitmapValue, int]:
            n = _unpack_i32(buf, off)[0]
            data = bytes(buf[off + 4:off + 4 + n])
            if n < 0 or len(data) != n:
                raise SavepointFormatError(f"bitmap of {n} bytes runs past its record", offset=off)
            return bitmap_from_bytes(data, off), off + 4 + n

        return decode

    def make_encoder(self) -> Encoder:
        def encode(value: Any, out: bytearray) -> None:
            data = bitmap_bytes(value)
            out += I32.pack(len(data)) + data

        return encode


def bitmap_from_bytes(data: bytes, offset: int = 0) -> BitmapValue:
    """A bitmap from ``Bitmap.toBytes`` (the Bitmap serializer's record and a RowData BITMAP field hold the same
    bytes); ``offset`` locates a malformed one."""
    try:
        members = BitMap.deserialize(data)
    except Exception as exc:  # pyroaring raises ValueError (and others) on bad input
        raise SavepointFormatError(f"malformed RoaringBitmap ({exc})", offset=offset) from None
    return BitmapValue(((m ^ 0x80000000) - 0x80000000 for m in members), data)


def bitmap_bytes(value: Any) -> bytes:
    """``Bitmap.toBytes`` of a bitmap's members: the bytes it was read from while its members are unchanged."""
    members = list(value)
    data = getattr(value, "data", None)
    if data is not None and BitmapValue(members) == bitmap_from_bytes(data):
        return bytes(data)
    bitmap = BitMap(m & 0xFFFFFFFF for m in members)
    bitmap.run_optimize()  # what RoaringBitmapData.toBytes does before serializing
    return bytes(bitmap.serialize())


class VariantValue(dict[str, Any]):
    """A decoded ``Variant``: ``{"variant": view}``, with the binary value and metadata it was read from."""

    __slots__ = ("_seen", "metadata", "value")

    def __init__(self, view: Any, value: bytes, metadata: bytes) -> None:
        super().__init__(variant=view)
        self.value, self.metadata = value, metadata
        self._seen = repr(view)

    @property
    def unchanged(self) -> bool:
        return set(self) == {"variant"} and repr(self["variant"]) == self._seen


def _unsigned(data: bytes, pos: int, size: int) -> int:
    if pos < 0 or pos + size > len(data):
        raise ValueError("offset outside the variant")
    return int.from_bytes(data[pos:pos + size], "little")


def _signed(data: bytes, pos: int, size: int) -> int:
    if pos + size > len(data):
        raise ValueError("offset outside the variant")
    return int.from_bytes(data[pos:pos + size], "little", signed=True)


def _key(metadata: bytes, ident: int) -> str:
    """``BinaryVariantUtil.getMetadataKey``: field name ``ident`` of the metadata dictionary."""
    offset_size = ((metadata[0] >> 6) & 0x3) + 1
    size = _unsigned(metadata, 1, offset_size)
    if ident >= size:
        raise ValueError(f"field id {ident} outside the dictionary of {size}")
    start = 1 + (size + 2) * offset_size
    begin = _unsigned(metadata, 1 + (ident + 1) * offset_size, offset_size)
    end = _unsigned(metadata, 1 + (ident + 2) * offset_size, offset_size)
    return metadata[start + begin:start + end].decode("utf-8", "surrogateescape")


def _primitive(value: bytes, pos: int, type_info: int) -> Any:
    if type_info in (0, 1, 2):  # NULL, TRUE, FALSE
        return (None, True, False)[type_info]
    if type_info in (3, 4, 5, 6):  # INT1, INT2, INT4, INT8
        return _signed(value, pos + 1, (1, 2, 4, 8)[type_info - 3])
    if type_info == 7:
        return struct.unpack_from("<d", value, pos + 1)[0]
    if type_info == 14:
        return struct.unpack_from("<f", value, pos + 1)[0]
    if type_info in (8, 9, 10):  # DECIMAL4/8/16: scale byte, then the unscaled value
        unscaled = _signed(value, pos + 2, (4, 8, 16)[type_info - 8])
        return Decimal(unscaled).scaleb(-value[pos + 1])
    if type_info == 11:
        return LocalDate.of_epoch_day(_signed(value, pos + 1, 4))
    if type_info in (12, 13):  # TIMESTAMP_LTZ (an instant), TIMESTAMP (local): microseconds since the epoch
        micros = _signed(value, pos + 1, 8)
        if type_info == 12:
            return Instant.of_epoch_nanos(micros * 1000)
        days, micros_of_day = divmod(micros, 86_400_000_000)
        seconds, micros_left = divmod(micros_of_day, 1_000_000)
        return LocalDateTime.of(LocalDate.of_epoch_day(days), LocalTime(seconds // 3600, seconds // 60 % 60,
                                                                        seconds % 60, micros_left * 1000))
    if type_info in (15, 16):  # BINARY, LONG_STR: u32 length, then the bytes
        size = _unsigned(value, pos + 1, 4)
        data = value[pos + 5:pos + 5 + size]
        return bytes(data) if type_info == 15 else data.decode("utf-8", "surrogateescape")
    raise ValueError(f"unknown primitive type {type_info} in the variant")


def _view(value: bytes, metadata: bytes, pos: int, depth: int = 0) -> Any:
    """The JSON-ready view of the variant value at ``pos`` (``BinaryVariant``'s reading rules)."""
    if depth > MAX_VIEW_DEPTH:
        return TRUNCATED
    header = value[pos]
    basic, type_info = header & 0x3, (header >> 2) & 0x3F
    if basic == 0:
        return _primitive(value, pos, type_info)
    if basic == 1:  # short string: the length is the type info
        return value[pos + 1:pos + 1 + type_info].decode("utf-8", "surrogateescape")
    if basic == 2:  # object: [size] [field ids] [offsets] [values]
        size_bytes = 4 if (type_info >> 4) & 0x1 else 1
        size = _unsigned(value, pos + 1, size_bytes)
        id_size, offset_size = ((type_info >> 2) & 0x3) + 1, (type_info & 0x3) + 1
        ids = pos + 1 + size_bytes
        offsets = ids + size * id_size
        data = offsets + (size + 1) * offset_size
        return {_key(metadata, _unsigned(value, ids + i * id_size, id_size)):
                _view(value, metadata, data + _unsigned(value, offsets + i * offset_size, offset_size), depth + 1)
                for i in range(size)}
    size_bytes = 4 if (type_info >> 2) & 0x1 else 1  # array: [size] [offsets] [values]
    size = _unsigned(value, pos + 1, size_bytes)
    offset_size = (type_info & 0x3) + 1
    offsets = pos + 1 + size_bytes
    data = offsets + (size + 1) * offset_size
    return [_view(value, metadata, data + _unsigned(value, offsets + i * offset_size, offset_size), depth + 1)
            for i in range(size)]


@register
class VariantSnapshot(EmptyPayloadSnapshot):
    CLASS_NAMES = (BASE + "VariantSerializer$VariantSerializerSnapshot",)
    NAME = "Variant"
    LENGTH = -1

    def make_decoder(self) -> Decoder:
        def decode(buf: bytes, off: int) -> tuple[VariantValue, int]:
            value_size, metadata_size = _unpack_i32(buf, off)[0], _unpack_i32(buf, off + 4)[0]
            start = off + 8
            value = bytes(buf[start:start + value_size])
            metadata = bytes(buf[start + value_size:start + value_size + metadata_size])
            if min(value_size, metadata_size) < 1 or len(value) + len(metadata) != value_size + metadata_size:
                raise SavepointFormatError(f"variant of {value_size} + {metadata_size} bytes runs past its record",
                                           offset=off)
            return variant_from_parts(value, metadata, off), start + value_size + metadata_size

        return decode

    def make_encoder(self) -> Encoder:
        def encode(value: Any, out: bytearray) -> None:
            unchanged_variant(value)
            out += I32.pack(len(value.value)) + I32.pack(len(value.metadata)) + value.value + value.metadata

        return encode


def variant_from_parts(value: bytes, metadata: bytes, offset: int = 0) -> VariantValue:
    """A binary variant from its value and metadata bytes (the Variant serializer's record and a RowData VARIANT
    field frame the same two parts differently); ``offset`` locates a malformed one."""
    try:
        view = _view(value, metadata, 0)
    except (ValueError, IndexError, struct.error) as exc:
        raise SavepointFormatError(f"malformed variant ({exc})", offset=offset) from None
    return VariantValue(view, value, metadata)


def unchanged_variant(value: Any) -> VariantValue:
    """``value`` if it is a variant read from a savepoint and not changed since: variants are written back as the
    bytes read (a migration that would change one is refused)."""
    if not isinstance(value, VariantValue) or not value.unchanged:
        what = "a changed value" if isinstance(value, VariantValue) else type(value).__name__
        raise UnsupportedFormat(f"Variant values pass through byte for byte, so a migration cannot change them "
                                f"(got {what})")
    return value


__all__ = ["BitmapSnapshot", "BitmapValue", "VariantSnapshot", "VariantValue", "bitmap_bytes", "bitmap_from_bytes",
           "unchanged_variant", "variant_from_parts"]
