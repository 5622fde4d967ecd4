"""The Table runtime's binary formats (flink-table-common ``data.binary``; written by ``BinaryRowWriter`` /
``BinaryArrayWriter``), decoded to Python values and encoded back to the same bytes. Multi-byte numbers are in the
JVM's native order, little-endian on every platform Flink runs on.

BinaryRowData (``arity`` fields)::

    fixed part:  header (1 byte RowKind, then one null bit per field, LSB first)  padded to ((arity + 71) // 64) * 8
                 one 8-byte slot per field
    var part:    8-byte aligned, zero padded; a slot points at it with (offset << 32) | size (offset from the row)

Slots: BOOLEAN / TINYINT / SMALLINT / INT / DATE / TIME / INTERVAL_YEAR_MONTH / BIGINT / INTERVAL_DAY_TIME / FLOAT /
DOUBLE, DECIMAL(p <= 18) (unscaled long) and TIMESTAMP(p <= 3) / TIMESTAMP_LTZ(p <= 3) (epoch millis) in place;
CHAR / VARCHAR / BINARY / VARBINARY of at most 7 bytes in place (last byte 0x80 | length); longer ones, and ARRAY,
MAP, MULTISET, ROW, STRUCTURED_TYPE, RAW, VARIANT (``i32 metadata length`` big-endian, the metadata, the value:
``BinaryWriter.writeVariant``) and BITMAP (``Bitmap.toBytes``) in the var part; DECIMAL(p > 18) as 16 reserved
bytes holding ``BigInteger.toByteArray()`` (size = byte count); TIMESTAMP(p > 3) as 8 bytes of millis (the slot's
low word holds the nanos of the millisecond).

BinaryArrayData: i32 n, null bits (LSB first) padded to 4 + ((n + 31) // 32) * 4, n elements of the type's size (1, 2,
4 or 8 bytes; 8-byte slots as above) padded to a word, then the var part. BinaryMapData: i32 byte size of the key
array, the key array, the value array. A MULTISET is a map of element -> INT count.

Python values: ROW and STRUCTURED_TYPE -> tuple (a :class:`RowDataValue` when its RowKind is not INSERT or Flink's
code generator reserved var-part space for a null field), CHAR/VARCHAR -> str, BINARY/VARBINARY and RAW -> bytes,
DECIMAL -> Decimal with the type's scale, DATE -> LocalDate, TIME -> LocalTime, TIMESTAMP -> LocalDateTime,
TIMESTAMP_LTZ -> Instant, ARRAY -> list, MAP -> dict, MULTISET -> dict of element -> count, VARIANT and BITMAP -> the
values of the Variant and Bitmap serializers (:mod:`flinkstate.serializers.bitmapvariant`).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from decimal import Decimal
from typing import Any, cast

from flinkstate.format_errors import SavepointFormatError, UnsupportedFormat
from flinkstate.serializers.bitmapvariant import bitmap_bytes, bitmap_from_bytes, unchanged_variant, variant_from_parts
from flinkstate.serializers.logicaltypes import LogicalType
from flinkstate.serializers.row import KindedRow
from flinkstate.serializers.times import Instant, LocalDate, LocalDateTime, LocalTime

# (buffer, base of the row/array, offset of the slot) -> value
SlotReader = Callable[[bytes, int, int], Any]
# (value, the row/array being built, offset of the slot) -> None; var data is appended to the bytearray
SlotWriter = Callable[[Any, bytearray, int], None]

_LE = {1: struct.Struct("<b"), 2: struct.Struct("<h"), 4: struct.Struct("<i"), 8: struct.Struct("<q")}
_Q = _LE[8]
_F32, _F64 = struct.Struct("<f"), struct.Struct("<d")
_I32_BE = struct.Struct(">i")  # the VARIANT field's metadata length: a Java ByteBuffer's order, not the row's
_MARK = 1 << 63
MILLIS_PER_DAY = 86_400_000

#: Roots whose values the codecs know; any other root is refused by name.
SUPPORTED_ROOTS = frozenset((
    "CHAR", "VARCHAR", "BOOLEAN", "BINARY", "VARBINARY", "DECIMAL", "TINYINT", "SMALLINT", "INTEGER", "BIGINT",
    "FLOAT", "DOUBLE", "DATE", "TIME_WITHOUT_TIME_ZONE", "TIMESTAMP_WITHOUT_TIME_ZONE",
    "TIMESTAMP_WITH_LOCAL_TIME_ZONE", "INTERVAL_YEAR_MONTH", "INTERVAL_DAY_TIME", "ARRAY", "MULTISET", "MAP",
    "ROW", "STRUCTURED_TYPE", "DISTINCT_TYPE", "RAW", "NULL", "VARIANT", "BITMAP"))


class RowDataValue(KindedRow):
    """A row with a RowKind other than INSERT, or with var-part space reserved for null DECIMAL(p > 18) /
    TIMESTAMP(p > 3) fields (``reserved``: their positions), which Flink's generated projections write."""

    reserved: tuple[int, ...]

    def __new__(cls, values: Any, kind: int, reserved: tuple[int, ...] = ()) -> RowDataValue:
        row = cast(RowDataValue, super().__new__(cls, values, kind))
        row.reserved = reserved
        return row


def check_supported(t: LogicalType, where: str) -> None:
    """One-line refusal for a logical type the codecs do not know (TIMESTAMP WITH TIME ZONE, SYMBOL, DESCRIPTOR: the
    runtime stores none of them in a RowData, ``RowData.createFieldGetter`` refuses them)."""
    if t.root not in SUPPORTED_ROOTS:
        raise UnsupportedFormat(f"{where}: RowData field of logical type {t.notation()} ({t.root}) is not supported")
    for child in t.children:
        check_supported(child, where)


def source(t: LogicalType) -> LogicalType:
    return source(t.children[0]) if t.root == "DISTINCT_TYPE" else t


def element_size(t: LogicalType) -> int:
    """``BinaryArrayData.calculateFixLengthPartSize``."""
    root = source(t).root
    if root in ("BOOLEAN", "TINYINT"):
        return 1
    if root == "SMALLINT":
        return 2
    if root in ("INTEGER", "FLOAT", "DATE", "TIME_WITHOUT_TIME_ZONE", "INTERVAL_YEAR_MONTH"):
        return 4
    return 8


def _round8(n: int) -> int:
    return (n + 7) & ~7


def put_var(out: bytearray, data: bytes, base: int) -> int:
    """Appends ``data`` word-aligned with zero padding; returns its offset from ``base``."""
    offset = len(out) - base
    out += data
    out += bytes(_round8(len(data)) - len(data))
    return offset


def decimal_value(unscaled: int, scale: int) -> Decimal:
    """``DecimalData`` as a Decimal with exactly ``scale`` places (built from digits: no context rounding)."""
    return Decimal((1 if unscaled < 0 else 0, tuple(int(d) for d in str(abs(unscaled))), -scale))


def unscaled_of(value: Decimal, scale: int) -> int:
    sign, digits, exponent = value.as_tuple()
    if not isinstance(exponent, int):
        raise ValueError(f"{value} is not a finite decimal")
    unscaled: int = int("".join(map(str, digits)) or "0")
    shift = exponent + scale
    if shift >= 0:
        unscaled *= 10 ** shift
    elif unscaled % 10 ** -shift:
        raise ValueError(f"{value} has more than {scale} decimal places")
    else:
        unscaled //= 10 ** -shift
    return -unscaled if sign else unscaled


def timestamp_value(millis: int, nanos: int, ltz: bool) -> Any:
    if ltz:
        return Instant.of_epoch_nanos(millis * 1_000_000 + nanos)
    days, ms = divmod(millis, MILLIS_PER_DAY)
    date = LocalDate.of_epoch_day(days)
    return LocalDateTime(date.year, date.month, date.day, ms // 3_600_000, ms // 60_000 % 60, ms // 1000 % 60,
                         (ms % 1000) * 1_000_000 + nanos)


def timestamp_parts(value: Any) -> tuple[int, int]:
    """(epoch millis, nanos of the millisecond) of an Instant or LocalDateTime."""
    if isinstance(value, Instant):
        total = value.epoch_nanos
    else:
        day = LocalDate(value.year, value.month, value.day).epoch_day
        total = (day * 86_400 + value.hour * 3600 + value.minute * 60 + value.second) * 1_000_000_000 + value.nano
    return divmod(total, 1_000_000)


def _time(millis: int) -> LocalTime:
    return LocalTime(millis // 3_600_000, millis // 60_000 % 60, millis // 1000 % 60, (millis % 1000) * 1_000_000)


def _time_millis(value: LocalTime) -> int:
    return ((value.hour * 60 + value.minute) * 60 + value.second) * 1000 + value.nano // 1_000_000


def _freeze(value: Any) -> Any:
    """Map keys must be hashable: arrays become tuples, maps tuples of pairs."""
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, dict):
        return tuple((_freeze(k), _freeze(v)) for k, v in value.items())
    return value


# --------------------------------------------------------------------------------------------------------------------
# Slots (one field of a row or one element of an array)
# --------------------------------------------------------------------------------------------------------------------


def slot_codec(t: LogicalType, size: int) -> tuple[SlotReader, SlotWriter]:
    """Reader and writer of one slot of ``size`` bytes (8 in rows, :func:`element_size` in arrays)."""
    t = source(t)
    root = t.root
    if root == "BOOLEAN":
        return (lambda b, base, o: b[o] != 0), (lambda v, out, o: out.__setitem__(o, 1 if v else 0))
    if root in ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "INTERVAL_YEAR_MONTH", "INTERVAL_DAY_TIME"):
        s = _LE[element_size(t)]
        return (lambda b, base, o: s.unpack_from(b, o)[0]), (lambda v, out, o: s.pack_into(out, o, v))
    if root == "FLOAT":
        return (lambda b, base, o: _F32.unpack_from(b, o)[0]), (lambda v, out, o: _F32.pack_into(out, o, v))
    if root == "DOUBLE":
        return (lambda b, base, o: _F64.unpack_from(b, o)[0]), (lambda v, out, o: _F64.pack_into(out, o, v))
    if root == "DATE":
        i32 = _LE[4]
        return (lambda b, base, o: LocalDate.of_epoch_day(i32.unpack_from(b, o)[0]),
                lambda v, out, o: i32.pack_into(out, o, v.epoch_day))
    if root == "TIME_WITHOUT_TIME_ZONE":
        i32 = _LE[4]
        return (lambda b, base, o: _time(i32.unpack_from(b, o)[0]),
                lambda v, out, o: i32.pack_into(out, o, _time_millis(v)))
    if root == "DECIMAL":
        return _decimal_codec(t)
    if root in ("TIMESTAMP_WITHOUT_TIME_ZONE", "TIMESTAMP_WITH_LOCAL_TIME_ZONE"):
        return _timestamp_codec(t)
    if root in ("CHAR", "VARCHAR", "BINARY", "VARBINARY"):
        return _bytes_codec(root in ("CHAR", "VARCHAR"))
    if root == "RAW":
        return _var_codec(bytes, bytes)
    if root == "VARIANT":
        return _var_codec(_read_variant, _write_variant)
    if root == "BITMAP":
        return _var_codec(bitmap_from_bytes, bitmap_bytes)
    if root in ("ROW", "STRUCTURED_TYPE"):
        read_row, write_row = row_codec(t.children)
        return _var_codec(read_row, write_row)
    if root == "ARRAY":
        read_array, write_array = array_codec(t.children[0])
        return _var_codec(read_array, write_array)
    if root in ("MAP", "MULTISET"):
        value_type = t.children[1] if root == "MAP" else LogicalType("INTEGER", False)
        read_map, write_map = map_codec(t.children[0], value_type)
        return _var_codec(read_map, write_map)
    raise UnsupportedFormat(f"RowData field of logical type {t.notation()} ({root}) is not supported")


def _var_codec(read: Callable[[bytes], Any], write: Callable[[Any], bytes]) -> tuple[SlotReader, SlotWriter]:
    """Data wholly in the var part: decoded from its own bytes, encoded to bytes appended there."""

    def read_slot(b: bytes, base: int, o: int) -> Any:
        v = _Q.unpack_from(b, o)[0]
        start = base + (v >> 32)
        return read(bytes(b[start:start + (v & 0xFFFFFFFF)]))

    def write_slot(v: Any, out: bytearray, o: int) -> None:
        data = write(v)
        # a row or array is always encoded into its own bytearray (nested values are built apart, then copied
        # in), so var-part offsets count from 0
        _Q.pack_into(out, o, (put_var(out, data, 0) << 32) | len(data))

    return read_slot, write_slot


def _read_variant(data: bytes) -> Any:
    meta_size = _I32_BE.unpack_from(data, 0)[0] if len(data) >= 4 else -1
    if not 0 < meta_size <= len(data) - 5:
        raise SavepointFormatError(f"RowData VARIANT field of {len(data)} bytes with metadata of {meta_size} bytes")
    return variant_from_parts(data[4 + meta_size:], data[4:4 + meta_size])


def _write_variant(value: Any) -> bytes:
    variant = unchanged_variant(value)
    return _I32_BE.pack(len(variant.metadata)) + variant.metadata + variant.value


def _bytes_codec(text: bool) -> tuple[SlotReader, SlotWriter]:
    def read_slot(b: bytes, base: int, o: int) -> Any:
        v = _Q.unpack_from(b, o)[0]
        if v < 0:  # mark bit: at most 7 bytes in the slot itself
            data = bytes(b[o:o + ((v >> 56) & 0x7F)])
        else:
            start = base + (v >> 32)
            data = bytes(b[start:start + (v & 0xFFFFFFFF)])
        return data.decode("utf-8", "surrogateescape") if text else data

    def write_slot(v: Any, out: bytearray, o: int) -> None:
        data = v.encode("utf-8", "surrogateescape") if text else bytes(v)
        if len(data) <= 7:
            out[o:o + len(data)] = data
            out[o + 7] = 0x80 | len(data)
        else:
            _Q.pack_into(out, o, (put_var(out, data, 0) << 32) | len(data))

    return read_slot, write_slot


def _decimal_codec(t: LogicalType) -> tuple[SlotReader, SlotWriter]:
    scale, precision = t.scale or 0, t.precision or 0
    if precision <= 18:
        return (lambda b, base, o: decimal_value(_Q.unpack_from(b, o)[0], scale),
                lambda v, out, o: _Q.pack_into(out, o, unscaled_of(v, scale)))

    def read_slot(b: bytes, base: int, o: int) -> Any:
        v = _Q.unpack_from(b, o)[0]
        start = base + (v >> 32)
        return decimal_value(int.from_bytes(b[start:start + (v & 0xFFFFFFFF)], "big", signed=True), scale)

    def write_slot(v: Any, out: bytearray, o: int) -> None:
        unscaled = unscaled_of(v, scale)
        data = unscaled.to_bytes(unscaled.bit_length() // 8 + 1, "big", signed=True)  # BigInteger.toByteArray
        if len(data) > 16:
            raise ValueError(f"{v} does not fit DECIMAL({precision}, {scale})")
        _Q.pack_into(out, o, (put_var(out, data + bytes(16 - len(data)), 0) << 32) | len(data))

    return read_slot, write_slot


def _timestamp_codec(t: LogicalType) -> tuple[SlotReader, SlotWriter]:
    ltz = t.root == "TIMESTAMP_WITH_LOCAL_TIME_ZONE"
    if (t.precision or 0) <= 3:
        return (lambda b, base, o: timestamp_value(_Q.unpack_from(b, o)[0], 0, ltz),
                lambda v, out, o: _Q.pack_into(out, o, _compact_millis(v)))

    def read_slot(b: bytes, base: int, o: int) -> Any:
        v = _Q.unpack_from(b, o)[0]
        return timestamp_value(_Q.unpack_from(b, base + (v >> 32))[0], v & 0xFFFFFFFF, ltz)

    def write_slot(v: Any, out: bytearray, o: int) -> None:
        millis, nanos = timestamp_parts(v)
        _Q.pack_into(out, o, (put_var(out, _Q.pack(millis), 0) << 32) | nanos)

    return read_slot, write_slot


def _compact_millis(v: Any) -> int:
    millis, nanos = timestamp_parts(v)
    if nanos:
        raise ValueError(f"{v} has sub-millisecond digits, which TIMESTAMP(p <= 3) cannot hold")
    return millis


#: Var-part bytes Flink reserves for a null field written through the generated projections' writeDecimal /
#: writeTimestamp(pos, null, precision).
def _reservation(t: LogicalType) -> int:
    t = source(t)
    if t.root == "DECIMAL" and (t.precision or 0) > 18:
        return 16
    if t.root in ("TIMESTAMP_WITHOUT_TIME_ZONE", "TIMESTAMP_WITH_LOCAL_TIME_ZONE") and (t.precision or 0) > 3:
        return 8
    return 0


# --------------------------------------------------------------------------------------------------------------------
# Rows, arrays, maps
# --------------------------------------------------------------------------------------------------------------------


def null_bits_size(arity: int) -> int:
    return ((arity + 63 + 8) // 64) * 8


def row_codec(types: tuple[LogicalType, ...] | list[LogicalType]
              ) -> tuple[Callable[[bytes], Any], Callable[[Any], bytes]]:
    """Decoder of one whole BinaryRowData (its exact bytes) and the matching encoder."""
    arity = len(types)
    header = null_bits_size(arity)
    fixed = header + 8 * arity
    codecs = [slot_codec(t, 8) if source(t).root != "NULL" else (None, None) for t in types]
    reservations = [_reservation(t) for t in types]
    fields = [(i, header + 8 * i, (i + 8) >> 3, 1 << ((i + 8) & 7), r, w, reservations[i])
              for i, (r, w) in enumerate(codecs)]

    def read(b: bytes) -> Any:
        if len(b) < fixed:
            raise ValueError(f"BinaryRowData of {len(b)} bytes, shorter than its fixed part ({fixed} bytes)")
        values: list[Any] = []
        reserved: list[int] = []
        for i, slot, byte, bit, r, _, reservation in fields:
            if b[byte] & bit or r is None:
                values.append(None)
                if reservation and _Q.unpack_from(b, slot)[0]:
                    reserved.append(i)
            else:
                values.append(r(b, 0, slot))
        kind = b[0]
        if kind or reserved:
            return RowDataValue(values, kind, tuple(reserved))
        return tuple(values)

    def write(value: Any) -> bytes:
        if len(value) != arity:
            raise ValueError(f"row of {len(value)} fields for a RowData type of {arity}")
        out = bytearray(fixed)
        out[0] = getattr(value, "kind", 0)
        reserved = getattr(value, "reserved", ())
        for (i, slot, byte, bit, _, w, reservation), item in zip(fields, value, strict=True):
            if item is None or w is None:
                out[byte] |= bit
                if i in reserved:
                    _Q.pack_into(out, slot, put_var(out, bytes(reservation), 0) << 32)
            else:
                w(item, out, slot)
        return bytes(out)

    return read, write


def array_codec(element: LogicalType) -> tuple[Callable[[bytes], Any], Callable[[Any], bytes]]:
    size = element_size(element)
    r, w = slot_codec(element, size) if source(element).root != "NULL" else (None, None)
    i32 = _LE[4]

    def read(b: bytes) -> list[Any]:
        n = i32.unpack_from(b, 0)[0]
        if n < 0 or 4 + ((n + 31) // 32) * 4 + n * size > len(b):
            raise ValueError(f"BinaryArrayData of {n} elements does not fit its {len(b)} bytes")
        first = 4 + ((n + 31) // 32) * 4
        return [None if (b[4 + (i >> 3)] >> (i & 7)) & 1 or r is None else r(b, 0, first + i * size)
                for i in range(n)]

    def write(value: Any) -> bytes:
        n = len(value)
        first = 4 + ((n + 31) // 32) * 4
        out = bytearray(_round8(first + n * size))
        i32.pack_into(out, 0, n)
        for i, item in enumerate(value):
            if item is None or w is None:
                out[4 + (i >> 3)] |= 1 << (i & 7)
            else:
                w(item, out, first + i * size)
        return bytes(out)

    return read, write


def map_codec(key: LogicalType, value: LogicalType) -> tuple[Callable[[bytes], Any], Callable[[Any], bytes]]:
    read_keys, write_keys = array_codec(key)
    read_values, write_values = array_codec(value)
    i32 = _LE[4]

    def read(b: bytes) -> dict[Any, Any]:
        key_bytes = i32.unpack_from(b, 0)[0]
        if key_bytes < 0 or 4 + key_bytes > len(b):
            raise ValueError(f"BinaryMapData key array of {key_bytes} bytes does not fit its {len(b)} bytes")
        keys = read_keys(b[4:4 + key_bytes])
        values = read_values(b[4 + key_bytes:])
        if len(keys) != len(values):
            raise ValueError(f"BinaryMapData with {len(keys)} keys and {len(values)} values")
        return {_freeze(k): v for k, v in zip(keys, values, strict=True)}

    def write(value: Any) -> bytes:
        keys = write_keys([list(k) if isinstance(k, tuple) and source(key).root == "ARRAY" else k for k in value])
        return i32.pack(len(keys)) + keys + write_values(list(value.values()))

    return read, write
