"""``TimerSerializerSnapshot`` (composite, outer version 2, no outer payload; nested = [key, namespace]).

Record: ``i64 (timestamp XOR sign bit)`` (so that byte order sorts like the signed value), key, namespace.
Python value: :class:`Timer`.
"""

from __future__ import annotations

import struct
from typing import Any, NamedTuple

from flinkstate.binary import I64
from flinkstate.serializers.base import Decoder, Encoder
from flinkstate.serializers.composite import CompositeSnapshot
from flinkstate.serializers.registry import register

_SIGN = 1 << 63
_unpack_u64 = struct.Struct(">Q").unpack_from


class Timer(NamedTuple):
    timestamp: int
    key: Any
    namespace: Any


@register
class TimerSnapshot(CompositeSnapshot):
    CLASS_NAMES = ("org.apache.flink.streaming.api.operators.TimerSerializerSnapshot",)
    OUTER_VERSION = 2
    ARITY = 2

    @property
    def key(self) -> Any:
        return self.nested[0]

    @property
    def namespace(self) -> Any:
        return self.nested[1]

    def make_decoder(self) -> Decoder:
        key_dec, ns_dec = self.key.decoder(), self.namespace.decoder()

        def decode(buf: bytes, off: int) -> tuple[Timer, int]:
            flipped = _unpack_u64(buf, off)[0] ^ _SIGN
            timestamp = flipped - (1 << 64) if flipped & _SIGN else flipped
            key, off = key_dec(buf, off + 8)
            namespace, off = ns_dec(buf, off)
            return Timer(timestamp, key, namespace), off

        return decode

    def make_encoder(self) -> Encoder:
        key_enc, ns_enc = self.key.encoder(), self.namespace.encoder()

        def encode(value: Timer, out: bytearray) -> None:
            out += I64.pack(value[0] ^ -_SIGN)  # flipSignBit; Python ints XOR as two's complement
            key_enc(value[1], out)
            ns_enc(value[2], out)

        return encode

    def type_name(self) -> str:
        return f"Timer<{self.key.type_name()}, {self.namespace.type_name()}>"

    def nested_labels(self) -> list[str | None]:
        return ["key", "namespace"]
