"""The Table runtime's sorted serializers:

* ``SortedMapSerializerSnapshot`` (flink-table-runtime ``typeutils``; version 3): ``Java-serialized Comparator``, then
  the key and value snapshots (``NestedSerializersSnapshotDelegate``, no composite header). Records are
  ``AbstractMapSerializer``'s, as ``MapSerializer`` writes them: ``i32 n``, then per entry the key, ``bool isNull``
  and the value. Python value: dict, in the stored (sorted) order. ``RetractableTopNFunction`` (a Top-N over an
  updating input, the ``retract`` rank strategy) keeps its ``sorted-map`` state with it.
  Compatibility (``resolveSchemaCompatibility``): another snapshot class is incompatible; otherwise the comparators
  decide alone (the nested serializers are not consulted): equal -> as is, else incompatible. Flink's comparator,
  ``ComparableRecordComparator``, is equal to another by its sort key positions, key types, orders and null
  ordering (``equals`` ignores the generated code, whose class names change with every compilation); another
  comparator class's ``equals`` is not known here, so it is judged equal only by the exact bytes Flink wrote.
* ``SortedLongSerializer$SortedLongSerializerSnapshot`` (``operators.sink``; a ``SimpleTypeSerializerSnapshot``):
  a long with its sign bit flipped, big-endian, so that the bytes sort as the numbers do (the sort buffer of
  process table functions). Python value: int.
"""

from __future__ import annotations

from typing import Any

from flinkstate.binary import I64, Reader, Writer
from flinkstate.compatibility import INCOMPATIBLE, Compatibility, Finding
from flinkstate.serializers.base import Decoder, Encoder, TypeSerializerSnapshot
from flinkstate.serializers.collections import MapSnapshot
from flinkstate.serializers.composite import read_nested_snapshots, write_nested_snapshots
from flinkstate.serializers.logicaltypes import fingerprint, java_class_name, java_fields, read_java_object
from flinkstate.serializers.namespaces import EmptyPayloadSnapshot
from flinkstate.serializers.registry import register

TABLE_RUNTIME = "org.apache.flink.table.runtime."
#: The comparator Flink's planner gives SortedMap state (``operators.rank``; ``generated`` in later sources), and the
#: fields its ``equals`` compares.
COMPARABLE_RECORD_COMPARATORS = (TABLE_RUNTIME + "operators.rank.ComparableRecordComparator",
                                 TABLE_RUNTIME + "generated.ComparableRecordComparator")
COMPARED_FIELDS = ("compareKeyPositions", "compareKeyTypes", "compareOrders", "nullsIsLast")
SIGN_BIT = 1 << 63
_unpack_i64 = I64.unpack_from


def comparator_identity(parsed: Any, data: bytes) -> Any:
    """What the comparator's ``equals`` compares, as a hashable value."""
    if java_class_name(parsed) in COMPARABLE_RECORD_COMPARATORS:
        fields = java_fields(parsed)
        return tuple(fingerprint(fields.get(name)) for name in COMPARED_FIELDS)
    return ("bytes", data)


@register
class SortedMapSnapshot(MapSnapshot):
    CLASS_NAMES = (TABLE_RUNTIME + "typeutils.SortedMapSerializerSnapshot",)

    def __init__(self, class_name: str, nested: list[TypeSerializerSnapshot], *, version: int = 3,
                 comparator: bytes = b"", comparator_class: str = "", comparator_identity: Any = None) -> None:
        super().__init__(class_name, nested, version=version)
        self.comparator, self.comparator_class, self.comparator_identity = \
            comparator, comparator_class, comparator_identity

    @classmethod
    def read_payload(cls, class_name: str, version: int, reader: Reader) -> SortedMapSnapshot:
        start = reader.pos
        if version != 3:
            raise reader.error(f"{class_name}: unsupported snapshot version {version}", start)
        parsed, data = read_java_object(reader, "SortedMap comparator")
        try:
            identity = comparator_identity(parsed, data)
        except (ValueError, TypeError, AttributeError) as exc:
            raise reader.error(f"SortedMap comparator: unexpected {java_class_name(parsed)} ({exc})", start) from None
        nested = read_nested_snapshots(reader)
        if len(nested) != 2:
            raise reader.error(f"{class_name} has {len(nested)} nested serializers, expected 2", start)
        return cls(class_name, nested, version=version, comparator=data, comparator_class=java_class_name(parsed),
                   comparator_identity=identity)

    def write_payload(self, writer: Writer) -> None:
        writer.bytes(self.comparator)
        write_nested_snapshots(writer, self.nested)

    def type_name(self) -> str:
        return f"SortedMap<{self.nested[0].type_name()}, {self.nested[1].type_name()}>"

    def resolve_same_family(self, old: Any, path: str) -> Compatibility:
        if old.comparator_identity == self.comparator_identity:
            return Compatibility.as_is()
        return Compatibility.of(Finding(
            "SORTED_MAP_COMPARATOR_CHANGED", path,
            f"the SortedMap's comparator ({self.comparator_class}) is not equal to the old one: its sort keys, key "
            f"types, orders or null ordering changed", INCOMPATIBLE, old.type_name(), self.type_name()))


@register
class SortedLongSnapshot(EmptyPayloadSnapshot):
    CLASS_NAMES = (TABLE_RUNTIME + "operators.sink.SortedLongSerializer$SortedLongSerializerSnapshot",)
    NAME = "SortedLong"
    LENGTH = 8

    def make_decoder(self) -> Decoder:
        def decode(buf: bytes, off: int) -> tuple[int, int]:
            # MathUtils.flipSignBit: the stored long's sign bit inverted (x ^ -2^63 flips it in a signed int)
            return _unpack_i64(buf, off)[0] ^ -SIGN_BIT, off + 8

        return decode

    def make_encoder(self) -> Encoder:
        def encode(value: Any, out: bytearray) -> None:
            out += I64.pack(int(value) ^ -SIGN_BIT)

        return encode


__all__ = ["SortedLongSnapshot", "SortedMapSnapshot", "comparator_identity"]
