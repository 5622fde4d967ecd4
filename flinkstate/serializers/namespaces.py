"""Namespace serializers: ``VoidNamespaceSerializer`` (all non-window state), ``TimeWindow.Serializer`` and
``GlobalWindow.Serializer``; all ``SimpleTypeSerializerSnapshot``s with an empty payload at version 3.

Records: VoidNamespace and GlobalWindow write one 0 byte; TimeWindow writes ``i64 start; i64 end``.
Python values: VoidNamespace → None, GlobalWindow → "GlobalWindow", TimeWindow → :class:`TimeWindow`.
``getLength()``: VoidNamespace reports 0 although it writes a byte; GlobalWindow 1; TimeWindow 16. Only whether
it is non-negative matters (the composite-key ambiguity suffix).
"""

from __future__ import annotations

import struct
from typing import Any, ClassVar, NamedTuple

from flinkstate.binary import Reader, Writer
from flinkstate.serializers.base import Decoder, Encoder, TypeSerializerSnapshot
from flinkstate.serializers.registry import register

WINDOWS = "org.apache.flink.streaming.api.windowing.windows."
_TWO_LONGS = struct.Struct(">qq")


class TimeWindow(NamedTuple):
    start: int
    end: int


class EmptyPayloadSnapshot(TypeSerializerSnapshot):
    LENGTH: ClassVar[int] = 0
    NAME: ClassVar[str] = ""

    def __init__(self, class_name: str | None = None, version: int = 3, legacy: str | None = None) -> None:
        super().__init__(class_name or self.CLASS_NAMES[0], version)
        self.legacy = legacy

    @classmethod
    def read_payload(cls, class_name: str, version: int, reader: Reader) -> TypeSerializerSnapshot:
        return cls(class_name, version, reader.utf() if version < 3 else None)

    def write_payload(self, writer: Writer) -> None:
        if self.version < 3:
            writer.utf(self.legacy or "")

    @property
    def fixed_length(self) -> int:
        return self.LENGTH

    def type_name(self) -> str:
        return self.NAME


def _decode_zero_byte(buf: bytes, off: int) -> tuple[None, int]:
    return None, off + 1


def _encode_zero_byte(value: Any, out: bytearray) -> None:
    out.append(0)


@register
class VoidNamespaceSnapshot(EmptyPayloadSnapshot):
    CLASS_NAMES = ("org.apache.flink.runtime.state.VoidNamespaceSerializer$VoidNamespaceSerializerSnapshot",)
    NAME = "VoidNamespace"

    def make_decoder(self) -> Decoder:
        return _decode_zero_byte

    def make_encoder(self) -> Encoder:
        return _encode_zero_byte


@register
class GlobalWindowSnapshot(EmptyPayloadSnapshot):
    CLASS_NAMES = (WINDOWS + "GlobalWindow$Serializer$GlobalWindowSerializerSnapshot",)
    NAME = "GlobalWindow"
    LENGTH = 1

    def make_decoder(self) -> Decoder:
        def decode(buf: bytes, off: int) -> tuple[str, int]:
            return "GlobalWindow", off + 1

        return decode

    def make_encoder(self) -> Encoder:
        return _encode_zero_byte


@register
class TimeWindowSnapshot(EmptyPayloadSnapshot):
    CLASS_NAMES = (WINDOWS + "TimeWindow$Serializer$TimeWindowSerializerSnapshot",)
    NAME = "TimeWindow"
    LENGTH = 16

    def make_decoder(self) -> Decoder:
        unpack = _TWO_LONGS.unpack_from

        def decode(buf: bytes, off: int) -> tuple[TimeWindow, int]:
            return TimeWindow(*unpack(buf, off)), off + 16

        return decode

    def make_encoder(self) -> Encoder:
        def encode(value: Any, out: bytearray) -> None:
            out += _TWO_LONGS.pack(value[0], value[1])

        return encode
