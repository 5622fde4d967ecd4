"""Writing canonical savepoints: the mirror of :mod:`flinkstate.metadata` and :mod:`flinkstate.keyed`.

* :func:`write_metadata` serializes a :class:`CheckpointMetadata` as ``_metadata`` version 3, 4, 5 or 6
  (``MetadataV2V3SerializerBase`` and its subclasses). Re-writing what :func:`read_metadata` read gives the same bytes.
* :class:`KeyedStreamWriter` writes one subtask's keyed-state stream: the ``KeyedBackendSerializationProxy`` header,
  then one block per non-empty key group in increasing order, optionally one Snappy-framed stream per block, and
  returns the :class:`KeyGroupsStateHandle` (code 7, relative file) that points at it.
* :class:`SavepointOutput` is where a new savepoint is written: a staging directory that is only published (renamed
  to the final name) once the result was re-read and verified, so a failed run leaves nothing that looks finished.
  ``open_output`` dispatches on the URI scheme: local directories (publish is a rename) and ``s3://`` prefixes
  (publish is a server-side copy with ``_metadata`` last, see :class:`S3SavepointOutput`).

File names are derived from (operator id, subtask), never random, so two runs over the same input (one process, or
one Spark task per subtask) write identical directories.
"""

from __future__ import annotations

import fcntl
import io
import json
import os
import shutil
import socket
import tempfile
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import unquote, urlparse

import cramjam

from flinkstate import storage
from flinkstate.binary import I32, U16, KeyGroupRange, Writer
from flinkstate.checkpoint_properties import JAVA_SERIALIZED_NULL, serialize_properties
from flinkstate.errors import FlinkStateError, printable
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
    read_metadata,
)
from flinkstate.storage import (
    METADATA_FILE,
    LocalSavepointLocation,
    S3Options,
    S3SavepointLocation,
    SavepointLocation,
    split_s3_uri,
)

_DISTRIBUTION_MODE_CODES = {"SPLIT_DISTRIBUTE": 0, "UNION": 1, "BROADCAST": 2}
_CHANNEL_CODES = {"input": 1, "output": 2, "merged input": 3, "merged output": 4}


class WriteError(FlinkStateError):
    """A savepoint could not be written."""


# --------------------------------------------------------------------------------------------------------------------
# _metadata
# --------------------------------------------------------------------------------------------------------------------


def write_metadata(metadata: CheckpointMetadata, version: int | None = None) -> bytes:
    """``_metadata`` bytes of ``metadata`` in ``version`` (default: the version it was read as).

    The V4+ trailer is the source's own CheckpointProperties when it has one (re-serialized: byte-identical for what
    Flink wrote), otherwise a Java-serialized null (Flink accepts both; the properties only matter for shared-file
    ownership, which savepoints do not have).

    What is written is parsed back before it is returned, with every check the reader makes (Flink's ranges for
    parallelism, max parallelism, subtask indexes and key groups, the trailer's shape): values Flink would refuse
    are a :class:`WriteError`, never a file."""
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
        w.bytes(serialize_properties(metadata.properties) if metadata.properties is not None
                else JAVA_SERIALIZED_NULL)
    data = w.getvalue()
    try:
        read_metadata(data, "_metadata")
    except FlinkStateError as exc:
        raise WriteError(f"refusing to write _metadata that Flink would not restore: {exc}") from None
    return data


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


#: While staged, ``_metadata`` is written under this name: a staging area never holds a ``_metadata`` before the
#: verifier passed it, so a killed run leaves nothing that looks like a finished savepoint (see :meth:`publish`).
STAGED_METADATA = "_metadata.unverified"
#: The owner marker inside a staging area: which run made it (pid, host, start time, random id).
OWNER_MARKER = ".flinkstate-owner.json"
_RESERVED_NAMES = {STAGED_METADATA, OWNER_MARKER}
#: An S3 lock whose heartbeat (the lock object's LastModified) is older than this is taken over.
S3_LOCK_STALE_SECONDS = 300.0
S3_LOCK_HEARTBEAT_SECONDS = 30.0


@dataclass(frozen=True)
class Owner:
    """Who writes an output: enough to tell a live run from a dead one on the same host (pid and the process's
    start time, so a reused pid is not taken for the owner) and to name it in a message."""

    id: str
    host: str
    pid: int
    started: float  # wall clock, for people
    process_start: str | None  # /proc/PID/stat start ticks (Linux), for liveness

    @classmethod
    def current(cls) -> Owner:
        return cls(uuid.uuid4().hex, socket.gethostname(), os.getpid(), time.time(), _process_start(os.getpid()))

    def to_json(self) -> bytes:
        return json.dumps(self.__dict__, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Owner | None:
        try:
            raw = json.loads(data)
            return cls(str(raw["id"]), str(raw["host"]), int(raw["pid"]), float(raw["started"]),
                       None if raw.get("process_start") is None else str(raw["process_start"]))
        except (ValueError, KeyError, TypeError):
            return None

    def is_over(self) -> bool:
        """Provably not writing any more: on this host, and either this very process (whose earlier run released
        the lock we now hold) or no process with that pid and start time exists. Another host's run cannot be
        proved over."""
        if self.host != socket.gethostname():
            return False
        if self.pid == os.getpid():
            return True
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            pass  # a process of another user has that pid
        # A live pid that started at another time is a reused pid: the owner is gone.
        current = _process_start(self.pid)
        return self.process_start is not None and current is not None and current != self.process_start

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.started))
        return f"run {self.id[:12]} (pid {self.pid} on {printable(self.host)}, started {when})"


def _process_start(pid: int) -> str | None:
    """The start time of ``pid`` in clock ticks since boot (field 22 of /proc/PID/stat), None where unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat_file:
            text = stat_file.read().decode(errors="replace")
    except OSError:
        return None
    fields = text.rpartition(")")[2].split()  # the command name may contain spaces and parentheses
    return fields[19] if len(fields) > 19 else None


def _staged_name(name: str) -> str:
    if name in _RESERVED_NAMES:
        raise WriteError(f"cannot write a file named {name}: the name is reserved for the staging area")
    return STAGED_METADATA if name == METADATA_FILE else name


class _StagedLocalLocation(LocalSavepointLocation):
    """The staging directory read as a savepoint: ``_metadata`` is the staged, not yet verified one."""

    def _resolve(self, name: str) -> Path:
        return super()._resolve(STAGED_METADATA if name == METADATA_FILE else name)


class _OutputLock:
    """An exclusive ``flock`` on ``.NAME.lock`` beside a local output: a second run to the same output fails at
    once, naming the holder. The lock file is removed on release; acquiring checks that the locked file is still
    the one at the path (a run that opened it just before it was removed would otherwise lock a deleted file)."""

    def __init__(self, path: Path, owner: Owner, output: Path) -> None:
        self.path = path
        self._fd: int | None = None
        while True:
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
            except IsADirectoryError:
                raise WriteError(f"{output}: cannot lock the output: {path} is a directory") from None
            except OSError as exc:  # e.g. a parent that root may not write either (a read-only file system)
                raise WriteError(f"{output}: cannot create the output: {path.parent} is not writable "
                                 f"({exc.strerror or exc})") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = Owner.from_json(os.pread(fd, 4096, 0))
                os.close(fd)
                raise WriteError(f"{output}: another migration is writing this output (lock {path} held by "
                                 f"{holder.describe() if holder else 'another process'})") from None
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(path))
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)  # the file was removed by its previous holder between our open and our lock: again
        os.ftruncate(fd, 0)
        os.pwrite(fd, owner.to_json(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is None:
            return
        with suppress(OSError):
            os.unlink(self.path)  # while still locked: a waiting run then sees a new file, never this one
        os.close(self._fd)
        self._fd = None


class LocalSavepointOutput(SavepointOutput):
    """A local directory. Staging is a hidden sibling (``.NAME.inprogress``) on the same file system, so that
    publishing is one ``rename``.

    Safe against other runs and against crashes: an exclusive lock (``.NAME.lock`` beside the output, held from
    here until :meth:`publish` or :meth:`abort`, released by the kernel if the process dies) makes a second run to
    the same output fail at once; the staging directory carries an owner marker, and a leftover staging directory
    is removed only when its owner is provably dead (same host, no such process) or is this process; ``_metadata``
    is staged as ``_metadata.unverified`` and takes its name only after verification."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.uri = str(directory)
        self.owner = Owner.current()
        parent = directory.parent
        _prepare_parent(parent, directory)
        self.staging = parent / f".{directory.name}.inprogress"
        self._lock: _OutputLock | None = _OutputLock(parent / f".{directory.name}.lock", self.owner, directory)
        try:
            if os.path.lexists(directory):
                raise WriteError(f"{directory}: output already exists")
            self._clear_leftovers()
            try:
                self.staging.mkdir()
            except OSError as exc:
                raise WriteError(f"{self.staging}: cannot create the staging directory: "
                                 f"{exc.strerror or exc}") from None
            (self.staging / OWNER_MARKER).write_bytes(self.owner.to_json())
        except BaseException:
            self._release()
            raise

    def __getstate__(self) -> dict[str, Any]:
        # Pickled to Spark tasks, which only write files: the lock stays with the driver.
        return {**self.__dict__, "_lock": None}

    def _release(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def _clear_leftovers(self) -> None:
        """A staging area left by an earlier run: removed if it is ours to remove, refused in one line otherwise."""
        staging = self.staging
        if not os.path.lexists(staging):
            return
        if staging.is_symlink() or not staging.is_dir():
            kind = "a symbolic link" if staging.is_symlink() else "a file"
            raise WriteError(f"{staging}: the staging path is {kind}, not a staging directory of flinkstate; "
                             f"remove it if nothing needs it")
        try:
            owner = Owner.from_json((staging / OWNER_MARKER).read_bytes())
        except OSError:
            owner = None
        if owner is None:
            raise WriteError(f"{staging}: a staging directory without flinkstate's owner marker (not ours); remove "
                             f"it if nothing needs it")
        if not owner.is_over():
            raise WriteError(f"{staging}: left by {owner.describe()}, which may still be running; remove it if "
                             f"that run is over")
        shutil.rmtree(staging)  # a crashed run of ours: its _metadata was never there, nothing looked finished

    def open(self, name: str) -> BinaryIO:
        return open(self.staging / _staged_name(name), "xb")

    def copy_from(self, source: SavepointLocation, name: str, target: str) -> int:
        from flinkstate.storage import LocalSavepointLocation

        if isinstance(source, LocalSavepointLocation):
            # Through the source's resolution (contained, regular file) and bounded by the recorded size: never
            # shutil.copyfile of whatever path a handle names.
            size = source.size(name)
            with source.bounded_stream(name) as stream, self.open(target) as sink:
                shutil.copyfileobj(stream, sink, 1 << 20)
            return size
        size = source.size(name)
        chunk = 8 << 20
        with self.open(target) as sink:
            for offset in range(0, size, chunk):
                sink.write(source.read_range(name, offset, min(chunk, size - offset)))
        return size

    def staged(self) -> SavepointLocation:
        return _StagedLocalLocation(self.staging)

    def publish(self) -> None:
        """Verified: ``_metadata`` takes its name inside the staging directory, the directory takes the output's
        name (one rename), and the owner marker goes. A crash in between leaves a hidden staging directory whose
        ``_metadata`` was verified, or a published savepoint with a stray marker file; never an unverified one."""
        if os.path.lexists(self.directory):
            raise WriteError(f"{self.directory}: output appeared while migrating; the result stays in {self.staging}")
        if not (self.staging / STAGED_METADATA).is_file():
            raise WriteError(f"{self.staging}: nothing to publish (no {METADATA_FILE})")
        try:
            os.rename(self.staging / STAGED_METADATA, self.staging / METADATA_FILE)
            os.rename(self.staging, self.directory)
        except OSError as exc:
            raise WriteError(f"{self.directory}: cannot publish the savepoint: {exc.strerror or exc}") from None
        with suppress(OSError):
            os.unlink(self.directory / OWNER_MARKER)
        self._release()

    def abort(self) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)
        self._release()


def _prepare_parent(parent: Path, directory: Path) -> None:
    """The output's parent folder, created if missing; one line when that cannot be (a file on the way, no
    permission)."""
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        blocker = next((p for p in (parent, *parent.parents) if os.path.lexists(p) and not p.is_dir()), parent)
        raise WriteError(f"{directory}: cannot create the output: {blocker} is a file, not a directory") from None
    except OSError as exc:
        raise WriteError(f"{directory}: cannot create the output's folder {parent}: {exc.strerror or exc}") from None
    if not os.access(parent, os.W_OK | os.X_OK):
        raise WriteError(f"{directory}: cannot create the output: {parent} is not writable (permission denied)")


class _UploadOnClose(io.BufferedRandom):
    """A writable file that is spooled to an anonymous local temporary file and handed to ``upload`` when closed
    without error. Keyed streams can be gigabytes: they go to disk, never to memory, and boto3's managed upload sends
    them in parts. A ``with`` block that raises discards the file, so a half-written stream is never uploaded."""

    def __init__(self, upload: Callable[[BinaryIO], None]) -> None:
        fd, path = tempfile.mkstemp(prefix="flinkstate-upload-")
        os.unlink(path)  # anonymous: the space is freed on close, even when the process dies
        super().__init__(io.FileIO(fd, "w+"))
        self._upload = upload
        self._discard = False

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self._discard = exc_type is not None
        super().__exit__(exc_type, exc, tb)

    def close(self) -> None:
        if self.closed:
            return
        try:
            if not self._discard:
                self.flush()
                self.seek(0)
                # boto3 closes the file it uploads: give it a duplicate descriptor, not this object (whose close is
                # what uploads). The duplicate shares the file offset, now at 0.
                with io.FileIO(os.dup(self.fileno()), "r") as reader:
                    self._upload(reader)
        finally:
            super().close()


class S3SavepointOutput(SavepointOutput):
    """A savepoint directory under ``s3://bucket/prefix/``, staged under the sibling prefix
    ``s3://bucket/.../.NAME.inprogress/``.

    S3 has no rename, so :meth:`publish` copies every staged object to the final prefix server-side, ``_metadata``
    last, and then deletes the staging objects. A crash in the middle of publishing leaves the final prefix without
    ``_metadata``, which neither Flink nor flinkstate takes for a finished savepoint, and leaves the staging objects
    in place; running the same migration again recognises that pair (final prefix without ``_metadata`` + staging
    objects) and removes both before starting over. An error (rather than a crash) while publishing removes the
    partial copy itself.

    Concurrent runs: a lock object ``.NAME.lock`` beside the output is created only if absent (a conditional PUT)
    and refreshed by a heartbeat while the run lives; a second run fails naming its holder, and a lock whose
    heartbeat stopped for :data:`S3_LOCK_STALE_SECONDS` (by the S3 server's clock) is taken over. The staging area
    carries an owner marker; leftovers without one are not ours and are refused, not deleted. ``_metadata`` is
    staged as ``_metadata.unverified`` and copied to ``_metadata`` last, after verification.

    The object is pickled to Spark's Python workers: it carries the bucket, the prefixes and the S3 options, and
    builds its boto3 client lazily, once per process (clients neither pickle nor survive a fork). Server-side copies
    assume the source savepoint is reachable through the same endpoint and credentials as the output."""

    def __init__(self, uri: str, options: S3Options | None = None) -> None:
        self.bucket, self.prefix = split_s3_uri(uri)
        if not self.prefix:
            raise WriteError(f"{uri}: name a prefix inside the bucket for the new savepoint")
        parent, _, name = self.prefix.rpartition("/")
        self.staging_prefix = f"{parent}/.{name}.inprogress" if parent else f".{name}.inprogress"
        self.uri = f"s3://{self.bucket}/{self.prefix}"
        # Captured now, from the CLI's --s3-* flags if any: Spark workers only see what is pickled with this object.
        self.options = replace(options or storage.s3_options)
        self._client: Any = None
        self._client_pid: int | None = None
        self.owner = Owner.current()
        self.lock_key = f"{parent}/.{name}.lock" if parent else f".{name}.lock"
        self._heartbeat: threading.Event | None = None
        self._lock()
        try:
            self._clear_leftovers()
            self._put(self._staged_key(OWNER_MARKER), self.owner.to_json())
        except BaseException:
            self._release()
            raise

    def __getstate__(self) -> dict[str, Any]:
        # Spark tasks only write staged files: the lock and its heartbeat stay with the driver.
        return {**self.__dict__, "_client": None, "_client_pid": None, "_heartbeat": None}

    def _put(self, key: str, body: bytes, **conditions: str) -> None:
        with self._s3("upload", f"s3://{self.bucket}/{key}"):
            self.client.put_object(Bucket=self.bucket, Key=key, Body=body, **conditions)

    def _lock(self) -> None:
        """Creates the lock object if absent; takes over a stale one; else one line naming the holder."""
        from botocore.exceptions import ClientError

        where = f"s3://{self.bucket}/{self.lock_key}"
        for _ in range(3):
            try:
                with self._s3("lock", where):
                    try:
                        self.client.put_object(Bucket=self.bucket, Key=self.lock_key, Body=self.owner.to_json(),
                                               IfNoneMatch="*")
                        break
                    except ClientError as exc:
                        if exc.response.get("Error", {}).get("Code") not in ("PreconditionFailed",
                                                                              "ConditionalRequestConflict"):
                            raise
                    response = self.client.get_object(Bucket=self.bucket, Key=self.lock_key)
                    holder = Owner.from_json(response["Body"].read())
                    server_now = _http_date(response["ResponseMetadata"].get("HTTPHeaders", {}).get("date"))
                    age = (server_now or time.time()) - response["LastModified"].timestamp()
                    if age < S3_LOCK_STALE_SECONDS and not (holder is not None and holder.pid != os.getpid()
                                                            and holder.is_over()):
                        raise WriteError(f"{self.uri}: another migration is writing this output (lock {where} held "
                                         f"by {holder.describe() if holder else 'another process'}, refreshed "
                                         f"{int(age)} s ago)")
                    # Stale (no heartbeat) or its owner is provably gone: take it over, if nobody else did.
                    self.client.delete_object(Bucket=self.bucket, Key=self.lock_key, IfMatch=response["ETag"])
            except WriteError as exc:
                if "PreconditionFailed" in str(exc):  # another run took the stale lock first: look again
                    continue
                raise
        else:
            raise WriteError(f"{self.uri}: could not take the lock {where}: other runs keep taking it")
        stop = threading.Event()
        self._heartbeat = stop
        threading.Thread(target=self._beat, args=(stop,), name="flinkstate-s3-lock", daemon=True).start()

    def _beat(self, stop: threading.Event) -> None:
        """Refreshes the lock object while the run lives (its LastModified is the heartbeat)."""
        while not stop.wait(S3_LOCK_HEARTBEAT_SECONDS):
            with suppress(Exception):  # a missed beat only makes the lock look older; the next one retries
                self.client.put_object(Bucket=self.bucket, Key=self.lock_key, Body=self.owner.to_json())

    def _release(self) -> None:
        if self._heartbeat is None:
            return
        self._heartbeat.set()
        self._heartbeat = None
        with suppress(Exception):  # only our own lock is removed; a failure leaves it to go stale
            response = self.client.get_object(Bucket=self.bucket, Key=self.lock_key)
            holder = Owner.from_json(response["Body"].read())
            if holder is not None and holder.id == self.owner.id:
                self.client.delete_object(Bucket=self.bucket, Key=self.lock_key)

    @property
    def client(self) -> Any:
        if self._client is None or self._client_pid != os.getpid():
            self._client = storage.s3_client(self.options)
            self._client_pid = os.getpid()
        return self._client

    def _staged_key(self, name: str) -> str:
        return f"{self.staging_prefix}/{name}"

    @contextmanager
    def _s3(self, action: str, where: str) -> Iterator[None]:
        """botocore's errors as one-line :class:`WriteError`s naming the object."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            yield
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code == "NoSuchBucket":
                raise WriteError(f"s3://{self.bucket}: no such bucket") from None
            raise WriteError(f"{where}: S3 {action} failed: {code or exc}") from None
        except BotoCoreError as exc:
            raise WriteError(f"{where}: S3 {action} failed: {exc}") from None

    def _keys(self, prefix: str) -> list[str]:
        """Every object key under ``prefix/``, nested ones included (anything there means the name is taken)."""
        keys: list[str] = []
        with self._s3("list", f"s3://{self.bucket}/{prefix}/"):
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket,
                                                                            Prefix=f"{prefix}/"):
                keys.extend(item["Key"] for item in page.get("Contents", []))
        return keys

    def _delete(self, keys: list[str]) -> None:
        for start in range(0, len(keys), 1000):  # DeleteObjects takes at most 1000 keys
            batch = keys[start:start + 1000]
            with self._s3("delete", f"s3://{self.bucket}/{batch[0]}"):
                response = self.client.delete_objects(
                    Bucket=self.bucket, Delete={"Objects": [{"Key": key} for key in batch], "Quiet": True})
            if response.get("Errors"):
                error = response["Errors"][0]
                raise WriteError(f"s3://{self.bucket}/{error['Key']}: S3 delete failed: {error.get('Code')}")

    def _clear_leftovers(self) -> None:
        """Called holding the lock: a staging area with an owner marker belongs to a run that no longer holds it
        (over, or its heartbeat stopped), and is removed with the partial copy of a publish it crashed in; objects
        without the marker are someone else's and refused."""
        final, staged = self._keys(self.prefix), self._keys(self.staging_prefix)
        ours = self._staged_key(OWNER_MARKER) in staged
        if staged and not ours:
            raise WriteError(f"s3://{self.bucket}/{self.staging_prefix}/: a staging area without flinkstate's owner "
                             f"marker (not ours); remove it if nothing needs it")
        if final:
            if f"{self.prefix}/{METADATA_FILE}" in final or not staged:
                raise WriteError(f"{self.uri}: output already exists")
            self._delete(final)  # a publish of ours that crashed: it never had _metadata, so it never looked finished
        self._delete(staged)  # a run of ours that crashed before publishing

    def open(self, name: str) -> BinaryIO:
        key = self._staged_key(_staged_name(name))

        def upload(body: BinaryIO) -> None:
            with self._s3("upload", f"s3://{self.bucket}/{key}"):
                self.client.upload_fileobj(body, self.bucket, key)

        return _UploadOnClose(upload)

    def copy_from(self, source: SavepointLocation, name: str, target: str) -> int:
        key = self._staged_key(_staged_name(target))
        size = source.size(name)
        with self._s3("copy", f"{source.describe(name)} -> s3://{self.bucket}/{key}"):
            if isinstance(source, S3SavepointLocation):
                source_bucket, source_key = split_s3_uri(source.describe(name))
                self.client.copy({"Bucket": source_bucket, "Key": source_key}, self.bucket, key)  # server-side
            else:
                with source.bounded_stream(name) as stream:
                    self.client.upload_fileobj(stream, self.bucket, key)
        return size

    def staged(self) -> SavepointLocation:
        return _StagedS3Location(self.bucket, self.staging_prefix, self.client)

    def publish(self) -> None:
        """Verified: every staged file is copied to the final prefix, the staged metadata last as ``_metadata``
        (the commit point), then the staging area and the lock go."""
        staged = self._keys(self.staging_prefix)
        names = [key[len(self.staging_prefix) + 1:] for key in staged]
        if STAGED_METADATA not in names:
            raise WriteError(f"s3://{self.bucket}/{self.staging_prefix}: nothing to publish (no {METADATA_FILE})")
        if self._keys(self.prefix):
            raise WriteError(f"{self.uri}: output appeared while migrating")
        copied: list[str] = []
        try:
            files = sorted(n for n in names if n not in _RESERVED_NAMES)
            for staged_name, name in [*((n, n) for n in files), (STAGED_METADATA, METADATA_FILE)]:
                key = f"{self.prefix}/{name}"
                source_key = self._staged_key(staged_name)
                with self._s3("copy", f"s3://{self.bucket}/{source_key} -> s3://{self.bucket}/{key}"):
                    self.client.copy({"Bucket": self.bucket, "Key": source_key}, self.bucket, key)
                copied.append(key)
        except BaseException:
            with suppress(WriteError):  # the copy's error is the one to report
                self._delete(copied)
            raise
        self._delete(staged)
        self._release()

    def abort(self) -> None:
        # abort runs while another error propagates: failing here would hide that error, and whatever stays behind
        # is removed by the next run (see _clear_leftovers).
        try:
            with suppress(WriteError):
                self._delete(self._keys(self.staging_prefix))
        finally:
            self._release()


class _StagedS3Location(S3SavepointLocation):
    """The staging prefix read as a savepoint: ``_metadata`` is the staged, not yet verified one."""

    def _resolve(self, name: str) -> str:
        return super()._resolve(STAGED_METADATA if name == METADATA_FILE else name)


def _http_date(value: str | None) -> float | None:
    """An HTTP ``Date`` header as a timestamp: the S3 server's clock, so a lock's age needs no synchronized
    clocks."""
    from email.utils import parsedate_to_datetime

    try:
        return parsedate_to_datetime(value).timestamp() if value else None
    except (TypeError, ValueError):
        return None


def open_output(uri: str | os.PathLike[str]) -> SavepointOutput:
    """The output for a savepoint directory URI: a local path, a ``file:`` URI or ``s3://bucket/prefix``."""
    text = os.fspath(uri)
    scheme = urlparse(text).scheme
    if scheme in ("s3", "s3a"):
        return S3SavepointOutput(text)
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
