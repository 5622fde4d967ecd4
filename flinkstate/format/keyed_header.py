"""The header of a keyed-state stream (``KeyedBackendSerializationProxy``): the key serializer snapshot and
one meta info per state (name, kind, serializer snapshots), read and written. The blocks after it:
:mod:`flinkstate.format.keyed_stream`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from flinkstate.binary import Reader, Writer
from flinkstate.format.handles import DISTRIBUTION_MODES
from flinkstate.format_errors import SavepointFormatError, UnknownSerializerSnapshot, UnsupportedFormat
from flinkstate.serializers.base import TypeSerializerSnapshot
from flinkstate.serializers.registry import read_snapshot, write_snapshot

KEYED_PROXY_VERSION = 6
BACKEND_STATE_TYPES = ("KEY_VALUE", "OPERATOR", "BROADCAST", "PRIORITY_QUEUE", "KEY_VALUE_V2")
END_OF_KEY_GROUP_MARK = 0xFFFF
FIRST_BIT_IN_BYTE_MASK = 0x80
KEYED_STATE_TYPE = "KEYED_STATE_TYPE"
VALUE_SERIALIZER = "VALUE_SERIALIZER"
NAMESPACE_SERIALIZER = "NAMESPACE_SERIALIZER"
USER_KEY_SERIALIZER = "USER_KEY_SERIALIZER"
OPERATOR_STATE_DISTRIBUTION_MODE = "OPERATOR_STATE_DISTRIBUTION_MODE"
#: ``StateDescriptor.Type``: the names Flink's restore parses with ``valueOf`` (``OperatorStateHandle.Mode``'s are
#: handles.DISTRIBUTION_MODES).
STATE_DESCRIPTOR_TYPES = ("UNKNOWN", "VALUE", "LIST", "REDUCING", "FOLDING", "AGGREGATING", "MAP")
#: The kind reported for priority-queue (timer) states.
TIMERS = "TIMERS"


# --------------------------------------------------------------------------------------------------------------------
# Header
# --------------------------------------------------------------------------------------------------------------------


@dataclass
class StateMetaInfo:
    """One registered state (``StateMetaInfoSnapshot``). Options and serializers keep their written order so the
    header can be written back byte for byte."""

    name: str
    backend_type: str
    options: list[tuple[str, str]]
    serializers: list[tuple[str, TypeSerializerSnapshot]]

    def option(self, key: str) -> str | None:
        return next((v for k, v in self.options if k == key), None)

    def serializer(self, key: str) -> TypeSerializerSnapshot | None:
        return next((v for k, v in self.serializers if k == key), None)

    @property
    def kind(self) -> str:
        """VALUE, LIST, MAP, REDUCING, AGGREGATING, ... for keyed state; TIMERS for priority queues."""
        if self.backend_type == "PRIORITY_QUEUE":
            return TIMERS
        return self.option(KEYED_STATE_TYPE) or "UNKNOWN"

    @property
    def namespace_serializer(self) -> TypeSerializerSnapshot | None:
        if self.backend_type == "PRIORITY_QUEUE":
            timer = self.serializer(VALUE_SERIALIZER)
            return timer.nested[1] if timer is not None and timer.nested else None
        return self.serializer(NAMESPACE_SERIALIZER)

    @property
    def value_serializer(self) -> TypeSerializerSnapshot | None:
        """The serializer of one stored value: the element for LIST, the user value for MAP (both meta versions);
        the timer serializer for priority queues."""
        value = self.serializer(VALUE_SERIALIZER)
        if value is None or self.backend_type != "KEY_VALUE":
            return value
        if self.kind == "LIST":  # V1 meta: ListSerializer(element)
            return value.nested[0]
        if self.kind == "MAP":  # V1 meta: MapSerializer(userKey, userValue)
            return value.nested[1]
        return value

    @property
    def user_key_serializer(self) -> TypeSerializerSnapshot | None:
        if self.kind != "MAP":
            return None
        if self.backend_type == "KEY_VALUE":
            value = self.serializer(VALUE_SERIALIZER)
            return value.nested[0] if value is not None else None
        return self.serializer(USER_KEY_SERIALIZER)


@dataclass
class KeyedBackendHeader:
    """``KeyedBackendSerializationProxy``. ``error`` is set when a state's snapshot could not be parsed: the states
    before it are still listed, the rest of the header (and so the data) is unreadable."""

    version: int
    compressed: bool
    key_serializer: TypeSerializerSnapshot | None
    states: list[StateMetaInfo] = field(default_factory=list)
    length: int = 0
    error: SavepointFormatError | None = None

    def state_index(self, name: str) -> int | None:
        return next((i for i, s in enumerate(self.states) if s.name == name), None)

    def write(self) -> bytes:
        """The header bytes (as Flink writes them)."""
        writer = Writer()
        writer.i32(self.version)
        writer.bool(self.compressed)
        assert self.key_serializer is not None
        write_snapshot(writer, self.key_serializer, top_level=True)
        writer.i16(len(self.states))
        for state in self.states:
            write_state_meta_info(writer, state)
        return writer.getvalue()


def read_state_meta_info(reader: Reader) -> StateMetaInfo:
    name_at = reader.pos
    name = reader.utf()
    start = reader.pos
    type_index = reader.i32()
    if not 0 <= type_index < len(BACKEND_STATE_TYPES):
        raise reader.error(f"state {name}: unknown backend state type {type_index}", start)
    options = [(reader.utf(), reader.utf()) for _ in range(_count(reader, "options"))]
    meta = StateMetaInfo(name, BACKEND_STATE_TYPES[type_index], options, [])
    for _ in range(_count(reader, "serializers")):
        key = reader.utf()
        try:
            meta.serializers.append((key, read_snapshot(reader, top_level=True)))
        except SavepointFormatError as exc:
            raise exc.located(None, 0, f"state {name}, {key}") from None
    problem = restore_problem(meta)
    if problem is not None:
        raise reader.error(f"state {name}: {problem}", name_at)
    return meta


#: What Flink's restore requires of a state's meta info, by backend type: the serializer snapshots it looks up
#: (``Preconditions.checkNotNull`` in the ``Registered*BackendMetaInfo(StateMetaInfoSnapshot)`` constructors) and the
#: option it parses with ``Enum.valueOf`` (a missing or unknown name throws).
_REQUIRED_SERIALIZERS = {"KEY_VALUE": (NAMESPACE_SERIALIZER, VALUE_SERIALIZER),
                         "KEY_VALUE_V2": (NAMESPACE_SERIALIZER, VALUE_SERIALIZER),
                         "PRIORITY_QUEUE": (VALUE_SERIALIZER,),
                         "OPERATOR": (VALUE_SERIALIZER,),
                         "BROADCAST": ("KEY_SERIALIZER", VALUE_SERIALIZER)}
_REQUIRED_OPTION = {"KEY_VALUE": (KEYED_STATE_TYPE, STATE_DESCRIPTOR_TYPES),
                    "KEY_VALUE_V2": (KEYED_STATE_TYPE, STATE_DESCRIPTOR_TYPES),
                    "OPERATOR": (OPERATOR_STATE_DISTRIBUTION_MODE, DISTRIBUTION_MODES),
                    "BROADCAST": (OPERATOR_STATE_DISTRIBUTION_MODE, DISTRIBUTION_MODES)}


def restore_problem(meta: StateMetaInfo) -> str | None:
    """Why Flink could not restore this state's meta info (a serializer snapshot it needs is missing, or its state
    type or distribution mode is no name Flink knows), or None. Flink writes them all; a savepoint without one, a
    corrupted key name say, fails Flink's restore, so readers refuse it here rather than meet the gap later."""
    option = _REQUIRED_OPTION.get(meta.backend_type)
    if option is not None:
        key, known = option
        value = meta.option(key)
        if value not in known:
            return (f"option {key} is {'missing' if value is None else repr(value)}, not one of Flink's "
                    f"({', '.join(known)})")
    required = list(_REQUIRED_SERIALIZERS[meta.backend_type])
    if meta.backend_type == "KEY_VALUE_V2" and meta.option(KEYED_STATE_TYPE) == "MAP":
        required.append(USER_KEY_SERIALIZER)  # RegisteredKeyAndUserKeyValueStateBackendMetaInfo
    missing = [key for key in required if meta.serializer(key) is None]
    if missing:
        found = ", ".join(key for key, _ in meta.serializers) or "none"
        return (f"no {' or '.join(missing)} snapshot for a {meta.backend_type} state (serializer snapshots: {found}); "
                f"Flink's restore needs it")
    return None


def write_state_meta_info(writer: Writer, meta: StateMetaInfo) -> None:
    writer.utf(meta.name)
    writer.i32(BACKEND_STATE_TYPES.index(meta.backend_type))
    writer.i32(len(meta.options))
    for key, value in meta.options:
        writer.utf(key)
        writer.utf(value)
    writer.i32(len(meta.serializers))
    for key, snapshot in meta.serializers:
        writer.utf(key)
        write_snapshot(writer, snapshot, top_level=True)


def state_meta_bytes(meta: StateMetaInfo) -> bytes:
    """A state's meta info as written: equal bytes, same state."""
    writer = Writer()
    write_state_meta_info(writer, meta)
    return writer.getvalue()


def _count(reader: Reader, what: str) -> int:
    start = reader.pos
    count = reader.i32()
    if count < 0 or count > reader.remaining():
        raise reader.error(f"implausible number of {what}: {count}", start)
    return count


def read_keyed_header(reader: Reader, tolerant: bool = False) -> KeyedBackendHeader:
    """Parses the proxy. With ``tolerant``, an unknown serializer snapshot ends the state list with ``error`` set
    instead of raising."""
    start = reader.pos
    version = reader.i32()
    if version != KEYED_PROXY_VERSION:
        written = " (Flink 1.6 or earlier: serializers stored with Java serialization, which Flink 1.17 and later " \
            "cannot restore either)" if version < KEYED_PROXY_VERSION else ""
        raise UnsupportedFormat(f"keyed state proxy version {version}{written} is not supported (only "
                                f"{KEYED_PROXY_VERSION})", reader.path, reader.base + start)
    compressed = reader.bool()
    header = KeyedBackendHeader(version, compressed, None)
    try:
        header.key_serializer = read_snapshot(reader, top_level=True)
        count = reader.i16()
        for _ in range(count):
            header.states.append(read_state_meta_info(reader))
    except UnknownSerializerSnapshot as exc:
        if not tolerant:
            raise
        header.error = exc
    header.length = reader.pos
    return header


def read_stream_header(data: bytes, path: str, context: str, tolerant: bool = False) -> KeyedBackendHeader:
    """The header at the start of a stream's bytes (a canonical stream, a native snapshot's meta file), every
    error located at ``path`` and named by ``context`` (the operator): raised, or kept on the header (``tolerant``)."""
    try:
        header = read_keyed_header(Reader(data, 0, path), tolerant)
    except SavepointFormatError as exc:
        raise exc.located(path, 0, context) from None
    if header.error is not None:
        header.error = header.error.located(path, 0, context)
    return header


__all__ = ["BACKEND_STATE_TYPES", "END_OF_KEY_GROUP_MARK", "FIRST_BIT_IN_BYTE_MASK", "KEYED_PROXY_VERSION",
           "KEYED_STATE_TYPE", "NAMESPACE_SERIALIZER", "TIMERS", "USER_KEY_SERIALIZER", "VALUE_SERIALIZER",
           "KeyedBackendHeader", "StateMetaInfo", "read_keyed_header", "read_state_meta_info", "read_stream_header",
           "state_meta_bytes", "write_state_meta_info"]
