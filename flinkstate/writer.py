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

import io
import os
import shutil
import tempfile
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
    read_metadata,
)
from flinkstate.storage import METADATA_FILE, S3Options, S3SavepointLocation, SavepointLocation, split_s3_uri

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
        from flinkstate.storage import LocalSavepointLocation

        return LocalSavepointLocation(self.staging)

    def publish(self) -> None:
        if self.directory.exists():
            raise WriteError(f"{self.directory}: output appeared while migrating; the result stays in {self.staging}")
        os.rename(self.staging, self.directory)

    def abort(self) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)


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
        self._clear_leftovers()

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_client": None, "_client_pid": None}

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
        final, staged = self._keys(self.prefix), self._keys(self.staging_prefix)
        if final:
            if f"{self.prefix}/{METADATA_FILE}" in final or not staged:
                raise WriteError(f"{self.uri}: output already exists")
            self._delete(final)  # a publish of ours that crashed: it never had _metadata, so it never looked finished
        self._delete(staged)  # a run of ours that crashed before publishing

    def open(self, name: str) -> BinaryIO:
        key = self._staged_key(name)

        def upload(body: BinaryIO) -> None:
            with self._s3("upload", f"s3://{self.bucket}/{key}"):
                self.client.upload_fileobj(body, self.bucket, key)

        return _UploadOnClose(upload)

    def copy_from(self, source: SavepointLocation, name: str, target: str) -> int:
        key = self._staged_key(target)
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
        return S3SavepointLocation(self.bucket, self.staging_prefix, self.client)

    def publish(self) -> None:
        staged = self._keys(self.staging_prefix)
        names = [key[len(self.staging_prefix) + 1:] for key in staged]
        if METADATA_FILE not in names:
            raise WriteError(f"s3://{self.bucket}/{self.staging_prefix}: nothing to publish (no {METADATA_FILE})")
        if self._keys(self.prefix):
            raise WriteError(f"{self.uri}: output appeared while migrating")
        copied: list[str] = []
        try:
            for name in [*sorted(n for n in names if n != METADATA_FILE), METADATA_FILE]:
                key = f"{self.prefix}/{name}"
                with self._s3("copy", f"s3://{self.bucket}/{self._staged_key(name)} -> s3://{self.bucket}/{key}"):
                    self.client.copy({"Bucket": self.bucket, "Key": self._staged_key(name)}, self.bucket, key)
                copied.append(key)
        except BaseException:
            with suppress(WriteError):  # the copy's error is the one to report
                self._delete(copied)
            raise
        self._delete(staged)

    def abort(self) -> None:
        # abort runs while another error propagates: failing here would hide that error, and whatever stays behind
        # is removed by the next run (see _clear_leftovers).
        with suppress(WriteError):
            self._delete(self._keys(self.staging_prefix))


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
