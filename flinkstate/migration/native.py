"""Keyed state in a native snapshot format, read by a migration as canonical key-group blocks, so that every
migration (identity or not) writes the canonical savepoint format from it.

* Native RocksDB (:class:`~flinkstate.format.rocksdb_native.NativeRocksDBStream`): RocksDB's key and value bytes are
  the canonical format's entry bytes (a canonical savepoint of a RocksDB job copies them), so a block is the key
  group's RocksDB entries per state, copied as they are (``NativeRocksDBStream.canonical_block``).
* The HashMap backend's own format (``stream.heap_format``): a heap block holds ``namespace, key, state`` elements
  with the state serialized whole (a list as ``ListSerializer``, a map as ``MapSerializer``); each is decoded by the
  heap reader and its entries encoded in the canonical layout by the states' codecs (``encode``, one per state id of
  the stream's header), in the heap block's order.
* A changelog checkpoint (:class:`~flinkstate.format.changelog.ChangelogStream`): the materialized entries with the
  log applied (``canonical_entries``), encoded like a heap block's.
* A canonical stream's block is read as it is stored (decompressed).

Either way memory is one key group's block. The verifier does not use this module: it reads native sources with
their own readers (:mod:`flinkstate.migration.verify_native`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from flinkstate.format.changelog import ChangelogStream
from flinkstate.format.keyed_stream import KeyedStateStream, encode_block
from flinkstate.format.rocksdb_native import NativeRocksDBStream
from flinkstate.format_errors import SavepointFormatError

#: One state's canonical (key, value) bytes of a decoded entry in a key group; None when nothing is stored.
EntryEncoder = Callable[[tuple[Any, ...], int], "tuple[bytes, bytes] | None"]


def is_native(stream: KeyedStateStream) -> bool:
    """Whether the stream's keyed state is in a native format (its header is read to know): a migration then writes
    canonical blocks from its entries."""
    if isinstance(stream, (NativeRocksDBStream, ChangelogStream)):
        return True
    stream.header()
    return stream.heap_format


class CanonicalBlocks:
    """A stream's key-group blocks in the canonical layout, uncompressed (``b""`` for a key group without entries),
    for ``(key group, start, end)`` of ``stream.blocks``. ``encoders`` (by the stream's state ids) are needed for a
    heap-format stream only, and built on its first block."""

    def __init__(self, stream: KeyedStateStream, encoders: Callable[[], Sequence[EntryEncoder | None]]) -> None:
        self.stream = stream
        self.native = is_native(stream)
        self._make_encoders = encoders
        self._encoders: Sequence[EntryEncoder | None] | None = None

    def read(self, key_group: int, start: int, end: int) -> bytes:
        stream = self.stream
        if isinstance(stream, NativeRocksDBStream):
            return stream.canonical_block(key_group)
        if isinstance(stream, ChangelogStream):
            return self._encode(key_group, start, stream.canonical_entries(key_group))
        if not stream.heap_format:
            return stream.read_block(key_group, start, end)
        block = stream.heap_block(key_group, start, end)
        return self._encode(key_group, start, [
            (state_id, [entry for element in elements for entry in element.entries])
            for state_id, _, elements in sorted(block.sections, key=lambda section: section[0])])

    def _encode(self, key_group: int, start: int, sections: list[tuple[int, list[tuple[Any, ...]]]]) -> bytes:
        """One key group's decoded entries, per state id in increasing order, as a canonical block."""
        stream = self.stream
        if self._encoders is None:
            self._encoders = self._make_encoders()
        states = stream.header().states
        runs: list[tuple[int, list[tuple[bytes, bytes]]]] = []
        for state_id, entries in sections:
            encode = self._encoders[state_id]
            if encode is None and entries:
                raise SavepointFormatError(f"{stream.context}, state {states[state_id].name}, key group {key_group}: "
                                           f"no codec to write its entries canonically", stream.source.path, start)
            pairs: list[tuple[bytes, bytes]] = []
            for entry in entries:
                assert encode is not None
                try:
                    pair = encode(entry, key_group)
                except Exception as exc:  # a codec that cannot write what the native reader decoded
                    raise SavepointFormatError(
                        f"{stream.context}, state {states[state_id].name}, key group {key_group}: the entry "
                        f"cannot be written in the canonical layout ({type(exc).__name__}: {exc})",
                        stream.source.path, start) from None
                if pair is not None:
                    pairs.append(pair)
            runs.append((state_id, pairs))
        return encode_block(runs)


__all__ = ["CanonicalBlocks", "EntryEncoder", "is_native"]
