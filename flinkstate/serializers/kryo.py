"""``KryoSerializerSnapshot`` (version 2): ``UTF typeClass`` then three LinkedOptionalMaps (registrations, default
serializer instances, default serializer classes) whose frames are kept as raw bytes.

Kryo data (``writeClassAndObject``; Kryo 2.24 in Flink 1.x, 5.6 in 2.x) is not decoded: records are opaque and
have no length of their own, so they can only be returned whole where the stream frames them (a whole state
value, a MAP state value, or the last field of a POJO stored as one), as :class:`OpaqueValue`, and are written
back byte for byte. Anywhere else (a list element, a POJO field followed by others) they are refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flinkstate.binary import Reader, Writer
from flinkstate.compatibility import INCOMPATIBLE, RECONFIGURED, Compatibility, Finding
from flinkstate.format_errors import UnsupportedFormat
from flinkstate.serializers.base import Decoder, Encoder, TypeSerializerSnapshot
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
        if not isinstance(value, OpaqueValue) or value.type_name != type_name:
            raise UnsupportedFormat(f"{type_name}: only {what} read from a savepoint (passed through byte for byte) "
                                    f"can be written, not {type(value).__name__}")
        out += value.data

    return encode


def _raw(frame: Reader) -> bytes:
    return frame.rest()


def _same(data: bytes) -> bytes:
    return data


@register
class KryoSnapshot(TypeSerializerSnapshot):
    CLASS_NAMES = ("org.apache.flink.api.java.typeutils.runtime.kryo.KryoSerializerSnapshot",)
    #: The keyed reader hands whole values of an opaque serializer over as OpaqueValue.
    opaque = True

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

    #: A Kryo record carries no length: it is known only as a whole stored value (or the tail of one).
    needs_end = True

    def make_decoder(self) -> Decoder:
        raise UnsupportedFormat(f"Kryo-serialized {self.type_class} cannot be decoded here: Kryo records carry no "
                                f"length, so only a whole stored value (or a POJO's last field) can be passed through")

    def tail_decoder(self) -> Decoder:
        type_name = self.type_name()

        def decode(buf: bytes, off: int) -> tuple[Any, int]:
            return OpaqueValue(type_name, bytes(buf[off:])), len(buf)

        return decode

    def make_encoder(self) -> Encoder:
        return opaque_encoder(self.type_name(), "Kryo values")

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
