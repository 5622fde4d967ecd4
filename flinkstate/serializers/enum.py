"""``EnumSerializer$EnumSerializerSnapshot`` (version 3): ``UTF enumClass; i32 n; n x UTF constantName``.

Record: ``i32`` index into the snapshot's constant list. Python value: the constant's name.
"""

from __future__ import annotations

from typing import Any

from flinkstate.binary import I32, Reader, Writer
from flinkstate.compatibility import INCOMPATIBLE, RECONFIGURED, Compatibility, Finding
from flinkstate.format_errors import SavepointFormatError
from flinkstate.serializers.base import Decoder, Encoder, TypeSerializerSnapshot
from flinkstate.serializers.registry import register


@register
class EnumSnapshot(TypeSerializerSnapshot):
    CLASS_NAMES = ("org.apache.flink.api.common.typeutils.base.EnumSerializer$EnumSerializerSnapshot",)

    def __init__(self, class_name: str, version: int, enum_class: str, constants: list[str]) -> None:
        super().__init__(class_name, version)
        self.enum_class = enum_class
        self.constants = constants

    @classmethod
    def read_payload(cls, class_name: str, version: int, reader: Reader) -> EnumSnapshot:
        enum_class = reader.utf()
        count = reader.i32()
        if count < 0:
            raise reader.error(f"negative enum constant count {count}", reader.pos - 4)
        return cls(class_name, version, enum_class, [reader.utf() for _ in range(count)])

    def write_payload(self, writer: Writer) -> None:
        writer.utf(self.enum_class)
        writer.i32(len(self.constants))
        for name in self.constants:
            writer.utf(name)

    @property
    def fixed_length(self) -> int:
        return 4

    def make_decoder(self) -> Decoder:
        constants = tuple(self.constants)
        enum_class = self.enum_class

        def decode(buf: bytes, off: int) -> tuple[str, int]:
            index = I32.unpack_from(buf, off)[0]
            if not 0 <= index < len(constants):
                raise SavepointFormatError(f"enum {enum_class}: ordinal {index} out of range", offset=off)
            return constants[index], off + 4

        return decode

    def make_encoder(self) -> Encoder:
        index = {name: i for i, name in enumerate(self.constants)}

        def encode(value: Any, out: bytearray) -> None:
            out += I32.pack(index[value])

        return encode

    def type_name(self) -> str:
        return f"Enum {self.enum_class}"

    def resolve_same_family(self, old: Any, path: str) -> Compatibility:
        def finding(code: str, message: str, verdict: Any) -> Compatibility:
            return Compatibility.of(Finding(code, path, message, verdict, old.type_name(), self.type_name()))

        if old.enum_class != self.enum_class:
            return finding("ENUM_CLASS_CHANGED", f"enum class changed from {old.enum_class} to {self.enum_class}",
                           INCOMPATIBLE)
        removed = [c for c in old.constants if c not in self.constants]
        if removed:
            # Reading the old snapshot resolves every old constant by name: Flink fails before comparing anything
            # ("Could not create a restore serializer for enum ... Probably because an enum value was removed.").
            return finding("ENUM_CONSTANT_REMOVED", f"constant(s) {', '.join(removed)} removed", INCOMPATIBLE)
        if old.constants == self.constants:
            return Compatibility.as_is()
        # Data holds ordinals into the old list: Flink keeps the old order and appends the new constants.
        if self.constants[:len(old.constants)] == old.constants:
            added = self.constants[len(old.constants):]
            return finding("ENUM_CONSTANT_ADDED", f"constant(s) {', '.join(added)} appended", RECONFIGURED)
        return finding("ENUM_CONSTANTS_REORDERED", "constants reordered or inserted (" + ", ".join(old.constants)
                       + " -> " + ", ".join(self.constants) + "); stored ordinals keep their old meaning",
                       RECONFIGURED)
