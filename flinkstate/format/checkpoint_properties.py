"""The ``CheckpointProperties`` trailer of ``_metadata`` V4+ (``MetadataV4Serializer``): parsed, validated, written.

Flink ends every V4+ ``_metadata`` file with ``new ObjectOutputStream(dos).writeObject(properties)``: Java
serialization of ``CheckpointProperties`` (serialVersionUID 2), whose ``checkpointType`` is a ``SavepointType`` or a
``CheckpointType``, each with enum fields. On restore Flink reads it back with ``ObjectInputStream.readObject``; a
trailer that does not deserialize fails the submit (``java.io.EOFException``, ``InvalidClassException`` ...), so it
must never be carried as opaque bytes.

Why a strict hand parser and not ``javaobj-py3`` (0.6.1, checked on PyPI): the trailer is one of a handful of fixed
shapes, and what matters is that what we write is exactly what Flink wrote and what Flink will read. javaobj is a
general deserializer and a poor fit for that: its ``loads`` accepts a trailer with the last bytes cut off and a boolean
byte of 7, and its ``dumps`` does not re-produce Flink's 756 bytes. Here instead:

* :func:`parse_trailer` reads the Java serialization grammar subset Flink's ``ObjectOutputStream`` emits for these
  classes (objects, class descriptors, enums, strings, back-references, null), with the exact class names,
  serialVersionUIDs, descriptor flags and field lists of Flink 1.15+ (measured with ``serialver`` on the 1.20.3,
  2.2.0 and 2.3.0 distributions; SavepointType and CheckpointType declare none, so the JVM derives them from the class
  shape, unchanged since 1.15);
* it checks the values the way Flink's factories make them (``CheckpointProperties.forSavepoint``,
  ``forSyncSavepoint``, ``forUnclaimedSnapshot``, ``forCheckpoint`` and the REST-triggered checkpoints): a savepoint
  type with its own name and post-checkpoint action, no discard flags, a checkpoint type with its own sharing
  strategy and one of the three retention policies;
* it then writes the parsed object back (:func:`serialize_properties`, handle numbering as ``ObjectOutputStream``
  does it) and requires the very same bytes, so anything Flink would not have written is refused, and a
  Flink-written trailer is re-written byte for byte.

The one field a corruption can change without being noticed is ``forced`` of a savepoint: Flink writes both values
(``forSavepoint(!unalignedCheckpointsEnabled, ...)``) and reads it only when triggering, never on restore.
"""

from __future__ import annotations

from dataclasses import dataclass

from flinkstate.binary import Reader, Writer
from flinkstate.format_errors import SavepointFormatError

STREAM_MAGIC = 0xACED
STREAM_VERSION = 5
TC_NULL = 0x70
TC_REFERENCE = 0x71
TC_CLASSDESC = 0x72
TC_OBJECT = 0x73
TC_STRING = 0x74
TC_ENDBLOCKDATA = 0x78
TC_ENUM = 0x7E
BASE_WIRE_HANDLE = 0x7E0000
SC_SERIALIZABLE = 0x02
SC_ENUM = 0x10

#: ``ObjectOutputStream`` of a null object: what the State Processor API writes as the V4+ trailer.
JAVA_SERIALIZED_NULL = bytes.fromhex("aced000570")

_PKG = "org.apache.flink.runtime.checkpoint"
PROPERTIES_CLASS = f"{_PKG}.CheckpointProperties"
SAVEPOINT_TYPE_CLASS = f"{_PKG}.SavepointType"
CHECKPOINT_TYPE_CLASS = f"{_PKG}.CheckpointType"
FORMAT_TYPE_CLASS = "org.apache.flink.core.execution.SavepointFormatType"
POST_ACTION_CLASS = f"{_PKG}.SavepointType$PostCheckpointAction"
SHARING_CLASS = f"{_PKG}.SnapshotType$SharingFilesStrategy"
ENUM_CLASS = "java.lang.Enum"

#: serialVersionUIDs: CheckpointProperties declares 2; the others are the JVM's defaults (``serialver`` on
#: flink-dist 1.20.3, 2.2.0 and 2.3.0 gives these; enums always have 0).
PROPERTIES_SUID = 2
SAVEPOINT_TYPE_SUID = -6879297871714708296
CHECKPOINT_TYPE_SUID = -2963844630364414662

FORMAT_TYPES = ("CANONICAL", "NATIVE")
POST_ACTIONS = ("NONE", "SUSPEND", "TERMINATE")
SHARING_STRATEGIES = ("FORWARD_BACKWARD", "FORWARD", "NO_SHARING")

#: SavepointType's factories: name -> post-checkpoint action.
SAVEPOINT_NAMES = {"Savepoint": "NONE", "Suspend Savepoint": "SUSPEND", "Terminate Savepoint": "TERMINATE"}
#: CheckpointType's two constants: name -> sharing strategy.
CHECKPOINT_NAMES = {"Checkpoint": "FORWARD_BACKWARD", "Full Checkpoint": "FORWARD"}
#: CheckpointRetentionPolicy -> (discardSubsumed, discardFinished, discardCancelled, discardFailed, discardSuspended).
RETENTION_POLICIES = {
    "NEVER_RETAIN_AFTER_TERMINATION": (True, True, True, True, True),
    "RETAIN_ON_FAILURE": (True, True, True, False, True),
    "RETAIN_ON_CANCELLATION": (True, True, False, False, False),
}

# Serializable fields as ObjectStreamClass orders them: primitives first, then objects, each sorted by name.
_BOOLEAN_FIELDS = ("discardCancelled", "discardFailed", "discardFinished", "discardSubsumed", "discardSuspended",
                   "forced", "unclaimed")
_PROPERTIES_FIELDS = (*(("Z", name, None) for name in _BOOLEAN_FIELDS),
                      ("L", "checkpointType", f"L{_PKG.replace('.', '/')}/SnapshotType;"))
_SAVEPOINT_TYPE_FIELDS = (("L", "formatType", "Lorg/apache/flink/core/execution/SavepointFormatType;"),
                          ("L", "name", "Ljava/lang/String;"),
                          ("L", "postCheckpointAction", f"L{POST_ACTION_CLASS.replace('.', '/')};"))
_CHECKPOINT_TYPE_FIELDS = (("L", "name", "Ljava/lang/String;"),
                           ("L", "sharingFilesStrategy", f"L{SHARING_CLASS.replace('.', '/')};"))


# --------------------------------------------------------------------------------------------------------------------
# Model
# --------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SavepointType:
    """``org.apache.flink.runtime.checkpoint.SavepointType``."""

    name: str
    post_checkpoint_action: str
    format_type: str

    @property
    def sharing_files_strategy(self) -> str:
        return "NO_SHARING"  # SavepointType.getSharingFilesStrategy


@dataclass(frozen=True)
class CheckpointType:
    """``org.apache.flink.runtime.checkpoint.CheckpointType`` (retained checkpoints)."""

    name: str
    sharing_files_strategy: str


SnapshotType = SavepointType | CheckpointType


@dataclass(frozen=True)
class CheckpointProperties:
    """``org.apache.flink.runtime.checkpoint.CheckpointProperties`` as Flink serializes it into ``_metadata``."""

    checkpoint_type: SnapshotType
    forced: bool
    discard_subsumed: bool
    discard_finished: bool
    discard_cancelled: bool
    discard_failed: bool
    discard_suspended: bool
    unclaimed: bool

    @property
    def is_savepoint(self) -> bool:
        return isinstance(self.checkpoint_type, SavepointType)

    @property
    def discards(self) -> tuple[bool, bool, bool, bool, bool]:
        return (self.discard_subsumed, self.discard_finished, self.discard_cancelled, self.discard_failed,
                self.discard_suspended)

    def problem(self) -> str | None:
        """Why Flink could not have written these properties, or None."""
        kind = self.checkpoint_type
        if isinstance(kind, SavepointType):
            if kind.format_type not in FORMAT_TYPES:
                return f"unknown savepoint format type {kind.format_type!r}"
            if kind.post_checkpoint_action not in POST_ACTIONS:
                return f"unknown post-checkpoint action {kind.post_checkpoint_action!r}"
            if SAVEPOINT_NAMES.get(kind.name) != kind.post_checkpoint_action:
                return (f"savepoint type {kind.name!r} with post-checkpoint action {kind.post_checkpoint_action} is "
                        f"none of Flink's (Savepoint/NONE, Suspend Savepoint/SUSPEND, Terminate Savepoint/TERMINATE)")
            if any(self.discards):
                return "a savepoint with discard flags set (Flink never discards savepoints)"
            if self.unclaimed and (self.forced or kind.post_checkpoint_action != "NONE"
                                   or kind.format_type != "CANONICAL"):
                return "unclaimed snapshot properties other than forUnclaimedSnapshot's"
            return None
        if kind.sharing_files_strategy not in SHARING_STRATEGIES:
            return f"unknown sharing files strategy {kind.sharing_files_strategy!r}"
        if CHECKPOINT_NAMES.get(kind.name) != kind.sharing_files_strategy:
            return (f"checkpoint type {kind.name!r} with sharing strategy {kind.sharing_files_strategy} is none of "
                    f"Flink's (Checkpoint/FORWARD_BACKWARD, Full Checkpoint/FORWARD)")
        if self.forced or self.unclaimed:
            return "a checkpoint marked forced or unclaimed (Flink's checkpoint properties are neither)"
        if self.discards not in RETENTION_POLICIES.values():
            return f"discard flags {self.discards} match no checkpoint retention policy"
        return None


def savepoint_properties(forced: bool = True, format_type: str = "CANONICAL") -> CheckpointProperties:
    """``CheckpointProperties.forSavepoint(forced, formatType)``."""
    return CheckpointProperties(SavepointType("Savepoint", "NONE", format_type), forced,
                                False, False, False, False, False, False)


# --------------------------------------------------------------------------------------------------------------------
# Writing (ObjectOutputStream's encoding of exactly these classes)
# --------------------------------------------------------------------------------------------------------------------


class _JavaWriter:
    def __init__(self) -> None:
        self.w = Writer()
        self.handles: dict[tuple[str, str], int] = {}
        self.next_handle = BASE_WIRE_HANDLE

    def _assign(self, key: tuple[str, str] | None) -> None:
        if key is not None:
            self.handles[key] = self.next_handle
        self.next_handle += 1

    def _reference(self, key: tuple[str, str]) -> bool:
        handle = self.handles.get(key)
        if handle is None:
            return False
        self.w.u8(TC_REFERENCE)
        self.w.i32(handle)
        return True

    def type_string(self, text: str) -> None:
        # Field signatures are interned strings: ObjectOutputStream writes each once and refers back to it after.
        if not self._reference(("string", text)):
            self.w.u8(TC_STRING)
            self._assign(("string", text))
            self.w.utf(text)

    def string(self, text: str) -> None:
        # Values and enum constant names are distinct objects: always a new TC_STRING (with a handle of its own).
        self.w.u8(TC_STRING)
        self._assign(None)
        self.w.utf(text)

    def class_desc(self, name: str, suid: int, flags: int, fields: tuple[tuple[str, str, str | None], ...],
                   superclass: tuple[str, int, int] | None = None) -> None:
        if self._reference(("class", name)):
            return
        self.w.u8(TC_CLASSDESC)
        self._assign(("class", name))  # assigned before the descriptor's body, as writeNonProxyDesc does
        self.w.utf(name)
        self.w.i64(suid)
        self.w.u8(flags)
        self.w.u16(len(fields))
        for code, field_name, type_name in fields:
            self.w.u8(ord(code))
            self.w.utf(field_name)
            if type_name is not None:
                self.type_string(type_name)
        self.w.u8(TC_ENDBLOCKDATA)  # no class annotation
        if superclass is None:
            self.w.u8(TC_NULL)
        else:
            self.class_desc(*superclass, ())

    def enum(self, class_name: str, constant: str) -> None:
        self.w.u8(TC_ENUM)
        self.class_desc(class_name, 0, SC_SERIALIZABLE | SC_ENUM, (), (ENUM_CLASS, 0, SC_SERIALIZABLE | SC_ENUM))
        self._assign(None)
        self.string(constant)


def serialize_properties(properties: CheckpointProperties | None) -> bytes:
    """The trailer Flink's ``MetadataV4Serializer`` writes for ``properties`` (None: a serialized null)."""
    if properties is None:
        return JAVA_SERIALIZED_NULL
    out = _JavaWriter()
    w = out.w
    w.u16(STREAM_MAGIC)
    w.u16(STREAM_VERSION)
    w.u8(TC_OBJECT)
    out.class_desc(PROPERTIES_CLASS, PROPERTIES_SUID, SC_SERIALIZABLE, _PROPERTIES_FIELDS)
    out._assign(None)
    p = properties
    for value in (p.discard_cancelled, p.discard_failed, p.discard_finished, p.discard_subsumed, p.discard_suspended,
                  p.forced, p.unclaimed):
        w.bool(value)
    kind = p.checkpoint_type
    w.u8(TC_OBJECT)
    if isinstance(kind, SavepointType):
        out.class_desc(SAVEPOINT_TYPE_CLASS, SAVEPOINT_TYPE_SUID, SC_SERIALIZABLE, _SAVEPOINT_TYPE_FIELDS)
        out._assign(None)
        out.enum(FORMAT_TYPE_CLASS, kind.format_type)
        out.string(kind.name)
        out.enum(POST_ACTION_CLASS, kind.post_checkpoint_action)
    else:
        out.class_desc(CHECKPOINT_TYPE_CLASS, CHECKPOINT_TYPE_SUID, SC_SERIALIZABLE, _CHECKPOINT_TYPE_FIELDS)
        out._assign(None)
        out.string(kind.name)
        out.enum(SHARING_CLASS, kind.sharing_files_strategy)
    return w.getvalue()


# --------------------------------------------------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _ClassDesc:
    name: str
    suid: int
    flags: int
    fields: tuple[tuple[str, str, str | None], ...]
    superclass: _ClassDesc | None


@dataclass(frozen=True)
class _Enum:
    desc: _ClassDesc
    constant: str


@dataclass(frozen=True)
class _Object:
    desc: _ClassDesc
    values: dict[str, object]


_MAX_DEPTH = 8  # CheckpointProperties -> SavepointType -> enum is 3 deep: anything deeper is not Flink's


class _JavaReader:
    """The subset of the Java serialization grammar that ``ObjectOutputStream`` produces for these classes. Anything
    else (block data, arrays, classes with writeObject, proxies, exceptions, long strings) is refused."""

    def __init__(self, reader: Reader) -> None:
        self.r = reader
        self.handles: list[object] = []

    def _assign(self, value: object) -> int:
        self.handles.append(value)
        return len(self.handles) - 1

    def _reference(self, start: int) -> object:
        handle = self.r.i32() - BASE_WIRE_HANDLE
        if not 0 <= handle < len(self.handles) or self.handles[handle] is None:
            raise self.r.error(f"back-reference to unknown handle 0x{(handle + BASE_WIRE_HANDLE) & 0xFFFFFFFF:x}",
                               start)
        return self.handles[handle]

    def string(self) -> str:
        start = self.r.pos
        code = self.r.u8()
        if code == TC_STRING:
            text = self.r.utf()
            self._assign(text)
            return text
        if code == TC_REFERENCE:
            value = self._reference(start)
            if not isinstance(value, str):
                raise self.r.error("back-reference to a non-string where a string was expected", start)
            return value
        raise self.r.error(f"expected a string, found type code 0x{code:02x}", start)

    def class_desc(self, depth: int) -> _ClassDesc | None:
        r = self.r
        start = r.pos
        code = r.u8()
        if code == TC_NULL:
            return None
        if code == TC_REFERENCE:
            value = self._reference(start)
            if not isinstance(value, _ClassDesc):
                raise r.error("back-reference to a non-class where a class descriptor was expected", start)
            return value
        if code != TC_CLASSDESC:
            raise r.error(f"expected a class descriptor, found type code 0x{code:02x}", start)
        if depth > _MAX_DEPTH:
            raise r.error("class descriptors nested deeper than Flink's", start)
        slot = self._assign(None)  # the handle is taken before the body: a self-reference inside is unknown
        name = r.utf()
        suid = r.i64()
        flags_at = r.pos
        flags = r.u8()
        if flags not in (SC_SERIALIZABLE, SC_SERIALIZABLE | SC_ENUM):
            raise r.error(f"class {name}: descriptor flags 0x{flags:02x}, Flink's classes have 0x02 or 0x12",
                          flags_at)
        fields: list[tuple[str, str, str | None]] = []
        for _ in range(r.u16()):
            code_at = r.pos
            type_code = chr(r.u8())
            field_name = r.utf()
            if type_code == "L":
                fields.append((type_code, field_name, self.string()))
            elif type_code == "Z":
                fields.append((type_code, field_name, None))
            else:
                raise r.error(f"class {name}: field {field_name!r} of type code {type_code!r}, Flink's are Z or L",
                              code_at)
        end_at = r.pos
        if r.u8() != TC_ENDBLOCKDATA:
            raise r.error(f"class {name}: class annotations, which Flink's classes do not have", end_at)
        superclass = self.class_desc(depth + 1)
        desc = _ClassDesc(name, suid, flags, tuple(fields), superclass)
        self.handles[slot] = desc
        return desc

    def content(self, depth: int) -> object:
        r = self.r
        start = r.pos
        code = r.u8()
        if code == TC_NULL:
            return None
        if code == TC_STRING:
            r.pos = start
            return self.string()
        if code == TC_REFERENCE:
            return self._reference(start)
        if depth > _MAX_DEPTH:
            raise r.error("objects nested deeper than Flink's", start)
        if code == TC_ENUM:
            desc = self.class_desc(depth + 1)
            if desc is None or not desc.flags & SC_ENUM:
                raise r.error("an enum constant without an enum class", start)
            slot = self._assign(None)
            value = _Enum(desc, self.string())
            self.handles[slot] = value
            return value
        if code == TC_OBJECT:
            desc = self.class_desc(depth + 1)
            if desc is None or desc.flags & SC_ENUM:
                raise r.error("an object without a serializable class", start)
            if desc.superclass is not None:
                raise r.error(f"class {desc.name}: a serializable superclass, which Flink's classes do not have",
                              start)
            slot = self._assign(None)
            values: dict[str, object] = {}
            for type_code, field_name, _ in desc.fields:
                values[field_name] = self._boolean() if type_code == "Z" else self.content(depth + 1)
            obj = _Object(desc, values)
            self.handles[slot] = obj
            return obj
        raise r.error(f"unexpected Java serialization type code 0x{code:02x}", start)

    def _boolean(self) -> bool:
        start = self.r.pos
        value = self.r.u8()
        if value not in (0, 1):
            raise self.r.error(f"boolean byte 0x{value:02x} (ObjectOutputStream writes 0 or 1)", start)
        return value == 1


def _expect_class(reader: Reader, start: int, value: object, name: str, suid: int,
                  fields: tuple[tuple[str, str, str | None], ...]) -> _Object:
    if not isinstance(value, _Object) or value.desc.name != name:
        found = value.desc.name if isinstance(value, (_Object, _Enum)) else type(value).__name__
        raise reader.error(f"expected a {name.rsplit('.', 1)[-1]}, found {found}", start)
    if value.desc.suid != suid:
        raise reader.error(f"{name} serialVersionUID {value.desc.suid}, Flink's is {suid} (Flink would refuse it "
                           f"with InvalidClassException)", start)
    if value.desc.fields != fields:
        raise reader.error(f"{name}: fields {[f[1] for f in value.desc.fields]} are not Flink's "
                           f"{[f[1] for f in fields]}", start)
    return value


def _expect_enum(reader: Reader, start: int, value: object, name: str, constants: tuple[str, ...]) -> str:
    if not isinstance(value, _Enum) or value.desc.name != name:
        raise reader.error(f"expected a {name.rsplit('.', 1)[-1]} constant", start)
    super_desc = value.desc.superclass
    if value.desc.suid != 0 or value.desc.fields or super_desc is None or super_desc.name != ENUM_CLASS \
            or super_desc.suid != 0 or super_desc.fields or super_desc.superclass is not None:
        raise reader.error(f"{name}: not the descriptor Java writes for an enum", start)
    if value.constant not in constants:
        raise reader.error(f"{name}: unknown constant {value.constant!r} (Flink's: {', '.join(constants)})", start)
    return value.constant


def parse_trailer(data: bytes, path: str | None = None, offset: int = 0) -> CheckpointProperties | None:
    """The CheckpointProperties of a V4+ trailer (None for a serialized null). ``offset`` is where the trailer starts
    in the file, so that errors name file offsets. Raises :class:`SavepointFormatError`, one line, for anything Flink
    would not have written."""
    try:
        return _parse(Reader(data, 0, path, offset))
    except SavepointFormatError as exc:
        raise exc.located(None, 0, "CheckpointProperties trailer") from None


def _parse(r: Reader) -> CheckpointProperties | None:
    if r.remaining() < 4 or r.u16() != STREAM_MAGIC or r.u16() != STREAM_VERSION:
        raise r.error("not a Java serialization stream (expected AC ED 00 05)", 0)
    start = r.pos
    java = _JavaReader(r)
    root = java.content(0)
    if root is None:
        properties = None
    else:
        obj = _expect_class(r, start, root, PROPERTIES_CLASS, PROPERTIES_SUID, _PROPERTIES_FIELDS)
        values = obj.values
        kind_value = values["checkpointType"]
        if isinstance(kind_value, _Object) and kind_value.desc.name == SAVEPOINT_TYPE_CLASS:
            kind_obj = _expect_class(r, start, kind_value, SAVEPOINT_TYPE_CLASS, SAVEPOINT_TYPE_SUID,
                                     _SAVEPOINT_TYPE_FIELDS).values
            name = kind_obj["name"]
            if not isinstance(name, str):
                raise r.error("SavepointType without a name", start)
            kind: SnapshotType = SavepointType(
                name, _expect_enum(r, start, kind_obj["postCheckpointAction"], POST_ACTION_CLASS, POST_ACTIONS),
                _expect_enum(r, start, kind_obj["formatType"], FORMAT_TYPE_CLASS, FORMAT_TYPES))
        else:
            kind_obj = _expect_class(r, start, kind_value, CHECKPOINT_TYPE_CLASS, CHECKPOINT_TYPE_SUID,
                                     _CHECKPOINT_TYPE_FIELDS).values
            name = kind_obj["name"]
            if not isinstance(name, str):
                raise r.error("CheckpointType without a name", start)
            kind = CheckpointType(name, _expect_enum(r, start, kind_obj["sharingFilesStrategy"], SHARING_CLASS,
                                                     SHARING_STRATEGIES))
        flags = {name: values[name] for name in _BOOLEAN_FIELDS}
        properties = CheckpointProperties(
            kind, bool(flags["forced"]), bool(flags["discardSubsumed"]), bool(flags["discardFinished"]),
            bool(flags["discardCancelled"]), bool(flags["discardFailed"]), bool(flags["discardSuspended"]),
            bool(flags["unclaimed"]))
        problem = properties.problem()
        if problem is not None:
            raise r.error(f"{problem}: Flink does not write such properties", start)
    if r.remaining():
        raise r.error(f"{r.remaining()} unexpected bytes after the serialized object")
    expected = serialize_properties(properties)
    if expected != r.buf:
        pairs = enumerate(zip(expected, r.buf, strict=False))
        at = next((i for i, (a, b) in pairs if a != b), min(len(expected), len(r.buf)))
        raise r.error("not encoded the way Flink's ObjectOutputStream encodes these properties", at)
    return properties
