"""State handles in ``_metadata``: what they are, how they are read and how they are written.

A handle says where a piece of state lives: inline bytes, a file (absolute or relative to the savepoint directory),
a keyed-state stream with its key-group offsets, an operator-state stream with its per-state offsets, or in-flight
channel state. Codes and layouts: Flink's ``MetadataV2V3SerializerBase`` (serialize/deserialize*Handle) and
``ChannelStateHandleSerializerV2``. :mod:`flinkstate.format.metadata` reads and writes the rest of the file.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from flinkstate.binary import KeyGroupRange, Reader, Writer
from flinkstate.errors import WriteError
from flinkstate.format_errors import SavepointFormatError, UnsupportedFormat

# Handle type codes (MetadataV2V3SerializerBase).
NULL_HANDLE = 0
BYTE_STREAM = 1
FILE_STREAM = 2
KEY_GROUPS = 3
PARTITIONABLE_OPERATOR_STATE = 4
INCREMENTAL_KEY_GROUPS = 5
RELATIVE_STREAM = 6
SAVEPOINT_KEY_GROUPS = 7
INCREMENTAL_KEY_GROUPS_V2 = 11
KEY_GROUPS_V2 = 12
# The changelog state backend's handles (read by flinkstate.format.changelog).
CHANGELOG_HANDLE = 8
CHANGELOG_BYTE_INCREMENT = 9
CHANGELOG_FILE_INCREMENT = 10
CHANGELOG_FILE_INCREMENT_V2 = 13
CHANGELOG_HANDLE_V2 = 14
#: ``StateChange.META_KEY_GROUP``: the key group of a change that registers a state (its meta info).
META_KEY_GROUP = -1

UNSUPPORTED_HANDLES = {
    15: "SEGMENT_FILE (file-merging checkpoint)",
    16: "EMPTY_SEGMENT_FILE (file-merging checkpoint)",
    17: "SEGMENT_PARTITIONABLE_OPERATOR_STATE (file-merging checkpoint)",
}

DISTRIBUTION_MODES = ("SPLIT_DISTRIBUTE", "UNION", "BROADCAST")


# --------------------------------------------------------------------------------------------------------------------
# Data model
# --------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StreamStateHandle:
    """Base of the stream handles: where one state stream's bytes are."""

    size: int


@dataclass(frozen=True)
class ByteStreamStateHandle(StreamStateHandle):
    """Inline bytes (code 1). ``name`` is informational (the would-be path, or the operator id)."""

    name: str
    data: bytes = field(repr=False)


@dataclass(frozen=True)
class FileStateHandle(StreamStateHandle):
    """Absolute file path (code 2)."""

    path: str


@dataclass(frozen=True)
class RelativeFileStateHandle(StreamStateHandle):
    """File name relative to the savepoint directory (code 6)."""

    relative_path: str


@dataclass(frozen=True)
class KeyGroupRangeOffsets:
    """The offset of each key group's block in the stream; 0 means the key group holds no data."""

    key_group_range: KeyGroupRange
    offsets: tuple[int, ...]

    def offset(self, key_group: int) -> int:
        return self.offsets[key_group - self.key_group_range.start]


@dataclass(frozen=True)
class KeyGroupsStateHandle:
    """Keyed state of one subtask: codes 7 (canonical savepoint), 3 (legacy) and 12 (full checkpoint)."""

    code: int
    offsets: KeyGroupRangeOffsets
    delegate: StreamStateHandle | None
    state_handle_id: str | None = None

    @property
    def key_group_range(self) -> KeyGroupRange:
        return self.offsets.key_group_range


@dataclass(frozen=True)
class HandleAndLocalPath:
    """One file of a native RocksDB snapshot: its name in the RocksDB instance directory (``000042.sst``,
    ``MANIFEST-000005``, ``CURRENT``, ``OPTIONS-000007``) and where its bytes are."""

    local_path: str
    handle: StreamStateHandle | None


@dataclass(frozen=True)
class IncrementalKeyedStateHandle:
    """Keyed state of one subtask as a native RocksDB snapshot (``IncrementalRemoteKeyedStateHandle``): native
    savepoints and retained RocksDB checkpoints, incremental or not. Code 11 (Flink 1.15+) carries the checkpointed
    size and the state handle id; code 5 (older) has neither. ``backend_id`` is kept as written (a UUID, or before
    FLINK-6964 any string) so that the handle is written back byte for byte."""

    code: int
    checkpoint_id: int
    backend_id: str
    key_group_range: KeyGroupRange
    meta_state: StreamStateHandle | None
    shared: tuple[HandleAndLocalPath, ...]
    private: tuple[HandleAndLocalPath, ...]
    checkpointed_size: int | None = None
    state_handle_id: str | None = None
    #: The key-group count as written: Flink writes an empty range as (0, 0), kept apart from ``key_group_range``.
    key_group_count: int | None = None

    def files(self) -> list[tuple[str, StreamStateHandle | None]]:
        """(what, handle) of the meta state and every RocksDB file, in file order."""
        return [("native RocksDB meta state", self.meta_state),
                *((f"native RocksDB shared file {f.local_path}", f.handle) for f in self.shared),
                *((f"native RocksDB private file {f.local_path}", f.handle) for f in self.private)]


#: Any keyed-state handle of a subtask.
#: (A changelog backend's handle, flinkstate.format.changelog_handles, wraps these: metadata.AnyKeyedStateHandle.)
KeyedStateHandle = KeyGroupsStateHandle | IncrementalKeyedStateHandle


@dataclass(frozen=True)
class OperatorStateMeta:
    mode: str
    offsets: tuple[int, ...]


@dataclass(frozen=True)
class OperatorStreamStateHandle:
    """Operator (non-keyed) state of one subtask (code 4): per state name, its mode and element offsets."""

    states: dict[str, OperatorStateMeta]
    delegate: StreamStateHandle | None


@dataclass(frozen=True)
class ChannelStateHandle:
    """Unaligned-checkpoint channel state (never present in savepoints). ``merged`` handles keep their offsets
    serialized."""

    kind: str
    subtask_index: int
    info: tuple[int, int] | None
    offsets: tuple[int, ...] | bytes
    size: int
    delegate: StreamStateHandle | None


class HandleReader:
    """Reads the state handles of a ``_metadata`` file (``MetadataV2V3SerializerBase``'s deserialize*Handle),
    at the reader's position; the metadata parser builds on it."""

    def __init__(self, reader: Reader, version: int) -> None:
        self.r = reader
        self.version = version

    def count(self, what: str) -> int:
        start = self.r.pos
        count = self.r.i32()
        if count < 0 or count > self.r.remaining():
            raise self.r.error(f"implausible number of {what}: {count}", start)
        return count

    def unsupported(self, code: int, start: int, what: str) -> SavepointFormatError:
        if code in UNSUPPORTED_HANDLES:
            return UnsupportedFormat(f"{what} handle {UNSUPPORTED_HANDLES[code]} (code {code}) is not supported: "
                                     f"only canonical savepoints can be read", self.r.path, start)
        return self.r.error(f"unknown {what} handle type code {code}", start)

    def stream_handle(self) -> StreamStateHandle | None:
        r = self.r
        start = r.pos
        code = r.u8()
        if code == NULL_HANDLE:
            return None
        if code == BYTE_STREAM:
            name = r.utf()
            data = r.bytes(self.count("inline state bytes"))
            return ByteStreamStateHandle(len(data), name, data)
        if code == FILE_STREAM:
            size = r.i64()
            if size < 0:  # reads and copies are bounded by this size: it must be a real one
                raise r.error(f"file state handle with negative size {size}", start + 1)
            return FileStateHandle(size, self._path(start + 9))
        if code == RELATIVE_STREAM:
            relative = self._path(start + 1)
            size_at = r.pos
            size = r.i64()
            if size < 0:
                raise r.error(f"file state handle {relative!r} with negative size {size}", size_at)
            return RelativeFileStateHandle(size, relative)
        if code == KEY_GROUPS:
            raise r.error("a key-groups handle where a stream handle was expected is not supported", start)
        raise self.unsupported(code, start, "stream state")

    def _path(self, at: int) -> str:
        """A file handle's path. Modified UTF-8 can hold lone surrogates, which no file name can: such a path is
        corruption, refused here rather than failing later inside the file system call."""
        path = self.r.utf()
        try:
            path.encode("utf-8")
        except UnicodeEncodeError:
            raise self.r.error(f"file state handle path {path.encode('utf-8', 'backslashreplace').decode()!r} is "
                               f"not a valid file name (a lone UTF-16 surrogate)", at) from None
        return path

    def key_group_offsets(self) -> KeyGroupRangeOffsets:
        r = self.r
        start_kg = r.i32()
        count = r.i32()
        if count < 0 or count * 8 > r.remaining():
            raise r.error(f"implausible key-group count {count}", r.pos - 4)
        offsets = tuple(r.i64() for _ in range(count))
        return KeyGroupRangeOffsets(KeyGroupRange(start_kg, start_kg + count - 1), offsets)

    def keyed_state_handle(self) -> KeyedStateHandle | None:
        r = self.r
        start = r.pos
        code = r.u8()
        if code == NULL_HANDLE:
            return None
        if code in (KEY_GROUPS, SAVEPOINT_KEY_GROUPS, KEY_GROUPS_V2):
            offsets = self.key_group_offsets()
            delegate = self.stream_handle()
            handle_id = r.utf() if code == KEY_GROUPS_V2 else None
            return KeyGroupsStateHandle(code, offsets, delegate, handle_id)
        if code in (INCREMENTAL_KEY_GROUPS, INCREMENTAL_KEY_GROUPS_V2):
            return self.incremental_keyed_state_handle(code)
        raise self.unsupported(code, start, "keyed state")

    def incremental_keyed_state_handle(self, code: int) -> IncrementalKeyedStateHandle:
        """``deserializeIncrementalStateHandle``: checkpoint id, backend id, key-group range, (code 11) checkpointed
        size, the meta state handle, the shared and the private files, (code 11) the state handle id."""
        r = self.r
        checkpoint_id = r.i64()
        backend_id = r.utf()
        start_kg = r.i32()
        count_at = r.pos
        count = r.i32()
        if count < 0 or start_kg < 0:
            raise r.error(f"implausible key-group range: start {start_kg}, count {count}", count_at)
        v2 = code == INCREMENTAL_KEY_GROUPS_V2
        checkpointed_size = r.i64() if v2 else None
        meta_state = self.stream_handle()
        shared = self.local_files("shared")
        private = self.local_files("private")
        handle_id = r.utf() if v2 else None
        return IncrementalKeyedStateHandle(code, checkpoint_id, backend_id,
                                           KeyGroupRange(start_kg, start_kg + count - 1), meta_state, shared,
                                           private, checkpointed_size, handle_id, count)

    def local_files(self, what: str) -> tuple[HandleAndLocalPath, ...]:
        """``deserializeHandleAndLocalPathList``: (local file name, stream handle) pairs."""
        files = []
        for _ in range(self.count(f"native RocksDB {what} files")):
            name_at = self.r.pos
            name = self.r.utf()
            # The name becomes a file name inside a private directory when the instance is rebuilt: a plain name.
            if not name or name in (".", "..") or "/" in name or "\\" in name or "\x00" in name:
                raise self.r.error(f"native RocksDB {what} file name {name!r} is not a plain file name", name_at)
            files.append(HandleAndLocalPath(name, self.stream_handle()))
        return tuple(files)

    def operator_state_handle(self) -> OperatorStreamStateHandle:
        r = self.r
        start = r.pos
        code = r.u8()
        if code != PARTITIONABLE_OPERATOR_STATE:
            raise self.unsupported(code, start, "operator state")
        states = {}
        for _ in range(self.count("operator states")):
            name = r.utf()
            mode_start = r.pos
            mode = r.u8()
            if mode >= len(DISTRIBUTION_MODES):
                raise r.error(f"unknown operator state distribution mode {mode}", mode_start)
            offsets = tuple(r.i64() for _ in range(self.count("operator state offsets")))
            states[name] = OperatorStateMeta(DISTRIBUTION_MODES[mode], offsets)
        return OperatorStreamStateHandle(states, self.stream_handle())

    def channel_handle(self, direction: str) -> ChannelStateHandle:
        r = self.r
        kind = direction
        if self.version >= 6:  # ChannelStateHandleSerializerV2: a type byte first
            start = r.pos
            code = r.u8()
            if code in (3, 4):
                subtask, size = r.i32(), r.i64()
                delegate = self.stream_handle()
                merged_offsets = r.bytes(self.count("channel offset bytes"))
                return ChannelStateHandle(f"merged {direction}", subtask, None, merged_offsets, size, delegate)
            if code not in (1, 2):
                raise r.error(f"unknown channel state handle type {code}", start)
        subtask = r.i32()
        info = (r.i32(), r.i32())
        offsets = tuple(r.i64() for _ in range(self.count("channel offsets")))
        size = r.i64()
        return ChannelStateHandle(kind, subtask, info, offsets, size, self.stream_handle())


_DISTRIBUTION_MODE_CODES = {"SPLIT_DISTRIBUTE": 0, "UNION": 1, "BROADCAST": 2}
_CHANNEL_CODES = {"input": 1, "output": 2, "merged input": 3, "merged output": 4}


def write_stream_handle(w: Writer, handle: StreamStateHandle | None) -> None:
    if handle is None:
        w.u8(NULL_HANDLE)
    elif isinstance(handle, ByteStreamStateHandle):
        w.u8(BYTE_STREAM)
        w.utf(handle.name)
        w.i32(len(handle.data))
        w.bytes(handle.data)
    elif isinstance(handle, FileStateHandle):
        w.u8(FILE_STREAM)
        w.i64(handle.size)  # size before path (code 2) ...
        w.utf(handle.path)
    elif isinstance(handle, RelativeFileStateHandle):
        w.u8(RELATIVE_STREAM)
        w.utf(handle.relative_path)  # ... but path before size (code 6)
        w.i64(handle.size)
    else:
        raise WriteError(f"cannot write stream handle {type(handle).__name__}")


def write_keyed_state_handle(w: Writer, handle: KeyedStateHandle | None) -> None:
    if handle is None:
        w.u8(NULL_HANDLE)
        return
    if isinstance(handle, IncrementalKeyedStateHandle):
        _write_incremental_handle(w, handle)
        return
    w.u8(handle.code)
    w.i32(handle.key_group_range.start)
    w.i32(len(handle.offsets.offsets))
    for offset in handle.offsets.offsets:
        w.i64(offset)
    write_stream_handle(w, handle.delegate)
    if handle.code == KEY_GROUPS_V2:
        w.utf(handle.state_handle_id or "")


def _write_incremental_handle(w: Writer, handle: IncrementalKeyedStateHandle) -> None:
    """``serializeKeyedStateHandle`` for an ``IncrementalRemoteKeyedStateHandle`` (Flink writes code 11 only; code 5
    is written back as read)."""
    v2 = handle.code == INCREMENTAL_KEY_GROUPS_V2
    w.u8(handle.code)
    w.i64(handle.checkpoint_id)
    w.utf(handle.backend_id)
    w.i32(handle.key_group_range.start)
    w.i32(len(handle.key_group_range) if handle.key_group_count is None else handle.key_group_count)
    if v2:
        w.i64(-1 if handle.checkpointed_size is None else handle.checkpointed_size)
    write_stream_handle(w, handle.meta_state)
    for files in (handle.shared, handle.private):
        w.i32(len(files))
        for f in files:
            w.utf(f.local_path)
            write_stream_handle(w, f.handle)
    if v2:
        w.utf(handle.state_handle_id or "")


def write_operator_state_handle(w: Writer, handle: OperatorStreamStateHandle) -> None:
    w.u8(PARTITIONABLE_OPERATOR_STATE)
    w.i32(len(handle.states))
    for name, meta in handle.states.items():
        w.utf(name)
        w.u8(_DISTRIBUTION_MODE_CODES[meta.mode])
        w.i32(len(meta.offsets))
        for offset in meta.offsets:
            w.i64(offset)
    write_stream_handle(w, handle.delegate)


def write_channel_handle(w: Writer, handle: ChannelStateHandle, version: int) -> None:
    if version >= 6:
        w.u8(_CHANNEL_CODES[handle.kind])
    if isinstance(handle.offsets, bytes):  # merged (V6 only)
        if version < 6:
            raise WriteError(f"merged channel state cannot be written as _metadata version {version}")
        w.i32(handle.subtask_index)
        w.i64(handle.size)
        write_stream_handle(w, handle.delegate)
        w.i32(len(handle.offsets))
        w.bytes(handle.offsets)
        return
    assert handle.info is not None
    w.i32(handle.subtask_index)
    w.i32(handle.info[0])
    w.i32(handle.info[1])
    w.i32(len(handle.offsets))
    for offset in handle.offsets:
        w.i64(offset)
    w.i64(handle.size)
    write_stream_handle(w, handle.delegate)


__all__ = ["BYTE_STREAM", "CHANGELOG_BYTE_INCREMENT", "CHANGELOG_FILE_INCREMENT", "CHANGELOG_FILE_INCREMENT_V2",
           "CHANGELOG_HANDLE", "CHANGELOG_HANDLE_V2", "DISTRIBUTION_MODES", "FILE_STREAM", "INCREMENTAL_KEY_GROUPS",
           "INCREMENTAL_KEY_GROUPS_V2", "KEY_GROUPS", "KEY_GROUPS_V2", "META_KEY_GROUP", "NULL_HANDLE",
           "PARTITIONABLE_OPERATOR_STATE", "RELATIVE_STREAM", "SAVEPOINT_KEY_GROUPS", "UNSUPPORTED_HANDLES",
           "ByteStreamStateHandle", "ChannelStateHandle", "FileStateHandle", "HandleAndLocalPath", "HandleReader",
           "IncrementalKeyedStateHandle", "KeyGroupRangeOffsets", "KeyGroupsStateHandle", "KeyedStateHandle",
           "OperatorStateMeta", "OperatorStreamStateHandle", "RelativeFileStateHandle", "StreamStateHandle",
           "write_channel_handle", "write_keyed_state_handle", "write_operator_state_handle", "write_stream_handle"]
