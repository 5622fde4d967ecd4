"""The keyed-state stream of a canonical savepoint (one per operator subtask; ``FullSnapshotAsyncWriter``),
read and written.

Layout: a ``KeyedBackendSerializationProxy`` header (:mod:`flinkstate.format.keyed_header`), then one block per
non-empty key group at the offsets the metadata handle records (each block optionally one Snappy-framed stream;
its entries: :mod:`flinkstate.format.key_group_block`). Keys are composite: key-group prefix (1 byte if
maxParallelism <= 128, else 2), key, namespace, an ambiguity suffix (varint-le lengths) only when key and namespace
are both variable-length, and for MapState the user key (decoded by :mod:`flinkstate.format.keyed_entries`).

Reading streams block by block: memory is bounded by one key-group block, and a key-group range only reads its
own blocks. :class:`KeyedStreamWriter` writes the header, then one block per non-empty key group in increasing
order, and returns the :class:`KeyGroupsStateHandle` (code 7, relative file) that points at it. File names are
derived from (operator id, subtask), never random, so two runs over the same input write identical directories.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO

import cramjam

from flinkstate._speedups import raw_entries_compiled, scan_compiled
from flinkstate.binary import I32, U16, KeyGroupRange
from flinkstate.errors import WriteError
from flinkstate.format.handles import (
    SAVEPOINT_KEY_GROUPS,
    ByteStreamStateHandle,
    FileStateHandle,
    KeyGroupRangeOffsets,
    KeyGroupsStateHandle,
    RelativeFileStateHandle,
    StreamStateHandle,
)
from flinkstate.format.heap_blocks import HEAP_FORMAT, HeapBlock, HeapStateCodec, heap_codecs, walk_heap_block
from flinkstate.format.key_group_block import check_state_id, encode_block, iter_raw_entries, raw_key
from flinkstate.format.keyed_entries import EntryDecoder, KeyLayout, make_entry_decoder
from flinkstate.format.keyed_header import (
    END_OF_KEY_GROUP_MARK,
    FIRST_BIT_IN_BYTE_MASK,
    KeyedBackendHeader,
    StateMetaInfo,
    read_stream_header,
)
from flinkstate.format.snappy_frames import SnappyCorrupt, decompress_framed
from flinkstate.format_errors import SavepointFormatError, UnsupportedFormat
from flinkstate.limits import LimitExceeded
from flinkstate.storage.locations import SavepointLocation

# --------------------------------------------------------------------------------------------------------------------
# Byte sources
# --------------------------------------------------------------------------------------------------------------------


class StreamSource:
    """Ranged reads of one state stream, wherever its handle points."""

    def __init__(self, location: SavepointLocation, handle: StreamStateHandle, sized: bool = True) -> None:
        """``sized``: the handle's recorded size is the file's length (not so for a changelog file)."""
        self.handle = handle
        self.location = location
        if isinstance(handle, ByteStreamStateHandle):
            self.name = None
            self.path = f"{location.describe('_metadata')} (inline stream {handle.name})"
            self.size = len(handle.data)
            return
        if isinstance(handle, RelativeFileStateHandle):
            self.name = handle.relative_path
        elif isinstance(handle, FileStateHandle):
            self.name = handle.path
        else:
            raise UnsupportedFormat(f"unsupported stream handle {type(handle).__name__}")
        self.path = location.describe(self.name)
        self.size = location.size(self.name)
        if sized and self.size < handle.size:
            raise SavepointFormatError(f"state file is truncated: {self.size} bytes, the metadata records "
                                       f"{handle.size}", self.path, self.size)

    def read(self, offset: int, length: int) -> bytes:
        if self.name is None:
            assert isinstance(self.handle, ByteStreamStateHandle)
            return self.handle.data[offset:offset + length]
        return self.location.read_range(self.name, offset, length)


# --------------------------------------------------------------------------------------------------------------------
# The stream
# --------------------------------------------------------------------------------------------------------------------


def key_group_prefix_bytes(max_parallelism: int) -> int:
    """``CompositeKeySerializationUtils.computeRequiredBytesInKeyGroupPrefix``."""
    return 1 if max_parallelism <= 128 else 2


class KeyedStateStream:
    """One subtask's keyed-state stream. ``context`` (e.g. ``operator stats``) prefixes error messages."""

    _heap_codecs: list[HeapStateCodec] | None = None  # a heap-format stream's codecs, built on its first block

    def __init__(self, location: SavepointLocation, handle: KeyGroupsStateHandle, max_parallelism: int,
                 context: str) -> None:
        if handle.delegate is None:
            raise SavepointFormatError(f"{context}: keyed state handle without a stream")
        self.handle = handle
        self.context = context
        self.prefix_bytes = key_group_prefix_bytes(max_parallelism)
        self.source = StreamSource(location, handle.delegate)
        self._blocks = self._block_table()
        self._header: KeyedBackendHeader | None = None
        #: Known once the header is read: the blocks are in the HashMap backend's own format.
        self.heap_format = False

    def _block_table(self) -> list[tuple[int, int, int]]:
        """(key group, start, end) of every non-empty key group, in stream order."""
        offsets = self.handle.offsets
        present = sorted((off, kg) for kg, off in zip(offsets.key_group_range, offsets.offsets, strict=True) if off)
        table = []
        for i, (off, kg) in enumerate(present):
            end = present[i + 1][0] if i + 1 < len(present) else self.source.size
            if not 0 < off <= end <= self.source.size:
                raise SavepointFormatError(f"{self.context}: key group {kg} block offset {off} outside the stream "
                                           f"({self.source.size} bytes)", self.source.path, off)
            table.append((kg, off, end))
        return table

    @property
    def key_group_range(self) -> KeyGroupRange:
        return self.handle.key_group_range

    @property
    def blocks(self) -> list[tuple[int, int, int]]:
        """``(key group, start, end)`` of every non-empty key group's block, in stream order."""
        return list(self._blocks)

    def header(self, tolerant: bool = False) -> KeyedBackendHeader:
        """The parsed header (read once: from offset 0 to the first block)."""
        if self._header is None or (self._header.error is not None and not tolerant):
            end = self._blocks[0][1] if self._blocks else self.source.size
            data = self.source.read(0, end)
            header = read_stream_header(data, self.source.path, self.context, tolerant)
            # Cached only once checked: a refused header must be refused again by the next non-tolerant call.
            self.heap_format = self._is_heap_format(header.compressed)
            if header.error is None and header.length != end:
                raise SavepointFormatError(f"{self.context}: keyed state header ends at {header.length}, "
                                           f"the first key-group block starts at {end}", self.source.path,
                                           header.length)
            self._header = header
        return self._header

    @property
    def canonical_blocks(self) -> bool:
        """Whether the stored blocks are canonical key-group blocks, whose raw entries can be walked, compared and
        copied (read the header first: it tells the heap format apart). Native RocksDB and changelog streams,
        which have no stored blocks of their own, say no."""
        return not self.heap_format

    def _is_heap_format(self, compressed: bool) -> bool:
        """Whether the blocks are in the HashMap backend's own format (:mod:`flinkstate.format.heap_blocks`).

        ``HeapSnapshotStrategy`` (checkpoints, native savepoints, and every heap savepoint before Flink 1.13's unified
        format) writes *every* key group of the range, empty or not, starting with ``i32 keyGroupId`` (never
        compressed). The canonical format (``FullSnapshotAsyncWriter``) starts a block with ``u16 stateId`` and
        ``i32 keyLength`` (or, compressed, with the snappy stream identifier 0xff...) and leaves empty key groups at
        offset 0. So: every key group present and the first i32 of a block equal to its key group. That is
        conclusive for a key group other than 0; a canonical uncompressed block of key group 0 may also start with
        four zero bytes, so there the block must also fail to parse as canonical. A canonical savepoint's handle
        (``KeyGroupsSavepointStateHandle``, code 7) is never heap format. Reading a heap block then checks every
        byte of it (key group, state ids, every element decoded, nothing left over)."""
        if self.handle.code == SAVEPOINT_KEY_GROUPS:
            return False
        offsets = self.handle.offsets.offsets
        if not offsets or not all(offsets) or not self._blocks:
            return False
        conclusive = compressed
        for key_group, start, end in self._blocks[:2]:
            head = self.source.read(start, 4) if end - start >= 4 else b""
            if len(head) != 4 or I32.unpack(head)[0] != key_group:
                return False
            conclusive = conclusive or key_group != 0
        if not conclusive:
            _, start, end = self._blocks[0]
            try:
                for _ in iter_raw_entries(self.source.read(start, end - start)):
                    pass
                return False  # a well-formed canonical block of key group 0
            except SavepointFormatError:
                pass
        return True

    def _refuse_canonical_access(self, what: str) -> None:
        self.header()
        if self.heap_format:
            raise UnsupportedFormat(f"{self.context}: {what} is not supported for keyed state in {HEAP_FORMAT} (a "
                                    f"checkpoint, a native savepoint, or a heap savepoint of Flink 1.12 or earlier): "
                                    f"take a canonical savepoint", self.source.path, self._blocks[0][1])

    def heap_blocks(self, state_name: str | None = None, key_group_range: KeyGroupRange | None = None
                    ) -> Iterator[HeapBlock]:
        """The parsed blocks of a heap-format stream (every key group, within ``key_group_range``); with
        ``state_name``, each block is walked only up to that state's section."""
        for key_group, start, end in self._blocks:
            if key_group_range is None or key_group in key_group_range:
                yield self.heap_block(key_group, start, end, state_name)

    def heap_block(self, key_group: int, start: int, end: int, state_name: str | None = None) -> HeapBlock:
        """One parsed block of a heap-format stream (``(key group, start, end)`` of :attr:`blocks`)."""
        header = self.header()
        wanted = header.state_index(state_name) if state_name is not None else None
        codecs = heap_codecs(header) if self._heap_codecs is None else self._heap_codecs
        self._heap_codecs = codecs  # built once per stream: a block per key group may be thousands of calls
        try:
            return walk_heap_block(self.source.read(start, end - start), key_group, codecs, header.compressed, wanted)
        except SavepointFormatError as exc:
            state = f", state {state_name}" if state_name else ""
            where = f" (at {exc.offset} in the decompressed block)" if header.compressed else ""
            # a compressed block's error is placed at the block's start, its offset inside said in the text
            base = start - (exc.offset or 0) if header.compressed else start
            raise exc.located(self.source.path, base, f"{self.context}{state}, key group {key_group}{where}"
                              ) from None

    def read_block(self, key_group: int, start: int, end: int, state_name: str | None = None) -> bytes:
        """The (decompressed) block of one key group; ``state_name`` only names the state being read in errors."""
        context = f"{self.context}, state {state_name}" if state_name else self.context
        self._refuse_canonical_access("migrating or copying entries (canonical key-group blocks)")
        data = self.source.read(start, end - start)
        if len(data) != end - start:
            raise SavepointFormatError(f"{context}: key group {key_group} block truncated ({len(data)} of "
                                       f"{end - start} bytes)", self.source.path, start + len(data))
        if not self.header().compressed:
            return data
        try:
            return decompress_framed(data)
        except LimitExceeded as exc:
            raise LimitExceeded(f"{context}: key group {key_group}: {exc.what}", self.source.path, start) from None
        except SnappyCorrupt as exc:
            raise SavepointFormatError(f"{context}: key group {key_group}: corrupted snappy block ({exc})",
                                       self.source.path, start) from None

    def entry_decoder(self, state_name: str) -> Callable[..., tuple[Any, ...]]:
        """The decoder of one state's entries in this stream's canonical blocks (the state must be in its header):
        what :meth:`iter_blocks` decodes them with."""
        header = self.header()
        index = header.state_index(state_name)
        assert index is not None
        try:
            return make_entry_decoder(header.states[index], self._key_layout(header, header.states[index]))
        except SavepointFormatError as exc:
            raise exc.located(self.source.path, 0, f"{self.context}, state {state_name}") from None

    def iter_blocks(self, state_name: str, key_group_range: KeyGroupRange | None = None
                    ) -> Iterator[tuple[int, list[tuple[Any, ...]]]]:
        """Yields ``(key group, entries)`` for every non-empty key group (within ``key_group_range``). Entries are
        ``(key, namespace, value)``; MAP state ``(key, namespace, user_key, value)``; timers
        ``(key, namespace, timestamp)``."""
        header = self.header()
        index = header.state_index(state_name)
        if index is None:
            return
        if self.heap_format:
            for block in self.heap_blocks(state_name, key_group_range):
                entries = [entry for state_id, _, elements in block.sections if state_id == index
                           for element in elements for entry in element.entries]
                if entries:
                    yield block.key_group, entries
            return
        decode_entry = self.entry_decoder(state_name)
        for key_group, start, end in self._blocks:
            if key_group_range is not None and key_group not in key_group_range:
                continue
            data = self.read_block(key_group, start, end, state_name)
            entries = self._decode_block(data, key_group, index, decode_entry, start, state_name)
            if entries:
                yield key_group, entries

    def _key_layout(self, header: KeyedBackendHeader, state: StateMetaInfo) -> KeyLayout:
        key = header.key_serializer
        namespace = state.namespace_serializer
        if key is None or namespace is None:
            raise SavepointFormatError(f"{self.context}, state {state.name}: no key or namespace serializer")
        ambiguous = key.fixed_length < 0 and namespace.fixed_length < 0
        return KeyLayout(self.prefix_bytes, key.decoder(), namespace.decoder(), ambiguous, key_snapshot=key)

    def _decode_block(self, data: bytes, key_group: int, wanted: int, decode_entry: EntryDecoder,
                      block_offset: int, state_name: str) -> list[tuple[Any, ...]]:
        entries: list[tuple[Any, ...]] = []
        pos = 0
        compiled = scan_compiled(decode_entry, data, key_group, wanted, len(self.header().states), self.prefix_bytes)
        if compiled is not None:  # else the reference walks the block and reports what the compiled walk failed on
            return compiled
        try:
            pos = self._scan_block(data, key_group, wanted, decode_entry, entries, len(self.header().states))
        except SavepointFormatError as exc:
            raise self._block_error(exc.what, exc.offset if exc.offset is not None else pos, key_group,
                                    block_offset, state_name) from None
        except (struct.error, IndexError, ValueError, UnicodeDecodeError, KeyError) as exc:
            raise self._block_error(f"undecodable entry ({type(exc).__name__}: {exc})", None, key_group,
                                    block_offset, state_name) from None
        return entries

    def raw_entries(self, data: bytes, key_group: int, block_offset: int
                    ) -> Iterator[tuple[int, int, int, int, int]]:
        """:func:`iter_raw_entries` over one of this stream's blocks (``data`` as :meth:`read_block` returns it, which
        started at ``block_offset``): state ids checked against this stream's header, every key's key-group prefix
        against ``key_group`` (as the decoding reader does: a block found at another key group's offset is refused,
        not copied), and a malformed block reported in one line naming the file, the offset, the operator and the
        key group."""
        if (compiled := raw_entries_compiled(data, len(self.header().states), key_group, self.prefix_bytes)):
            yield from compiled
            return
        two_byte_prefix = self.prefix_bytes == 2
        try:
            for entry in iter_raw_entries(data, len(self.header().states)):
                ks = entry[1]
                group = ((data[ks] & 0x7F) << 8 | data[ks + 1]) if two_byte_prefix else data[ks] & 0x7F
                if group != key_group:
                    raise SavepointFormatError(f"entry of key group {group} in the block of key group {key_group}",
                                               offset=ks)
                yield entry
        except SavepointFormatError as exc:
            raise self._block_error(exc.what, exc.offset, key_group, block_offset, None) from None

    def _block_error(self, what: str, offset: int | None, key_group: int, block_offset: int,
                     state_name: str | None) -> SavepointFormatError:
        state = f", state {state_name}" if state_name else ""
        context = f"{self.context}{state}, key group {key_group}"
        if self.header().compressed:
            where = f" (at {offset} in the decompressed block)" if offset is not None else ""
            return SavepointFormatError(f"{context}: {what}{where}", self.source.path, block_offset)
        return SavepointFormatError(f"{context}: {what}", self.source.path,
                                    block_offset + (offset or 0))

    def _scan_block(self, data: bytes, key_group: int, wanted: int, decode_entry: EntryDecoder,
                    entries: list[tuple[Any, ...]], state_count: int) -> int:
        """Walks every entry of a block, decoding those of state ``wanted``. Hot loop: locals only."""
        unpack_i32 = I32.unpack_from
        unpack_u16 = U16.unpack_from
        size = len(data)
        two_byte_prefix = self.prefix_bytes == 2
        append = entries.append
        if size < 2:
            raise SavepointFormatError("empty key-group block", offset=0)
        state_id = unpack_u16(data, 0)[0]
        pos = 2
        check_state_id(state_id, state_count, 0)
        while True:
            entry_start = pos
            key_len: int = unpack_i32(data, pos)[0]
            key_start = pos + 4
            value_pos = key_start + key_len
            if key_len <= 0 or value_pos + 4 > size:
                raise SavepointFormatError(f"bad key length {key_len}", offset=entry_start)
            value_len: int = unpack_i32(data, value_pos)[0]
            value_start = value_pos + 4
            pos = value_start + value_len
            if value_len < 0 or pos > size:
                raise SavepointFormatError(f"bad value length {value_len}", offset=value_pos)
            first = data[key_start]
            group = ((first & 0x7F) << 8 | data[key_start + 1]) if two_byte_prefix else first & 0x7F
            if group != key_group:
                raise SavepointFormatError(f"entry of key group {group} in the block of key group {key_group}",
                                           offset=key_start)
            if state_id == wanted:
                append(decode_entry(data, key_start, value_pos, value_start, pos))
            if first & FIRST_BIT_IN_BYTE_MASK:
                if pos + 2 > size:
                    raise SavepointFormatError("missing state id after the last entry of a run", offset=pos)
                state_id = unpack_u16(data, pos)[0]
                pos += 2
                if state_id == END_OF_KEY_GROUP_MARK:
                    if pos != size:
                        raise SavepointFormatError(f"{size - pos} bytes after the end-of-key-group mark", offset=pos)
                    return pos
                check_state_id(state_id, state_count, pos - 2)
            elif pos >= size:
                raise SavepointFormatError("block ends without an end-of-key-group mark", offset=pos)


# --------------------------------------------------------------------------------------------------------------------
# Keyed-state stream
# --------------------------------------------------------------------------------------------------------------------


def keyed_stream_file_name(operator_id: str, subtask: int) -> str:
    """The deterministic name of a rewritten keyed-state file (Flink uses random UUIDs; any name works with
    relative handles)."""
    return f"keyed-{operator_id}-{subtask:05d}"


class KeyedStreamWriter:
    """Writes one subtask's keyed-state stream to ``sink``: call :meth:`write_block` for key groups in increasing
    order, then :meth:`finish` for the handle. ``header.compressed`` decides whether blocks are snappy-framed."""

    def __init__(self, sink: BinaryIO, header: KeyedBackendHeader, key_group_range: KeyGroupRange,
                 relative_path: str) -> None:
        self.sink = sink
        self.compressed = header.compressed
        self.range = key_group_range
        self.relative_path = relative_path
        self.offsets = [0] * len(key_group_range)
        self.position = 0
        self._last_key_group = key_group_range.start - 1
        self._write(header.write())

    def _write(self, data: bytes) -> None:
        self.sink.write(data)
        self.position += len(data)

    def write_block(self, key_group: int, block: bytes) -> None:
        """``block`` is the uncompressed block (see :func:`encode_block`); empty blocks are not written."""
        if key_group not in self.range or key_group <= self._last_key_group:
            raise WriteError(f"key group {key_group} written out of order or outside {self.range}")
        self._last_key_group = key_group
        if not block:
            return
        self.offsets[key_group - self.range.start] = self.position
        self._write(bytes(cramjam.snappy.compress(block)) if self.compressed else block)

    def write_raw_block(self, key_group: int, data: bytes) -> None:
        """A block copied as stored (already compressed when the stream is)."""
        if key_group not in self.range or key_group <= self._last_key_group:
            raise WriteError(f"key group {key_group} written out of order or outside {self.range}")
        self._last_key_group = key_group
        self.offsets[key_group - self.range.start] = self.position
        self._write(data)

    def finish(self) -> KeyGroupsStateHandle:
        offsets = KeyGroupRangeOffsets(self.range, tuple(self.offsets))
        return KeyGroupsStateHandle(SAVEPOINT_KEY_GROUPS, offsets,
                                    RelativeFileStateHandle(self.position, self.relative_path))


__all__ = ["KeyedStateStream", "KeyedStreamWriter", "StreamSource", "encode_block", "iter_raw_entries",
           "key_group_prefix_bytes", "keyed_stream_file_name", "raw_key"]
