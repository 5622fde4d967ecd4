"""List, Map, Set and GenericArray serializers (all composite snapshots, outer version 1).

Record formats:
    List:         i32 n; n x element (no nulls)
    Map:          i32 n; n x (key; bool valueIsNull; [value])
    Set (2.x):    i32 n; n x (bool isNull; [element])
    GenericArray: i32 n; n x (bool isPRESENT; [element])     -- note: the flag means the opposite of Set's
Python values: list, dict, :class:`StoredOrderSet` (a set that iterates in stored order, so re-encoding writes the
same bytes; when the elements are unhashable, or Python would merge elements Java keeps apart, such as 0.0 and -0.0
or BigDecimal 1.0 and 1.00, a list instead), list.
"""

from __future__ import annotations

from typing import Any

from flinkstate.binary import I32, Reader, Writer
from flinkstate.compatibility import INCOMPATIBLE, Compatibility, Finding
from flinkstate.serializers.base import Decoder, Encoder
from flinkstate.serializers.composite import CompositeSnapshot
from flinkstate.serializers.registry import register

BASE = "org.apache.flink.api.common.typeutils.base."
_unpack_i32 = I32.unpack_from


@register
class ListSnapshot(CompositeSnapshot):
    CLASS_NAMES = (BASE + "ListSerializerSnapshot",)
    ARITY = 1

    @property
    def element(self) -> Any:
        return self.nested[0]

    def make_decoder(self) -> Decoder:
        elem = self.element.decoder()

        def decode(buf: bytes, off: int) -> tuple[list[Any], int]:
            n = _unpack_i32(buf, off)[0]
            off += 4
            items: list[Any] = []
            append = items.append
            for _ in range(n):
                item, off = elem(buf, off)
                append(item)
            return items, off

        return decode

    def make_encoder(self) -> Encoder:
        elem = self.element.encoder()

        def encode(value: list[Any], out: bytearray) -> None:
            out += I32.pack(len(value))
            for item in value:
                elem(item, out)

        return encode

    def type_name(self) -> str:
        return f"List<{self.element.type_name()}>"

    def nested_labels(self) -> list[str | None]:
        return ["element"]


@register
class MapSnapshot(CompositeSnapshot):
    CLASS_NAMES = (BASE + "MapSerializerSnapshot",)
    ARITY = 2

    def make_decoder(self) -> Decoder:
        key_dec, value_dec = self.nested[0].decoder(), self.nested[1].decoder()

        def decode(buf: bytes, off: int) -> tuple[dict[Any, Any], int]:
            n = _unpack_i32(buf, off)[0]
            off += 4
            result: dict[Any, Any] = {}
            for _ in range(n):
                key, off = key_dec(buf, off)
                if buf[off]:
                    result[key] = None
                    off += 1
                else:
                    result[key], off = value_dec(buf, off + 1)
            return result, off

        return decode

    def make_encoder(self) -> Encoder:
        key_enc, value_enc = self.nested[0].encoder(), self.nested[1].encoder()

        def encode(value: dict[Any, Any], out: bytearray) -> None:
            out += I32.pack(len(value))
            for key, item in value.items():
                key_enc(key, out)
                if item is None:
                    out.append(1)
                else:
                    out.append(0)
                    value_enc(item, out)

        return encode

    def type_name(self) -> str:
        return f"Map<{self.nested[0].type_name()}, {self.nested[1].type_name()}>"

    def nested_labels(self) -> list[str | None]:
        return ["key", "value"]


def _flagged_sequence_decoder(elem_dec: Decoder, present_flag: int) -> Decoder:
    """``i32 n`` then per element a boolean flag (``present_flag`` = the value meaning "an element follows")."""

    def decode(buf: bytes, off: int) -> tuple[list[Any], int]:
        n = _unpack_i32(buf, off)[0]
        off += 4
        items: list[Any] = []
        for _ in range(n):
            flag = buf[off]
            off += 1
            if flag == present_flag:
                item, off = elem_dec(buf, off)
                items.append(item)
            else:
                items.append(None)
        return items, off

    return decode


def _flagged_sequence_encoder(elem_enc: Encoder, present_flag: int) -> Encoder:
    def encode(value: Any, out: bytearray) -> None:
        items = list(value)
        out += I32.pack(len(items))
        for item in items:
            if item is None:
                out.append(1 - present_flag)
            else:
                out.append(present_flag)
                elem_enc(item, out)

    return encode


class StoredOrderSet(set[Any]):  # a real set: isinstance checks, equality and set algebra stay set's
    """A decoded Java Set: equal to the set of its elements, iterating in the order they were stored (Java's
    HashSet order, which Python's hash order would scramble). A set changed after decoding iterates in set order."""

    __slots__ = ("_order",)

    def __init__(self, items: Any = ()) -> None:
        order = list(items)
        super().__init__(order)
        self._order = order

    def __iter__(self) -> Any:
        order = self._order
        if len(order) == len(self) and all(map(self.__contains__, order)):
            return iter(order)
        return set.__iter__(self)


def set_value(items: list[Any]) -> Any:
    """A Set's value as :class:`SetSnapshot` decodes it from its elements in stored order: a
    :class:`StoredOrderSet`, or the list itself where a set would lose elements."""
    try:
        result = StoredOrderSet(items)
    except TypeError:  # unhashable elements (lists, dicts): keep them as a list
        return items
    # Elements Java keeps apart but Python merges (0.0 and -0.0): a list loses nothing.
    return result if len(result) == len(items) else items


@register
class SetSnapshot(CompositeSnapshot):
    CLASS_NAMES = (BASE + "SetSerializerSnapshot",)
    ARITY = 1

    def make_decoder(self) -> Decoder:
        decode_list = _flagged_sequence_decoder(self.nested[0].decoder(), 0)

        def decode(buf: bytes, off: int) -> tuple[Any, int]:
            items, off = decode_list(buf, off)
            return set_value(items), off

        return decode

    def make_encoder(self) -> Encoder:
        return _flagged_sequence_encoder(self.nested[0].encoder(), 0)

    def type_name(self) -> str:
        return f"Set<{self.nested[0].type_name()}>"

    def nested_labels(self) -> list[str | None]:
        return ["element"]


@register
class GenericArraySnapshot(CompositeSnapshot):
    CLASS_NAMES = (BASE + "GenericArraySerializerSnapshot",)
    ARITY = 1

    def __init__(self, class_name: str, nested: list[Any], *, component_class: str = "java.lang.Object",
                 **kwargs: Any) -> None:
        super().__init__(class_name, nested, **kwargs)
        self.component_class = component_class

    @classmethod
    def read_outer(cls, reader: Reader, outer_version: int) -> dict[str, object]:
        return {"component_class": reader.utf()}

    def write_outer(self, writer: Writer) -> None:
        writer.utf(self.component_class)

    def make_decoder(self) -> Decoder:
        return _flagged_sequence_decoder(self.nested[0].decoder(), 1)

    def make_encoder(self) -> Encoder:
        return _flagged_sequence_encoder(self.nested[0].encoder(), 1)

    def type_name(self) -> str:
        return f"{self.nested[0].type_name()}[]"

    def nested_labels(self) -> list[str | None]:
        return ["element"]

    def resolve_outer(self, old: GenericArraySnapshot, path: str) -> Compatibility:
        # GenericArraySerializerSnapshot: the component class must be the same.
        if old.component_class != self.component_class:
            return Compatibility.of(Finding("ARRAY_COMPONENT_CLASS_CHANGED", path,
                                            f"array component class changed from {old.component_class} to "
                                            f"{self.component_class}", INCOMPATIBLE, old.type_name(),
                                            self.type_name()))
        return Compatibility.as_is()
