"""Byte-level building blocks of Flink's formats: big-endian ``DataInput``/``DataOutput`` reading and writing, Java
modified UTF-8 (``writeUTF``), Flink's ``StringValue`` encoding, the two varint flavours, Java ``hashCode`` emulation,
Flink's key-group assignment and operator ids from uids.

Hot decode loops do not go through :class:`Reader`: codecs use the module-level precompiled ``Struct`` objects and
:func:`decode_sv` directly on ``(buffer, offset)``.
"""

from __future__ import annotations

import builtins
import math
import struct
from collections.abc import Iterator
from dataclasses import dataclass

import mmh3

from flinkstate.format_errors import SavepointFormatError, TruncatedData

I8 = struct.Struct(">b")
U8 = struct.Struct(">B")
I16 = struct.Struct(">h")
U16 = struct.Struct(">H")
I32 = struct.Struct(">i")
I64 = struct.Struct(">q")
F32 = struct.Struct(">f")
F64 = struct.Struct(">d")

INT_MIN = -(1 << 31)
LONG_MIN = -(1 << 63)


# --------------------------------------------------------------------------------------------------------------------
# Java modified UTF-8 (DataOutput.writeUTF)
# --------------------------------------------------------------------------------------------------------------------


def encode_mutf8(text: str) -> bytes:
    """Java modified UTF-8 of ``text`` (no length prefix): NUL as C0 80, supplementary characters as surrogates."""
    if text.isascii() and "\x00" not in text:
        return text.encode("ascii")
    out = bytearray()
    for unit in _utf16_units(text):
        if 0 < unit < 0x80:
            out.append(unit)
        elif unit < 0x800:
            out += bytes((0xC0 | (unit >> 6), 0x80 | (unit & 0x3F)))
        else:
            out += bytes((0xE0 | (unit >> 12), 0x80 | ((unit >> 6) & 0x3F), 0x80 | (unit & 0x3F)))
    return bytes(out)


def decode_mutf8(data: bytes) -> str:
    """Inverse of :func:`encode_mutf8`. Surrogate pairs are recombined; a malformed sequence raises ValueError."""
    if data.isascii():
        return data.decode("ascii")
    units: list[int] = []
    i, n = 0, len(data)
    while i < n:
        b = data[i]
        if b < 0x80:
            units.append(b)
            i += 1
        elif b & 0xE0 == 0xC0 and i + 1 < n:
            units.append(((b & 0x1F) << 6) | (data[i + 1] & 0x3F))
            i += 2
        elif b & 0xF0 == 0xE0 and i + 2 < n:
            units.append(((b & 0x0F) << 12) | ((data[i + 1] & 0x3F) << 6) | (data[i + 2] & 0x3F))
            i += 3
        else:
            raise ValueError(f"malformed modified UTF-8 byte 0x{b:02x} at {i}")
    return _from_utf16_units(units)


def _utf16_units(text: str) -> list[int]:
    raw = text.encode("utf-16-be", "surrogatepass")
    return list(struct.unpack(f">{len(raw) // 2}H", raw))


def _from_utf16_units(units: list[int]) -> str:
    return struct.pack(f">{len(units)}H", *units).decode("utf-16-be", "surrogatepass")


# --------------------------------------------------------------------------------------------------------------------
# Flink StringValue (StringSerializer): LEB128 length+1, then every UTF-16 unit as LEB128
# --------------------------------------------------------------------------------------------------------------------


def decode_sv(buf: bytes, off: int) -> tuple[str | None, int]:
    """Reads a Flink ``StringValue.writeString`` string at ``off``; returns (string or None, new offset)."""
    b = buf[off]
    off += 1
    if b < 0x80:
        n = b - 1
    else:
        n, off = leb128_tail(buf, off, b & 0x7F)
        n -= 1
    if n < 0:
        return None, off
    return decode_sv_body(buf, off, n)


def decode_sv_body(buf: bytes, off: int, n: int) -> tuple[str, int]:
    """The ``n`` LEB128-encoded UTF-16 units of a StringValue at ``off``."""
    end = off + n
    chunk = buf[off:end]
    # Fast path: an ASCII string is one byte per char, exactly like its LEB128 units.
    if len(chunk) == n and chunk.isascii():
        return chunk.decode("ascii"), end
    return _decode_sv_units(buf, off, n)


def leb128_tail(buf: bytes, off: int, value: int) -> tuple[int, int]:
    """The rest of an unsigned LEB128 varint whose first byte (``value``: its low 7 bits) had the continuation bit
    set: ``(number, offset after it)``. The fast paths read the one-byte case inline and call this for the rest."""
    shift = 7
    while True:
        b = buf[off]
        off += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, off
        shift += 7


def _decode_sv_units(buf: bytes, off: int, n: int) -> tuple[str, int]:
    units = []
    for _ in range(n):
        b = buf[off]
        off += 1
        if b >= 0x80:
            b, off = leb128_tail(buf, off, b & 0x7F)
        units.append(b)
    return _from_utf16_units(units), off


def encode_sv(text: str | None) -> bytes:
    """Flink ``StringValue.writeString`` bytes of ``text`` (None is the single byte 0)."""
    if text is None:
        return b"\x00"
    if text.isascii():
        return encode_leb128(len(text) + 1) + text.encode("ascii")
    units = _utf16_units(text)
    return encode_leb128(len(units) + 1) + b"".join(encode_leb128(u) for u in units)


# --------------------------------------------------------------------------------------------------------------------
# Varints
# --------------------------------------------------------------------------------------------------------------------


def encode_leb128(value: int) -> bytes:
    """Unsigned LEB128 (7 bits per byte, low group first, high bit = more)."""
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def decode_leb128(buf: bytes, off: int) -> tuple[int, int]:
    b = buf[off]
    return (b, off + 1) if b < 0x80 else leb128_tail(buf, off + 1, b & 0x7F)


def encode_varint_le(value: int) -> bytes:
    """``CompositeKeySerializationUtils.writeVariableIntBytes``: low byte first, 8 bits per byte, at least one."""
    out = bytearray()
    while True:
        out.append(value & 0xFF)
        value >>= 8
        if value == 0:
            return bytes(out)


def varint_le_size(value: int) -> int:
    """How many bytes :func:`encode_varint_le` writes for ``value``."""
    return max(1, (value.bit_length() + 7) // 8)


def decode_varint_le(data: bytes) -> int:
    return int.from_bytes(data, "little")


# --------------------------------------------------------------------------------------------------------------------
# Reader / Writer (for headers and metadata; not for hot loops)
# --------------------------------------------------------------------------------------------------------------------


class Reader:
    """Big-endian ``DataInput`` over an in-memory buffer. ``path`` and ``base`` (the buffer's offset in that file)
    make every error name the file and the absolute offset."""

    __slots__ = ("base", "buf", "path", "pos")

    def __init__(self, buf: bytes, pos: int = 0, path: str | None = None, base: int = 0) -> None:
        self.buf = buf
        self.pos = pos
        self.path = path
        self.base = base

    def error(self, what: str, offset: int | None = None) -> SavepointFormatError:
        return SavepointFormatError(what, self.path, self.base + (self.pos if offset is None else offset))

    def _need(self, n: int) -> int:
        pos = self.pos
        if n < 0 or pos + n > len(self.buf):
            raise TruncatedData(f"truncated: need {n} bytes, {len(self.buf) - pos} left", self.path, self.base + pos)
        self.pos = pos + n
        return pos

    def remaining(self) -> int:
        return len(self.buf) - self.pos

    def bytes(self, n: int) -> bytes:
        pos = self._need(n)
        return bytes(self.buf[pos:pos + n])

    # Inside the class, ``bytes`` names the method above, so annotations after it spell the builtin out.
    def rest(self) -> builtins.bytes:
        return self.bytes(self.remaining())

    def u8(self) -> int:
        return self.buf[self._need(1)]

    def i8(self) -> int:
        value: int = I8.unpack_from(self.buf, self._need(1))[0]
        return value

    def bool(self) -> bool:
        return self.buf[self._need(1)] != 0

    def i16(self) -> int:
        value: int = I16.unpack_from(self.buf, self._need(2))[0]
        return value

    def u16(self) -> int:
        value: int = U16.unpack_from(self.buf, self._need(2))[0]
        return value

    def i32(self) -> int:
        value: int = I32.unpack_from(self.buf, self._need(4))[0]
        return value

    def i64(self) -> int:
        value: int = I64.unpack_from(self.buf, self._need(8))[0]
        return value

    def f32(self) -> float:
        value: float = F32.unpack_from(self.buf, self._need(4))[0]
        return value

    def f64(self) -> float:
        value: float = F64.unpack_from(self.buf, self._need(8))[0]
        return value

    def utf(self) -> str:
        start = self.pos
        raw = self.bytes(self.u16())
        try:
            return decode_mutf8(raw)
        except ValueError as exc:
            raise self.error(f"bad modified UTF-8 string: {exc}", start) from None

    def sv(self) -> str | None:
        start = self.pos
        try:
            value, self.pos = decode_sv(self.buf, start)
        except IndexError:
            raise TruncatedData("truncated StringValue string", self.path, self.base + start) from None
        if self.pos > len(self.buf):
            raise TruncatedData("truncated StringValue string", self.path, self.base + start)
        return value


class Writer:
    """Big-endian ``DataOutput`` into a bytearray; the mirror image of :class:`Reader`."""

    __slots__ = ("out",)

    def __init__(self) -> None:
        self.out = bytearray()

    def getvalue(self) -> bytes:
        return bytes(self.out)

    def bytes(self, data: bytes) -> None:
        self.out += data

    def u8(self, v: int) -> None:
        self.out.append(v & 0xFF)

    def bool(self, v: bool) -> None:
        self.out.append(1 if v else 0)

    def i16(self, v: int) -> None:
        self.out += I16.pack(v)

    def u16(self, v: int) -> None:
        self.out += U16.pack(v)

    def i32(self, v: int) -> None:
        self.out += I32.pack(v)

    def i64(self, v: int) -> None:
        self.out += I64.pack(v)

    def f64(self, v: float) -> None:
        self.out += F64.pack(v)

    def utf(self, text: str) -> None:
        raw = encode_mutf8(text)
        if len(raw) > 0xFFFF:
            raise ValueError(f"string too long for writeUTF ({len(raw)} bytes)")
        self.out += U16.pack(len(raw)) + raw

    def sv(self, text: str | None) -> None:
        self.out += encode_sv(text)


# --------------------------------------------------------------------------------------------------------------------
# Java hashCode emulation and Flink key groups
# --------------------------------------------------------------------------------------------------------------------


def to_int32(value: int) -> int:
    """Wraps to a Java ``int``."""
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


def java_string_hash(text: str) -> int:
    """``String.hashCode``: 31-polynomial over UTF-16 code units."""
    h = 0
    units = text.encode("ascii") if text.isascii() else _utf16_units(text)
    for unit in units:
        h = (31 * h + unit) & 0xFFFFFFFF
    return to_int32(h)


def java_long_hash(value: int) -> int:
    value &= 0xFFFFFFFFFFFFFFFF
    return to_int32(value ^ (value >> 32))


def java_int_hash(value: int) -> int:
    return to_int32(value)


def java_bool_hash(value: bool) -> int:
    return 1231 if value else 1237


def java_double_hash(value: float) -> int:
    # doubleToLongBits canonicalises NaN to 0x7ff8000000000000; struct gives Python's NaN, which is the same one.
    bits = I64.unpack(F64.pack(value))[0] if not math.isnan(value) else 0x7FF8000000000000
    return java_long_hash(bits)


def java_float_hash(value: float) -> int:
    return I32.unpack(F32.pack(value))[0] if not math.isnan(value) else 0x7FC00000


def java_combine_hashes(hashes: list[int], seed: int) -> int:
    """``seed``-started ``31 * h + x`` fold with Java int overflow (Arrays.hashCode when seed is 1)."""
    h = seed
    for x in hashes:
        h = (31 * h + x) & 0xFFFFFFFF
    return to_int32(h)


def _rotl32(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & 0xFFFFFFFF


def flink_murmur_hash(code: int) -> int:
    """``MathUtils.murmurHash(int)``: one Murmur3 round plus fmix, made non-negative as Flink does."""
    k = (code * 0xCC9E2D51) & 0xFFFFFFFF
    k = _rotl32(k, 15)
    k = (k * 0x1B873593) & 0xFFFFFFFF
    h = _rotl32(k, 13)
    h = (h * 5 + 0xE6546B64) & 0xFFFFFFFF
    h ^= 4
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & 0xFFFFFFFF
    h ^= h >> 16
    signed = to_int32(h)
    if signed >= 0:
        return signed
    return 0 if signed == INT_MIN else -signed


def assign_key_group(hash_code: int, max_parallelism: int) -> int:
    """``KeyGroupRangeAssignment.computeKeyGroupForKeyHash``."""
    return flink_murmur_hash(hash_code) % max_parallelism


def default_max_parallelism(parallelism: int) -> int:
    """``KeyGroupRangeAssignment.computeDefaultMaxParallelism``: roundUpToPowerOfTwo(p + p/2) within [128, 32768]."""
    target = parallelism + parallelism // 2
    power = 1 << max(0, (target - 1).bit_length())
    return min(max(power, 128), 32768)


@dataclass(frozen=True)
class KeyGroupRange:
    """An inclusive range of key groups; empty when ``end < start`` (Flink's EMPTY_KEY_GROUP_RANGE is 0..-1)."""

    start: int
    end: int

    def __len__(self) -> int:
        return max(0, self.end - self.start + 1)

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.start, self.end + 1))

    def __contains__(self, key_group: object) -> bool:
        return isinstance(key_group, int) and self.start <= key_group <= self.end

    def intersection(self, other: KeyGroupRange) -> KeyGroupRange:
        start, end = max(self.start, other.start), min(self.end, other.end)
        return KeyGroupRange(start, end) if start <= end else KeyGroupRange(0, -1)

    def __str__(self) -> str:
        return f"[{self.start}, {self.end}]"


def key_group_range_for_operator_index(max_parallelism: int, parallelism: int, index: int) -> KeyGroupRange:
    """``KeyGroupRangeAssignment.computeKeyGroupRangeForOperatorIndex``."""
    start = (index * max_parallelism + parallelism - 1) // parallelism
    end = ((index + 1) * max_parallelism - 1) // parallelism
    return KeyGroupRange(start, end)


def operator_index_for_key_group(max_parallelism: int, parallelism: int, key_group: int) -> int:
    """``KeyGroupRangeAssignment.computeOperatorIndexForKeyGroup``."""
    return key_group * parallelism // max_parallelism


def operator_id_from_uid(uid: str) -> str:
    """The OperatorID Flink derives from a user-set uid (Murmur3-128, seed 0, Guava byte order) as 32 hex digits."""
    return mmh3.hash_bytes(uid.encode("utf-8")).hex()
