"""Serializer families: snapshot parse → write reproduces the bytes, and record codecs round-trip hand-made values
in Flink's byte layout."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from typing import Any

import pytest

from flinkstate.binary import I32, I64, INT_MIN, LONG_MIN, Reader, Writer, encode_sv
from flinkstate.format.keyed_entries import KeyLayout
from flinkstate.format_errors import UnknownSerializerSnapshot
from flinkstate.serializers import read_snapshot, snapshot_bytes
from flinkstate.serializers.avro import AvroSnapshot
from flinkstate.serializers.base import TypeSerializerSnapshot, UnknownSnapshot
from flinkstate.serializers.collections import GenericArraySnapshot, ListSnapshot, MapSnapshot, SetSnapshot
from flinkstate.serializers.enum import EnumSnapshot
from flinkstate.serializers.kryo import KryoSnapshot
from flinkstate.serializers.namespaces import TimeWindow, TimeWindowSnapshot, VoidNamespaceSnapshot
from flinkstate.serializers.nullable import NullableSnapshot
from flinkstate.serializers.pojo import PojoSnapshot, java_string_sort_key
from flinkstate.serializers.primitives import BASE, SIMPLE_TYPES, SimpleSnapshot, simple
from flinkstate.serializers.row import KindedRow, RowSnapshot
from flinkstate.serializers.timer import Timer, TimerSnapshot
from flinkstate.serializers.times import (
    Date,
    Instant,
    LocalDate,
    LocalDateTime,
    LocalTime,
    SqlDate,
    SqlTime,
    SqlTimestamp,
)
from flinkstate.serializers.ttl import TtlSnapshot, TtlValue
from flinkstate.serializers.tuple import TupleSnapshot

LIST = ListSnapshot.CLASS_NAMES[0]
MAP = MapSnapshot.CLASS_NAMES[0]


def _reparse(snapshot: TypeSerializerSnapshot, top_level: bool = True) -> TypeSerializerSnapshot:
    """Writes, parses, and checks that writing the parsed snapshot gives the same bytes."""
    data = snapshot_bytes(snapshot, top_level)
    parsed = read_snapshot(Reader(data), top_level)
    assert snapshot_bytes(parsed, top_level) == data
    return parsed


def _roundtrip(snapshot: TypeSerializerSnapshot, value: Any, expected_bytes: bytes | None = None) -> Any:
    data = snapshot.encode(value)
    if expected_bytes is not None:
        assert data == expected_bytes
    decoded, end = snapshot.decoder()(data + b"trailing", 0)
    assert end == len(data)
    if snapshot.fixed_length >= 0:
        assert len(data) == snapshot.fixed_length
    return decoded


# -- primitives ------------------------------------------------------------------------------------------------------

PRIMITIVE_VALUES = {
    "Long": [(0, b"\x00" * 8), (-2, b"\xff" * 7 + b"\xfe")], "Int": [(258, b"\x00\x00\x01\x02")],
    "Short": [(-1, b"\xff\xff")], "Byte": [(5, b"\x05")], "Boolean": [(True, b"\x01")],
    "Double": [(1.5, b"\x3f\xf8" + b"\x00" * 6)], "Float": [(0.5, b"\x3f\x00\x00\x00")], "Char": [("é", b"\x00\xe9")],
    "String": [("key-1", b"\x06key-1"), (None, b"\x00"), ("€", b"\x02\xac\x41")],
    "BigInt": [(None, b"\x00\x00\x00\x00"), (-129, b"\x00\x00\x00\x06\xff\x7f"), (10**30, None)],
    "BigDec": [(Decimal("-12.345"), None), (None, b"\x00\x00\x00\x00")],
    "Date": [(Date(1_704_164_645_006), I64.pack(1_704_164_645_006)), (None, I64.pack(LONG_MIN))],
    "SqlDate": [(SqlDate(-86_400_000), I64.pack(-86_400_000)), (None, I64.pack(LONG_MIN))],
    "SqlTime": [(SqlTime(3_723_004), I64.pack(3_723_004)), (None, I64.pack(LONG_MIN))],
    "SqlTimestamp": [(SqlTimestamp(1_704_164_645_123, 123_456_789),
                      I64.pack(1_704_164_645_123) + I32.pack(123_456_789)),
                     (SqlTimestamp(-1, 999_000_001), I64.pack(-1) + I32.pack(999_000_001)),
                     (None, I64.pack(LONG_MIN) + I32.pack(0))],
    "Instant": [(Instant(-3600, 1), I64.pack(-3600) + I32.pack(1)), (None, I64.pack(LONG_MIN) + I32.pack(INT_MIN))],
    "LocalDate": [(LocalDate(2024, 2, 29), b"\x00\x00\x07\xe8\x02\x1d"), (None, I32.pack(INT_MIN) + b"\x80\x00")],
    "LocalTime": [(LocalTime(23, 59, 58, 999_999_999), b"\x17\x3b\x3a" + I32.pack(999_999_999)),
                  (None, b"\x80\x80\x00" + I32.pack(INT_MIN))],
    "LocalDateTime": [(LocalDateTime(2024, 2, 29, 1, 2, 3, 4), b"\x00\x00\x07\xe8\x02\x1d\x01\x02\x03" + I32.pack(4)),
                      (None, I32.pack(INT_MIN) + b"\x80\x00\x80\x80\x00" + I32.pack(INT_MIN))],
    "Void": [(None, b"\x00")], "NullValue": [(None, b"")],
}


@pytest.mark.parametrize(("stem", "value", "data"),
                         [(s, v, d) for s, cases in PRIMITIVE_VALUES.items() for v, d in cases])
def test_primitive_roundtrip(stem: str, value: Any, data: bytes | None) -> None:
    snapshot = simple(stem)
    assert _roundtrip(snapshot, value, data) == value
    _reparse(snapshot)


@pytest.mark.parametrize(("stem", "value"), [
    ("Long", [1, -2]), ("Int", [3]), ("Short", []), ("Double", [0.25]), ("Float", [2.0]), ("Byte", b"\x01\xff"),
    ("Boolean", [True, False]), ("Char", "ab"),
])
def test_primitive_arrays(stem: str, value: Any) -> None:
    snapshot = SimpleSnapshot(f"{BASE}array.{stem}PrimitiveArraySerializer${stem}PrimitiveArraySerializerSnapshot")
    assert _roundtrip(snapshot, value) == value


@pytest.mark.parametrize(("stem", "python_value", "model"), [
    ("Instant", dt.datetime(1969, 12, 31, 23, 0, 0, 1, tzinfo=dt.timezone.utc), Instant(-3600, 1000)),
    ("SqlTimestamp", dt.datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=dt.timezone.utc),
     SqlTimestamp(1_704_164_645_123, 123_456_000)),
    ("Date", dt.datetime(2024, 1, 2, 3, 4, 5, 6000, tzinfo=dt.timezone.utc), Date(1_704_164_645_006)),
    ("LocalDate", dt.date(2024, 2, 29), LocalDate(2024, 2, 29)),
    ("LocalTime", dt.time(23, 59, 58, 999999), LocalTime(23, 59, 58, 999_999_000)),
    ("LocalDateTime", dt.datetime(2024, 2, 29, 1, 2, 3, 7), LocalDateTime(2024, 2, 29, 1, 2, 3, 7000)),
])
def test_time_encoders_take_python_values_exactly(stem: str, python_value: Any, model: Any) -> None:
    # Values written by code that still holds Python datetimes encode exactly like the model (and decode to it).
    snapshot = simple(stem)
    assert snapshot.encode(python_value) == snapshot.encode(model)
    assert snapshot.decode(snapshot.encode(python_value)) == model


def test_time_encoders_refuse_what_they_cannot_write_exactly() -> None:
    with pytest.raises(ValueError, match="naive"):
        simple("Instant").encode(dt.datetime(2024, 1, 1))
    with pytest.raises(ValueError, match="below the millisecond"):
        simple("Date").encode(dt.datetime(2024, 1, 1, 0, 0, 0, 1, tzinfo=dt.timezone.utc))
    with pytest.raises(TypeError, match="expected a Instant, got str"):
        simple("Instant").encode("2024-01-01T00:00:00Z")


def test_string_array_and_value_types() -> None:
    strings = SimpleSnapshot(f"{BASE}array.StringArraySerializer$StringArraySerializerSnapshot")
    assert _roundtrip(strings, ["a", None, "é"], b"\x00\x00\x00\x03\x02a\x00\x02\xe9\x01") == ["a", None, "é"]
    string_value = SimpleSnapshot(f"{BASE}StringValueSerializer$StringValueSerializerSnapshot")
    assert _roundtrip(string_value, "ab", b"\x02ab") == "ab"
    assert _roundtrip(SimpleSnapshot(f"{BASE}LongValueSerializer$LongValueSerializerSnapshot"), 7) == 7


def test_every_simple_type_is_registered() -> None:
    for class_name in SIMPLE_TYPES:
        data = Writer()
        data.utf(class_name)
        data.i32(3)
        assert isinstance(read_snapshot(Reader(data.getvalue())), SimpleSnapshot)


def test_legacy_simple_snapshot_keeps_serializer_class() -> None:
    writer = Writer()
    writer.utf(f"{BASE}LongSerializer$LongSerializerSnapshot")
    writer.i32(2)
    writer.utf(f"{BASE}LongSerializer")
    parsed = read_snapshot(Reader(writer.getvalue()))
    assert snapshot_bytes(parsed) == writer.getvalue()


# -- composites ------------------------------------------------------------------------------------------------------


def test_list_map_set_array() -> None:
    longs = ListSnapshot(LIST, [simple("Long")])
    assert _roundtrip(_reparse(longs), [1, 2], b"\x00\x00\x00\x02" + I64.pack(1) + I64.pack(2)) == [1, 2]
    strings_to_ints = MapSnapshot(MAP, [simple("String"), simple("Int")])
    value = {"a": 1, "b": None}
    assert _roundtrip(_reparse(strings_to_ints), value,
                      b"\x00\x00\x00\x02\x02a\x00\x00\x00\x00\x01\x02b\x01") == value
    assert strings_to_ints.type_name() == "Map<String, Integer>"
    sets = SetSnapshot(SetSnapshot.CLASS_NAMES[0], [simple("String")])
    assert _roundtrip(_reparse(sets), {"x"}, b"\x00\x00\x00\x01\x00\x02x") == {"x"}
    array = GenericArraySnapshot(GenericArraySnapshot.CLASS_NAMES[0], [simple("String")],
                                 component_class="java.lang.String")
    assert _roundtrip(_reparse(array), ["x", None], b"\x00\x00\x00\x02\x01\x02x\x00") == ["x", None]


def test_composite_snapshot_bytes() -> None:
    # ListSerializerSnapshot(Long) exactly as Flink writes it (checked against the sample job's 'recent' header).
    data = snapshot_bytes(ListSnapshot(LIST, [simple("Long")]))
    expected = Writer()
    expected.utf(LIST)
    expected.i32(3)
    for v in (911108, 1, 1333245, 1, 1):
        expected.i32(v)
    expected.utf(f"{BASE}LongSerializer$LongSerializerSnapshot")
    expected.i32(3)
    assert data == expected.getvalue()


def test_tuple_and_row() -> None:
    tuple2 = TupleSnapshot(TupleSnapshot.CLASS_NAMES[0], [simple("Long"), simple("String")])
    assert _reparse(tuple2).type_name() == "Tuple2<Long, String>"
    assert _roundtrip(tuple2, (3, "x"), I64.pack(3) + b"\x02x") == (3, "x")
    assert tuple2.hash_code((0, "")) == 0
    row = RowSnapshot(RowSnapshot.CLASS_NAMES[0], [simple("Int"), simple("String"), simple("Double")])
    assert _reparse(row).type_name() == "Row(INT, STRING, DOUBLE)"
    # mask: 2 kind bits + 3 null bits, MSB first: INSERT, label null -> 0b00010000
    assert _roundtrip(row, (4, None, 0.5), b"\x10" + I32.pack(4) + b"\x3f\xe0" + b"\x00" * 6) == (4, None, 0.5)
    deleted = _roundtrip(row, KindedRow((1, "a", 2.0), 3))
    assert isinstance(deleted, KindedRow) and deleted.kind == 3 and deleted == (1, "a", 2.0)
    legacy = RowSnapshot(RowSnapshot.CLASS_NAMES[0], [simple("Int")], supports_row_kind=False, outer_version=2)
    assert _roundtrip(_reparse(legacy), (None,), b"\x80") == (None,)


def test_nullable_timer_ttl_and_namespaces() -> None:
    nullable = NullableSnapshot(NullableSnapshot.CLASS_NAMES[0], [simple("Long")], null_padding=8)
    assert _roundtrip(_reparse(nullable), None, b"\x01" + b"\x00" * 8) is None
    assert _roundtrip(nullable, 5) == 5
    timer = TimerSnapshot(TimerSnapshot.CLASS_NAMES[0], [simple("String"), VoidNamespaceSnapshot()])
    assert _roundtrip(_reparse(timer), Timer(5, "k", None), b"\x80" + b"\x00" * 6 + b"\x05\x02k\x00") == Timer(
        5, "k", None)
    assert _roundtrip(timer, Timer(-5, "k", None)).timestamp == -5
    ttl = TtlSnapshot(TtlSnapshot.CLASS_NAMES[0], [simple("Long"), simple("String")])
    assert _roundtrip(_reparse(ttl), TtlValue("v", 99), I64.pack(99) + b"\x02v") == TtlValue("v", 99)
    window = TimeWindowSnapshot()
    assert _roundtrip(_reparse(window), TimeWindow(0, 10)) == TimeWindow(0, 10)


def test_ambiguous_composite_key_suffix() -> None:
    # String key with a variable-length namespace: both are followed by their length as varint-le.
    variable_ns = simple("String")
    layout = KeyLayout(2, simple("String").decoder(), variable_ns.decoder(), ambiguous=True)
    data = b"\x00\x05" + encode_sv("key") + b"\x04" + encode_sv("ns") + b"\x03" + b"userkey"
    key, namespace, end = layout.decoder()(data, 0)
    assert (key, namespace, data[end:]) == ("key", "ns", b"userkey")


# -- POJO ------------------------------------------------------------------------------------------------------------


def test_pojo_snapshot_and_record() -> None:
    pojo = PojoSnapshot.create("sample.Stats", [("total", simple("Long")), ("key", simple("String")),
                                                ("count", simple("Long"))])
    assert [f.name for f in pojo.fields] == ["count", "key", "total"]
    parsed = _reparse(pojo)
    assert parsed.type_name() == "POJO sample.Stats{count: Long, key: String, total: Long}"
    value = {"count": 3, "key": None, "total": 6}
    data = b"\x02" + b"\x00" + I64.pack(3) + b"\x01" + b"\x00" + I64.pack(6)
    assert _roundtrip(parsed, value, data) == value
    assert _roundtrip(parsed, None, b"\x01") is None


def test_pojo_field_order_is_java_compare_to() -> None:
    names = ["b", "B", "a", "Z", "é", "_"]
    assert sorted(names, key=java_string_sort_key) == ["B", "Z", "_", "a", "b", "é"]


def test_pojo_with_unknown_field_snapshot_stays_describable() -> None:
    pojo = PojoSnapshot.create("x.P", [("a", simple("Long"))])
    known = f"{BASE}LongSerializer$LongSerializerSnapshot".encode()
    custom = b"com.example.MySerializer$MySnapshot".ljust(len(known), b"X")  # same length: frames stay valid
    data = snapshot_bytes(pojo).replace(known, custom)
    parsed = read_snapshot(Reader(data))
    assert isinstance(parsed, PojoSnapshot) and isinstance(parsed.fields[0].snapshot, UnknownSnapshot)
    assert snapshot_bytes(parsed) == data
    with pytest.raises(UnknownSerializerSnapshot):
        parsed.decoder()


def test_unknown_snapshot_class_is_named() -> None:
    writer = Writer()
    writer.i32(2)
    writer.utf("com.example.CustomSnapshot")
    writer.i32(1)
    with pytest.raises(UnknownSerializerSnapshot, match=r"com\.example\.CustomSnapshot") as raised:
        read_snapshot(Reader(writer.getvalue(), path="f"), top_level=True)
    assert raised.value.class_name == "com.example.CustomSnapshot" and raised.value.offset == 4


# -- Enum, Kryo, Avro ------------------------------------------------------------------------------------------------


def test_enum() -> None:
    colors = EnumSnapshot(EnumSnapshot.CLASS_NAMES[0], 3, "x.Color", ["RED", "GREEN"])
    assert _roundtrip(_reparse(colors), "GREEN", b"\x00\x00\x00\x01") == "GREEN"


def test_kryo_snapshot_passes_through() -> None:
    writer = Writer()
    writer.utf(KryoSnapshot.CLASS_NAMES[0])
    writer.i32(2)
    writer.utf("x.Thing")
    for entries in ([("x.A", b"\x00\x05x.A..", b"\x00\x05x.A..\x00\x00\x00\x00")], [], []):
        writer.i64(0x000004F2C69A3D70)
        writer.i32(len(entries))
        for name, key, value in entries:
            writer.utf(name)
            for frame in (key, value):
                writer.bool(True)
                writer.i32(len(frame))
                writer.bytes(frame)
    parsed = read_snapshot(Reader(writer.getvalue()))
    assert isinstance(parsed, KryoSnapshot) and parsed.type_class == "x.Thing"
    assert snapshot_bytes(parsed) == writer.getvalue()
    assert parsed.type_name() == "Kryo<x.Thing>"


AVRO_SCHEMA = {
    "type": "record", "name": "Event", "namespace": "x", "fields": [
        {"name": "id", "type": "long"}, {"name": "name", "type": ["null", "string"]},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "attrs", "type": {"type": "map", "values": "int"}},
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}},
        {"name": "next", "type": ["null", "Event"]},
    ]}


def test_avro_snapshot_and_flink_encoding() -> None:
    snapshot = AvroSnapshot(AvroSnapshot.CLASS_NAMES[0], 3, "org.apache.avro.generic.GenericRecord",
                            json.dumps(AVRO_SCHEMA, separators=(",", ":")))
    parsed = _reparse(snapshot, top_level=False)
    value = {"id": 7, "name": "n", "tags": ["t"], "attrs": {"k": 1}, "kind": "B",
             "next": {"id": 8, "name": None, "tags": [], "attrs": {}, "kind": "A", "next": None}}
    inner = (I64.pack(8) + I32.pack(0) + b"\x00" + b"\x00" + I32.pack(0) + I32.pack(0))
    data = (I64.pack(7) + I32.pack(1) + I32.pack(1) + b"n" + b"\x01" + I32.pack(1) + b"t" + b"\x00"
            + b"\x01" + I32.pack(1) + b"k" + I32.pack(1) + b"\x00" + I32.pack(1) + I32.pack(1) + inner)
    assert _roundtrip(parsed, value, data) == value
    assert parsed.type_name() == "Avro x.Event"
