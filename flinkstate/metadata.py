"""The ``_metadata`` file of a savepoint (``Checkpoints.loadCheckpointMetadata`` / ``MetadataV2V3SerializerBase``).

Reads versions 3 (Flink 1.11-1.15), 4 (1.16-1.20, adds the Java-serialized CheckpointProperties trailer),
5 (2.0, adds operator name and uid) and 6 (2.1+, channel state handles V2). Native, incremental, changelog and
file-merging handles are recognised and rejected by name: only canonical savepoints are supported.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from flinkstate.binary import KeyGroupRange, Reader
from flinkstate.checkpoint_properties import CheckpointProperties, parse_trailer, serialize_properties
from flinkstate.format_errors import SavepointFormatError, UnsupportedFormat

MAGIC = 0x4960672D
#: KeyGroupRangeAssignment.UPPER_BOUND_MAX_PARALLELISM (Transformation.UPPER_BOUND_MAX_PARALLELISM, 1 << 15).
UPPER_BOUND_MAX_PARALLELISM = 1 << 15
MASTER_STATE_MAGIC = 0xC96B1696 - (1 << 32)  # as a Java int
SUPPORTED_VERSIONS = (3, 4, 5, 6)

# Handle type codes (MetadataV2V3SerializerBase).
NULL_HANDLE = 0
BYTE_STREAM = 1
FILE_STREAM = 2
KEY_GROUPS = 3
PARTITIONABLE_OPERATOR_STATE = 4
RELATIVE_STREAM = 6
SAVEPOINT_KEY_GROUPS = 7
KEY_GROUPS_V2 = 12

UNSUPPORTED_HANDLES = {
    5: "INCREMENTAL_KEY_GROUPS (native RocksDB incremental)",
    8: "CHANGELOG_HANDLE (changelog state backend)",
    9: "CHANGELOG_BYTE_INCREMENT (changelog state backend)",
    10: "CHANGELOG_FILE_INCREMENT (changelog state backend)",
    11: "INCREMENTAL_KEY_GROUPS_V2 (native RocksDB savepoint or checkpoint)",
    13: "CHANGELOG_FILE_INCREMENT_V2 (changelog state backend)",
    14: "CHANGELOG_HANDLE_V2 (changelog state backend)",
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


@dataclass
class OperatorSubtaskState:
    managed_operator_state: OperatorStreamStateHandle | None = None
    raw_operator_state: OperatorStreamStateHandle | None = None
    managed_keyed_state: KeyGroupsStateHandle | None = None
    raw_keyed_state: KeyGroupsStateHandle | None = None
    input_channel_state: list[ChannelStateHandle] = field(default_factory=list)
    result_subpartition_state: list[ChannelStateHandle] = field(default_factory=list)


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
                    ("managed keyed state", sub.managed_keyed_state.delegate if sub.managed_keyed_state else None),
                    ("raw keyed state", sub.raw_keyed_state.delegate if sub.raw_keyed_state else None),
                    *(("channel state", c.delegate) for c in [*sub.input_channel_state,
                                                                *sub.result_subpartition_state]),
                ]
                found.extend((f"{where}: {what}", h) for what, h in handles
                             if isinstance(h, (FileStateHandle, RelativeFileStateHandle)))
        return found


# --------------------------------------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------------------------------------


def read_metadata(data: bytes, path: str | None = None) -> CheckpointMetadata:
    """Parses a whole ``_metadata`` file. Errors name ``path`` and the offset."""
    reader = Reader(data, 0, path)
    magic = reader.i32()
    if magic & 0xFFFFFFFF != MAGIC:
        raise SavepointFormatError(f"not a Flink _metadata file: magic 0x{magic & 0xFFFFFFFF:08x}, "
                                   f"expected 0x{MAGIC:08x}", path, 0)
    version = reader.i32()
    if version not in SUPPORTED_VERSIONS:
        # Version 2 is what Flink 1.10 and earlier wrote (MetadataV2Serializer); 3 came with Flink 1.11.
        era = " (Flink 1.10 or earlier)" if version == 2 else ""
        raise UnsupportedFormat(f"_metadata version {version}{era} is not supported (supported: 3, 4, 5, 6, "
                                f"Flink 1.11 to 2.3)", path, 4)
    return _MetadataParser(reader, version).parse()


class _MetadataParser:
    def __init__(self, reader: Reader, version: int) -> None:
        self.r = reader
        self.version = version

    def parse(self) -> CheckpointMetadata:
        r = self.r
        start = r.pos
        checkpoint_id = r.i64()
        if checkpoint_id < 0:
            raise r.error(f"negative checkpoint id {checkpoint_id}", start)
        masters = [self.master_state() for _ in range(self._count("master states"))]
        operators = [self.operator_state() for _ in range(self._count("operator states"))]
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

    def _count(self, what: str) -> int:
        start = self.r.pos
        count = self.r.i32()
        if count < 0 or count > self.r.remaining():
            raise self.r.error(f"implausible number of {what}: {count}", start)
        return count

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
        # Flink's ranges: KeyGroupRangeAssignment.checkParallelismPreconditions (1..32768) for the max parallelism,
        # OperatorState's constructor for parallelism <= max parallelism.
        if not 1 <= op.max_parallelism <= UPPER_BOUND_MAX_PARALLELISM:
            raise r.error(f"{label}: max parallelism {op.max_parallelism} is outside Flink's range 1.."
                          f"{UPPER_BOUND_MAX_PARALLELISM}", start + 4)
        if not 1 <= op.parallelism <= op.max_parallelism:
            raise r.error(f"{label}: parallelism {op.parallelism} is outside 1..{op.max_parallelism} (its max "
                          f"parallelism)", start)
        start = r.pos
        coordinator = self.stream_handle()
        if coordinator is not None and not isinstance(coordinator, ByteStreamStateHandle):
            raise r.error("operator coordinator state must be inline (byte stream) or null", start)
        op.coordinator_state = coordinator
        count_at = r.pos
        subtasks = r.i32()
        if subtasks < 0:
            if coordinator is not None:  # Flink: "Coordinator State should be null for fully finished operator"
                raise r.error(f"{label}: a fully finished operator with coordinator state", count_at)
            op.fully_finished = True
            return op
        if subtasks > op.parallelism:
            raise r.error(f"{label}: {subtasks} subtask states for parallelism {op.parallelism}", count_at)
        for _ in range(subtasks):
            index_at = r.pos
            index = r.i32()
            finished = index < 0
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
        if r.i32() != 0:
            state.managed_operator_state = self.operator_state_handle()
        if r.i32() != 0:
            state.raw_operator_state = self.operator_state_handle()
        state.managed_keyed_state = self.keyed_state_handle()
        state.raw_keyed_state = self.keyed_state_handle()
        state.input_channel_state = [self.channel_handle("input") for _ in range(self._count("channel handles"))]
        state.result_subpartition_state = [self.channel_handle("output")
                                           for _ in range(self._count("channel handles"))]
        return state

    def _unsupported(self, code: int, start: int, what: str) -> SavepointFormatError:
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
            data = r.bytes(self._count("inline state bytes"))
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
        raise self._unsupported(code, start, "stream state")

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

    def keyed_state_handle(self) -> KeyGroupsStateHandle | None:
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
        raise self._unsupported(code, start, "keyed state")

    def operator_state_handle(self) -> OperatorStreamStateHandle:
        r = self.r
        start = r.pos
        code = r.u8()
        if code != PARTITIONABLE_OPERATOR_STATE:
            raise self._unsupported(code, start, "operator state")
        states = {}
        for _ in range(self._count("operator states")):
            name = r.utf()
            mode_start = r.pos
            mode = r.u8()
            if mode >= len(DISTRIBUTION_MODES):
                raise r.error(f"unknown operator state distribution mode {mode}", mode_start)
            offsets = tuple(r.i64() for _ in range(self._count("operator state offsets")))
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
                offsets = r.bytes(self._count("channel offset bytes"))
                return ChannelStateHandle(f"merged {direction}", subtask, None, offsets, size, delegate)
            if code not in (1, 2):
                raise r.error(f"unknown channel state handle type {code}", start)
        subtask = r.i32()
        info = (r.i32(), r.i32())
        offsets = tuple(r.i64() for _ in range(self._count("channel offsets")))
        size = r.i64()
        return ChannelStateHandle(kind, subtask, info, offsets, size, self.stream_handle())
