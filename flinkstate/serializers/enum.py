"""``EnumSerializer$EnumSerializerSnapshot`` (version 3): ``UTF enumClass; i32 n; n x UTF constantName``.

Record: ``i32`` index into the snapshot's constant list. Python value: the constant's name.
"""

from __future__ import annotations

from typing import Any

from flinkstate.binary import I32, Reader, Writer
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
