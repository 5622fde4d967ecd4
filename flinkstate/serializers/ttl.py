"""``TtlStateFactory$TtlSerializerSnapshot`` (composite, outer version 2, no outer payload; nested = [Long, user]).

Record (``CompositeSerializer``): ``i64 lastAccessTimestamp`` then the user value, no null flag.
Python value: :class:`TtlValue`.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from flinkstate.binary import I64
from flinkstate.serializers.base import Decoder, Encoder
from flinkstate.serializers.composite import CompositeSnapshot
from flinkstate.serializers.registry import register

_unpack_i64 = I64.unpack_from


class TtlValue(NamedTuple):
    value: Any
    last_access: int


@register
class TtlSnapshot(CompositeSnapshot):
    CLASS_NAMES = ("org.apache.flink.runtime.state.ttl.TtlStateFactory$TtlSerializerSnapshot",)
    OUTER_VERSION = 2
    ARITY = 2

    @property
    def user(self) -> Any:
        return self.nested[1]

    @property
    def needs_end(self) -> bool:  # type: ignore[override]
        # A user value without length (Kryo, a user Value type) ends the record: read as a whole stored value.
        return bool(self.user.needs_end)

    def tail_decoder(self) -> Decoder:
        return self._with_user(self.user.tail_decoder())

    def make_decoder(self) -> Decoder:
        return self._with_user(self.user.decoder())

    @staticmethod
    def _with_user(user: Decoder) -> Decoder:
        def decode(buf: bytes, off: int) -> tuple[TtlValue, int]:
            last_access = _unpack_i64(buf, off)[0]
            value, off = user(buf, off + 8)
            return TtlValue(value, last_access), off

        return decode

    def make_encoder(self) -> Encoder:
        user = self.user.encoder()

        def encode(value: TtlValue, out: bytearray) -> None:
            out += I64.pack(value.last_access)
            user(value.value, out)

        return encode

    def type_name(self) -> str:
        return f"TTL<{self.user.type_name()}>"

    def nested_labels(self) -> list[str | None]:
        return ["last_access", None]
