"""``JavaEitherSerializerSnapshot`` (composite, outer version 1, no outer payload; nested = [left, right]).

Record (``EitherSerializer``): ``bool isLeft`` then the left or the right value (no null support: Flink's
``Either.Left``/``Right`` hold non-null values). Python value: :class:`Either`, a one-key mapping ``{"left": v}`` or
``{"right": v}``, which is also its JSON in ``dump``.

Compatibility: ``CompositeTypeSerializerSnapshot``'s rule (the worst of the two sides).

The legacy ``EitherSerializerSnapshot`` (Flink 1.6 and 1.7 wrote it; removed in Flink 1.17) is read too: version 2
is the nested snapshots alone (``NestedSerializersSnapshotDelegate``, no composite header), with the same records;
version 1 (Java-serialized serializers) is refused in one line. Flink 1.17 and later cannot load that class, so a
new job's ``JavaEitherSerializerSnapshot`` against it is incompatible (``LEGACY_EITHER_SNAPSHOT``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flinkstate.binary import Reader
from flinkstate.compatibility import INCOMPATIBLE, Compatibility, Finding
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

    def resolve_compatibility(self, old: Any, path: str = "") -> Compatibility:
        if isinstance(old, LegacyEitherSnapshot) and not isinstance(self, LegacyEitherSnapshot):
            return Compatibility.of(Finding(
                "LEGACY_EITHER_SNAPSHOT", path, "the savepoint's EitherSerializerSnapshot (written by Flink 1.7 and "
                "earlier) no longer exists in Flink 1.17+, which cannot restore it (restore with Flink 1.8-1.16 and "
                "take a new savepoint)", INCOMPATIBLE, old.type_name(), self.type_name()))
        return super().resolve_compatibility(old, path)


@register
class LegacyEitherSnapshot(EitherSnapshot):
    CLASS_NAMES = ("org.apache.flink.api.java.typeutils.runtime.EitherSerializerSnapshot",)

    @classmethod
    def read_payload(cls, class_name: str, version: int, reader: Reader) -> EitherSnapshot:
        if version != 2:  # version 1 holds Java-serialized serializers (Flink 1.6's legacy nested snapshots)
            raise UnsupportedFormat(f"{class_name} version {version} (Java-serialized nested serializers) is not "
                                    f"supported", reader.path, reader.base + reader.pos)
        # Version 2 is NestedSerializersSnapshotDelegate alone: CompositeSnapshot's legacy layout with no outer part.
        snapshot = super().read_payload(class_name, version, reader)
        assert isinstance(snapshot, EitherSnapshot)
        return snapshot


__all__ = ["LEFT", "RIGHT", "Either", "EitherSnapshot", "LegacyEitherSnapshot", "either_side"]
