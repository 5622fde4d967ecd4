"""Keyed state of the changelog state backend (``state.changelog.enabled``, Flink 1.15+ "generic log-based
incremental checkpoints"), read as the checkpoint's logical state.

A subtask's handle (:class:`~flinkstate.format.handles.ChangelogBackendHandle`) holds the *materialized* state (the
wrapped backend's own snapshot: HashMap key groups or a native RocksDB snapshot, read by the existing readers) and
the changes logged since (*non-materialized*: inline in ``_metadata`` with the in-memory storage, or change sets in
the DSTL's files, ``StateChangeFormat``: ``u8 compressed`` then, Snappy-framed or not, per change set
``i32 groups; per group: i32 n, i32 keyGroup, n x (i32 len, bytes)``, at the offsets the handle records).

A change (``AbstractStateChangeLogger``) starts with its ``StateChangeOperation`` code. ``METADATA`` (key group -1)
registers a state: ``i32 metaVersion``, the ``StateMetaInfoSnapshot``, (key/value states) the TTL flag, the TTL
config (Java-serialized) and the default value, then ``i16 stateId``, ``u8 backendStateType`` (read from the end:
the Java-serialized TTL config has no length). A data change is ``u8 op, i16 stateId``, then for key/value states
the key and namespace, then the operation's data; for priority queues (timers) the timers themselves. They are
applied in log order as ``ChangelogBackendLogApplier`` and the ``*StateChangeApplier`` classes do, per key group, on
top of the materialized entries.

The key serializer is not in the log (Flink restores with the job's own): it comes from the materialized part's
header, else from a timer state's ``TimerSerializer`` snapshot. Without either (a subtask that never materialized
and has no timers) keys are given as their bytes, delimited where the namespace and value have fixed lengths, unless
the key type is supplied from outside (:meth:`ChangelogStream.assume_key_serializer`: a migration takes the new
job's, as Flink does; every key must then decode to exactly its bytes).

Memory: the changes of the state and key-group range being read, plus one key group's entries.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import cramjam

from flinkstate.binary import I16, I32, KeyGroupRange, Reader, assign_key_group
from flinkstate.errors import printable
from flinkstate.format.changelog_apply import DECODE_ERRORS, Applier
from flinkstate.format.changelog_handles import ChangelogBackendHandle, ChangelogStreamHandle, InMemoryChangelogHandle
from flinkstate.format.handles import (
    META_KEY_GROUP,
    IncrementalKeyedStateHandle,
)
from flinkstate.format.heap_blocks import HeapBlock
from flinkstate.format.keyed_header import (
    KEYED_PROXY_VERSION,
    VALUE_SERIALIZER,
    KeyedBackendHeader,
    StateMetaInfo,
    read_state_meta_info,
    state_meta_bytes,
)
from flinkstate.format.keyed_stream import KeyedStateStream, StreamSource, key_group_prefix_bytes
from flinkstate.format.rocksdb_native import NativeRocksDBStream
from flinkstate.format_errors import SavepointFormatError, UnsupportedFormat, UnsupportedKeyType
from flinkstate.jsonify import to_json
from flinkstate.serializers.base import TypeSerializerSnapshot
from flinkstate.serializers.registry import snapshot_bytes
from flinkstate.serializers.timer import TimerSnapshot
from flinkstate.storage.locations import SavepointLocation, StorageError

#: A changelog file is read whole (its recorded size is not its length); the DSTL uploads its changes in batches
#: of a few MiB (``state.changelog.dstl.dfs.batch.persist-size-threshold``), so a larger file is refused.
MAX_LOG_FILE_BYTES = 1 << 30

#: What the refusals call the format.
CHANGELOG = "a changelog checkpoint (the changelog state backend)"

_BACKEND_TYPES = {0: "KEY_VALUE", 3: "PRIORITY_QUEUE"}  # StateMetaInfoSnapshot.BackendStateType codes in the log

#: ``StateMetaInfoSnapshotReadersWriters``' versions the log's registrations carry: 6 (Flink 1.15, 1.16) and 7
#: (``CURRENT_STATE_META_INFO_SNAPSHOT_VERSION`` since FLINK-30113, Flink 1.17+), read alike by its current reader
#: (version 7 changed operator state only).
META_INFO_VERSIONS = (6, 7)


class _LogSource:
    """Where errors about the log point when there is no materialized stream (the changes are inline)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.size = 0


class ChangelogStream(KeyedStateStream):
    """One subtask's keyed state under the changelog backend, read like a canonical keyed stream: :meth:`header`
    (the materialized header and the states the log registers) and :meth:`iter_blocks` (materialized entries with
    the log applied). Copying stored blocks is refused in one line, as for other native formats."""

    #: No stored canonical blocks: entries are read (and migrated) through the format's own reader.
    canonical_blocks = False

    def __init__(self, location: SavepointLocation, handle: ChangelogBackendHandle, max_parallelism: int,
                 context: str) -> None:
        # KeyedStateStream.__init__ is not called: there is no key-group offset table of its own.
        self.changelog = handle
        self.location = location
        self.context = context
        self.prefix_bytes = key_group_prefix_bytes(max_parallelism)
        self.max_parallelism = max_parallelism
        #: False once a key read with an assumed key type could not be hashed (checked by its bytes alone)
        self.key_groups_checked = True
        self.materialized: list[KeyedStateStream] = [
            NativeRocksDBStream(location, part, max_parallelism, f"{context} (materialized)")
            if isinstance(part, IncrementalKeyedStateHandle)
            else KeyedStateStream(location, part, max_parallelism, f"{context} (materialized)")
            for part in handle.materialized if part is not None]
        self.source = (self.materialized[0].source if self.materialized
                       else _LogSource(location.describe("_metadata")))  # type: ignore[assignment]
        self._blocks = []
        self._header: KeyedBackendHeader | None = None
        self.heap_format = False
        self._files: dict[int, tuple[str, bytes]] = {}  # id(stream handle) -> (path, decompressed log bytes)
        #: state id in the log -> state name, per METADATA change bytes (parsed once)
        self._meta_cache: dict[bytes, tuple[int, StateMetaInfo]] = {}
        #: The key serializer supplied from outside when the checkpoint records none (assume_key_serializer).
        self._assumed_key: TypeSerializerSnapshot | None = None
        self._key_recorded = True
        #: canonical_entries: per state, its iterator of non-empty key groups and the next one it holds
        self._cursors: dict[str, tuple[Iterator[tuple[int, list[tuple[Any, ...]]]],
                                       tuple[int, list[tuple[Any, ...]]] | None]] = {}
        self._cursor_key_group = -1

    @property
    def key_group_range(self) -> KeyGroupRange:
        return self.changelog.key_group_range

    @property
    def blocks(self) -> list[tuple[int, int, int]]:
        """No stored blocks: ``(key group, 0, 0)`` per key group of the range (what progress reports count)."""
        return [(key_group, 0, 0) for key_group in self.changelog.key_group_range]

    def _refuse(self, what: str) -> UnsupportedFormat:
        return UnsupportedFormat(f"{self.context}: {what} is not supported for keyed state in {CHANGELOG}",
                                 self.source.path, 0)

    def read_block(self, key_group: int, start: int, end: int, state_name: str | None = None) -> bytes:
        raise self._refuse("copying stored key-group blocks")

    def heap_blocks(self, state_name: str | None = None, key_group_range: KeyGroupRange | None = None
                    ) -> Iterator[HeapBlock]:
        raise self._refuse("reading heap-format blocks")

    # -- the log -----------------------------------------------------------------------------------------------------

    def iter_changes(self) -> Iterator[tuple[int, bytes, str]]:
        """``(key group, change bytes, where)`` of every change of the non-materialized parts, in replay order. A
        change of another subtask's key group is kept (Flink's applier skips those: logs read after rescaling hold
        them), one of a key group no job of this max parallelism has is refused."""
        for key_group, data, where in self._changes():
            if key_group != META_KEY_GROUP and not 0 <= key_group < self.max_parallelism:
                raise SavepointFormatError(f"{self.context}: a change of key group {key_group} in the changelog "
                                           f"(max parallelism {self.max_parallelism}: 0 to "
                                           f"{self.max_parallelism - 1}, or {META_KEY_GROUP} for a registration)",
                                           where)
            yield key_group, data, where

    def _changes(self) -> Iterator[tuple[int, bytes, str]]:
        for part in self.changelog.non_materialized:
            if isinstance(part, InMemoryChangelogHandle):
                where = f"{self.location.describe('_metadata')} (inline changelog)"
                for change in part.changes:
                    yield change.key_group, change.data, where
            elif isinstance(part, ChangelogStreamHandle):
                for handle, offset in part.handles_and_offsets:
                    if handle is None:
                        raise SavepointFormatError(f"{self.context}: changelog part without a stream handle",
                                                   self.location.describe("_metadata"))
                    path, data = self._log_file(handle)
                    yield from _change_set(data, offset, path)

    def _log_file(self, handle: Any) -> tuple[str, bytes]:
        """A changelog file's bytes after its compression flag, decompressed. The size Flink records for it is not
        the file's length but what was written after the flag before compression (``StateChangeFsUploader``:
        ``OutputStreamWithPos.pos``): the whole file is read and the decompressed bytes must be exactly that many.
        The last file read is kept, since consecutive change sets usually share one."""
        cached = self._files.get(id(handle))
        if cached is not None:
            return cached
        try:
            source = StreamSource(self.location, handle, sized=False)
            if max(source.size, handle.size) > MAX_LOG_FILE_BYTES:
                raise SavepointFormatError(f"changelog file of {max(source.size, handle.size)} bytes, more than the "
                                           f"{MAX_LOG_FILE_BYTES} this reader takes", source.path, 0)
            raw = source.read(0, source.size)
        except StorageError as exc:
            raise StorageError(f"{self.context}: changelog file: {exc}") from None
        except SavepointFormatError as exc:
            raise exc.located(None, 0, self.context) from None
        if not raw:
            raise SavepointFormatError(f"{self.context}: empty changelog file", source.path, 0)
        if raw[0] == 1:
            # Decompressed into the recorded size and one byte more, never further: a stream that expands past it
            # is refused without being held in memory.
            out = bytearray(handle.size + 1)
            try:
                data = bytes(memoryview(out)[:cramjam.snappy.decompress_into(raw[1:], out)])
            except Exception as exc:  # cramjam raises its own DecompressionError
                raise SavepointFormatError(f"{self.context}: corrupted snappy changelog, or one longer than the "
                                           f"{handle.size} bytes the metadata records ({exc})", source.path,
                                           1) from None
        elif raw[0] == 0:
            data = raw[1:]
        else:
            raise SavepointFormatError(f"{self.context}: changelog file starts with compression flag {raw[0]} "
                                       f"(0 or 1 expected)", source.path, 0)
        if len(data) != handle.size:
            state = "truncated" if len(data) < handle.size else "longer than recorded"
            raise SavepointFormatError(f"{self.context}: changelog file is {state}: {len(data)} bytes after its "
                                       f"compression flag{' (decompressed)' if raw[0] else ''}, the metadata records "
                                       f"{handle.size}", source.path, len(raw))
        self._files = {id(handle): (source.path, data)}
        return source.path, data

    def _meta(self, data: bytes, where: str) -> tuple[int, StateMetaInfo]:
        """(state id, meta info) of a METADATA change."""
        cached = self._meta_cache.get(data)
        if cached is not None:
            return cached
        reader = Reader(data, 1, where)
        try:
            version = reader.i32()
            if version not in META_INFO_VERSIONS:
                raise UnsupportedFormat(f"state meta info version {version} in the changelog (only "
                                        f"{' and '.join(map(str, META_INFO_VERSIONS))})")
            meta = read_state_meta_info(reader)
            if len(data) < reader.pos + 3:
                raise SavepointFormatError("state registration ends before its state id")
            state_id = I16.unpack_from(data, len(data) - 3)[0]
            backend_type = _BACKEND_TYPES.get(data[-1])
        except SavepointFormatError as exc:
            raise exc.located(where, 0, f"{self.context}: changelog state registration") from None
        except DECODE_ERRORS as exc:
            raise SavepointFormatError(f"{self.context}: changelog state registration: undecodable "
                                       f"({type(exc).__name__}: {exc})", where) from None
        if backend_type != meta.backend_type:
            raise SavepointFormatError(f"{self.context}: changelog registration of state {meta.name} says backend "
                                       f"type code {data[-1]}, its meta info {meta.backend_type}", where)
        self._meta_cache[data] = (state_id, meta)
        return state_id, meta

    # -- header ------------------------------------------------------------------------------------------------------

    def header(self, tolerant: bool = False) -> KeyedBackendHeader:
        """The materialized parts' states, then those the log registers (first registration order); the key
        serializer of the materialized part, else of a timer state."""
        if self._header is not None and (self._header.error is None or tolerant):
            return self._header
        key = None
        states: list[StateMetaInfo] = []
        by_name: dict[str, StateMetaInfo] = {}
        for part in self.materialized:
            mat = part.header(tolerant)
            if mat.error is not None:
                return mat
            key = key if key is not None else mat.key_serializer
            for state in mat.states:
                if state.name not in by_name:
                    by_name[state.name] = state
                    states.append(state)
        for key_group, data, where in self.iter_changes():
            if key_group != META_KEY_GROUP:
                continue
            _, meta = self._meta(data, where)
            seen = by_name.get(meta.name)
            if seen is None:
                by_name[meta.name] = meta
                states.append(meta)
            elif state_meta_bytes(seen) != state_meta_bytes(meta):
                raise UnsupportedFormat(f"{self.context}: state {meta.name} is registered in the changelog with other "
                                        f"serializers than before (a state migration inside the log is not "
                                        f"supported)", where)
        if key is None:
            key = next((timer.key for timer in (s.serializer(VALUE_SERIALIZER) for s in states)
                        if isinstance(timer, TimerSnapshot)), None)
        self._key_recorded = key is not None
        if key is None:
            key = self._assumed_key
        self._header = KeyedBackendHeader(KEYED_PROXY_VERSION, False, key, states, 0)
        return self._header

    def records_key_serializer(self) -> bool:
        """Whether the checkpoint itself says the key serializer (materialized part or timer state)."""
        self.header()
        return self._key_recorded

    def assume_key_serializer(self, key: TypeSerializerSnapshot) -> None:
        """Reads keys with ``key`` where the checkpoint records no key serializer (Flink restores such a log with
        the new job's own, unchecked); a recorded one stays. Each key must then decode to exactly its bytes in every
        change (the appliers check that a change is consumed to its end), else reading fails naming the change."""
        if self._assumed_key is not None and snapshot_bytes(self._assumed_key) == snapshot_bytes(key):
            return
        self._assumed_key = key
        self._header = None
        self._cursors = {}
        self._cursor_key_group = -1

    # -- entries -----------------------------------------------------------------------------------------------------

    def iter_blocks(self, state_name: str, key_group_range: KeyGroupRange | None = None
                    ) -> Iterator[tuple[int, list[tuple[Any, ...]]]]:
        """``(key group, entries)`` per non-empty key group (within ``key_group_range``) of the state as the log
        leaves it, in key-group order; the entries as :meth:`KeyedStateStream.iter_blocks` gives them."""
        header = self.header()
        index = header.state_index(state_name)
        if index is None:
            return
        state = header.states[index]
        wanted = self.key_group_range if key_group_range is None else \
            self.key_group_range.intersection(key_group_range)
        if not len(wanted):
            return
        assumed = "" if self._key_recorded or header.key_serializer is None else \
            f" (keys read as {header.key_serializer.type_name()}, a key type the checkpoint does not record)"
        applier = Applier(state, header, f"{self.context}, state {state_name}{assumed}")
        changes = self._changes_of(state_name, wanted)
        bases = [part.iter_blocks(state_name, wanted) for part in self.materialized
                 if state_name in {s.name for s in part.header().states}]
        pending: list[tuple[int, list[tuple[Any, ...]]] | None] = [next(base, None) for base in bases]
        for key_group in wanted:
            if not changes.get(key_group) and not any(p is not None and p[0] == key_group for p in pending):
                continue
            applier.reset()
            for i, base in enumerate(bases):
                current = pending[i]
                if current is not None and current[0] == key_group:
                    applier.load(current[1])
                    pending[i] = next(base, None)
            for number, (data, where) in enumerate(changes.pop(key_group, [])):
                applier.apply(data, where, key_group, number)
            entries = applier.entries()
            if assumed:
                self._check_key_groups(entries, key_group, header.key_serializer, state_name)
            if entries:
                yield key_group, entries

    def _check_key_groups(self, entries: list[tuple[Any, ...]], key_group: int, key: TypeSerializerSnapshot | None,
                          state_name: str) -> None:
        """Keys read with a key type the checkpoint does not record must hash to the key group Flink logged them in
        (a type of the same length but another hash, read by mistake, shows here). A key type without a known Java
        ``hashCode`` (a POJO's is the job's code) is checked by its bytes alone (:attr:`key_groups_checked`)."""
        assert key is not None
        for entry in entries:
            try:
                want = assign_key_group(key.hash_code(entry[0]), self.max_parallelism)
            except UnsupportedKeyType:
                self.key_groups_checked = False
                return
            if want != key_group:
                raise SavepointFormatError(f"{self.context}, state {state_name}, key group {key_group}: the key "
                                           f"{printable(to_json(entry[0]))}, read as {key.type_name()} (a key type "
                                           f"the checkpoint does not record), belongs to key group {want}: the job's "
                                           f"key type is another", self.source.path)

    def canonical_entries(self, key_group: int) -> list[tuple[int, list[tuple[Any, ...]]]]:
        """``(state id, entries)`` of every state of :meth:`header` holding entries in ``key_group``, as the log leaves
        them (what a migration writes canonically). Calls in increasing key-group order read the log once per state;
        a call for the same or an earlier key group starts over."""
        if key_group <= self._cursor_key_group:
            self._cursors = {}
        self._cursor_key_group = key_group
        found: list[tuple[int, list[tuple[Any, ...]]]] = []
        for state_id, state in enumerate(self.header().states):
            cursor = self._cursors.get(state.name)
            if cursor is None:
                blocks = self.iter_blocks(state.name)
                cursor = (blocks, next(blocks, None))
            blocks, pending = cursor
            while pending is not None and pending[0] < key_group:
                pending = next(blocks, None)
            if pending is not None and pending[0] == key_group:
                found.append((state_id, pending[1]))
                pending = next(blocks, None)
            self._cursors[state.name] = (blocks, pending)
        return found

    def _changes_of(self, state_name: str, wanted: KeyGroupRange) -> dict[int, list[tuple[bytes, str]]]:
        """The data changes of one state inside ``wanted``, by key group, in log order (the state's log ids can be
        re-registered along the log: each change is named by the registration before it)."""
        ids: dict[int, str] = {}
        found: dict[int, list[tuple[bytes, str]]] = {}
        for key_group, data, where in self.iter_changes():
            if key_group == META_KEY_GROUP:
                state_id, meta = self._meta(data, where)
                ids[state_id] = meta.name
                continue
            if len(data) < 3:
                raise SavepointFormatError(f"{self.context}: a state change of {len(data)} bytes in key group "
                                           f"{key_group}", where)
            state_id = I16.unpack_from(data, 1)[0]
            name = ids.get(state_id)
            if name is None:  # ChangelogBackendLogApplier: checkNotNull(stateIds.get(id))
                raise SavepointFormatError(f"{self.context}: a change of key group {key_group} names state id "
                                           f"{state_id}, which the changelog never registered", where)
            if name == state_name and key_group in wanted:
                found.setdefault(key_group, []).append((data, where))
        return found

    def close(self) -> None:
        for part in self.materialized:
            close = getattr(part, "close", None)
            if close is not None:
                close()
        self._files = {}
        self._cursors = {}


def _change_set(data: bytes, offset: int, path: str) -> Iterator[tuple[int, bytes, str]]:
    """The changes of one ``StateChangeFormat`` change set starting at ``offset`` of a decompressed log."""
    pos = offset

    def i32() -> int:
        nonlocal pos
        if pos + 4 > len(data):
            raise SavepointFormatError(f"changelog change set at {offset} is truncated", path, pos)
        value: int = I32.unpack_from(data, pos)[0]
        pos += 4
        return value

    groups = i32()
    if groups < 0 or groups > len(data):
        raise SavepointFormatError(f"implausible number of key groups {groups} in a changelog change set", path,
                                   pos - 4)
    for _ in range(groups):
        count = i32()
        key_group = i32()
        if count < 0 or count > len(data):
            raise SavepointFormatError(f"implausible number of changes {count} in a changelog change set", path,
                                       pos - 8)
        for _ in range(count):
            size = i32()
            if size < 0 or pos + size > len(data):
                raise SavepointFormatError(f"changelog change of {size} bytes past the end of the log", path, pos - 4)
            yield key_group, data[pos:pos + size], f"{path} (change at {pos} of the decompressed log)"
            pos += size


__all__ = ["CHANGELOG", "ChangelogStream"]
