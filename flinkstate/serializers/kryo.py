"""``KryoSerializerSnapshot`` (version 2): ``UTF typeClass`` then three LinkedOptionalMaps (registrations, default
serializer instances, default serializer classes) whose frames are kept as raw bytes.

Kryo data (``writeClassAndObject``; Kryo 2.24 in Flink 1.x, 5.6 in 2.x) is decoded by
:mod:`flinkstate.serializers.kryo_data` where the record holds only JDK classes with built-in serializers: the
value is a :class:`~flinkstate.serializers.kryo_data.KryoValue` that keeps the record's bytes (written back as they
were). Any other record (a user class, a custom serializer) is opaque and has no length of its own: it is returned
whole where the stream frames it (a whole state value, a MAP state value, or the last field of a POJO stored as
one), as :class:`OpaqueValue`, and written back byte for byte. Anywhere else (a list element, a POJO field followed
by others) only a fully decodable record can be delimited; an opaque one is refused, per value, in one line.

Which Kryo wrote the bytes is not in the snapshot (Flink 1.x and 2.x write the same one): the savepoint's ``_metadata``
version says it (:func:`kryo_version_for_metadata`), and :class:`flinkstate.savepoint.Savepoint` sets it on every
KryoSnapshot of its headers (:func:`set_kryo_version`) before any decoder is built.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, fields, is_dataclass
from typing import Any

from flinkstate.binary import Reader, Writer
from flinkstate.compatibility import INCOMPATIBLE, RECONFIGURED, Compatibility, Finding
from flinkstate.format_errors import UnsupportedFormat
from flinkstate.serializers.base import Decoder, Encoder, TypeSerializerSnapshot
from flinkstate.serializers.kryo_data import (
    KRYO2,
    KRYO5,
    KryoCorrupt,
    KryoOpaque,
    KryoValue,
    decode_record,
    registration_table,
)
from flinkstate.serializers.kryo_fields import read_user_record, tree_value
from flinkstate.serializers.kryo_layout import KryoCarryLayouts
from flinkstate.serializers.pojo import OptionalMapEntry, read_linked_optional_map, write_linked_optional_map
from flinkstate.serializers.registry import register


@dataclass(frozen=True)
class OpaqueValue:
    """A record this library cannot decode: the serializer's type and the record's bytes."""

    type_name: str
    data: bytes


def opaque_encoder(type_name: str, what: str = "values") -> Encoder:
    """The writer of a value that passes through byte for byte (Kryo, a user's Value class): only an
    :class:`OpaqueValue` read from a savepoint for the same type can be written back, since making new bytes would
    need the class's Java code."""
    def encode(value: Any, out: bytearray) -> None:
        if isinstance(value, KryoValue) and value.type_name == type_name:
            out += value.data  # decoded for reading; the original bytes are the exact record
            return
        if not isinstance(value, OpaqueValue) or value.type_name != type_name:
            raise UnsupportedFormat(f"{type_name}: only {what} read from a savepoint (passed through byte for byte) "
                                    f"can be written, not {type(value).__name__}")
        out += value.data

    return encode


def _registered_plain(frame: Any) -> bool:
    """Whether a KryoRegistration frame (``UTF class; i32 serializerDefinitionType``) registers the class with
    Kryo's default serializer (type 0, UNSPECIFIED) rather than a serializer class or instance of its own."""
    if not isinstance(frame, (bytes, bytearray)) or len(frame) < 2:
        return False
    name_len = int.from_bytes(frame[:2], "big")
    kind = frame[2 + name_len:6 + name_len]
    return len(kind) == 4 and int.from_bytes(kind, "big") == 0


def _raw(frame: Reader) -> bytes:
    return frame.rest()


def _same(data: bytes) -> bytes:
    return data


@register
class KryoSnapshot(TypeSerializerSnapshot):
    CLASS_NAMES = ("org.apache.flink.api.java.typeutils.runtime.kryo.KryoSerializerSnapshot",)
    #: The keyed reader hands whole values of an opaque serializer over as OpaqueValue.
    opaque = True
    #: :meth:`make_decoder` delimits a decodable record (and refuses an opaque one per value): a POJO field followed
    #: by others, or a LIST state element, can use it although a record carries no length.
    delimits_records = True

    def __init__(self, class_name: str, version: int, type_class: str,
                 maps: tuple[list[OptionalMapEntry], list[OptionalMapEntry], list[OptionalMapEntry]]) -> None:
        super().__init__(class_name, version)
        self.type_class = type_class
        self.registrations, self.default_serializers, self.default_serializer_classes = maps

    @classmethod
    def read_payload(cls, class_name: str, version: int, reader: Reader) -> KryoSnapshot:
        if version != 2:
            raise reader.error(f"{class_name}: unsupported snapshot version {version}")
        type_class = reader.utf()
        maps = tuple(read_linked_optional_map(reader, _raw, _raw) for _ in range(3))
        return cls(class_name, version, type_class, maps)  # type: ignore[arg-type]

    def write_payload(self, writer: Writer) -> None:
        writer.utf(self.type_class)
        for entries in (self.registrations, self.default_serializers, self.default_serializer_classes):
            write_linked_optional_map(writer, entries, _same, _same)

    #: A Kryo record carries no length: an opaque one is known only as a whole stored value (or the tail of one).
    #: Decodable records are delimited by :meth:`make_decoder`; whole values go through :meth:`tail_decoder`.
    needs_end = True
    #: The Kryo version of the savepoint's data (2: Flink 1.x, 5: Flink 2.x) when the caller knows it (the _metadata
    #: version: <= 4 is Flink 1.x, >= 5 Flink 2.x); None: a record is decoded only where both readings agree, or
    #: (a whole value) where exactly one reads it to its end.
    kryo_version: int | None = None
    #: A Flink 1.x -> 2.x migration's user-class layouts (set by its plan: flinkstate.migration.manifest_targets):
    #: the savepoint's Kryo 2.24 records of user classes are delimited with the old ones, carried with both.
    kryo_layouts: KryoCarryLayouts | None = None

    def registrations_in_order(self) -> list[tuple[str, bool]]:
        """The snapshot's registrations (class name, registered without a serializer of its own), in id order."""
        result = []
        for entry in self.registrations:
            result.append((entry.name, _registered_plain(entry.value)))
        return result

    def _versions(self) -> tuple[int, ...]:
        return (self.kryo_version,) if self.kryo_version in (KRYO2, KRYO5) else (KRYO2, KRYO5)

    def _tables(self) -> dict[int, dict[int, tuple[str, bool]]]:
        plain = self.registrations_in_order()
        return {v: registration_table(v, plain) for v in (KRYO2, KRYO5)}

    def make_decoder(self) -> Decoder:
        """Delimits a record by decoding it: only records of JDK classes with built-in serializers have an end."""
        type_name, versions, tables = self.type_name(), self._versions(), self._tables()
        user_records = self._user_records()

        def decode(buf: bytes, off: int) -> tuple[Any, int]:
            try:
                version, cls, value, end = decode_record(buf, off, len(buf), versions, tables, whole=False)
            except KryoOpaque as e:
                if (found := user_records(buf, off, False)) is not None:
                    return found
                raise UnsupportedFormat(f"{type_name} value at byte {off} holds {e}: Kryo records carry no length, "
                                        f"so it can be passed through only as a whole stored value") from None
            except KryoCorrupt as e:
                raise KryoCorrupt(f"{type_name}: {e}") from None
            return KryoValue(type_name, cls, value, bytes(buf[off:end]), version), end

        return decode

    def _user_records(self) -> Callable[[bytes, int, bool], tuple[KryoValue, int] | None]:
        """The reader of a user class's record (None where it cannot read one: no layouts, or not to the end of a
        ``whole`` value) with a migration's layouts of this data's Kryo (:class:`KryoCarryLayouts`)."""
        type_name, version, registrations = self.type_name(), self.kryo_version, self.registrations_in_order()
        carry = self.kryo_layouts
        layouts = None if carry is None else {KRYO2: carry.old, KRYO5: carry.new}.get(version or 0)

        def read(buf: bytes, off: int, whole: bool) -> tuple[KryoValue, int] | None:
            if layouts is None or version is None:
                return None
            try:
                tree, end = read_user_record(buf, off, registrations, layouts, version)
            except (KryoOpaque, KryoCorrupt):
                return None
            if tree is None or (whole and end != len(buf)):
                return None
            return KryoValue(type_name, tree.java_class, tree_value(tree), bytes(buf[off:end]), version), end

        return read

    def tail_decoder(self) -> Decoder:
        """A whole stored value: decoded when possible, else passed through as :class:`OpaqueValue` (as before)."""
        type_name, versions, tables = self.type_name(), self._versions(), self._tables()

        user_records = self._user_records()

        def decode(buf: bytes, off: int) -> tuple[Any, int]:
            data = bytes(buf[off:])
            try:
                version, cls, value, _ = decode_record(data, 0, len(data), versions, tables, whole=True)
            except (KryoOpaque, KryoCorrupt):
                found = user_records(data, 0, True)
                return (found[0] if found is not None else OpaqueValue(type_name, data)), len(buf)
            return KryoValue(type_name, cls, value, data, version), len(buf)

        return decode

    def describe_values(self, values: list[Any]) -> str:
        """The per-state verdict for what was read: "Kryo: decoded (java.util.ArrayList, ...)", "Kryo: opaque" or
        both with counts."""
        decoded = sorted({v.java_class for v in values if isinstance(v, KryoValue)})
        opaque = sum(1 for v in values if isinstance(v, OpaqueValue))
        if not values:
            return "Kryo: no values read"
        if not opaque:
            return f"Kryo: decoded ({', '.join(decoded)})"
        if not decoded:
            return "Kryo: opaque (passed through byte for byte)"
        return (f"Kryo: {len(values) - opaque} of {len(values)} values decoded ({', '.join(decoded)}), {opaque} "
                f"opaque (passed through byte for byte)")

    def make_encoder(self) -> Encoder:
        records = opaque_encoder(self.type_name(), "Kryo values")

        def encode(value: Any, out: bytearray) -> None:
            if value is None:  # Flink's KryoSerializer writes null as Kryo's null class id, 0 (Kryo 2 and 5 alike)
                out.append(0)
            else:
                records(value, out)

        return encode

    def type_name(self) -> str:
        return f"Kryo<{self.type_class}>"

    def resolve_same_family(self, old: Any, path: str) -> Compatibility:
        def finding(code: str, message: str, verdict: Any) -> Compatibility:
            return Compatibility.of(Finding(code, path, message, verdict, old.type_name(), self.type_name()))

        if old.type_class != self.type_class:
            return finding("KRYO_CLASS_CHANGED", f"Kryo type changed from {old.type_class} to {self.type_class}",
                           INCOMPATIBLE)
        lists = (("registrations", old.registrations, self.registrations),
                 ("default serializers", old.default_serializers, self.default_serializers),
                 ("default serializer classes", old.default_serializer_classes, self.default_serializer_classes))
        for what, before, _ in lists:
            absent = [e.name for e in before if e.key is None or e.value is None]
            if absent:
                return finding("KRYO_REGISTRATION_ABSENT", f"{what} no longer resolvable: {', '.join(absent)}",
                               INCOMPATIBLE)
        for what, before, after in lists:
            names, new_names = [e.name for e in before], [e.name for e in after]
            if new_names[:len(names)] != names:
                # LinkedOptionalMap.mergeRightIntoLeft keeps the old order, so old registration ids stay valid.
                return finding("KRYO_REGISTRATIONS_CHANGED", f"{what} changed order; Flink keeps the old order and "
                               f"appends new entries", RECONFIGURED)
        return Compatibility.as_is()


#: The last ``_metadata`` version Flink 1.x writes (Kryo 2.24); Flink 2.0 writes 5 and 2.1+ 6 (Kryo 5.6).
LAST_FLINK1_METADATA_VERSION = 4


def kryo_version_for_metadata(metadata_version: int) -> int:
    """The Kryo version (:data:`KRYO2` or :data:`KRYO5`) of the Flink that writes ``_metadata`` of this version."""
    return KRYO2 if metadata_version <= LAST_FLINK1_METADATA_VERSION else KRYO5


def _reachable(item: Any, seen: set[int]) -> Iterator[TypeSerializerSnapshot]:
    """Every snapshot inside ``item``: nested snapshots of composites (fields, subclasses, elements), found through
    their attributes so that no composite family needs to list its own."""
    if id(item) in seen:
        return
    seen.add(id(item))
    if isinstance(item, TypeSerializerSnapshot):
        yield item
        children: Iterable[Any] = vars(item).values()  # cached decoders are functions: not walked
    elif isinstance(item, (list, tuple)):
        children = item
    elif isinstance(item, dict):
        children = item.values()
    elif is_dataclass(item) and not isinstance(item, type):
        children = (getattr(item, f.name) for f in fields(item))
    else:
        return
    for child in children:
        yield from _reachable(child, seen)


def kryo_snapshots(snapshots: Iterable[Any]) -> list[KryoSnapshot]:
    """The KryoSnapshots inside ``snapshots`` (None entries skipped), outermost first."""
    return [s for s in reachable_snapshots(snapshots) if isinstance(s, KryoSnapshot)]


def reachable_snapshots(snapshots: Iterable[Any]) -> list[TypeSerializerSnapshot]:
    """Every snapshot inside ``snapshots`` (None entries skipped), the snapshots themselves and all they nest,
    outermost first."""
    seen: set[int] = set()
    return [s for item in snapshots if item is not None for s in _reachable(item, seen)]


def set_kryo_layouts(snapshots: Iterable[Any], layouts: KryoCarryLayouts) -> None:
    """Sets a migration's user-class layouts on every KryoSnapshot inside ``snapshots`` (before the decoders of
    composites around them are built, as :func:`set_kryo_version`; those of ``snapshots`` are built again)."""
    roots = [s for s in snapshots if s is not None]
    for snapshot in kryo_snapshots(roots):
        snapshot.kryo_layouts = layouts
    for reachable in reachable_snapshots(roots):  # a POJO's decoder keeps the Kryo decoder it was built with
        reachable._decoder = None


def set_kryo_version(snapshots: Iterable[Any], kryo_version: int) -> None:
    """Sets the Kryo version on every KryoSnapshot inside ``snapshots``. Call it before the decoders of composites
    around them are built: those keep the Kryo decoder they were built with."""
    for snapshot in kryo_snapshots(snapshots):
        if snapshot.kryo_version != kryo_version:
            snapshot.kryo_version = kryo_version
            snapshot._decoder = None  # built for the other reading
