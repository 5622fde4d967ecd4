"""``TupleSerializerSnapshot`` (composite, outer version 2: ``UTF tupleClass``; nested = field serializers).

Record: the fields back to back, no header and no null support. Python value: a tuple.
"""

from __future__ import annotations

from typing import Any

from flinkstate.binary import Reader, Writer, java_combine_hashes
from flinkstate.compatibility import INCOMPATIBLE, Compatibility, Finding
from flinkstate.serializers.base import VARIABLE_LENGTH, Decoder, Encoder
from flinkstate.serializers.composite import CompositeSnapshot
from flinkstate.serializers.registry import register

TUPLE_PACKAGE = "org.apache.flink.api.java.tuple."



def fields_decoder(decoders: tuple[Decoder, ...]) -> Decoder:
    """A fixed sequence of fields, one after another, decoded into a tuple (Flink's tuples, Scala case classes)."""
    def decode(buf: bytes, off: int) -> tuple[tuple[Any, ...], int]:
        values = []
        for dec in decoders:
            value, off = dec(buf, off)
            values.append(value)
        return tuple(values), off

    return decode


def fields_encoder(encoders: tuple[Encoder, ...]) -> Encoder:
    """The writer of :func:`fields_decoder`'s layout: each field in turn, exactly as many as there are encoders."""
    def encode(value: Any, out: bytearray) -> None:
        for enc, item in zip(encoders, value, strict=True):
            enc(item, out)

    return encode

@register
class TupleSnapshot(CompositeSnapshot):
    CLASS_NAMES = ("org.apache.flink.api.java.typeutils.runtime.TupleSerializerSnapshot",)
    OUTER_VERSION = 2
    NESTED_TYPE_CHANGED = "TUPLE_FIELD_TYPE_CHANGED"

    def __init__(self, class_name: str, nested: list[Any], *, tuple_class: str | None = None, **kwargs: Any) -> None:
        super().__init__(class_name, nested, **kwargs)
        self.tuple_class = tuple_class or f"{TUPLE_PACKAGE}Tuple{len(nested)}"

    @classmethod
    def read_outer(cls, reader: Reader, outer_version: int) -> dict[str, object]:
        return {"tuple_class": reader.utf()}

    def write_outer(self, writer: Writer) -> None:
        writer.utf(self.tuple_class)

    @property
    def fixed_length(self) -> int:
        lengths = [n.fixed_length for n in self.nested]
        return VARIABLE_LENGTH if any(n < 0 for n in lengths) else sum(lengths)

    def make_decoder(self) -> Decoder:
        decoders = tuple(n.decoder() for n in self.nested)
        if len(decoders) == 2:  # the common Tuple2: no loop, no list
            first, second = decoders

            def decode2(buf: bytes, off: int) -> tuple[tuple[Any, Any], int]:
                a, off = first(buf, off)
                b, off = second(buf, off)
                return (a, b), off

            return decode2

        return fields_decoder(decoders)

    def make_encoder(self) -> Encoder:
        return fields_encoder(tuple(n.encoder() for n in self.nested))

    def type_name(self) -> str:
        name = self.tuple_class.rsplit(".", 1)[-1]
        return f"{name}<{', '.join(n.type_name() for n in self.nested)}>"

    def nested_labels(self) -> list[str | None]:
        return [f"f{i}" for i in range(len(self.nested))]

    def resolve_arity_change(self, old: Any, path: str) -> Compatibility:
        return Compatibility.of(Finding("TUPLE_ARITY_CHANGED", path, f"tuple arity changed from {len(old.nested)} "
                                        f"to {len(self.nested)}", INCOMPATIBLE, old.type_name(), self.type_name()))

    def hash_code(self, value: Any) -> int:
        # Generated TupleN.hashCode: result = h(f0); result = 31 * result + h(fi) ...; null fields hash to 0.
        hashes = [0 if v is None else n.hash_code(v) for n, v in zip(self.nested, value, strict=True)]
        return java_combine_hashes(hashes[1:], hashes[0]) if hashes else 0
