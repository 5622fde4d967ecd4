"""``NullableSerializer$NullableSerializerSnapshot`` (composite, outer version 2: ``i32 nullPaddingLength``).

Record: ``bool isNull``; then the value, or ``nullPaddingLength`` padding bytes when null (fixed-length inner
serializers are padded so the record keeps a fixed length).
"""

from __future__ import annotations

from typing import Any

from flinkstate.binary import Reader, Writer
from flinkstate.compatibility import AFTER_MIGRATION, Compatibility, Finding
from flinkstate.serializers.base import VARIABLE_LENGTH, Decoder, Encoder
from flinkstate.serializers.composite import CompositeSnapshot
from flinkstate.serializers.registry import register


@register
class NullableSnapshot(CompositeSnapshot):
    CLASS_NAMES = ("org.apache.flink.api.java.typeutils.runtime.NullableSerializer$NullableSerializerSnapshot",)
    OUTER_VERSION = 2
    ARITY = 1

    def __init__(self, class_name: str, nested: list[Any], *, null_padding: int = 0, **kwargs: Any) -> None:
        super().__init__(class_name, nested, **kwargs)
        self.null_padding = null_padding

    @classmethod
    def read_outer(cls, reader: Reader, outer_version: int) -> dict[str, object]:
        return {"null_padding": reader.i32()}

    def write_outer(self, writer: Writer) -> None:
        writer.i32(self.null_padding)

    @property
    def fixed_length(self) -> int:
        inner = self.nested[0].fixed_length
        return 1 + inner if self.null_padding and inner >= 0 else VARIABLE_LENGTH

    def make_decoder(self) -> Decoder:
        inner = self.nested[0].decoder()
        padding = self.null_padding

        def decode(buf: bytes, off: int) -> tuple[Any, int]:
            if buf[off]:
                return None, off + 1 + padding
            return inner(buf, off + 1)

        return decode

    def make_encoder(self) -> Encoder:
        inner = self.nested[0].encoder()
        padding = bytes(self.null_padding)

        def encode(value: Any, out: bytearray) -> None:
            if value is None:
                out.append(1)
                out += padding
            else:
                out.append(0)
                inner(value, out)

        return encode

    def type_name(self) -> str:
        return f"Nullable<{self.nested[0].type_name()}>"

    def nested_labels(self) -> list[str | None]:
        return [None]

    def resolve_outer(self, old: NullableSnapshot, path: str) -> Compatibility:
        # NullableSerializerSnapshot: a different null padding changes the record layout.
        if old.null_padding != self.null_padding:
            return Compatibility.of(Finding("NULLABLE_PADDING_CHANGED", path, f"null padding changed from "
                                            f"{old.null_padding} to {self.null_padding} bytes", AFTER_MIGRATION,
                                            old.type_name(), self.type_name()))
        return Compatibility.as_is()

    def hash_code(self, value: Any) -> int:
        return self.nested[0].hash_code(value)
