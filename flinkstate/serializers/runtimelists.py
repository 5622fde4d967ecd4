"""The runtime's and the Table runtime's list-like serializers (composite snapshots):

* ``ArrayListSerializerSnapshot`` (flink-runtime; outer version 1, no outer payload; nested = [element]): the
  serializer of ``ListState`` values on the heap backend. Record: ``i32 n; n x element`` (no nulls), like
  ``ListSerializer``. Python value: list.
* ``LinkedListSerializer$LinkedListSerializerSnapshot`` (Table runtime; outer version 3: ``bool hasNullMask``;
  version 2 implies a mask, version 1 none). Record: ``i32 n``; with the mask, ``ceil(n / 8)`` bytes of
  ``MaskUtils`` null bits (most significant bit first); then each non-null element. Python value: list (None for
  null elements). A changed mask flag is ``COMPATIBLE_AFTER_MIGRATION`` (``resolveOuterSchemaCompatibility``).
* ``ListViewSerializerSnapshot`` / ``MapViewSerializerSnapshot`` (Table API's legacy data views; outer version 1;
  nested = the List or Map serializer): the record is the nested list's or map's. Python value: list or dict.

Compatibility: ``CompositeTypeSerializerSnapshot``'s rule; only LinkedList has an outer part.
"""

from __future__ import annotations

from typing import Any

from flinkstate.binary import I32, Reader, Writer
from flinkstate.compatibility import AFTER_MIGRATION, Compatibility, Finding
from flinkstate.format_errors import UnsupportedFormat
from flinkstate.serializers.base import Decoder, Encoder
from flinkstate.serializers.collections import ListSnapshot
from flinkstate.serializers.composite import CompositeSnapshot
from flinkstate.serializers.registry import register

_unpack_i32 = I32.unpack_from
TABLE_RUNTIME = "org.apache.flink.table.runtime.typeutils."
DATAVIEW = "org.apache.flink.table.dataview."
#: LinkedListSerializerSnapshot: the outer version that introduced the null mask, and the one that made it a flag.
FIRST_VERSION_WITH_NULL_MASK = 2
LINKED_LIST_VERSION = 3


@register
class ArrayListSnapshot(CompositeSnapshot):
    CLASS_NAMES = ("org.apache.flink.runtime.state.ArrayListSerializerSnapshot",)
    OUTER_VERSION = 1
    ARITY = 1

    def _list(self) -> ListSnapshot:
        # Same record format as ListSerializer: reuse its codec, keep this class (its notation and rule differ).
        return ListSnapshot(ListSnapshot.CLASS_NAMES[0], self.nested)

    def make_decoder(self) -> Decoder:
        return self._list().make_decoder()

    def make_encoder(self) -> Encoder:
        return self._list().make_encoder()

    def type_name(self) -> str:
        return f"ArrayList<{self.nested[0].type_name()}>"

    def nested_labels(self) -> list[str | None]:
        return ["element"]


@register
class LinkedListSnapshot(CompositeSnapshot):
    CLASS_NAMES = (TABLE_RUNTIME + "LinkedListSerializer$LinkedListSerializerSnapshot",)
    OUTER_VERSION = LINKED_LIST_VERSION
    ARITY = 1

    def __init__(self, class_name: str, nested: list[Any], *, has_null_mask: bool = True, **kwargs: Any) -> None:
        super().__init__(class_name, nested, **kwargs)
        self.has_null_mask = has_null_mask

    @classmethod
    def read_outer(cls, reader: Reader, outer_version: int) -> dict[str, object]:
        if outer_version < FIRST_VERSION_WITH_NULL_MASK:
            return {"has_null_mask": False}
        if outer_version == FIRST_VERSION_WITH_NULL_MASK:
            return {"has_null_mask": True}
        return {"has_null_mask": reader.bool()}

    def write_outer(self, writer: Writer) -> None:
        if self.outer_version > FIRST_VERSION_WITH_NULL_MASK:
            writer.bool(self.has_null_mask)

    def make_decoder(self) -> Decoder:
        elem = self.nested[0].decoder()
        if not self.has_null_mask:
            return ListSnapshot(ListSnapshot.CLASS_NAMES[0], self.nested).make_decoder()

        def decode(buf: bytes, off: int) -> tuple[list[Any], int]:
            n = _unpack_i32(buf, off)[0]
            off += 4
            mask_start, off = off, off + (n + 7) // 8
            items: list[Any] = []
            for i in range(n):
                if buf[mask_start + (i >> 3)] & (0x80 >> (i & 7)):
                    items.append(None)
                else:
                    item, off = elem(buf, off)
                    items.append(item)
            return items, off

        return decode

    def make_encoder(self) -> Encoder:
        elem = self.nested[0].encoder()
        has_mask = self.has_null_mask
        type_name = self.type_name()

        def encode(value: Any, out: bytearray) -> None:
            items = list(value)
            out += I32.pack(len(items))
            if has_mask:
                mask = bytearray((len(items) + 7) // 8)
                for i, item in enumerate(items):
                    if item is None:
                        mask[i >> 3] |= 0x80 >> (i & 7)
                out += mask
            elif any(item is None for item in items):
                raise UnsupportedFormat(f"{type_name} without a null mask cannot hold null elements")
            for item in items:
                if item is not None:
                    elem(item, out)

        return encode

    def type_name(self) -> str:
        return f"LinkedList<{self.nested[0].type_name()}>"

    def nested_labels(self) -> list[str | None]:
        return ["element"]

    def resolve_outer(self, old: LinkedListSnapshot, path: str) -> Compatibility:
        if old.has_null_mask != self.has_null_mask:
            return Compatibility.of(Finding("LINKED_LIST_NULL_MASK_CHANGED", path,
                                            f"null mask {'added' if self.has_null_mask else 'removed'}",
                                            AFTER_MIGRATION, old.type_name(), self.type_name()))
        return Compatibility.as_is()


class DataViewSnapshot(CompositeSnapshot):
    """A legacy Table data view: the record is that of its one nested (List or Map) serializer."""

    OUTER_VERSION = 1
    ARITY = 1
    VIEW = ""

    def make_decoder(self) -> Decoder:
        return self.nested[0].decoder()

    def make_encoder(self) -> Encoder:
        return self.nested[0].encoder()

    def type_name(self) -> str:
        return f"{self.VIEW}<{self.nested[0].type_name()}>"

    def nested_labels(self) -> list[str | None]:
        return [None]


@register
class ListViewSnapshot(DataViewSnapshot):
    CLASS_NAMES = (DATAVIEW + "ListViewSerializerSnapshot",)
    VIEW = "ListView"


@register
class MapViewSnapshot(DataViewSnapshot):
    CLASS_NAMES = (DATAVIEW + "MapViewSerializerSnapshot",)
    VIEW = "MapView"


__all__ = ["ArrayListSnapshot", "DataViewSnapshot", "LinkedListSnapshot", "ListViewSnapshot", "MapViewSnapshot"]
