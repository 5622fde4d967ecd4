"""Keyed state in a native snapshot format, read by a migration as canonical key-group blocks, so that every
migration (identity or not) writes the canonical savepoint format from it.

* Native RocksDB (:class:`~flinkstate.format.rocksdb_native.NativeRocksDBStream`): RocksDB's key and value bytes are
  the canonical format's entry bytes (a canonical savepoint of a RocksDB job copies them), so a block is the key
  group's RocksDB entries per state, copied as they are (``NativeRocksDBStream.canonical_block``).
* The HashMap backend's own format (``stream.heap_format``): a heap block holds ``namespace, key, state`` elements
  with the state serialized whole (a list as ``ListSerializer``, a map as ``MapSerializer``); each is decoded by the
  heap reader and its entries encoded in the canonical layout by the states' codecs (``encode``, one per state id of
  the stream's header), in the heap block's order.
* A canonical stream's block is read as it is stored (decompressed).

Either way memory is one key group's block. The verifier does not use this module: it reads native sources with
their own readers (:mod:`flinkstate.migration.verify_native`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from flinkstate.format.changelog import CHANGELOG, ChangelogStream
from flinkstate.format.keyed_stream import KeyedStateStream, encode_block
from flinkstate.format.rocksdb_native import NativeRocksDBStream
from flinkstate.format_errors import SavepointFormatError, UnsupportedFormat

#: One state's canonical (key, value) bytes of a decoded entry in a key group; None when nothing is stored.
EntryEncoder = Callable[[tuple[Any, ...], int], "tuple[bytes, bytes] | None"]


def is_native(stream: KeyedStateStream) -> bool:
    """Whether the stream's keyed state is in a native format (its header is read to know). A changelog
    checkpoint is refused here (see :func:`refuse_changelog`): the planner asks this of every stream first."""
    refuse_changelog(stream)
    if isinstance(stream, NativeRocksDBStream):
        return True
    stream.header()
    return stream.heap_format


def refuse_changelog(stream: KeyedStateStream) -> None:
    """A migration does not write canonical blocks from a changelog checkpoint (its entries are the materialized
    state with the log applied, read by ``ChangelogStream.iter_blocks``, but no canonical encoding of them is wired
    into the migration yet): refused in one line while planning, before anything is written."""
    if isinstance(stream, ChangelogStream):
        raise UnsupportedFormat(f"{stream.context}: migrate does not read keyed state in {CHANGELOG} (describe, dump, "
                                f"schema and check do): take a canonical savepoint of the job, or restore the "
                                f"checkpoint in Flink and take one", stream.source.path, 0)


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
        if not stream.heap_format:
            return stream.read_block(key_group, start, end)
        if self._encoders is None:
            self._encoders = self._make_encoders()
        block = stream.heap_block(key_group, start, end)
        states = stream.header().states
        runs: list[tuple[int, list[tuple[bytes, bytes]]]] = []
        for state_id, _, elements in sorted(block.sections, key=lambda section: section[0]):
            encode = self._encoders[state_id]
            pairs: list[tuple[bytes, bytes]] = []
            for element in elements:
                for entry in element.entries:
                    if encode is None:
                        raise SavepointFormatError(f"{stream.context}, state {states[state_id].name}, key group "
                                                   f"{key_group}: no codec to write its entries canonically",
                                                   stream.source.path, start)
                    try:
                        pair = encode(entry, key_group)
                    except Exception as exc:  # a codec that cannot write what the heap reader decoded
                        raise SavepointFormatError(
                            f"{stream.context}, state {states[state_id].name}, key group {key_group}: the entry "
                            f"cannot be written in the canonical layout ({type(exc).__name__}: {exc})",
                            stream.source.path, start) from None
                    if pair is not None:
                        pairs.append(pair)
            runs.append((state_id, pairs))
        return encode_block(runs)


__all__ = ["CanonicalBlocks", "EntryEncoder", "is_native", "refuse_changelog"]
