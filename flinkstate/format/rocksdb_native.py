"""Native RocksDB snapshots: RocksDB native savepoints and retained RocksDB checkpoints (incremental or not), i.e. the
keyed state of a subtask held by an ``IncrementalRemoteKeyedStateHandle`` (:class:`IncrementalKeyedStateHandle`).

Such a snapshot is the RocksDB instance itself: its files (SST files, ``MANIFEST-*``, ``CURRENT``, ``OPTIONS-*``) as
the handle's shared and private (local file name -> stream handle) lists, plus a meta state file holding the same
``KeyedBackendSerializationProxy`` header a canonical keyed stream starts with (``RocksDBSnapshotStrategyBase``
``materializeMetaData``). One column family per state, named by the state's name; its keys and values are the
composite keys and values the canonical format stores (the canonical writer copies RocksDB's bytes as they are), so
:mod:`flinkstate.format.keyed_entries` decodes them.

The RocksDB instance is rebuilt in a private temporary directory from the handles (copies of the savepoint's own
files only, each bounded by its recorded size; containment was checked when the savepoint was opened) and opened
read-only with ``rocksdict`` (a RocksDB binding). RocksDB iterates keys in byte order, and every key starts with its
key group (big-endian), so entries come out grouped by key group in key-group order, as canonical blocks do.

List state filled with ``add()`` (and every window's contents) is stored as merge operands, which RocksDB resolves on
read with the column family's merge operator (Flink's: FRocksDB's ``StringAppendTESTOperator``, delimiter ``,``).
rocksdict cannot set one, but it loads the column families' options from the snapshot's ``OPTIONS`` file, and
RocksDB's options loader creates that built-in operator by its name. The database options stay rocksdict's defaults:
the file's name the writer's own directories (``wal_dir``), which do not exist here. An iterator stops on an error
(such as an operand without a merge operator) as if the data had ended: every scan checks the iterator's status when
it stops, so an error is an error, never a shorter read. (The verifier checks this reader against an independent
walk of the SST files: :mod:`flinkstate.format.sst_walk`.)
"""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from collections.abc import Iterator
from functools import partial
from typing import Any, Protocol

from flinkstate._speedups import native_group_scanner
from flinkstate.binary import KeyGroupRange
from flinkstate.format.handles import (
    ByteStreamStateHandle,
    FileStateHandle,
    IncrementalKeyedStateHandle,
    RelativeFileStateHandle,
    StreamStateHandle,
)
from flinkstate.format.heap_blocks import HeapBlock
from flinkstate.format.keyed_entries import EntryDecoder, make_entry_decoder
from flinkstate.format.keyed_header import KeyedBackendHeader
from flinkstate.format.keyed_stream import KeyedStateStream, StreamSource, encode_block, key_group_prefix_bytes
from flinkstate.format_errors import SavepointFormatError, UnsupportedFormat
from flinkstate.storage.locations import SavepointLocation, StorageError

#: What a native RocksDB snapshot is called in messages, and what to do instead where only canonical state will do.
NATIVE_ROCKSDB = "a native RocksDB snapshot (a RocksDB native savepoint or a retained RocksDB checkpoint)"
TAKE_CANONICAL = "take a canonical savepoint (Flink's default savepoint format)"
_COPY_CHUNK = 1 << 20


class _IteratorStopped(Exception):
    """A RocksDB iterator stopped on an error, not at the end of its data (reported with the state it read)."""


class NativeRocksDBStream(KeyedStateStream):
    """One subtask's native RocksDB snapshot, read like a canonical keyed stream: :meth:`header` from the meta state
    file, :meth:`iter_blocks` from the rebuilt RocksDB instance. What only canonical key-group blocks allow (copying
    blocks byte for byte, migrating) is refused in one line."""

    #: No stored canonical blocks: entries are read (and migrated) through the format's own reader.
    canonical_blocks = False

    def __init__(self, location: SavepointLocation, handle: IncrementalKeyedStateHandle,
                 max_parallelism: int, context: str) -> None:
        # KeyedStateStream.__init__ is not called: there is no key-group offset table, the blocks are RocksDB's.
        if handle.meta_state is None:
            raise SavepointFormatError(f"{context}: native RocksDB state handle without a meta state file")
        self.native = handle
        self.location = location
        self.context = context
        self.prefix_bytes = key_group_prefix_bytes(max_parallelism)
        self.source = StreamSource(location, handle.meta_state)
        self._blocks = []
        self._header: KeyedBackendHeader | None = None
        self.heap_format = False
        self._directory: str | None = None
        self._db: Any = None
        self._options_problem = ""
        # canonical_block's position: one raw iterator per state (by state id), and the key group it read last
        self._cursors: list[Any] | None = None
        self._cursor_group = -2  # never -1: the next call, even for key group 0, seeks

    @property
    def key_group_range(self) -> KeyGroupRange:
        return self.native.key_group_range

    @property
    def blocks(self) -> list[tuple[int, int, int]]:
        """No key-group blocks (the entries are in RocksDB's files): ``(key group, 0, 0)`` per key group of the
        range, which is what progress reports count."""
        return [(key_group, 0, 0) for key_group in self.native.key_group_range]

    def header(self, tolerant: bool = False) -> KeyedBackendHeader:
        """The ``KeyedBackendSerializationProxy`` of the meta state file, which must hold nothing else."""
        if self._header is None or (self._header.error is not None and not tolerant):
            from flinkstate.format.keyed_header import read_stream_header

            data = self.source.read(0, self.source.size)
            header = read_stream_header(data, self.source.path, self.context, tolerant)
            if header.error is None and header.length != len(data):
                raise SavepointFormatError(f"{self.context}: {len(data) - header.length} bytes after the keyed state "
                                           f"header in the native RocksDB meta state file", self.source.path,
                                           header.length)
            if header.compressed:  # RocksDB compresses its own SST blocks; Flink never sets the flag here
                raise UnsupportedFormat(f"{self.context}: native RocksDB meta state says key-group compression",
                                        self.source.path, 4)
            self._header = header
        return self._header

    def _refuse(self, what: str) -> UnsupportedFormat:
        return UnsupportedFormat(f"{self.context}: {what} is not supported for keyed state in {NATIVE_ROCKSDB}: "
                                 f"{TAKE_CANONICAL}", self.source.path, 0)

    def read_block(self, key_group: int, start: int, end: int, state_name: str | None = None) -> bytes:
        raise self._refuse("migrating or copying entries (canonical key-group blocks)")

    def heap_blocks(self, state_name: str | None = None, key_group_range: KeyGroupRange | None = None
                    ) -> Iterator[HeapBlock]:
        raise self._refuse("reading heap-format blocks")

    # -- the RocksDB instance ----------------------------------------------------------------------------------------

    def _files(self) -> list[tuple[str, StreamStateHandle]]:
        files: list[tuple[str, StreamStateHandle]] = []
        seen: set[str] = set()
        for entry in (*self.native.shared, *self.native.private):
            if entry.handle is None:
                raise SavepointFormatError(f"{self.context}: native RocksDB file {entry.local_path} has no state "
                                           f"handle", self.location.describe("_metadata"))
            if entry.local_path in seen:
                raise SavepointFormatError(f"{self.context}: native RocksDB file {entry.local_path} is listed twice",
                                           self.location.describe("_metadata"))
            seen.add(entry.local_path)
            files.append((entry.local_path, entry.handle))
        if "CURRENT" not in seen:
            raise SavepointFormatError(f"{self.context}: the native RocksDB snapshot lists no CURRENT file",
                                       self.location.describe("_metadata"))
        return files

    def _open_db(self) -> Any:
        if self._db is not None:
            return self._db
        files = self._files()
        directory = tempfile.mkdtemp(prefix="flinkstate-rocksdb-")
        self._directory = directory
        # The copy goes when the stream does (or at exit), whatever happens to the reader.
        weakref.finalize(self, shutil.rmtree, directory, True)
        for local_name, handle in files:
            self._copy(handle, os.path.join(directory, local_name))
        from rocksdict import AccessType, Options, Rdict

        # the column families' options as written (merge operator included); without them, plain options, and a
        # merge operand is then an iterator error, reported by _check_status with why the options are missing
        loaded, self._options_problem = column_family_options(directory)
        try:
            families = Rdict.list_cf(directory, Options(raw_mode=True))
            self._db = Rdict(directory, options=Options(raw_mode=True),
                             column_families={name: loaded.get(name) or Options(raw_mode=True) for name in families},
                             access_type=AccessType.read_only())
        except Exception as exc:  # rocksdict raises plain Exception with RocksDB's status text
            raise SavepointFormatError(f"{self.context}: RocksDB cannot open the native snapshot's files: {exc}",
                                       self.source.path) from None
        self._families = set(families)
        return self._db

    def _copy(self, handle: StreamStateHandle, target: str) -> None:
        """One file of the instance, bounded by its recorded size (never more bytes than the metadata says)."""
        if isinstance(handle, ByteStreamStateHandle):
            with open(target, "xb") as out:
                out.write(handle.data)
            return
        if not isinstance(handle, (RelativeFileStateHandle, FileStateHandle)):
            raise UnsupportedFormat(f"{self.context}: unsupported stream handle {type(handle).__name__}")
        name = handle.relative_path if isinstance(handle, RelativeFileStateHandle) else handle.path
        try:
            with self.location.bounded_stream(name) as src, open(target, "xb") as out:
                copied = 0
                while chunk := src.read(min(_COPY_CHUNK, handle.size - copied)):
                    out.write(chunk)
                    copied += len(chunk)
                    if copied >= handle.size:
                        break
        except StorageError as exc:
            raise StorageError(f"{self.context}: native RocksDB file: {exc}") from None
        if copied != handle.size:
            raise SavepointFormatError(f"{self.context}: state file is truncated: {copied} bytes, the metadata "
                                       f"records {handle.size}", self.location.describe(name), copied)

    def close(self) -> None:
        self._cursors = None  # iterators first: they hold the column families open
        if self._db is not None:
            self._db.close()
            self._db = None
        if self._directory is not None:
            shutil.rmtree(self._directory, ignore_errors=True)
            self._directory = None

    def sst_files(self) -> list[tuple[str, str]]:
        """``(path of the local copy, the savepoint's file for messages)`` of every SST file of the snapshot, for
        readers of the files themselves (:mod:`flinkstate.format.sst_walk`)."""
        self._open_db()
        assert self._directory is not None
        found = []
        for local_name, handle in self._files():
            if local_name.endswith(".sst"):
                name = handle.relative_path if isinstance(handle, RelativeFileStateHandle) else \
                    handle.path if isinstance(handle, FileStateHandle) else "_metadata"
                found.append((os.path.join(self._directory, local_name),
                              f"{self.location.describe(name)} ({local_name})"))
        return found

    # -- entries -----------------------------------------------------------------------------------------------------

    def _scan(self, db: Any, state_name: str, start_key: bytes) -> Iterator[tuple[bytes, bytes]]:
        """``(key, value)`` of one column family from ``start_key`` on, in key order, until the caller stops or the
        column family ends; an iterator that stops on an error raises it (``_check_status``). What the readers of
        entries (and the verifier) read; :meth:`canonical_block`, the migration's writer, reads :meth:`_pairs`."""
        return self._pairs(db, state_name, start_key)

    def _pairs(self, db: Any, state_name: str, start_key: bytes) -> Iterator[tuple[bytes, bytes]]:
        """:meth:`_scan`'s pairs."""
        family = db.get_column_family(state_name)
        pair: tuple[bytes, bytes] | None = None
        # rocksdict's items() makes each pair in one call (raw mode: bytes), but ends on an error as at the end of
        # the data: a cursor past the last pair it gave must be at the end too, with no error
        for pair in family.items(from_key=start_key):
            yield pair
        cursor = family.iter()
        cursor.seek(start_key if pair is None else pair[0])
        if pair is not None and cursor.valid():
            cursor.next()
        if cursor.valid():
            raise _IteratorStopped(f"RocksDB's items ended before key 0x{bytes(cursor.key()).hex()}, which it "
                                   f"holds{self._options_problem}")
        self._check_status(cursor)

    def _check_status(self, cursor: Any) -> None:
        """Raises the error an invalid iterator stopped on (none when it reached the end of its data)."""
        try:
            cursor.status()
        except Exception as exc:  # rocksdict raises plain Exception with RocksDB's status text
            raise _IteratorStopped(f"RocksDB stopped reading on an error: {exc}{self._options_problem}") from None

    def iter_blocks(self, state_name: str, key_group_range: KeyGroupRange | None = None
                    ) -> Iterator[tuple[int, list[tuple[Any, ...]]]]:
        """``(key group, entries)`` per non-empty key group (within ``key_group_range``), in key-group order, the
        entries as :meth:`KeyedStateStream.iter_blocks` gives them."""
        header = self.header()
        index = header.state_index(state_name)
        if index is None:
            return
        state = header.states[index]
        layout = self._key_layout(header, state)
        try:
            decode_entry = make_entry_decoder(state, layout)
        except SavepointFormatError as exc:
            raise exc.located(self.source.path, 0, f"{self.context}, state {state_name}") from None
        db = self._open_db()
        if state_name not in self._families:  # registered, but RocksDB holds no column family: no entries
            return
        wanted = self.key_group_range if key_group_range is None else \
            self.key_group_range.intersection(key_group_range)
        if not len(wanted):
            return
        prefix = self.prefix_bytes
        # one call per key group, in C when the decoder is compiled (no Python per entry), else the reference
        take_group = native_group_scanner(decode_entry) or partial(take_key_group, decode_entry)
        current: int | None = None
        try:
            pairs = self._scan(db, state_name, wanted.start.to_bytes(prefix, "big"))
            pending = next(pairs, None)
            while pending is not None:
                key_group = int.from_bytes(pending[0][:prefix], "big")
                if key_group > wanted.end:
                    break
                if key_group < wanted.start:
                    raise SavepointFormatError(f"entry of key group {key_group} before key group {wanted.start}")
                current = key_group
                entries: list[tuple[Any, ...]] = []
                pending = take_group(pairs, pending, prefix, entries)
                yield current, entries
        except SavepointFormatError as exc:
            where = f", key group {current}" if current is not None else ""
            raise SavepointFormatError(f"{self.context}, state {state_name}{where}: {exc.what}",
                                       self.source.path) from None
        except _IteratorStopped as exc:
            where = f", after key group {current}" if current is not None else ""
            raise SavepointFormatError(f"{self.context}, state {state_name}{where}: {exc}", self.source.path) from None
        except Exception as exc:  # an undecodable entry
            where = f", key group {current}" if current is not None else ""
            raise SavepointFormatError(f"{self.context}, state {state_name}{where}: cannot read the entry "
                                       f"({type(exc).__name__}: {exc})", self.source.path) from None

    def canonical_block(self, key_group: int) -> bytes:
        """The key group's block as a canonical savepoint of the same job stores it (uncompressed; ``b""`` when the
        key group holds no entry): per state in state-id order (the header's), its RocksDB key and value bytes in
        RocksDB's key order, copied as they are. That is what ``FullSnapshotAsyncWriter`` writes from
        ``RocksStatesPerKeyGroupMergeIterator`` (ordered by key group, then state id, then key), list state's merged
        value included (the merge operator runs on read). Calls for consecutive key groups continue one iterator per
        state; any other call seeks, so memory stays one key group's entries."""
        header = self.header()
        db = self._open_db()
        prefix = self.prefix_bytes
        start = key_group.to_bytes(prefix, "big")
        if self._cursors is None:  # per state: its pairs iterator and the first pair not yet taken
            self._cursors = [[None, None] if state.name in self._families else None for state in header.states]
        reseek = key_group != self._cursor_group + 1
        self._cursor_group = key_group
        runs: list[tuple[int, list[tuple[bytes, bytes]]]] = []
        for state_id, cursor in enumerate(self._cursors):
            if cursor is None:
                continue
            pairs: list[tuple[bytes, bytes]] = []
            try:
                if reseek or cursor[0] is None:
                    cursor[0] = self._pairs(db, header.states[state_id].name, start)
                    cursor[1] = next(cursor[0], None)
                pending = cursor[1]
                if pending is not None:
                    group = int.from_bytes(pending[0][:prefix], "big")
                    if group < key_group:
                        raise SavepointFormatError(f"entry of key group {group} after key group {key_group - 1}")
                    if group == key_group:
                        pending = take_pairs(cursor[0], pending, prefix, pairs)
                cursor[1] = pending
            except SavepointFormatError as exc:
                raise SavepointFormatError(f"{self.context}, state {header.states[state_id].name}, key group "
                                           f"{key_group}: {exc.what}", self.source.path) from None
            except _IteratorStopped as exc:
                raise SavepointFormatError(f"{self.context}, state {header.states[state_id].name}, key group "
                                           f"{key_group}: {exc}", self.source.path) from None
            except Exception as exc:  # RocksDB's status text
                raise SavepointFormatError(f"{self.context}, state {header.states[state_id].name}, key group "
                                           f"{key_group}: cannot read the entry ({type(exc).__name__}: {exc})",
                                           self.source.path) from None
            runs.append((state_id, pairs))
        return encode_block(runs)


class PairSink(Protocol):
    def append(self, pair: tuple[bytes, bytes], /) -> None: ...


def take_pairs(pairs: Iterator[tuple[bytes, bytes]], first: tuple[bytes, bytes], prefix_bytes: int,
               out: PairSink) -> tuple[bytes, bytes] | None:
    """Appends ``first`` and every following pair of ``pairs`` in its key group (the keys' first ``prefix_bytes``
    bytes) to ``out``, each before the next is taken; returns the first pair of the next key group, or None at the
    end. A key shorter than the prefix is refused (ValueError)."""
    group = first[0][:prefix_bytes]
    if len(group) < prefix_bytes:
        raise _short_key(first[0], prefix_bytes)
    out.append(first)
    for pair in pairs:
        if pair[0][:prefix_bytes] != group:
            if len(pair[0]) < prefix_bytes:
                raise _short_key(pair[0], prefix_bytes)
            return pair
        out.append(pair)
    return None


def _short_key(key: bytes, prefix_bytes: int) -> ValueError:
    return ValueError(f"a key of {len(key)} bytes, shorter than its {prefix_bytes}-byte key-group prefix")


class _Decoded:
    """A :class:`PairSink` that decodes each pair into ``entries`` as ``decode_entry`` does key + value."""

    def __init__(self, decode_entry: EntryDecoder, entries: list[tuple[Any, ...]]) -> None:
        self.decode_entry, self.entries = decode_entry, entries

    def append(self, pair: tuple[bytes, bytes], /) -> None:
        key, value = pair
        buf = key + value
        self.entries.append(self.decode_entry(buf, 0, len(key), len(key), len(buf)))


def take_key_group(decode_entry: EntryDecoder, pairs: Iterator[tuple[bytes, bytes]], first: tuple[bytes, bytes],
                   prefix_bytes: int, entries: list[tuple[Any, ...]]) -> tuple[bytes, bytes] | None:
    """Decodes ``first`` and every following pair of ``pairs`` in its key group into ``entries``, each before the
    next is taken; returns the first pair of the next key group, or None at the end. The reference of the compiled
    ``EntryDecoder.scan_pairs`` (flinkstate/_speedups/_cdecode.c), which must do exactly this."""
    return take_pairs(pairs, first, prefix_bytes, _Decoded(decode_entry, entries))


def column_family_options(directory: str) -> tuple[dict[str, Any], str]:
    """rocksdict options per column family from the snapshot's ``OPTIONS`` file (RocksDB's loader creates the merge
    operator it names), and ``""``; or no options and why they cannot be loaded (for messages)."""
    from rocksdict import Options

    try:
        return Options.load_latest(directory, ignore_unknown_options=True)[1], ""
    except Exception as exc:  # rocksdict raises plain Exception with RocksDB's status text
        return {}, f"; the snapshot's OPTIONS file cannot be loaded: {exc}"


def iter_raw(stream: NativeRocksDBStream, state_name: str, key_group_range: KeyGroupRange | None = None
             ) -> Iterator[tuple[int, bytes, bytes]]:
    """``(key group, key bytes, value bytes)`` of every entry of one state inside the stream's key-group range (and
    ``key_group_range``), in RocksDB's order (byte-level comparisons with a canonical savepoint's raw entries)."""
    if stream.header().state_index(state_name) is None:
        return
    db = stream._open_db()
    if state_name not in stream._families:
        return
    prefix, wanted = stream.prefix_bytes, stream.key_group_range
    if key_group_range is not None:
        wanted = wanted.intersection(key_group_range)
        if not len(wanted):
            return
    try:
        for key, value in stream._scan(db, state_name, wanted.start.to_bytes(prefix, "big")):
            key_group = int.from_bytes(key[:prefix], "big")
            if key_group > wanted.end:
                return
            yield key_group, key, value
    except _IteratorStopped as exc:
        raise SavepointFormatError(f"{stream.context}, state {state_name}: {exc}", stream.source.path) from None


def native_handle_files(handle: IncrementalKeyedStateHandle) -> int:
    """How many RocksDB files the snapshot of one subtask has (``describe``)."""
    return len(handle.shared) + len(handle.private)


__all__ = ["NATIVE_ROCKSDB", "TAKE_CANONICAL", "NativeRocksDBStream", "column_family_options", "iter_raw",
           "native_handle_files", "take_key_group", "take_pairs"]
