"""Unit level (no Flink): what Flink leaves in an added POJO field, Kryo values passed through whole, POJO subclass
values written back as Flink writes them, operator names that are ids, and the verifier's notion of equal values."""

from __future__ import annotations

from decimal import Decimal

import pytest

from flinkstate.binary import operator_id_from_uid
from flinkstate.format_errors import SavepointFormatError, UnsupportedFormat
from flinkstate.identity import OperatorRef
from flinkstate.migration.conversions import MigrationPlanError
from flinkstate.migration.spec import parse_migration
from flinkstate.migration.transforms import build_transform
from flinkstate.migration.verify import canonical
from flinkstate.serializers.kryo import KryoSnapshot, OpaqueValue
from flinkstate.serializers.pojo import OptionalMapEntry, PojoSnapshot
from flinkstate.serializers.primitives import simple
from flinkstate.snapshotnotation import to_notation
from flinkstate.typenotation import to_snapshot


def _pojo(fields: dict[str, str]) -> PojoSnapshot:
    snapshot = to_snapshot({"pojo": "x.Event", "fields": fields})
    assert isinstance(snapshot, PojoSnapshot)
    return snapshot


OLD = {"id": "Long", "name": "String"}


@pytest.mark.parametrize(("notation", "expected"), [("long", 0), ("int", 0), ("double", 0.0), ("boolean", False),
                                                     ("char", "\x00"), ("String", None)])
def test_an_added_field_gets_its_java_default(notation: str, expected: object):
    transform = build_transform(_pojo(OLD), _pojo({**OLD, "added": notation}))
    assert transform is not None
    assert transform({"id": 7, "name": "a"}) == {"added": expected, "id": 7, "name": "a"}


def test_an_added_boxed_capable_field_must_say_primitive_or_not():
    with pytest.raises(MigrationPlanError, match=r"'long' if the field is primitive or 'java\.lang\.Long' if"):
        build_transform(_pojo(OLD), _pojo({**OLD, "added": "Long"}))
    # A declared value settles it, null included.
    spec = parse_migration({"fields": {"added": {"default": None}}})
    transform = build_transform(_pojo(OLD), _pojo({**OLD, "added": "Long"}), rules=spec.fields)
    assert transform is not None and transform({"id": 1, "name": "b"})["added"] is None


def test_primitive_fields_round_trip_through_the_notation():
    snapshot = _pojo({**OLD, "added": "long"})
    assert to_notation(snapshot)["fields"]["added"] == "long"  # type: ignore[index]
    # Primitive or not, the serializer (and so the snapshot's bytes) is the same.
    from flinkstate.serializers.registry import snapshot_bytes

    assert snapshot_bytes(snapshot) == snapshot_bytes(_pojo({**OLD, "added": "Long"}))


def _kryo(type_class: str = "x.Opaque") -> KryoSnapshot:
    return KryoSnapshot(KryoSnapshot.CLASS_NAMES[0], 2, type_class, ([], [], []))


def test_kryo_values_pass_through_whole_and_nowhere_else():
    kryo = _kryo()
    raw = bytes([1, 0x82, 7, 0, 0xFF, 0x2C])  # arbitrary Kryo bytes, including a list delimiter
    value, end = kryo.tail_decoder()(raw, 0)
    assert value == OpaqueValue("Kryo<x.Opaque>", raw) and end == len(raw)
    assert kryo.encode(value) == raw
    with pytest.raises(UnsupportedFormat, match="carry no length"):  # delimited only where it decodes
        kryo.decoder()(raw, 0)
    with pytest.raises(UnsupportedFormat, match="read from a savepoint"):
        kryo.encode({"a": 1})


def test_a_pojo_with_kryo_fields_is_delimited_only_by_records_that_decode():
    pojo = PojoSnapshot.create("x.Stamped", [("id", simple("Long")), ("when", _kryo("java.time.LocalDateTime"))])
    assert [f.name for f in pojo.fields] == ["id", "when"] and pojo.needs_end
    tail = b"\x01\x02\x03"
    record = bytes([2, 0]) + (5).to_bytes(8, "big") + bytes([0]) + tail
    value, end = pojo.tail_decoder()(record, 0)  # a whole stored value: the opaque tail passes through
    assert value == {"id": 5, "when": OpaqueValue("Kryo<java.time.LocalDateTime>", tail)} and end == len(record)
    assert pojo.encode(value) == record
    with pytest.raises(SavepointFormatError, match="truncated"):  # where its end is needed, it must decode
        pojo.decoder()(record, 0)
    # A user class's record in the middle cannot be delimited: refused per value, naming the class.
    followed = PojoSnapshot.create("x.Stamped", [("a", _kryo()), ("b", simple("Long"))])
    opaque = bytes([1, 1]) + b"x.Opaqu" + bytes([ord("e") | 0x80])  # by name: Kryo's NAME, name id, ASCII
    record = bytes([2, 0]) + opaque + bytes([0]) + (5).to_bytes(8, "big")
    for decoder in (followed.tail_decoder(), followed.decoder()):
        with pytest.raises(UnsupportedFormat, match=r"holds x\.Opaque: no built-in serializer"):
            decoder(record, 0)


def test_pojo_subclass_values_are_written_back_as_flink_writes_them():
    circle = PojoSnapshot.create("x.Circle", [("radius", simple("Double")), ("name", simple("String"))])
    square = PojoSnapshot.create("x.Square", [("side", simple("Long")), ("name", simple("String"))])
    base = PojoSnapshot(PojoSnapshot.CLASS_NAMES[0], 2, "x.Shape",
                        PojoSnapshot.create("x.Shape", [("name", simple("String"))]).fields,
                        [OptionalMapEntry("x.Square", (), square)], [OptionalMapEntry("x.Circle", (), circle)])
    for value in ({"@class": "x.Circle", "name": "c", "radius": 1.5}, {"@class": "x.Square", "name": "s", "side": 2},
                  {"name": "plain"}, None):
        data = base.encode(value)
        assert base.decode(data) == value
    assert base.encode({"@class": "x.Square", "name": "s", "side": 2})[0] == 8  # tagged (registered)
    assert base.encode({"@class": "x.Circle", "name": "c", "radius": 1.0})[0] == 4  # by name
    notation = to_notation(base)
    assert set(notation["subclasses"]) == {"x.Square"}  # type: ignore[index]
    assert set(notation["nonregistered_subclasses"]) == {"x.Circle"}  # type: ignore[index]
    from flinkstate.serializers.registry import snapshot_bytes

    assert snapshot_bytes(to_snapshot(notation)) == snapshot_bytes(base)


def test_operator_names_that_are_ids_are_never_hashed():
    hex_id = "a" * 32
    assert OperatorRef.parse(hex_id) == OperatorRef(hex_id, None)
    assert OperatorRef.parse(hex_id.upper()).operator_id == hex_id
    assert OperatorRef.parse("stats") == OperatorRef(operator_id_from_uid("stats"), "stats")


def test_verifier_equality_is_javas():
    assert canonical(float("nan")) == canonical(float("nan"))
    assert canonical(0.0) != canonical(-0.0)
    assert canonical(Decimal("1.0")) != canonical(Decimal("1.00"))
    assert canonical({"a": 1, "b": [1, 2]}) == canonical({"b": [1, 2], "a": 1})
    assert canonical(1) != canonical(True) and canonical(1) != canonical(1.0)


def test_a_boxed_field_says_so_with_its_java_class():
    new = _pojo({**OLD, "boxed": "java.lang.Long", "primitive": "long"})
    transform = build_transform(_pojo(OLD), new)
    assert transform is not None
    assert transform({"id": 1, "name": "x"}) == {"boxed": None, "id": 1, "name": "x", "primitive": 0}
    assert to_notation(new)["fields"] == {"boxed": "java.lang.Long", "id": "Long", "name": "String",  # type: ignore[index]
                                          "primitive": "long"}


def test_to_string_is_built_in_only_where_javas_text_is_reproduced_exactly():
    from flinkstate.migration.conversions import conversion

    assert conversion("to-string", simple("Double"), simple("String"))(1e7) == "1.0E7"
    assert conversion("to-string", simple("BigDec"), simple("String"))(Decimal("1E+3")) == "1E+3"
    for old in ("Instant", "LocalDateTime", "Date"):
        with pytest.raises(MigrationPlanError, match="declare a function"):
            conversion("to-string", simple(old), simple("String"))
