"""The changelog state backend's handles in ``_metadata`` (``MetadataV2V3SerializerBase``: codes 8 and 14
``ChangelogStateBackendHandleImpl``, 9 ``InMemoryChangelogStateHandle``, 10 and 13 ``ChangelogStateHandleStreamImpl``),
read and written back byte for byte. The other handles: :mod:`flinkstate.format.handles`; what the changes mean:
:mod:`flinkstate.format.changelog`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from flinkstate.binary import KeyGroupRange, Writer
from flinkstate.format.handles import (
    CHANGELOG_BYTE_INCREMENT,
    CHANGELOG_FILE_INCREMENT,
    CHANGELOG_FILE_INCREMENT_V2,
    CHANGELOG_HANDLE,
    CHANGELOG_HANDLE_V2,
    INCREMENTAL_KEY_GROUPS,
    INCREMENTAL_KEY_GROUPS_V2,
    KEY_GROUPS,
    KEY_GROUPS_V2,
    NULL_HANDLE,
    SAVEPOINT_KEY_GROUPS,
    HandleReader,
    IncrementalKeyedStateHandle,
    KeyGroupsStateHandle,
    StreamStateHandle,
    write_keyed_state_handle,
    write_stream_handle,
)


@dataclass(frozen=True)
class StateChange:
    """One change of the changelog: the key group it applies to (``META_KEY_GROUP`` for a state's registration) and
    its bytes (``StateChangeOperation`` code first)."""

    key_group: int
    data: bytes = field(repr=False)


@dataclass(frozen=True)
class InMemoryChangelogHandle:
    """``InMemoryChangelogStateHandle`` (code 9): the changes themselves, inline in ``_metadata`` (the in-memory
    changelog storage), with the sequence numbers they span."""

    key_group_range: KeyGroupRange
    key_group_count: int
    from_sequence: int
    to_sequence: int
    changes: tuple[StateChange, ...]
    state_handle_id: str

    def files(self) -> list[tuple[str, StreamStateHandle | None]]:
        return []


@dataclass(frozen=True)
class ChangelogStreamHandle:
    """``ChangelogStateHandleStreamImpl`` (codes 10 and 13): change sets in changelog files (the DSTL's
    ``StateChangeFormat``), each at an offset of a stream handle. Code 13 adds the storage identifier."""

    code: int
    key_group_range: KeyGroupRange
    key_group_count: int
    #: (stream handle, offset in the file's decompressed stream) of each change set, in replay order
    handles_and_offsets: tuple[tuple[StreamStateHandle | None, int], ...]
    size: int
    checkpointed_size: int
    state_handle_id: str
    storage_identifier: str | None

    def files(self) -> list[tuple[str, StreamStateHandle | None]]:
        return [(f"changelog file {i}", handle) for i, (handle, _) in enumerate(self.handles_and_offsets)]


#: A non-materialized part of a changelog backend's keyed state.
ChangelogStateHandle = InMemoryChangelogHandle | ChangelogStreamHandle


@dataclass(frozen=True)
class ChangelogBackendHandle:
    """``ChangelogStateBackendHandleImpl`` (codes 8 and 14): the keyed state of one subtask under the changelog state
    backend: the materialized state (native keyed handles of the wrapped backend: HashMap key groups or a RocksDB
    snapshot), and the changes logged since, replayed on top of it in order. Code 14 adds the checkpoint id. Nulls
    in the materialized list are kept (Flink skips them on read) so the handle is written back byte for byte."""

    code: int
    key_group_range: KeyGroupRange
    key_group_count: int
    checkpointed_size: int
    materialized: tuple[KeyGroupsStateHandle | IncrementalKeyedStateHandle | None, ...]
    non_materialized: tuple[ChangelogStateHandle | None, ...]
    materialization_id: int
    checkpoint_id: int | None
    state_handle_id: str

    def files(self) -> list[tuple[str, StreamStateHandle | None]]:
        """(what, handle) of every stream handle the materialized and non-materialized parts name."""
        found: list[tuple[str, StreamStateHandle | None]] = []
        for i, handle in enumerate(self.materialized):
            if isinstance(handle, IncrementalKeyedStateHandle):
                found.extend((f"materialized part {i}: {what}", h) for what, h in handle.files())
            elif handle is not None:
                found.append((f"materialized part {i}", handle.delegate))
        for i, delta in enumerate(self.non_materialized):
            if delta is not None:
                found.extend((f"non-materialized part {i}: {what}", h) for what, h in delta.files())
        return found



def _range(self: HandleReader) -> tuple[KeyGroupRange, int]:
    """A key-group range as (start, count), and the count as written."""
    start_kg = self.r.i32()
    count_at = self.r.pos
    count = self.r.i32()
    if count < 0 or start_kg < 0:
        raise self.r.error(f"implausible key-group range: start {start_kg}, count {count}", count_at)
    return KeyGroupRange(start_kg, start_kg + count - 1), count

def read_changelog_backend_handle(self: HandleReader, code: int) -> ChangelogBackendHandle:
    """``ChangelogStateBackendHandleImpl``: key-group range, checkpointed size, the materialized keyed handles,
    the non-materialized changelog handles, the materialization id, (code 14) the checkpoint id, the state
    handle id."""
    r = self.r
    key_group_range, count = _range(self)
    checkpointed_size = r.i64()
    materialized: list[KeyGroupsStateHandle | IncrementalKeyedStateHandle | None] = []
    for _ in range(self.count("materialized changelog parts")):
        at = r.pos
        handle = self.keyed_state_handle()
        if isinstance(handle, ChangelogBackendHandle):
            raise r.error("a changelog handle inside a changelog handle's materialized part", at)
        materialized.append(handle)
    non_materialized: list[ChangelogStateHandle | None] = []
    for _ in range(self.count("non-materialized changelog parts")):
        non_materialized.append(_changelog_state_handle(self))
    materialization_id = r.i64()
    checkpoint_id = r.i64() if code == CHANGELOG_HANDLE_V2 else None
    return ChangelogBackendHandle(code, key_group_range, count, checkpointed_size, tuple(materialized),
                                  tuple(non_materialized), materialization_id, checkpoint_id, r.utf())

def _changelog_state_handle(self: HandleReader) -> ChangelogStateHandle | None:
    """A non-materialized part: in-memory changes (code 9) or change sets in files (codes 10 and 13)."""
    r = self.r
    start = r.pos
    code = r.u8()
    if code == NULL_HANDLE:
        return None
    if code == CHANGELOG_BYTE_INCREMENT:
        key_group_range, count = _range(self)
        from_sequence, to_sequence = r.i64(), r.i64()
        changes = []
        for _ in range(self.count("state changes")):
            key_group = r.i32()
            changes.append(StateChange(key_group, r.bytes(self.count("state change bytes"))))
        return InMemoryChangelogHandle(key_group_range, count, from_sequence, to_sequence, tuple(changes),
                                       r.utf())
    if code in (CHANGELOG_FILE_INCREMENT, CHANGELOG_FILE_INCREMENT_V2):
        key_group_range, count = _range(self)
        pairs: list[tuple[StreamStateHandle | None, int]] = []
        for _ in range(self.count("changelog stream handles")):
            offset_at = r.pos
            offset = r.i64()
            if offset < 0:
                raise r.error(f"negative changelog offset {offset}", offset_at)
            pairs.append((self.stream_handle(), offset))
        size, checkpointed_size = r.i64(), r.i64()
        handle_id = r.utf()
        storage = r.utf() if code == CHANGELOG_FILE_INCREMENT_V2 else None
        return ChangelogStreamHandle(code, key_group_range, count, tuple(pairs), size, checkpointed_size,
                                     handle_id, storage)
    if code in (KEY_GROUPS, KEY_GROUPS_V2, SAVEPOINT_KEY_GROUPS, INCREMENTAL_KEY_GROUPS,
                INCREMENTAL_KEY_GROUPS_V2, CHANGELOG_HANDLE, CHANGELOG_HANDLE_V2):
        raise r.error(f"keyed state handle code {code} where a changelog handle was expected", start)
    raise self.unsupported(code, start, "changelog state")



def write_changelog_handle(w: Writer, handle: ChangelogBackendHandle) -> None:
    """``serializeKeyedStateHandle`` for a ``ChangelogStateBackendHandle`` (Flink writes code 14; 8 as read)."""
    w.u8(handle.code)
    w.i32(handle.key_group_range.start)
    w.i32(handle.key_group_count)
    w.i64(handle.checkpointed_size)
    w.i32(len(handle.materialized))
    for materialized in handle.materialized:
        write_keyed_state_handle(w, materialized)
    w.i32(len(handle.non_materialized))
    for delta in handle.non_materialized:
        _write_changelog_state_handle(w, delta)
    w.i64(handle.materialization_id)
    if handle.code == CHANGELOG_HANDLE_V2:
        w.i64(-1 if handle.checkpoint_id is None else handle.checkpoint_id)
    w.utf(handle.state_handle_id)


def _write_changelog_state_handle(w: Writer, handle: ChangelogStateHandle | None) -> None:
    if handle is None:
        w.u8(NULL_HANDLE)
    elif isinstance(handle, InMemoryChangelogHandle):
        w.u8(CHANGELOG_BYTE_INCREMENT)
        w.i32(handle.key_group_range.start)
        w.i32(handle.key_group_count)
        w.i64(handle.from_sequence)
        w.i64(handle.to_sequence)
        w.i32(len(handle.changes))
        for change in handle.changes:
            w.i32(change.key_group)
            w.i32(len(change.data))
            w.bytes(change.data)
        w.utf(handle.state_handle_id)
    else:
        w.u8(handle.code)
        w.i32(handle.key_group_range.start)
        w.i32(handle.key_group_count)
        w.i32(len(handle.handles_and_offsets))
        for stream, offset in handle.handles_and_offsets:
            w.i64(offset)
            write_stream_handle(w, stream)
        w.i64(handle.size)
        w.i64(handle.checkpointed_size)
        w.utf(handle.state_handle_id)
        if handle.code == CHANGELOG_FILE_INCREMENT_V2:
            w.utf(handle.storage_identifier or "")



class ChangelogHandleReader(HandleReader):
    """The handle reader of ``_metadata`` with the changelog backend's keyed handles (codes 8 and 14) too."""

    def any_keyed_state_handle(self) -> KeyGroupsStateHandle | IncrementalKeyedStateHandle | ChangelogBackendHandle \
            | None:
        r = self.r
        if r.remaining() and r.buf[r.pos] in (CHANGELOG_HANDLE, CHANGELOG_HANDLE_V2):
            return read_changelog_backend_handle(self, r.u8())
        return self.keyed_state_handle()


def write_any_keyed_state_handle(w: Writer, handle: KeyGroupsStateHandle | IncrementalKeyedStateHandle
                                 | ChangelogBackendHandle | None) -> None:
    if isinstance(handle, ChangelogBackendHandle):
        write_changelog_handle(w, handle)
    else:
        write_keyed_state_handle(w, handle)


__all__ = [
    "ChangelogBackendHandle",
    "ChangelogHandleReader",
    "ChangelogStateHandle",
    "ChangelogStreamHandle",
    "InMemoryChangelogHandle",
    "StateChange",
    "read_changelog_backend_handle",
    "write_any_keyed_state_handle",
    "write_changelog_handle",
]
