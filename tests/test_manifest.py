"""Schema manifests: parsing, the type notation both ways (byte-exact snapshots), and validation errors that name
the file, the path inside it and what is wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from flinkstate.manifest import ManifestError, load_manifest, parse_manifest
from flinkstate.serializers.pojo import PojoSnapshot
from flinkstate.serializers.primitives import simple
from flinkstate.serializers.registry import snapshot_bytes
from flinkstate.serializers.row import RowSnapshot
from flinkstate.serializers.tuple import TupleSnapshot
from flinkstate.snapshotnotation import to_notation
from flinkstate.typenotation import TypeNotationError, simple_type_names, to_snapshot

V1 = """
manifest_version: 1
job: keyed-stats
operators:
  sequence-source: {}
  stats:
    max_parallelism: 128
    key: String
    dropped_states: [old]
    states:
      stats:
        kind: VALUE
        value: {pojo: sample.Stats, fields: {key: String, count: Long, total: Long}}
      count: {kind: VALUE, value: Long, migration: {value: {convert: to-string}}}
      recent: {kind: LIST, value: "Tuple2<Long, String>"}
      buckets: {kind: MAP, user_key: String, value: {row: {id: Integer, label: String, ratio: Double}}}
      _timer_state/processing_user-timers: {kind: TIMERS}
      moved: {kind: VALUE, value: Long, renamed_from: total}
  renamed-op:
    renamed_from: old-op
    key: Long
    states: {}
"""


def test_parse_a_manifest():
    manifest = parse_manifest(V1, "v1.yaml")
    assert manifest.job == "keyed-stats" and list(manifest.operators) == ["sequence-source", "stats", "renamed-op"]
    stats = manifest.operators["stats"]
    assert stats.uid == "stats" and stats.max_parallelism == 128 and stats.dropped_states == ["old"]
    assert manifest.find(stats.operator_id) is stats
    count = stats.states["count"]
    assert count.migration == {"value": {"convert": "to-string"}}  # kept as written, for the migration engine
    assert stats.states["moved"].renamed_from == "total"
    assert manifest.operators["renamed-op"].renamed_from == "old-op"
    # The state serializers Flink writes into the state meta info: List/Map wrapped, timers from key+namespace.
    assert stats.states["recent"].state_serializer().type_name() == "List<Tuple2<Long, String>>"
    assert stats.states["buckets"].state_serializer().type_name() == "Map<String, Row(INT, STRING, DOUBLE)>"
    timers = stats.states["_timer_state/processing_user-timers"]
    assert timers.value is None and timers.state_serializer().type_name() == "Timer<String, VoidNamespace>"


def test_dump_and_parse_again_is_the_same_manifest():
    manifest = parse_manifest(V1, "v1.yaml")
    again = parse_manifest(manifest.dump(), "again.yaml")
    assert again.to_dict() == manifest.to_dict()


def test_types_map_to_the_snapshots_flink_writes():
    pojo = to_snapshot({"pojo": "sample.Stats", "fields": {"total": "Long", "key": "String", "count": "Long",
                                                           "Zeta": "Integer"}})
    assert isinstance(pojo, PojoSnapshot)
    assert [f.name for f in pojo.fields] == ["Zeta", "count", "key", "total"]  # String.compareTo: capitals first
    assert all(f.declaring_class == "sample.Stats" for f in pojo.fields)
    row = to_snapshot({"row": {"id": "Integer", "label": "String"}})
    assert isinstance(row, RowSnapshot) and row.supports_row_kind and row.outer_version == 4
    assert row.field_names == ["id", "label"]
    tup = to_snapshot("Tuple3<Long, String, List<Integer>>")
    assert isinstance(tup, TupleSnapshot) and tup.tuple_class == "org.apache.flink.api.java.tuple.Tuple3"
    assert snapshot_bytes(to_snapshot("Long")) == snapshot_bytes(simple("Long"))
    assert to_snapshot("int").type_name() == "Integer"  # aliases of Java's primitive names


@pytest.mark.parametrize("notation", [
    "Long", "String", "byte[]", "long[]", "String[]", "BigDecimal", "LocalDateTime", "java.sql.Timestamp",
    "Long[]", "List<Long>", "Map<String, List<Double>>", "Set<String>", "Tuple2<Long, String>", "Nullable<Long>",
    "TTL<String>", "VoidNamespace", "TimeWindow", "Timer<String, TimeWindow>",
    {"pojo": "a.B", "fields": {"x": "Long", "y": {"row": {"a": "Integer"}}}},
    {"pojo": "a.B", "fields": {"x": "Long"}, "declaring_classes": {"x": "a.Base"},
     "subclasses": {"a.C": {"pojo": "a.C", "fields": {"z": "Long"}}}},
    {"row": {"f0": "Integer", "f1": {"list": {"pojo": "a.B", "fields": {"x": "Long"}}}}, "row_kind": False},
    {"enum": "a.Color", "constants": ["RED", "GREEN"]},
    {"avro": "org.apache.avro.generic.GenericRecord",
     "schema": {"type": "record", "name": "U", "fields": [{"name": "id", "type": "long"}]}},
    {"kryo": "a.Opaque", "registrations": {"a.Reg": "AAAA"}},
    {"map": {"key": "String", "value": {"enum": "a.E", "constants": ["A"]}}},
    {"tuple": ["Long", {"enum": "a.E", "constants": ["A"]}]},
    {"nullable": "Long", "padding": 8},
    {"array": {"pojo": "a.B", "fields": {"x": "Long"}}, "component_class": "a.B"},
    {"ttl": {"pojo": "a.B", "fields": {"x": "Long"}}},
    {"set": {"enum": "a.E", "constants": ["A"]}},
])
def test_notation_round_trip(notation):
    snapshot = to_snapshot(notation)
    assert to_notation(snapshot) == notation
    assert snapshot_bytes(to_snapshot(to_notation(snapshot))) == snapshot_bytes(snapshot)


def test_every_simple_type_has_a_notation():
    for name in simple_type_names():
        assert to_notation(to_snapshot(name)) == name


@pytest.mark.parametrize(("notation", "message"), [
    ("Lnog", "unknown type 'Lnog'"),
    ("List<Lnog>", "unknown type 'Lnog' in 'List<Lnog>'"),
    ("List<Long", "expected ',' or '>' in 'List<Long'"),
    ("Map<String>", "Map needs 2 type argument(s), got 1"),
    ("Tuple2<Long>", "Tuple2 needs 2 type arguments, got 1"),
    ("Long<String>", "Long takes no type arguments"),
    ("Foo[]", "unknown type 'Foo'"),
    (42, "a type must be a string or a mapping, not int 42"),
    ({"pojo": "a.B"}, "fields: pojo needs 'fields'"),
    ({"pojo": "a.B", "fields": {"x": "Lnog"}}, "fields.x: unknown type 'Lnog'"),
    ({"row": {"a": "Integer"}, "enum": "x"}, "needs exactly one of"),
    ({"enum": "a.E", "constants": ["A", "A"]}, "constants: constants must be distinct names"),
    ({"avro": "X", "schema": {"type": "nonsense"}}, "schema: invalid Avro schema"),
    ({"row": {"a": "Integer"}, "colour": 1}, "unknown key(s) colour in a row type"),
])
def test_notation_errors(notation, message):
    with pytest.raises(TypeNotationError) as error:
        to_snapshot(notation)
    assert message in str(error.value)


def _error(text: str) -> str:
    with pytest.raises(ManifestError) as error:
        parse_manifest(text, "manifest.yaml")
    message = str(error.value)
    assert "\n" not in message
    return message


HEADER = "manifest_version: 1\noperators:\n  stats:\n    key: String\n    states:\n"


@pytest.mark.parametrize(("states", "expected"), [
    ("      count: {kind: VALUE, value: Lnog}",
     "manifest.yaml: operators.stats.states.count.value: unknown type 'Lnog'"),
    ("      count: {kind: VALUE, value: {pojo: a.B, fields: {n: Lnog}}}",
     "manifest.yaml: operators.stats.states.count.value.fields.n: unknown type 'Lnog'"),
    ("      count: {kind: VALUES, value: Long}",
     "manifest.yaml: operators.stats.states.count.kind: expected one of VALUE, LIST, MAP, REDUCING, AGGREGATING, "
     "TIMERS, got 'VALUES'"),
    ("      count: {kind: VALUE}", "manifest.yaml: operators.stats.states.count.value: missing type"),
    ("      m: {kind: MAP, value: Long}", "manifest.yaml: operators.stats.states.m.user_key: missing type"),
    ("      c: {kind: VALUE, value: Long, user_key: Long}",
     "manifest.yaml: operators.stats.states.c.user_key: only MAP state has a user key, not VALUE"),
    ("      c: {kind: VALUE, value: Long, colour: red}",
     "manifest.yaml: operators.stats.states.c.colour: unknown key"),
    ("      c: {kind: VALUE, value: Long, key: Long}",
     "manifest.yaml: operators.stats.states.c.key: Long differs from the operator's key type String"),
    ("      c: {kind: TIMERS, value: Long}",
     "manifest.yaml: operators.stats.states.c: TIMERS state has no value or user_key"),
    ("      c: {kind: VALUE, value: Long, migration: [1]}",
     "manifest.yaml: operators.stats.states.c.migration: expected a mapping, got [1]"),
    ("      c: [1]", "manifest.yaml: operators.stats.states.c: expected a mapping, got [1]"),
])
def test_state_validation_errors_name_file_path_and_problem(states, expected):
    assert _error(HEADER + states + "\n").startswith(expected)


@pytest.mark.parametrize(("text", "expected"), [
    ("operators: {}", "manifest.yaml: manifest_version: missing"),
    ("manifest_version: 2\noperators: {}", "manifest.yaml: manifest_version: unsupported version 2"),
    ("manifest_version: 1\noperators: [a]", "manifest.yaml: operators: expected a mapping, got ['a']"),
    ("manifest_version: 1\nextra: 1", "manifest.yaml: extra: unknown key"),
    ("manifest_version: 1\noperators:\n  a:\n    states:\n      s: {kind: VALUE, value: Long}",
     "manifest.yaml: operators.a.states.s.key: missing"),
    ("manifest_version: 1\noperators:\n  a: {id: xyz}", "manifest.yaml: operators.a.id: expected 32 hex digits"),
    ("manifest_version: 1\noperators:\n  a: {max_parallelism: 0}",
     "manifest.yaml: operators.a.max_parallelism: expected an integer from 1 to 32768, got 0"),
    ("manifest_version: 1\noperators:\n  a: {dropped_states: x}",
     "manifest.yaml: operators.a.dropped_states: expected a list of state names"),
    ("manifest_version: 1\noperators:\n  a: {}\n  b: {id: " + "e" * 32 + "}\n  c: {id: " + "E" * 32 + "}",
     "manifest.yaml: operators.c: same operator as operators.b"),
    ("manifest_version: 1\noperators:\n  b: {id: " + "1" * 32 + "}",
     "manifest.yaml: operators.b.id: quote the operator id"),
    ("manifest_version: 1\noperators: {a: [}", "manifest.yaml: line 2, column 17: invalid YAML"),
])
def test_manifest_validation_errors(text, expected):
    assert _error(text).startswith(expected)


def test_load_manifest_errors_name_the_file(tmp_path: Path):
    with pytest.raises(ManifestError, match=r"missing\.yaml: cannot read"):
        load_manifest(tmp_path / "missing.yaml")
    path = tmp_path / "v.yaml"
    path.write_text(V1)
    assert load_manifest(path).path == str(path)


def test_operator_by_id_and_uid():
    manifest = parse_manifest("manifest_version: 1\noperators:\n  " + "ab" * 16 + ": {}\n  src: {id: " + "cd" * 16
                              + "}\n", "m.yaml")
    by_hex, src = manifest.operators.values()
    assert by_hex.operator_id == "ab" * 16 and by_hex.uid is None
    assert src.operator_id == "cd" * 16 and src.uid is None
    assert parse_manifest(manifest.dump(), "again.yaml").to_dict() == manifest.to_dict()
