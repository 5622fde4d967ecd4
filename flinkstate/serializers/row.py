"""``RowSerializer$RowSerializerSnapshot`` (composite; outer version 4 writes ``bool supportsRowKind``, version 3
implies true, older ones false). Field names are not stored.

Record: a bit mask, MSB first, of ``(supportsRowKind ? 2 : 0) + arity`` bits (the two RowKind bits: bit0 = kind & 1,
bit1 = kind & 2; then one "is null" bit per field), then the non-null fields in position order.
Python value: a tuple by position; a row whose kind is not INSERT is a :class:`KindedRow` (a tuple with ``kind``).
"""

from __future__ import annotations

from typing import Any

from flinkstate.binary import Reader, Writer, java_combine_hashes
from flinkstate.serializers.base import Decoder, Encoder
from flinkstate.serializers.composite import CompositeSnapshot
from flinkstate.serializers.registry import register

FIRST_VERSION_WITH_ROW_KIND = 3
ROW_KINDS = ("INSERT", "UPDATE_BEFORE", "UPDATE_AFTER", "DELETE")


class KindedRow(tuple):
    """A Row whose RowKind (0..3, see ROW_KINDS) is not INSERT."""

    kind: int

    def __new__(cls, values: Any, kind: int) -> KindedRow:
        row = super().__new__(cls, values)
        row.kind = kind
        return row


@register
class RowSnapshot(CompositeSnapshot):
    CLASS_NAMES = ("org.apache.flink.api.java.typeutils.runtime.RowSerializer$RowSerializerSnapshot",)
    OUTER_VERSION = 4

    def __init__(self, class_name: str, nested: list[Any], *, supports_row_kind: bool = True, **kwargs: Any) -> None:
        super().__init__(class_name, nested, **kwargs)
        self.supports_row_kind = supports_row_kind

    @classmethod
    def read_outer(cls, reader: Reader, outer_version: int) -> dict[str, object]:
        if outer_version < FIRST_VERSION_WITH_ROW_KIND:
            return {"supports_row_kind": False}
        if outer_version == FIRST_VERSION_WITH_ROW_KIND:
            return {"supports_row_kind": True}
        return {"supports_row_kind": reader.bool()}

    def write_outer(self, writer: Writer) -> None:
        if self.outer_version > FIRST_VERSION_WITH_ROW_KIND:
            writer.bool(self.supports_row_kind)

    def _mask_layout(self) -> tuple[int, int]:
        """(number of leading kind bits, number of mask bytes)."""
        offset = 2 if self.supports_row_kind else 0
        return offset, (offset + len(self.nested) + 7) // 8

    def make_decoder(self) -> Decoder:
        decoders = tuple(n.decoder() for n in self.nested)
        offset, mask_bytes = self._mask_layout()
        # Precompute (byte index, bit) of every field's null flag.
        flags = tuple(((offset + i) // 8, 0x80 >> ((offset + i) % 8)) for i in range(len(decoders)))
        fields = tuple(zip(decoders, flags, strict=True))
        with_kind = self.supports_row_kind

        def decode(buf: bytes, off: int) -> tuple[Any, int]:
            mask = buf[off:off + mask_bytes]
            off += mask_bytes
            values = []
            for dec, (index, bit) in fields:
                if mask[index] & bit:
                    values.append(None)
                else:
                    value, off = dec(buf, off)
                    values.append(value)
            kind = ((mask[0] >> 7) & 1) | ((mask[0] >> 5) & 2) if with_kind else 0
            return (tuple(values) if kind == 0 else KindedRow(values, kind)), off

        return decode

    def make_encoder(self) -> Encoder:
        encoders = tuple(n.encoder() for n in self.nested)
        offset, mask_bytes = self._mask_layout()

        def encode(value: Any, out: bytearray) -> None:
            kind = getattr(value, "kind", 0)
            bits = [bool(kind & 1), bool(kind & 2)] if offset else []
            bits += [v is None for v in value]
            mask = bytearray(mask_bytes)
            for i, bit in enumerate(bits):
                if bit:
                    mask[i // 8] |= 0x80 >> (i % 8)
            out += mask
            for enc, item in zip(encoders, value, strict=True):
                if item is not None:
                    enc(item, out)

        return encode

    def type_name(self) -> str:
        return f"Row({', '.join(_sql_name(n.type_name()) for n in self.nested)})"

    def hash_code(self, value: Any) -> int:
        # RowUtils.deepHashCodeRow: kind byte, then 31 * kind + Arrays-style hash where each leaf is 31 + hashCode.
        leaves = [0 if v is None else java_combine_hashes([n.hash_code(v)], 1)
                  for n, v in zip(self.nested, value, strict=True)]
        return java_combine_hashes([java_combine_hashes(leaves, 1)], getattr(value, "kind", 0))


_SQL_NAMES = {"Integer": "INT", "String": "STRING", "Double": "DOUBLE", "Long": "BIGINT", "Short": "SMALLINT",
              "Byte": "TINYINT", "Boolean": "BOOLEAN", "Float": "FLOAT", "BigDecimal": "DECIMAL",
              "LocalDate": "DATE", "LocalTime": "TIME", "LocalDateTime": "TIMESTAMP", "Instant": "TIMESTAMP_LTZ",
              "byte[]": "BYTES"}


def _sql_name(type_name: str) -> str:
    """Row fields read best in the SQL-ish notation Flink's ``Types.ROW`` users write."""
    return _SQL_NAMES.get(type_name, type_name)
