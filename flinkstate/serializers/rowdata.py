"""The Table/SQL runtime's serializers (flink-table-runtime / flink-table-type-utils ``runtime.typeutils``): the
state of every SQL operator (keys, accumulators, join and rank buffers) is ``RowData``.

``RowDataSerializer$RowDataSerializerSnapshot`` (version 3; version 4, Flink 2.3, adds the field names)::

    i32 n ; n x Java-serialized LogicalType ; nested serializer snapshots (NestedSerializersSnapshotDelegate)
    [version >= 4: bool hasNames ; n x UTF name]

Record: ``i32 size`` then the BinaryRowData bytes (:mod:`flinkstate.serializers.binaryrow`). The snapshot keeps every
LogicalType's bytes as read, so it is written back byte for byte.

Compatibility (``RowDataSerializerSnapshot.resolveSchemaCompatibility``): another snapshot class is incompatible;
LogicalTypes that differ (``Arrays.equals``: count, class, nullability, length/precision/scale, children, field names)
are incompatible; else the nested serializers decide (CompositeTypeSerializerUtil).

The internal serializers it nests, with their own snapshots: StringData (``i32 size`` + UTF-8), DecimalData
(``i32 precision, i32 scale``; record: unscaled long when precision <= 18, else ``i32 size`` + big-endian two's
complement), TimestampData (``i32 precision``; record: ``i64 millis`` [+ ``i32 nanos`` when precision > 3]),
BinaryRowData (``i32 arity``; record: ``i32 size`` + bytes, kept as bytes: it carries no types), ArrayData / MapData
(Java-serialized element types and serializers; record: ``i32 size`` + BinaryArrayData / BinaryMapData),
RawValueData (composite; record: ``i32 size`` + the inner serializer's bytes, kept as bytes), ExternalSerializer
(composite: Java-serialized DataType, ``bool isInternalInput``; record: its internal serializer's), and
``NullSerializer`` (one 0 byte) and the table runtime's ``TimeWindow`` (``i64 start, i64 end``).
"""

from __future__ import annotations

import struct
from typing import Any

import mmh3

from flinkstate.binary import Reader, Writer
from flinkstate.compatibility import INCOMPATIBLE, Compatibility, Finding
from flinkstate.serializers.base import Decoder, Encoder, TypeSerializerSnapshot
from flinkstate.serializers.binaryrow import (
    array_codec,
    check_supported,
    decimal_value,
    map_codec,
    row_codec,
    timestamp_parts,
    timestamp_value,
    unscaled_of,
)
from flinkstate.serializers.composite import CompositeSnapshot, read_nested_snapshots, write_nested_snapshots
from flinkstate.serializers.logicaltypes import LogicalType, fingerprint, read_java_object, read_logical_type
from flinkstate.serializers.namespaces import EmptyPayloadSnapshot, TimeWindowSnapshot
from flinkstate.serializers.registry import register
from flinkstate.serializers.sorted import SortedLongSnapshot, SortedMapSnapshot

TYPEUTILS = "org.apache.flink.table.runtime.typeutils."
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_I64_I32 = struct.Struct(">qi")
#: ``MurmurHashUtils.DEFAULT_SEED``: BinaryRowData.hashCode is murmur3-32 over its words with this seed.
MURMUR_SEED = 42


def _sized(buf: bytes, off: int) -> tuple[bytes, int]:
    """``i32 size`` then that many bytes."""
    size = _I32.unpack_from(buf, off)[0]
    end = off + 4 + size
    if size < 0 or end > len(buf):
        raise ValueError(f"record size {size} at offset {off} beyond the {len(buf)} bytes of the entry")
    return bytes(buf[off + 4:end]), end


def _sized_codec(read: Any, write: Any) -> tuple[Decoder, Encoder]:
    def decode(buf: bytes, off: int) -> tuple[Any, int]:
        data, end = _sized(buf, off)
        return read(data), end

    def encode(value: Any, out: bytearray) -> None:
        data = write(value)
        out += _I32.pack(len(data))
        out += data

    return decode, encode


def _changed(new: TypeSerializerSnapshot, old: TypeSerializerSnapshot, path: str, what: str) -> Compatibility:
    return Compatibility.of(Finding("ROWDATA_TYPE_CHANGED", path, what, INCOMPATIBLE, old.type_name(),
                                    new.type_name()))


@register
class RowDataSnapshot(TypeSerializerSnapshot):
    CLASS_NAMES = (TYPEUTILS + "RowDataSerializer$RowDataSerializerSnapshot",)

    def __init__(self, class_name: str, version: int, types: list[LogicalType], raw_types: list[bytes],
                 nested: list[TypeSerializerSnapshot], field_names: list[str] | None = None) -> None:
        super().__init__(class_name, version)
        self.types, self.raw_types, self._nested, self.field_names = types, raw_types, nested, field_names
        self._row_writer: Any = None  # the BinaryRowData encoder, built once for hash_code (one call per key)

    @classmethod
    def read_payload(cls, class_name: str, version: int, reader: Reader) -> RowDataSnapshot:
        start = reader.pos
        count = reader.i32()
        if not 0 <= count <= 65535:
            raise reader.error(f"RowData snapshot with {count} fields", start)
        types, raw = [], []
        for i in range(count):
            t, data = read_logical_type(reader, f"RowData field {i} logical type")
            types.append(t)
            raw.append(data)
        nested = read_nested_snapshots(reader)
        if len(nested) != count:
            raise reader.error(f"RowData snapshot with {count} types but {len(nested)} serializers", start)
        names = [reader.utf() for _ in range(count)] if version >= 4 and reader.bool() else None
        return cls(class_name, version, types, raw, nested, names)

    def write_payload(self, writer: Writer) -> None:
        writer.i32(len(self.raw_types))
        for data in self.raw_types:
            writer.bytes(data)
        write_nested_snapshots(writer, self._nested)
        if self.version >= 4:
            writer.bool(self.field_names is not None)
            for name in self.field_names or ():
                writer.utf(name)

    @property
    def nested(self) -> list[TypeSerializerSnapshot]:
        return self._nested

    def names(self) -> list[str]:
        """Field names: stored ones (version 4), else RowType's defaults f0, f1, ..."""
        return self.field_names or [f"f{i}" for i in range(len(self.types))]

    def _row_codec(self) -> Any:
        for name, t in zip(self.names(), self.types, strict=True):
            check_supported(t, f"{self.type_name()} field {name}")
        return row_codec(self.types)

    def make_decoder(self) -> Decoder:
        return _sized_codec(*self._row_codec())[0]

    def make_encoder(self) -> Encoder:
        return _sized_codec(*self._row_codec())[1]

    def type_name(self) -> str:
        fields = ", ".join(f"`{n}` {t.notation()}" for n, t in zip(self.names(), self.types, strict=True))
        return f"ROW<{fields}>"

    def hash_code(self, value: Any) -> int:
        # BinaryRowData.hashCode: MurmurHashUtils.hashBytesByWords over the row's bytes (a multiple of 8), i.e.
        # murmur3 x86-32 with little-endian words, seed 42.
        if self._row_writer is None:
            self._row_writer = self._row_codec()[1]
        return int(mmh3.hash(self._row_writer(value), MURMUR_SEED, signed=True))

    def resolve_same_family(self, old: Any, path: str) -> Compatibility:
        if [t.identity for t in old.types] != [t.identity for t in self.types]:
            return _changed(self, old, path, f"RowData field types changed ({old.type_name()} -> "
                                             f"{self.type_name()}); Flink restores RowData only with equal types")
        result = Compatibility.as_is()
        for name, new, previous in zip(self.names(), self._nested, old.nested, strict=True):
            result.merge(new.resolve_compatibility(previous, f"{path}.{name}" if path else name))
        return result


@register
class StringDataSnapshot(EmptyPayloadSnapshot):
    CLASS_NAMES = (TYPEUTILS + "StringDataSerializer$StringDataSerializerSnapshot",)
    NAME = "STRING"
    LENGTH = -1

    def make_decoder(self) -> Decoder:
        return _sized_codec(lambda b: b.decode("utf-8", "surrogateescape"),
                            lambda v: v.encode("utf-8", "surrogateescape"))[0]

    def make_encoder(self) -> Encoder:
        return _sized_codec(None, lambda v: v.encode("utf-8", "surrogateescape"))[1]


@register
class NullValueSnapshot(EmptyPayloadSnapshot):
    """``org.apache.flink.table.dataview.NullSerializer``: the placeholder of a DataView in an accumulator."""

    CLASS_NAMES = ("org.apache.flink.table.dataview.NullSerializer$NullSerializerSnapshot",)
    NAME = "NULL"
    LENGTH = 1

    def make_decoder(self) -> Decoder:
        return lambda buf, off: (None, off + 1)

    def make_encoder(self) -> Encoder:
        return lambda value, out: out.append(0)


@register
class TableTimeWindowSnapshot(TimeWindowSnapshot):
    """The table runtime's own ``TimeWindow`` (group-window aggregates); same record as the DataStream one."""

    CLASS_NAMES = ("org.apache.flink.table.runtime.operators.window.TimeWindow$Serializer$"
                   "TimeWindowSerializerSnapshot",)


class _IntParamsSnapshot(TypeSerializerSnapshot):
    """A snapshot whose payload is a few ``i32`` parameters; equal parameters are compatible as is, others not."""

    PARAMS: tuple[str, ...] = ()

    def __init__(self, class_name: str, version: int, params: tuple[int, ...]) -> None:
        super().__init__(class_name, version)
        self.params = params

    @classmethod
    def read_payload(cls, class_name: str, version: int, reader: Reader) -> TypeSerializerSnapshot:
        return cls(class_name, version, tuple(reader.i32() for _ in cls.PARAMS))

    def write_payload(self, writer: Writer) -> None:
        for value in self.params:
            writer.i32(value)

    def resolve_same_family(self, old: Any, path: str) -> Compatibility:
        if old.params != self.params:
            return _changed(self, old, path, f"{old.type_name()} -> {self.type_name()} is incompatible")
        return Compatibility.as_is()


@register
class DecimalDataSnapshot(_IntParamsSnapshot):
    CLASS_NAMES = (TYPEUTILS + "DecimalDataSerializer$DecimalSerializerSnapshot",)
    PARAMS = ("precision", "scale")

    def _codec(self) -> tuple[Decoder, Encoder]:
        precision, scale = self.params
        if precision <= 18:
            def decode(buf: bytes, off: int) -> tuple[Any, int]:
                return decimal_value(_I64.unpack_from(buf, off)[0], scale), off + 8

            def encode(value: Any, out: bytearray) -> None:
                out += _I64.pack(unscaled_of(value, scale))

            return decode, encode

        def decode_big(buf: bytes, off: int) -> tuple[Any, int]:
            data, end = _sized(buf, off)
            return decimal_value(int.from_bytes(data, "big", signed=True), scale), end

        def encode_big(value: Any, out: bytearray) -> None:
            unscaled = unscaled_of(value, scale)
            data = unscaled.to_bytes(unscaled.bit_length() // 8 + 1, "big", signed=True)
            out += _I32.pack(len(data)) + data

        return decode_big, encode_big

    def make_decoder(self) -> Decoder:
        return self._codec()[0]

    def make_encoder(self) -> Encoder:
        return self._codec()[1]

    def type_name(self) -> str:
        return f"DECIMAL({self.params[0]}, {self.params[1]})"


@register
class TimestampDataSnapshot(_IntParamsSnapshot):
    CLASS_NAMES = (TYPEUTILS + "TimestampDataSerializer$TimestampDataSerializerSnapshot",)
    PARAMS = ("precision",)

    @property
    def fixed_length(self) -> int:
        return 8 if self.params[0] <= 3 else 12

    def make_decoder(self) -> Decoder:
        if self.params[0] <= 3:
            return lambda buf, off: (timestamp_value(_I64.unpack_from(buf, off)[0], 0, False), off + 8)

        def decode(buf: bytes, off: int) -> tuple[Any, int]:
            millis, nanos = _I64_I32.unpack_from(buf, off)
            return timestamp_value(millis, nanos, False), off + 12

        return decode

    def make_encoder(self) -> Encoder:
        compact = self.params[0] <= 3

        def encode(value: Any, out: bytearray) -> None:
            millis, nanos = timestamp_parts(value)
            out += _I64.pack(millis) if compact else _I64_I32.pack(millis, nanos)

        return encode

    def type_name(self) -> str:
        # TimestampDataSerializer serves TIMESTAMP(p) and TIMESTAMP_LTZ(p) alike; values read as LocalDateTime.
        return f"TIMESTAMP({self.params[0]})"


@register
class BinaryRowDataSnapshot(_IntParamsSnapshot):
    CLASS_NAMES = (TYPEUTILS + "BinaryRowDataSerializer$BinaryRowDataSerializerSnapshot",)
    PARAMS = ("arity",)

    def make_decoder(self) -> Decoder:
        return _sized_codec(bytes, bytes)[0]

    def make_encoder(self) -> Encoder:
        return _sized_codec(bytes, bytes)[1]

    def type_name(self) -> str:
        return f"BinaryRowData({self.params[0]})"

    def hash_code(self, value: Any) -> int:
        return int(mmh3.hash(bytes(value), MURMUR_SEED, signed=True))


class _JavaTypesSnapshot(TypeSerializerSnapshot):
    """ArrayData / MapData snapshots: Java-serialized LogicalTypes, then Java-serialized serializers (kept as
    bytes; only their equality matters to Flink's rule)."""

    TYPES = 1

    def __init__(self, class_name: str, version: int, types: list[LogicalType], raw: list[bytes],
                 serializers: list[Any]) -> None:
        super().__init__(class_name, version)
        self.types, self.raw, self.serializers = types, raw, serializers

    @classmethod
    def read_payload(cls, class_name: str, version: int, reader: Reader) -> TypeSerializerSnapshot:
        types, raw = [], []
        for i in range(cls.TYPES):
            t, data = read_logical_type(reader, f"{class_name} type {i}")
            types.append(t)
            raw.append(data)
        serializers = []
        for i in range(cls.TYPES):
            parsed, data = read_java_object(reader, f"{class_name} serializer {i}")
            serializers.append(fingerprint(parsed))
            raw.append(data)
        return cls(class_name, version, types, raw, serializers)

    def write_payload(self, writer: Writer) -> None:
        for data in self.raw:
            writer.bytes(data)

    def resolve_same_family(self, old: Any, path: str) -> Compatibility:
        if [t.identity for t in old.types] != [t.identity for t in self.types] or old.serializers != self.serializers:
            return _changed(self, old, path, f"{old.type_name()} -> {self.type_name()} is incompatible")
        return Compatibility.as_is()


@register
class ArrayDataSnapshot(_JavaTypesSnapshot):
    CLASS_NAMES = (TYPEUTILS + "ArrayDataSerializer$ArrayDataSerializerSnapshot",)

    def _codec(self) -> tuple[Decoder, Encoder]:
        check_supported(self.types[0], self.type_name())
        return _sized_codec(*array_codec(self.types[0]))

    def make_decoder(self) -> Decoder:
        return self._codec()[0]

    def make_encoder(self) -> Encoder:
        return self._codec()[1]

    def type_name(self) -> str:
        return f"ARRAY<{self.types[0].notation()}>"


@register
class MapDataSnapshot(_JavaTypesSnapshot):
    CLASS_NAMES = (TYPEUTILS + "MapDataSerializer$MapDataSerializerSnapshot",)
    TYPES = 2

    def _codec(self) -> tuple[Decoder, Encoder]:
        for t in self.types:
            check_supported(t, self.type_name())
        return _sized_codec(*map_codec(self.types[0], self.types[1]))

    def make_decoder(self) -> Decoder:
        return self._codec()[0]

    def make_encoder(self) -> Encoder:
        return self._codec()[1]

    def type_name(self) -> str:
        return f"MAP<{self.types[0].notation()}, {self.types[1].notation()}>"


@register
class RawValueDataSnapshot(CompositeSnapshot):
    """``RawValueDataSerializer``: the inner serializer's bytes, sized; kept as bytes (the inner serializer is often
    Kryo or a job's own)."""

    CLASS_NAMES = (TYPEUTILS + "RawValueDataSerializer$RawValueDataSerializerSnapshot",)
    OUTER_VERSION = 0
    ARITY = 1

    def make_decoder(self) -> Decoder:
        return _sized_codec(bytes, bytes)[0]

    def make_encoder(self) -> Encoder:
        return _sized_codec(bytes, bytes)[1]

    def type_name(self) -> str:
        return f"RAW<{self.nested[0].type_name()}>"


@register
class ExternalSnapshot(CompositeSnapshot):
    """``ExternalSerializer``: a DataType (Java-serialized, kept as bytes) and its internal serializer, whose
    records it writes; values are read in their internal form."""

    CLASS_NAMES = (TYPEUTILS + "ExternalSerializer$ExternalSerializerSnapshot",)
    ARITY = 1

    def __init__(self, class_name: str, nested: list[TypeSerializerSnapshot], *, data_type: bytes = b"",
                 data_type_identity: Any = None, internal_input: bool = False, **kwargs: Any) -> None:
        super().__init__(class_name, nested, **kwargs)
        self.data_type, self.data_type_identity, self.internal_input = data_type, data_type_identity, internal_input

    @classmethod
    def read_outer(cls, reader: Reader, outer_version: int) -> dict[str, object]:
        parsed, data = read_java_object(reader, "ExternalSerializer data type")
        return {"data_type": data, "data_type_identity": fingerprint(parsed), "internal_input": reader.bool()}

    def write_outer(self, writer: Writer) -> None:
        writer.bytes(self.data_type)
        writer.bool(self.internal_input)

    def resolve_outer(self, old: Any, path: str) -> Compatibility:
        # CompositeTypeSerializerSnapshot's default outer rule: the outer snapshot's own configuration is not
        # compared (ExternalSerializerSnapshot does not override resolveOuterSchemaCompatibility).
        return Compatibility.as_is()

    def make_decoder(self) -> Decoder:
        return self.nested[0].decoder()

    def make_encoder(self) -> Encoder:
        return self.nested[0].encoder()

    @property
    def fixed_length(self) -> int:
        return self.nested[0].fixed_length

    def type_name(self) -> str:
        return f"External<{self.nested[0].type_name()}>"

    def hash_code(self, value: Any) -> int:
        return self.nested[0].hash_code(value)


#: The Table runtime's snapshot classes, this module's and the sorted ones (their notation carries the snapshot's bytes:
#: see flinkstate.typenotation).
TABLE_SNAPSHOTS = (RowDataSnapshot, StringDataSnapshot, NullValueSnapshot, TableTimeWindowSnapshot, DecimalDataSnapshot,
                   TimestampDataSnapshot, BinaryRowDataSnapshot, ArrayDataSnapshot, MapDataSnapshot,
                   RawValueDataSnapshot, ExternalSnapshot, SortedMapSnapshot, SortedLongSnapshot)
