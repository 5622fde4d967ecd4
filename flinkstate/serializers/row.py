"""``RowSerializer$RowSerializerSnapshot`` (composite; outer version 4 writes ``bool supportsRowKind``, version 3
implies true, older ones false). Field names are not stored: a snapshot built from a schema manifest carries them
in ``field_names`` (never written), which lets the compatibility rule spot fields swapped by name.

Record: a bit mask, MSB first, of ``(supportsRowKind ? 2 : 0) + arity`` bits (the two RowKind bits: bit0 = kind & 1,
bit1 = kind & 2; then one "is null" bit per field), then the non-null fields in position order.
Python value: a tuple by position; a row whose kind is not INSERT is a :class:`KindedRow` (a tuple with ``kind``).
"""

from __future__ import annotations

from typing import Any

from flinkstate.binary import Reader, Writer, java_combine_hashes
from flinkstate.compatibility import AFTER_MIGRATION, AS_IS, INCOMPATIBLE, Compatibility, Finding
from flinkstate.serializers.base import Decoder, Encoder
from flinkstate.serializers.composite import CompositeSnapshot
from flinkstate.serializers.registry import register

FIRST_VERSION_WITH_ROW_KIND = 3
ROW_KINDS = ("INSERT", "UPDATE_BEFORE", "UPDATE_AFTER", "DELETE")


class KindedRow(tuple[Any, ...]):
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
    NESTED_TYPE_CHANGED = "ROW_FIELD_TYPE_CHANGED"

    def __init__(self, class_name: str, nested: list[Any], *, supports_row_kind: bool = True,
                 field_names: list[str] | None = None, **kwargs: Any) -> None:
        super().__init__(class_name, nested, **kwargs)
        self.supports_row_kind = supports_row_kind
        self.field_names = field_names

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
            values: list[Any] = []
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

    # -- compatibility (RowSerializerSnapshot) ------------------------------------------------------------------------

    def names(self) -> list[str]:
        """Field names: declared ones, else Flink's defaults f0, f1, ..."""
        return self.field_names or [f"f{i}" for i in range(len(self.nested))]

    def matched_names(self, old: RowSnapshot) -> tuple[list[str], list[str]] | None:
        """(old names, new names) to match fields by, or None to match them by position, as Flink does: both must
        be named, and not one with Flink's default names (f0, f1, ...) against real ones. Default names are how a
        savepoint's or a job jar's Row reads once written to a file (neither stores names), so against real names
        they say nothing about which field is which (matched by name, none would be found)."""
        if not old.field_names or not self.field_names:
            return None
        if old.has_default_names() != self.has_default_names():
            return None
        return list(old.field_names), list(self.field_names)

    def has_default_names(self) -> bool:
        """Named f0, f1, ... as Flink names an unnamed Row's fields."""
        return self.field_names == [f"f{i}" for i in range(len(self.nested))]

    def nested_labels(self) -> list[str | None]:
        return list(self.names())

    def resolve_arity_change(self, old: Any, path: str) -> Compatibility:
        # Flink compares Row fields by position, so any change of arity is incompatible.
        old_names, new_names = old.names(), self.names()
        if len(self.nested) > len(old.nested):
            added = [n for n in new_names if n not in old_names] if old.field_names else new_names[len(old_names):]
            code, what = "ROW_FIELD_ADDED", f"field(s) {', '.join(added)} added"
        else:
            removed = [n for n in old_names if n not in new_names] if old.field_names else old_names[len(new_names):]
            code, what = "ROW_FIELD_REMOVED", f"field(s) {', '.join(removed)} removed"
        return Compatibility.of(Finding(code, path, f"{what}: Row arity {len(old.nested)} -> {len(self.nested)} "
                                        f"is incompatible (fields are matched by position)", INCOMPATIBLE,
                                        old.type_name(), self.type_name()))

    def resolve_outer(self, old: RowSnapshot, path: str) -> Compatibility:
        if old.supports_row_kind != self.supports_row_kind:
            return Compatibility.of(Finding("ROW_KIND_FLAG_CHANGED", path, "the RowKind header changed "
                                            f"({old.supports_row_kind} -> {self.supports_row_kind})",
                                            AFTER_MIGRATION, old.type_name(), self.type_name()))
        return Compatibility.as_is()

    def resolve_same_family(self, old: Any, path: str) -> Compatibility:
        result = super().resolve_same_family(old, path)
        names = self.matched_names(old)
        if names is not None and len(names[0]) == len(names[1]) and names[0] != names[1] \
                and result.verdict is not INCOMPATIBLE:
            result.add(self._name_change(old, path))
        return result

    def _name_change(self, old: RowSnapshot, path: str) -> Finding:
        old_names, new_names = list(old.field_names or ()), list(self.field_names or ())
        if sorted(old_names) == sorted(new_names):
            # Flink matches by position and the types agree, so it restores as is: the values of the swapped
            # fields land in each other's field. Nothing fails; the data is wrong.
            return Finding("ROW_FIELDS_REORDERED", path, f"fields reordered ({', '.join(old_names)} -> "
                           f"{', '.join(new_names)}); Flink matches Row fields by position and would restore "
                           f"them into the wrong fields", AS_IS, old.type_name(), self.type_name(),
                           silent_misread=True)
        renamed = [f"{a} -> {b}" for a, b in zip(old_names, new_names, strict=True) if a != b]
        return Finding("ROW_FIELD_RENAMED", path, f"field(s) renamed ({', '.join(renamed)}); Flink matches by "
                       f"position, so the values keep their positions", AS_IS, old.type_name(), self.type_name())

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
