"""The ``_metadata`` file of a savepoint: its model, its reading and its writing.

Layout (``MetadataV2V3SerializerBase`` and its V2 to V6 subclasses): magic, version, checkpoint id, master states,
operator states (each: name and uid from V5, id, parallelism, max parallelism, coordinator state, then per subtask
its operator-state, keyed-state and channel-state handles, see :mod:`flinkstate.format.handles`), and from V4 a
Java-serialized ``CheckpointProperties`` trailer (:mod:`flinkstate.format.checkpoint_properties`).

Version 2 (Flink 1.3 to 1.10, ``SavepointV2Serializer`` / ``MetadataV2Serializer``) differs in the operator: after the
max parallelism an unused i32 (the "chain length", always 1), no coordinator state, and each subtask starts with two
unused fields (i64 "duration", always -1, and i32 number of legacy states, which must be 0) and has no channel state.
Flink 2.x still restores version 2 (``MetadataSerializers`` registers ``MetadataV2Serializer``) but no longer writes it:
this module writes version 2 only to give back the bytes it read (the handles Flink 1.10 wrote, codes 1 to 4).
:func:`write_metadata` is the mirror of :func:`read_metadata`: re-writing what was read gives the same bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from flinkstate.binary import Reader, Writer
from flinkstate.errors import FlinkStateError, WriteError
from flinkstate.format.changelog_handles import (
    ChangelogBackendHandle,
    ChangelogHandleReader,
    ChangelogStreamHandle,
    write_any_keyed_state_handle,
)
from flinkstate.format.checkpoint_properties import (
    JAVA_SERIALIZED_NULL,
    CheckpointProperties,
    parse_trailer,
    serialize_properties,
)
from flinkstate.format.handles import (
    BYTE_STREAM,
    FILE_STREAM,
    INCREMENTAL_KEY_GROUPS,
    KEY_GROUPS,
    NULL_HANDLE,
    PARTITIONABLE_OPERATOR_STATE,
    RELATIVE_STREAM,
    ByteStreamStateHandle,
    ChannelStateHandle,
    FileStateHandle,
    IncrementalKeyedStateHandle,
    KeyedStateHandle,
    OperatorStreamStateHandle,
    RelativeFileStateHandle,
    StreamStateHandle,
    write_channel_handle,
    write_operator_state_handle,
    write_stream_handle,
)
from flinkstate.format_errors import SavepointFormatError, UnsupportedFormat

#: A subtask's keyed-state handle: canonical or HashMap key groups, a native RocksDB snapshot, or the changelog
#: backend's handle wrapping them.
AnyKeyedStateHandle = KeyedStateHandle | ChangelogBackendHandle

MAGIC = 0x4960672D
#: KeyGroupRangeAssignment.UPPER_BOUND_MAX_PARALLELISM (Transformation.UPPER_BOUND_MAX_PARALLELISM, 1 << 15).
UPPER_BOUND_MAX_PARALLELISM = 1 << 15
MASTER_STATE_MAGIC = 0xC96B1696 - (1 << 32)  # as a Java int
SUPPORTED_VERSIONS = (2, 3, 4, 5, 6)
#: The handle codes a version-2 file can hold (what Flink 1.10 and earlier wrote, incremental RocksDB checkpoints
#: included); anything newer is a V3+ file.
V2_HANDLE_CODES = (NULL_HANDLE, BYTE_STREAM, FILE_STREAM, KEY_GROUPS, PARTITIONABLE_OPERATOR_STATE,
                   INCREMENTAL_KEY_GROUPS)


@dataclass
class OperatorSubtaskState:
    managed_operator_state: OperatorStreamStateHandle | None = None
    raw_operator_state: OperatorStreamStateHandle | None = None
    #: A canonical (or heap-native) key-groups handle, or a native RocksDB snapshot (IncrementalKeyedStateHandle).
    managed_keyed_state: AnyKeyedStateHandle | None = None
    raw_keyed_state: AnyKeyedStateHandle | None = None
    input_channel_state: list[ChannelStateHandle] = field(default_factory=list)
    result_subpartition_state: list[ChannelStateHandle] = field(default_factory=list)
    #: V2 only: the unused "duration" field (Flink wrote -1), kept so the file is written back as read.
    duration: int = -1


@dataclass
class OperatorState:
    operator_id: str  # 32 hex digits, the OperatorID bytes in order
    parallelism: int
    max_parallelism: int
    name: str | None = None  # V5+
    uid: str | None = None  # V5+
    coordinator_state: ByteStreamStateHandle | None = None
    subtasks: dict[int, OperatorSubtaskState] = field(default_factory=dict)
    finished_subtasks: set[int] = field(default_factory=set)
    fully_finished: bool = False
    #: V2 only: the unused "chain length" field (Flink wrote 1 since 1.3), kept so the file is written back as read.
    chain_length: int = 1


@dataclass(frozen=True)
class MasterState:
    version: int
    name: str
    payload: bytes = field(repr=False)


@dataclass(init=False)
class CheckpointMetadata:
    version: int
    checkpoint_id: int
    master_states: list[MasterState]
    operators: list[OperatorState]
    #: V4+: the CheckpointProperties at the end of the file, parsed and validated (None: V3, which has none, or a
    #: Java-serialized null as the State Processor API writes).
    properties: CheckpointProperties | None
    path: str | None

    def __init__(self, version: int, checkpoint_id: int, master_states: list[MasterState],
                 operators: list[OperatorState], trailer: bytes | CheckpointProperties | None = None,
                 path: str | None = None) -> None:
        self.version = version
        self.checkpoint_id = checkpoint_id
        self.master_states = master_states
        self.operators = operators
        self.path = path
        self.properties = None
        if isinstance(trailer, CheckpointProperties):
            self.properties = trailer
        elif trailer:
            self.trailer = trailer

    @property
    def trailer(self) -> bytes:
        """The properties as Flink serializes them (empty when there are none). Setting it parses the bytes
        strictly (:func:`flinkstate.checkpoint_properties.parse_trailer`)."""
        return b"" if self.properties is None else serialize_properties(self.properties)

    @trailer.setter
    def trailer(self, data: bytes) -> None:
        self.properties = parse_trailer(data, self.path) if data else None

    def file_handles(self) -> list[tuple[str, FileStateHandle | RelativeFileStateHandle]]:
        """(where, handle) of every handle that names a file, in file order: what storage must resolve (and
        contain) before anything is read, whichever states a command goes on to read."""
        found: list[tuple[str, FileStateHandle | RelativeFileStateHandle]] = []
        for op in self.operators:
            label = f"operator {op.uid or op.name or op.operator_id}"
            for index, sub in sorted(op.subtasks.items()):
                where = f"{label}, subtask {index}"
                handles: list[tuple[str, StreamStateHandle | None]] = [
                    ("managed operator state", sub.managed_operator_state.delegate
                     if sub.managed_operator_state else None),
                    ("raw operator state", sub.raw_operator_state.delegate if sub.raw_operator_state else None),
                    *_keyed_files("managed keyed state", sub.managed_keyed_state),
                    *_keyed_files("raw keyed state", sub.raw_keyed_state),
                    *(("channel state", c.delegate) for c in [*sub.input_channel_state,
                                                                *sub.result_subpartition_state]),
                ]
                found.extend((f"{where}: {what}", h) for what, h in handles
                             if isinstance(h, (FileStateHandle, RelativeFileStateHandle)))
        return found

    def changelog_files(self) -> list[StreamStateHandle]:
        """The stream handles of changelog-backend logs (their recorded size counts the bytes written after the
        compression flag, before compression: not the file's length)."""
        return [h for op in self.operators for sub in op.subtasks.values()
                for h in [*_changelog_files(sub.managed_keyed_state), *_changelog_files(sub.raw_keyed_state)]]


def _changelog_files(handle: AnyKeyedStateHandle | None) -> list[StreamStateHandle]:
    if not isinstance(handle, ChangelogBackendHandle):
        return []
    return [h for part in handle.non_materialized if isinstance(part, ChangelogStreamHandle)
            for h, _ in part.handles_and_offsets if h is not None]


def _keyed_files(what: str, handle: AnyKeyedStateHandle | None) -> list[tuple[str, StreamStateHandle | None]]:
    if handle is None:
        return []
    if isinstance(handle, (IncrementalKeyedStateHandle, ChangelogBackendHandle)):
        return [(f"{what}: {name}", h) for name, h in handle.files()]
    return [(what, handle.delegate)]


# --------------------------------------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------------------------------------


def has_state(op: OperatorState) -> bool:
    """Whether Flink would refuse to skip this operator without allowNonRestoredState."""
    return op.coordinator_state is not None or any(
        s.managed_keyed_state or s.raw_keyed_state or s.managed_operator_state or s.raw_operator_state
        or s.input_channel_state or s.result_subpartition_state for s in op.subtasks.values())


def read_metadata(data: bytes, path: str | None = None) -> CheckpointMetadata:
    """Parses a whole ``_metadata`` file. Errors name ``path`` and the offset."""
    reader = Reader(data, 0, path)
    magic = reader.i32()
    if magic & 0xFFFFFFFF != MAGIC:
        raise SavepointFormatError(f"not a Flink _metadata file: magic 0x{magic & 0xFFFFFFFF:08x}, "
                                   f"expected 0x{MAGIC:08x}", path, 0)
    version = reader.i32()
    if version not in SUPPORTED_VERSIONS:
        raise UnsupportedFormat(f"_metadata version {version} is not supported (supported: 2 to 6, "
                                f"Flink 1.3 to 2.3)", path, 4)
    return _MetadataParser(reader, version).parse()


class _MetadataParser(ChangelogHandleReader):
    def parse(self) -> CheckpointMetadata:
        r = self.r
        start = r.pos
        checkpoint_id = r.i64()
        if checkpoint_id < 0:
            raise r.error(f"negative checkpoint id {checkpoint_id}", start)
        masters = [self.master_state() for _ in range(self.count("master states"))]
        operators = [self.operator_state() for _ in range(self.count("operator states"))]
        trailer_at = r.pos
        trailer = r.rest()
        if self.version < 4:
            if trailer:
                raise r.error(f"{len(trailer)} unexpected bytes after the last operator", trailer_at)
            return CheckpointMetadata(self.version, checkpoint_id, masters, operators, None, r.path)
        if not trailer:
            raise r.error("the CheckpointProperties trailer of _metadata version 4+ is missing", trailer_at)
        properties = parse_trailer(trailer, r.path, r.base + trailer_at)
        return CheckpointMetadata(self.version, checkpoint_id, masters, operators, properties, r.path)

    def master_state(self) -> MasterState:
        r = self.r
        start = r.pos
        magic = r.i32()
        if magic != MASTER_STATE_MAGIC:
            raise r.error(f"bad master state magic 0x{magic & 0xFFFFFFFF:08x}", start)
        length = r.i32()
        body_start = r.pos
        body = Reader(r.bytes(length), 0, r.path, r.base + body_start)
        version, name = body.i32(), body.utf()
        payload = body.bytes(body.i32())
        if body.remaining():
            raise body.error("unexpected bytes after master state payload")
        return MasterState(version, name, payload)

    def operator_state(self) -> OperatorState:
        r = self.r
        name = uid = None
        if self.version >= 5:
            name, uid = r.utf() or None, r.utf() or None
        operator_id = r.bytes(16).hex()
        label = f"operator {uid or name or operator_id}"
        start = r.pos
        op = OperatorState(operator_id, r.i32(), r.i32(), name, uid)
        if self.version == 2:
            op.chain_length = r.i32()
        # Flink's ranges: KeyGroupRangeAssignment.checkParallelismPreconditions (1..32768) for the max parallelism,
        # OperatorState's constructor for parallelism <= max parallelism.
        if not 1 <= op.max_parallelism <= UPPER_BOUND_MAX_PARALLELISM:
            raise r.error(f"{label}: max parallelism {op.max_parallelism} is outside Flink's range 1.."
                          f"{UPPER_BOUND_MAX_PARALLELISM}", start + 4)
        if not 1 <= op.parallelism <= op.max_parallelism:
            raise r.error(f"{label}: parallelism {op.parallelism} is outside 1..{op.max_parallelism} (its max "
                          f"parallelism)", start)
        start = r.pos
        coordinator = self.stream_handle() if self.version >= 3 else None
        if coordinator is not None and not isinstance(coordinator, ByteStreamStateHandle):
            raise r.error("operator coordinator state must be inline (byte stream) or null", start)
        op.coordinator_state = coordinator
        count_at = r.pos
        subtasks = r.i32()
        if subtasks < 0 and self.version >= 3:
            if coordinator is not None:  # Flink: "Coordinator State should be null for fully finished operator"
                raise r.error(f"{label}: a fully finished operator with coordinator state", count_at)
            op.fully_finished = True
            return op
        if subtasks < 0 or subtasks > op.parallelism:
            raise r.error(f"{label}: {subtasks} subtask states for parallelism {op.parallelism}", count_at)
        for _ in range(subtasks):
            index_at = r.pos
            index = r.i32()
            finished = index < 0 and self.version >= 3  # V2 has no finished subtasks: a negative index is refused
            index = -index - 1 if finished else index
            # OperatorState.putState: 0 <= index < parallelism; Flink writes each subtask once.
            if not 0 <= index < op.parallelism:
                raise r.error(f"{label}: subtask index {index} is outside 0..{op.parallelism - 1}", index_at)
            if index in op.subtasks or index in op.finished_subtasks:
                raise r.error(f"{label}: subtask {index} appears twice", index_at)
            if finished:
                op.finished_subtasks.add(index)
            else:
                op.subtasks[index] = state = self.subtask_state()
                for keyed in (state.managed_keyed_state, state.raw_keyed_state):
                    kg = keyed.key_group_range if keyed is not None else None
                    if kg is not None and len(kg) and not (0 <= kg.start and kg.end < op.max_parallelism):
                        raise r.error(f"{label}, subtask {index}: key groups {kg.start}..{kg.end} are outside "
                                      f"0..{op.max_parallelism - 1} (its max parallelism)", index_at)
        return op

    def subtask_state(self) -> OperatorSubtaskState:
        r = self.r
        state = OperatorSubtaskState()
        if self.version == 2:
            state.duration = r.i64()
            legacy_at = r.pos
            if (legacy := r.i32()) != 0:  # MetadataV2Serializer refuses these too
                raise r.error(f"{legacy} legacy task states (Flink 1.1 'Checkpointed' state) are not supported",
                              legacy_at)
        if r.i32() != 0:
            state.managed_operator_state = self.operator_state_handle()
        if r.i32() != 0:
            state.raw_operator_state = self.operator_state_handle()
        state.managed_keyed_state = self.any_keyed_state_handle()
        state.raw_keyed_state = self.any_keyed_state_handle()
        if self.version == 2:
            return state
        state.input_channel_state = [self.channel_handle("input") for _ in range(self.count("channel handles"))]
        state.result_subpartition_state = [self.channel_handle("output")
                                           for _ in range(self.count("channel handles"))]
        return state


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
        raise WriteError(f"cannot write _metadata version {version} (supported: 2 to 6)")
    if version == 2:
        _check_v2_writable(metadata)
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
    if version == 2:
        w.i32(op.chain_length)
    else:
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
    if version == 2:
        w.i64(state.duration)
        w.i32(0)
    for handle in (state.managed_operator_state, state.raw_operator_state):
        w.i32(0 if handle is None else 1)
        if handle is not None:
            write_operator_state_handle(w, handle)
    write_any_keyed_state_handle(w, state.managed_keyed_state)
    write_any_keyed_state_handle(w, state.raw_keyed_state)
    if version == 2:
        return
    for channels in (state.input_channel_state, state.result_subpartition_state):
        w.i32(len(channels))
        for channel in channels:
            write_channel_handle(w, channel, version)


def _check_v2_writable(metadata: CheckpointMetadata) -> None:
    """Version 2 is written only as Flink 1.10 wrote it: what a migration produces (relative files, canonical
    savepoint handles, coordinator or finished state) has no place in it, so such output is refused, not half-written
    in a format no Flink version wrote."""
    for op in metadata.operators:
        label = f"operator {op.uid or op.name or op.operator_id}"
        if op.coordinator_state is not None or op.finished_subtasks or op.fully_finished:
            raise WriteError(f"{label}: coordinator or finished-subtask state cannot be written as _metadata version 2")
        for index, sub in op.subtasks.items():
            if sub.input_channel_state or sub.result_subpartition_state:
                raise WriteError(f"{label}, subtask {index}: channel state cannot be written as _metadata version 2")
            for what, code in _v2_handle_codes(sub):
                if code not in V2_HANDLE_CODES:
                    raise WriteError(f"{label}, subtask {index}: {what} (handle code {code}) cannot be written as "
                                     f"_metadata version 2 (Flink 1.10 and earlier wrote codes 1 to 4): write "
                                     f"version 3 or later (migrate --metadata-version 3), which Flink 1.11 to 2.x "
                                     f"restore")


def _v2_handle_codes(sub: OperatorSubtaskState) -> list[tuple[str, int]]:
    found: list[tuple[str, int]] = []
    for what, keyed in (("managed keyed state", sub.managed_keyed_state), ("raw keyed state", sub.raw_keyed_state)):
        if keyed is not None:
            found.append((what, keyed.code))
            found.extend((f"{what} stream", _stream_code(h)) for _, h in _keyed_files(what, keyed))
    for what, operator in (("managed operator state", sub.managed_operator_state),
                           ("raw operator state", sub.raw_operator_state)):
        if operator is not None:
            found.append((f"{what} stream", _stream_code(operator.delegate)))
    return found


def _stream_code(handle: StreamStateHandle | None) -> int:
    if handle is None:
        return NULL_HANDLE
    if isinstance(handle, ByteStreamStateHandle):
        return BYTE_STREAM
    if isinstance(handle, FileStateHandle):
        return FILE_STREAM
    return RELATIVE_STREAM


__all__ = ["MAGIC", "MASTER_STATE_MAGIC", "SUPPORTED_VERSIONS", "UPPER_BOUND_MAX_PARALLELISM", "V2_HANDLE_CODES",
           "CheckpointMetadata", "MasterState", "OperatorState", "OperatorSubtaskState", "has_state", "read_metadata",
           "write_metadata"]
