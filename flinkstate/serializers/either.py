"""``JavaEitherSerializerSnapshot`` (composite, outer version 1, no outer payload; nested = [left, right]).

Record (``EitherSerializer``): ``bool isLeft`` then the left or the right value (no null support: Flink's
``Either.Left``/``Right`` hold non-null values). Python value: :class:`Either`, a one-key mapping ``{"left": v}`` or
``{"right": v}``, which is also its JSON in ``dump``.

Compatibility: ``CompositeTypeSerializerSnapshot``'s rule (the worst of the two sides). The legacy
``EitherSerializerSnapshot`` (a ``TypeSerializerConfigSnapshot``, removed in Flink 1.17) is refused by the registry
like every legacy config snapshot.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flinkstate.format_errors import UnsupportedFormat
from flinkstate.serializers.base import Decoder, Encoder
from flinkstate.serializers.composite import CompositeSnapshot
from flinkstate.serializers.registry import register

LEFT, RIGHT = "left", "right"


class Either(dict[str, Any]):
    """A decoded ``org.apache.flink.types.Either``: exactly one key, ``"left"`` or ``"right"``."""

    @classmethod
    def left(cls, value: Any) -> Either:
        return cls({LEFT: value})

    @classmethod
    def right(cls, value: Any) -> Either:
        return cls({RIGHT: value})

    @property
    def is_left(self) -> bool:
        return LEFT in self

    @property
    def value(self) -> Any:
        return self[LEFT] if LEFT in self else self[RIGHT]

    def __repr__(self) -> str:
        return f"Either.{'Left' if self.is_left else 'Right'}({self.value!r})"


def either_side(value: Any, type_name: str) -> tuple[bool, Any]:
    """(is_left, inner value) of an Either given as a one-key mapping; a one-line error for anything else."""
    if isinstance(value, Mapping) and len(value) == 1:
        (side, inner), = value.items()
        if side in (LEFT, RIGHT):
            if inner is None:
                raise UnsupportedFormat(f"{type_name}: Either.{side.capitalize()} cannot hold null")
            return side == LEFT, inner
    raise UnsupportedFormat(f"{type_name}: an Either value is {{\"left\": value}} or {{\"right\": value}}, "
                            f"not {value!r:.80}")


@register
class EitherSnapshot(CompositeSnapshot):
    CLASS_NAMES = ("org.apache.flink.api.java.typeutils.runtime.JavaEitherSerializerSnapshot",)
    OUTER_VERSION = 1
    ARITY = 2

    @property
    def needs_end(self) -> bool:  # type: ignore[override]
        # A side without length (Kryo, Java Value types) can be read only as the tail of a whole stored value.
        return any(n.needs_end for n in self.nested)

    def tail_decoder(self) -> Decoder:
        return self._side_decoder(tail=True)

    def make_decoder(self) -> Decoder:
        return self._side_decoder(tail=False)

    def _side_decoder(self, tail: bool) -> Decoder:
        left, right = (n.tail_decoder() if tail else n.decoder() for n in self.nested)

        def decode(buf: bytes, off: int) -> tuple[Either, int]:
            if buf[off]:
                value, off = left(buf, off + 1)
                return Either({LEFT: value}), off
            value, off = right(buf, off + 1)
            return Either({RIGHT: value}), off

        return decode

    def make_encoder(self) -> Encoder:
        left, right = (n.encoder() for n in self.nested)
        type_name = self.type_name()

        def encode(value: Any, out: bytearray) -> None:
            is_left, inner = either_side(value, type_name)
            out.append(1 if is_left else 0)
            (left if is_left else right)(inner, out)

        return encode

    def type_name(self) -> str:
        return f"Either<{self.nested[0].type_name()}, {self.nested[1].type_name()}>"

    def nested_labels(self) -> list[str | None]:
        return [LEFT, RIGHT]

    def hash_code(self, value: Any) -> int:
        # Either.Left/Right.hashCode() is the held value's hashCode.
        is_left, inner = either_side(value, self.type_name())
        return self.nested[0 if is_left else 1].hash_code(inner)


__all__ = ["LEFT", "RIGHT", "Either", "EitherSnapshot", "either_side"]
