"""Snappy's framing format (what Flink's ``SnappyStreamCompressionDecorator`` writes: xerial's
``SnappyFramedOutputStream``), decompressed within a budget::

    chunk: u8 type; u24 little-endian length; body
        0xff stream identifier ("sNaPpY")       0x00 compressed: u32 CRC; raw snappy block (varint length first)
        0x01 uncompressed: u32 CRC; the bytes   0x80-0xfe skippable (padding)

Snappy expands up to ~21x, so a block's stored size says little about what it decompresses to. The chunk headers
and each compressed chunk's length preamble do say it exactly: summed before anything is allocated, they are held
against ``DECOMPRESSED_BYTES``, and the output is allocated once at that size.
"""

from __future__ import annotations

import cramjam

from flinkstate.limits import DECOMPRESSED_BYTES, LimitExceeded

_COMPRESSED, _UNCOMPRESSED, _STREAM_IDENTIFIER = 0x00, 0x01, 0xFF
_CRC_BYTES = 4
#: The framing format's bound on a chunk's uncompressed data (xerial's and cramjam's frames are this size).
MAX_CHUNK_BYTES = 65536


class SnappyCorrupt(ValueError):
    """The bytes are not a valid snappy frame stream (cramjam's own message)."""


def framed_length(data: bytes) -> int:
    """The bytes a frame stream decompresses to, from its chunk headers. A chunk that says more than a frame holds
    (64 KiB) is :class:`SnappyCorrupt`, so that a corrupted length is not taken for a large block; any other
    malformation counts what the well-formed chunks say, and decompressing then fails as corrupt."""
    total = pos = 0
    size = len(data)
    while pos + 4 <= size:
        kind = data[pos]
        length = data[pos + 1] | data[pos + 2] << 8 | data[pos + 3] << 16
        body = pos + 4
        chunk = 0
        if kind == _COMPRESSED:
            chunk = _preamble(data, body + _CRC_BYTES, min(body + length, size))
        elif kind == _UNCOMPRESSED:
            chunk = max(0, length - _CRC_BYTES)
        if chunk > MAX_CHUNK_BYTES:
            raise SnappyCorrupt(f"a chunk at byte {pos} says {chunk} bytes, more than the {MAX_CHUNK_BYTES} a snappy "
                                f"frame holds")
        total += chunk
        pos = body + length
    return total


def _preamble(data: bytes, pos: int, end: int) -> int:
    """A raw snappy block's uncompressed length: a little-endian base-128 varint of at most 5 bytes."""
    result = shift = 0
    while pos < end and shift <= 28:
        byte = data[pos]
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result
        pos += 1
        shift += 7
    return 0


def decompress_framed(data: bytes) -> bytes:
    """The decompressed bytes of a frame stream. Beyond ``DECOMPRESSED_BYTES``: :class:`LimitExceeded` before
    anything is allocated; out of memory: :class:`LimitExceeded` too, saying so (it is not corruption); invalid:
    :class:`SnappyCorrupt`. Callers add the file, operator and block to either."""
    length = framed_length(data)
    limit = DECOMPRESSED_BYTES.value()
    if length > limit:
        raise DECOMPRESSED_BYTES.exceeded(f"snappy data decompresses to {length:,} bytes")
    try:
        out = bytearray(length)
        written = cramjam.snappy.decompress_into(data, out)
        if written != length:
            raise SnappyCorrupt(f"decompressed to {written} bytes, its frames say {length}")
        return bytes(out)  # immutable, as the readers' keys and compiled walks expect
    except MemoryError:
        raise LimitExceeded(f"out of memory decompressing {length:,} bytes of snappy data: the process needs more "
                            f"memory (or a lower {DECOMPRESSED_BYTES.variable})") from None
    except SnappyCorrupt:
        raise
    except Exception as exc:  # cramjam raises its own DecompressionError, also when the chunks say a wrong length
        raise SnappyCorrupt(str(exc)) from None
