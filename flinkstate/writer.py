"""Writing canonical savepoints: the mirror of :mod:`flinkstate.metadata` and :mod:`flinkstate.keyed`.

* :func:`write_metadata` serializes a :class:`CheckpointMetadata` as ``_metadata`` version 3, 4, 5 or 6
  (``MetadataV2V3SerializerBase`` and its subclasses). Re-writing what :func:`read_metadata` read gives the same bytes.
* :class:`KeyedStreamWriter` writes one subtask's keyed-state stream: the ``KeyedBackendSerializationProxy`` header,
  then one block per non-empty key group in increasing order, optionally one Snappy-framed stream per block, and
  returns the :class:`KeyGroupsStateHandle` (code 7, relative file) that points at it.
* :class:`SavepointOutput` is where a new savepoint is written: a staging directory that is only published (renamed
  to the final name) once the result was re-read and verified, so a failed run leaves nothing that looks finished.
  ``open_output`` dispatches on the URI scheme; local directories are implemented, ``s3://`` plugs in beside them.

File names are derived from (operator id, subtask), never random, so two runs over the same input (one process, or
one Spark task per subtask) write identical directories.
"""

from __future__ import annotations

import os
import shutil
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO
from urllib.parse import unquote, urlparse

import cramjam

from flinkstate.binary import I32, U16, KeyGroupRange, Writer
from flinkstate.errors import FlinkStateError
from flinkstate.keyed import END_OF_KEY_GROUP_MARK, FIRST_BIT_IN_BYTE_MASK, KeyedBackendHeader
from flinkstate.metadata import (
    BYTE_STREAM,
    FILE_STREAM,
    KEY_GROUPS_V2,
    MAGIC,
    MASTER_STATE_MAGIC,
    NULL_HANDLE,
    PARTITIONABLE_OPERATOR_STATE,
    RELATIVE_STREAM,
    SAVEPOINT_KEY_GROUPS,
    SUPPORTED_VERSIONS,
    ByteStreamStateHandle,
    ChannelStateHandle,
    CheckpointMetadata,
    FileStateHandle,
    KeyGroupRangeOffsets,
    KeyGroupsStateHandle,
    OperatorState,
    OperatorStreamStateHandle,
    OperatorSubtaskState,
    RelativeFileStateHandle,
    StreamStateHandle,
)
from flinkstate.storage import METADATA_FILE, SavepointLocation

#: ``ObjectOutputStream`` of a null object: what the State Processor API writes as the V4+ trailer.
JAVA_SERIALIZED_NULL = bytes.fromhex("aced000570")

_DISTRIBUTION_MODE_CODES = {"SPLIT_DISTRIBUTE": 0, "UNION": 1, "BROADCAST": 2}
_CHANNEL_CODES = {"input": 1, "output": 2, "merged input": 3, "merged output": 4}


class WriteError(FlinkStateError):
    """A savepoint could not be written."""


# --------------------------------------------------------------------------------------------------------------------
# _metadata
# --------------------------------------------------------------------------------------------------------------------


def write_metadata(metadata: CheckpointMetadata, version: int | None = None) -> bytes:
    """``_metadata`` bytes of ``metadata`` in ``version`` (default: the version it was read as).

    The V4+ trailer is the source's own CheckpointProperties when it has one, otherwise a Java-serialized null
    (Flink accepts both; the properties only matter for shared-file ownership, which savepoints do not have)."""
    version = metadata.version if version is None else version
    if version not in SUPPORTED_VERSIONS:
        raise WriteError(f"cannot write _metadata version {version} (supported: 3, 4, 5, 6)")
    w = Writer()
    w.i32(MAGIC)
    w.i32(version)
    w.i64(metadata.checkpoint_id)
    w.i32(len(metadata.master_states))
    for master in metadata.master_states:
        body = Writer()
        body.i32(master.version)
        body.utf(master.name)
        body.i32(len(master.payload))
        body.bytes(master.payload)
        data = body.getvalue()
        w.i32(MASTER_STATE_MAGIC)
        w.i32(len(data))
        w.bytes(data)
    w.i32(len(metadata.operators))
    for op in metadata.operators:
        _write_operator(w, op, version)
    if version >= 4:
        w.bytes(metadata.trailer or JAVA_SERIALIZED_NULL)
    return w.getvalue()


def _write_operator(w: Writer, op: OperatorState, version: int) -> None:
    if version >= 5:
        w.utf(op.name or "")
        w.utf(op.uid or "")
    w.bytes(bytes.fromhex(op.operator_id))
    w.i32(op.parallelism)
    w.i32(op.max_parallelism)
    write_stream_handle(w, op.coordinator_state)
    if op.fully_finished:
        w.i32(-1)
        return
    # Flink writes subtasks by index, finished ones as -(index + 1) without a body.
    indices = sorted(set(op.subtasks) | op.finished_subtasks)
    w.i32(len(indices))
    for index in indices:
        if index in op.finished_subtasks:
            w.i32(-index - 1)
            continue
        w.i32(index)
        _write_subtask(w, op.subtasks[index], version)


def _write_subtask(w: Writer, state: OperatorSubtaskState, version: int) -> None:
    for handle in (state.managed_operator_state, state.raw_operator_state):
        w.i32(0 if handle is None else 1)
        if handle is not None:
            _write_operator_state_handle(w, handle)
    write_keyed_state_handle(w, state.managed_keyed_state)
    write_keyed_state_handle(w, state.raw_keyed_state)
    for channels in (state.input_channel_state, state.result_subpartition_state):
        w.i32(len(channels))
        for channel in channels:
            _write_channel_handle(w, channel, version)


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


def write_keyed_state_handle(w: Writer, handle: KeyGroupsStateHandle | None) -> None:
    if handle is None:
        w.u8(NULL_HANDLE)
        return
    w.u8(handle.code)
    w.i32(handle.key_group_range.start)
    w.i32(len(handle.offsets.offsets))
    for offset in handle.offsets.offsets:
        w.i64(offset)
    write_stream_handle(w, handle.delegate)
    if handle.code == KEY_GROUPS_V2:
        w.utf(handle.state_handle_id or "")


def _write_operator_state_handle(w: Writer, handle: OperatorStreamStateHandle) -> None:
    w.u8(PARTITIONABLE_OPERATOR_STATE)
    w.i32(len(handle.states))
    for name, meta in handle.states.items():
        w.utf(name)
        w.u8(_DISTRIBUTION_MODE_CODES[meta.mode])
        w.i32(len(meta.offsets))
        for offset in meta.offsets:
            w.i64(offset)
    write_stream_handle(w, handle.delegate)


def _write_channel_handle(w: Writer, handle: ChannelStateHandle, version: int) -> None:
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


# --------------------------------------------------------------------------------------------------------------------
# Keyed-state stream
# --------------------------------------------------------------------------------------------------------------------


def keyed_stream_file_name(operator_id: str, subtask: int) -> str:
    """The deterministic name of a rewritten keyed-state file (Flink uses random UUIDs; any name works with
    relative handles)."""
    return f"keyed-{operator_id}-{subtask:05d}"


def encode_block(runs: Iterable[tuple[int, list[tuple[bytes, bytes]]]]) -> bytes:
    """One key group's block, uncompressed: per (state id, entries) run, the entries back to back with the
    META-DATA-FOLLOWS flag on the last key and the next state id (0xFFFF after the last run) after it.
    Keys are composite keys whose first byte has the flag bit clear."""
    out = bytearray()
    pack_i32, pack_u16 = I32.pack, U16.pack
    for state_id, entries in runs:
        if not entries:
            continue
        out += pack_u16(state_id)  # the block's first state id, or the one announced after a run's flagged entry
        last = len(entries) - 1
        for i, (key, value) in enumerate(entries):
            out += pack_i32(len(key))
            if i == last:
                out.append(key[0] | FIRST_BIT_IN_BYTE_MASK)
                out += key[1:]
            else:
                out += key
            out += pack_i32(len(value))
            out += value
    if out:
        out += pack_u16(END_OF_KEY_GROUP_MARK)
    return bytes(out)


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


# --------------------------------------------------------------------------------------------------------------------
# Output locations and atomic publish
# --------------------------------------------------------------------------------------------------------------------


class SavepointOutput(ABC):
    """Where a new savepoint directory is written. Files go to a staging area; :meth:`publish` makes the savepoint
    appear under its final name in one step, :meth:`abort` removes every trace."""

    uri: str

    @abstractmethod
    def open(self, name: str) -> BinaryIO:
        """A new file ``name`` in the staging area, opened for writing."""

    def write_bytes(self, name: str, data: bytes) -> None:
        with self.open(name) as sink:
            sink.write(data)

    @abstractmethod
    def copy_from(self, source: SavepointLocation, name: str, target: str) -> int:
        """Copies file ``name`` of ``source`` to ``target`` byte for byte; returns its size."""

    @abstractmethod
    def staged(self) -> SavepointLocation:
        """The staging area as a readable savepoint location (to verify before publishing)."""

    @abstractmethod
    def publish(self) -> None:
        """Moves the staged savepoint to its final location."""

    @abstractmethod
    def abort(self) -> None:
        """Removes the staging area."""


class LocalSavepointOutput(SavepointOutput):
    """A local directory. Staging is a hidden sibling (``.NAME.inprogress``) on the same file system, so that
    publishing is one ``rename``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.uri = str(directory)
        if directory.exists():
            raise WriteError(f"{directory}: output already exists")
        self.staging = directory.parent / f".{directory.name}.inprogress"
        if self.staging.exists():  # left by a crashed run of ours: it never looked finished, so start over
            shutil.rmtree(self.staging)
        self.staging.mkdir(parents=True)

    def open(self, name: str) -> BinaryIO:
        return open(self.staging / name, "xb")

    def copy_from(self, source: SavepointLocation, name: str, target: str) -> int:
        from flinkstate.storage import LocalSavepointLocation

        if isinstance(source, LocalSavepointLocation):
            shutil.copyfile(source.describe(name), self.staging / target)
            return (self.staging / target).stat().st_size
        size = source.size(name)
        chunk = 8 << 20
        with self.open(target) as sink:
            for offset in range(0, size, chunk):
                sink.write(source.read_range(name, offset, min(chunk, size - offset)))
        return size

    def staged(self) -> SavepointLocation:
        from flinkstate.storage import LocalSavepointLocation

        return LocalSavepointLocation(self.staging)

    def publish(self) -> None:
        if self.directory.exists():
            raise WriteError(f"{self.directory}: output appeared while migrating; the result stays in {self.staging}")
        os.rename(self.staging, self.directory)

    def abort(self) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)


def open_output(uri: str | os.PathLike[str]) -> SavepointOutput:
    """The output for a savepoint directory URI: a local path or ``file:`` URI (``s3://`` once storage supports
    writing)."""
    text = os.fspath(uri)
    scheme = urlparse(text).scheme
    if scheme.startswith("s3"):
        raise WriteError(f"{text}: writing savepoints to s3:// is not supported yet")
    if scheme == "file":
        text = unquote(urlparse(text).path)
    elif scheme and len(scheme) > 1:
        raise WriteError(f"{text}: unsupported output scheme {scheme!r}")
    return LocalSavepointOutput(Path(text).absolute())


@dataclass(frozen=True)
class CopiedFile:
    source_name: str
    target_name: str
    size: int


def copy_stream_handle(handle: StreamStateHandle | None, source: SavepointLocation, output: SavepointOutput,
                       copied: dict[str, CopiedFile]) -> StreamStateHandle | None:
    """The handle of the same bytes in the output: inline handles stay inline, file handles are copied byte for
    byte and become relative (absolute ones too, which makes the output self-contained). ``copied`` dedups files
    shared by several handles."""
    if handle is None or isinstance(handle, ByteStreamStateHandle):
        return handle
    if isinstance(handle, RelativeFileStateHandle):
        name = handle.relative_path
    elif isinstance(handle, FileStateHandle):
        name = handle.path
    else:
        raise WriteError(f"cannot copy stream handle {type(handle).__name__}")
    if name not in copied:
        target = Path(unquote(urlparse(name).path) if name.startswith("file:") else name).name
        if target == METADATA_FILE or any(c.target_name == target for c in copied.values()):
            raise WriteError(f"cannot copy {name}: its file name {target} is already used in the output")
        copied[name] = CopiedFile(name, target, output.copy_from(source, name, target))
    entry = copied[name]
    return RelativeFileStateHandle(handle.size, entry.target_name)
