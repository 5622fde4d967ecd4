"""Each serializer family's compatibility rule (``new.resolve_compatibility(old)``), checked against what Flink's
own snapshot classes answer, plus the composite rule (the worst part wins) and the finding paths."""

from __future__ import annotations

import json
from typing import Any

import pytest

from flinkstate.compatibility import Compatibility, Verdict
from flinkstate.serializers.avro import AvroSnapshot
from flinkstate.serializers.kryo import KryoSnapshot
from flinkstate.serializers.pojo import OptionalMapEntry, PojoField, PojoSnapshot
from flinkstate.typenotation import to_snapshot

AS_IS = Verdict.COMPATIBLE_AS_IS
RECONFIGURED = Verdict.COMPATIBLE_WITH_RECONFIGURED_SERIALIZER
AFTER_MIGRATION = Verdict.COMPATIBLE_AFTER_MIGRATION
INCOMPATIBLE = Verdict.INCOMPATIBLE


def resolve(old: Any, new: Any, path: str = "value") -> Compatibility:
    return to_snapshot(new).resolve_compatibility(to_snapshot(old), path)


def codes(result: Compatibility) -> list[tuple[str, str]]:
    return [(f.code, f.path) for f in result.findings]


POJO = {"pojo": "sample.Stats", "fields": {"key": "String", "count": "Long", "total": "Long"}}
COLOR = {"enum": "sample.Color", "constants": ["RED", "GREEN", "BLUE"]}


def pojo(**fields: Any) -> dict[str, Any]:
    return {"pojo": "sample.Stats", "fields": fields}


@pytest.mark.parametrize(("old", "new", "verdict", "found"), [
    ("Long", "Long", AS_IS, []),
    ("String", "String", AS_IS, []),
    ("Integer", "Long", INCOMPATIBLE, [("TYPE_CHANGED", "value")]),  # no widening in Flink
    ("long[]", "Long[]", INCOMPATIBLE, [("TYPE_CHANGED", "value")]),
    ("VoidNamespace", "TimeWindow", INCOMPATIBLE, [("TYPE_CHANGED", "value")]),
], ids=["same", "same-string", "int-to-long", "primitive-to-boxed-array", "namespace"])
def test_simple_types_are_as_is_only_when_the_serializer_is_the_same(old, new, verdict, found):
    result = resolve(old, new)
    assert result.verdict is verdict and codes(result) == found


def test_pojo_rules():
    assert resolve(POJO, POJO).verdict is AS_IS
    added = resolve(POJO, pojo(key="String", count="Long", total="Long", label="String"))
    assert added.verdict is AFTER_MIGRATION and codes(added) == [("POJO_FIELD_ADDED", "value.label")]
    removed = resolve(POJO, pojo(key="String", count="Long"))
    assert removed.verdict is AFTER_MIGRATION and codes(removed) == [("POJO_FIELD_REMOVED", "value.total")]
    changed = resolve(POJO, pojo(key="String", count="String", total="Long", label="String"))
    assert changed.verdict is INCOMPATIBLE
    assert ("POJO_FIELD_TYPE_CHANGED", "value.count") in codes(changed)
    finding = next(f for f in changed.findings if f.code == "POJO_FIELD_TYPE_CHANGED")
    assert (finding.old_type, finding.new_type) == ("Long", "String")
    renamed = resolve(POJO, {**POJO, "pojo": "sample.Statistics"})
    assert renamed.verdict is INCOMPATIBLE and codes(renamed) == [("POJO_CLASS_CHANGED", "value")]


def test_pojo_nested_results_take_the_worst_part():
    old = pojo(key="String", color=COLOR)
    appended = pojo(key="String", color={**COLOR, "constants": ["RED", "GREEN", "BLUE", "PINK"]})
    result = resolve(old, appended)
    assert result.verdict is RECONFIGURED and codes(result) == [("ENUM_CONSTANT_ADDED", "value.color")]
    both = pojo(key="String", color={**COLOR, "constants": ["RED", "GREEN", "BLUE", "PINK"]}, extra="Long")
    assert resolve(old, both).verdict is AFTER_MIGRATION


def test_pojo_field_order_flink_does_not_check_is_flagged_as_a_silent_misread():
    canonical = to_snapshot(POJO)
    assert [f.name for f in canonical.fields] == ["count", "key", "total"]  # Java String order
    scrambled = PojoSnapshot(PojoSnapshot.CLASS_NAMES[0], 2, "sample.Stats", list(reversed(canonical.fields)))
    result = canonical.resolve_compatibility(scrambled, "value")
    assert result.verdict is AS_IS  # what Flink answers
    assert codes(result) == [("POJO_FIELD_ORDER_NOT_CANONICAL", "value")]
    assert result.findings[0].silent_misread and result.effective_verdict is INCOMPATIBLE


def test_pojo_registered_subclasses():
    base = to_snapshot(POJO)

    def with_subclasses(*names: str) -> PojoSnapshot:
        entries = [OptionalMapEntry(n, (), to_snapshot({"pojo": n, "fields": {"x": "Long"}})) for n in names]
        return PojoSnapshot(base.class_name, 2, base.pojo_class, base.fields, entries)

    reordered = with_subclasses("a.B", "a.A").resolve_compatibility(with_subclasses("a.A", "a.B"), "")
    assert reordered.verdict is RECONFIGURED
    assert codes(reordered) == [("POJO_SUBCLASS_REGISTRATION_CHANGED", "")]
    gone = with_subclasses("a.A").resolve_compatibility(with_subclasses("a.A", "a.B"), "")
    assert gone.verdict is INCOMPATIBLE and codes(gone) == [("POJO_SUBCLASS_REMOVED", "")]
    appended = with_subclasses("a.A", "a.B").resolve_compatibility(with_subclasses("a.A"), "")
    assert appended.verdict is AS_IS


def test_pojo_field_absent_from_the_old_snapshot_counts_as_removed():
    old = to_snapshot(POJO)
    old.fields[0] = PojoField(old.fields[0].name, None, None)  # a field Flink could no longer resolve
    assert to_snapshot(POJO).resolve_compatibility(old, "").verdict is AFTER_MIGRATION


ROW = {"row": {"id": "Integer", "label": "String", "note": "String"}}


def test_row_rules():
    assert resolve(ROW, ROW).verdict is AS_IS
    added = resolve(ROW, {"row": {"id": "Integer", "label": "String", "note": "String", "weight": "Double"}})
    assert added.verdict is INCOMPATIBLE and codes(added) == [("ROW_FIELD_ADDED", "value")]
    assert "weight" in added.findings[0].message
    removed = resolve(ROW, {"row": {"id": "Integer", "label": "String"}})
    assert removed.verdict is INCOMPATIBLE and codes(removed) == [("ROW_FIELD_REMOVED", "value")]
    changed = resolve(ROW, {"row": {"id": "Long", "label": "String", "note": "String"}})
    assert changed.verdict is INCOMPATIBLE and codes(changed) == [("ROW_FIELD_TYPE_CHANGED", "value.id")]
    no_kind = resolve(ROW, {**ROW, "row_kind": False})
    assert no_kind.verdict is AFTER_MIGRATION and codes(no_kind) == [("ROW_KIND_FLAG_CHANGED", "value")]


def test_row_fields_swapped_by_name_are_a_silent_misread():
    swapped = resolve(ROW, {"row": {"id": "Integer", "note": "String", "label": "String"}})
    assert swapped.verdict is AS_IS  # Flink compares by position
    assert codes(swapped) == [("ROW_FIELDS_REORDERED", "value")]
    assert swapped.findings[0].silent_misread and swapped.effective_verdict is INCOMPATIBLE
    renamed = resolve(ROW, {"row": {"id": "Integer", "title": "String", "note": "String"}})
    assert renamed.verdict is AS_IS and codes(renamed) == [("ROW_FIELD_RENAMED", "value")]
    assert not renamed.findings[0].silent_misread
    # Without names on the old side (a savepoint alone) nothing can be said about names.
    anonymous = to_snapshot(ROW)
    anonymous.field_names = None
    assert codes(to_snapshot(ROW).resolve_compatibility(anonymous, "value")) == []


def test_tuple_list_map_set_nullable_rules():
    assert resolve("Tuple2<Long, String>", "Tuple2<Long, String>").verdict is AS_IS
    arity = resolve("Tuple2<Long, String>", "Tuple3<Long, String, Integer>")
    assert arity.verdict is INCOMPATIBLE and codes(arity) == [("TUPLE_ARITY_CHANGED", "value")]
    field = resolve("Tuple2<Long, String>", "Tuple2<Long, Integer>")
    assert codes(field) == [("TUPLE_FIELD_TYPE_CHANGED", "value.f1")]
    element = resolve("List<Long>", "List<String>")
    assert element.verdict is INCOMPATIBLE and codes(element) == [("TYPE_CHANGED", "value.element")]
    nested = resolve({"map": {"key": "String", "value": POJO}},
                     {"map": {"key": "String", "value": pojo(key="String", count="Long")}})
    assert nested.verdict is AFTER_MIGRATION and codes(nested) == [("POJO_FIELD_REMOVED", "value.value.total")]
    assert resolve("Set<String>", "List<String>").verdict is INCOMPATIBLE
    padding = resolve({"nullable": "Long", "padding": 8}, "Nullable<Long>")
    assert padding.verdict is AFTER_MIGRATION and codes(padding) == [("NULLABLE_PADDING_CHANGED", "value")]
    assert codes(resolve("Nullable<Long>", "Nullable<Integer>")) == [("TYPE_CHANGED", "value")]
    array = resolve({"array": POJO, "component_class": "sample.Stats"},
                    {"array": POJO, "component_class": "sample.Other"})
    assert codes(array) == [("ARRAY_COMPONENT_CLASS_CHANGED", "value")]


@pytest.mark.parametrize(("new", "verdict", "code"), [
    (["RED", "GREEN", "BLUE"], AS_IS, None),
    (["RED", "GREEN", "BLUE", "PINK"], RECONFIGURED, "ENUM_CONSTANT_ADDED"),
    (["BLUE", "RED", "GREEN"], RECONFIGURED, "ENUM_CONSTANTS_REORDERED"),
    (["RED", "GREEN"], INCOMPATIBLE, "ENUM_CONSTANT_REMOVED"),
])
def test_enum_rules(new, verdict, code):
    result = resolve(COLOR, {**COLOR, "constants": new})
    assert result.verdict is verdict and [f.code for f in result.findings] == ([code] if code else [])


def test_enum_class_change_is_incompatible():
    assert codes(resolve(COLOR, {**COLOR, "enum": "sample.Colour"})) == [("ENUM_CLASS_CHANGED", "value")]


def _kryo(type_class: str, *registrations: str) -> KryoSnapshot:
    entries = [OptionalMapEntry(n, n.encode(), b"\x00") for n in registrations]
    return KryoSnapshot(KryoSnapshot.CLASS_NAMES[0], 2, type_class, (entries, [], []))


def test_kryo_rules():
    assert _kryo("a.X", "a.A").resolve_compatibility(_kryo("a.X", "a.A"), "").verdict is AS_IS
    assert _kryo("a.X", "a.A", "a.B").resolve_compatibility(_kryo("a.X", "a.A"), "").verdict is AS_IS
    reordered = _kryo("a.X", "a.B", "a.A").resolve_compatibility(_kryo("a.X", "a.A", "a.B"), "")
    assert reordered.verdict is RECONFIGURED and codes(reordered) == [("KRYO_REGISTRATIONS_CHANGED", "")]
    assert codes(_kryo("a.Y").resolve_compatibility(_kryo("a.X"), "")) == [("KRYO_CLASS_CHANGED", "")]
    absent = _kryo("a.X", "a.A")
    absent.registrations[0].value = None
    assert codes(_kryo("a.X", "a.A").resolve_compatibility(absent, "")) == [("KRYO_REGISTRATION_ABSENT", "")]


def _avro(fields: list[dict[str, Any]], name: str = "User") -> AvroSnapshot:
    schema = {"type": "record", "name": name, "namespace": "ex", "fields": fields}
    return AvroSnapshot(AvroSnapshot.CLASS_NAMES[0], 3, "org.apache.avro.generic.GenericRecord", json.dumps(schema))


@pytest.mark.parametrize(("old", "new", "verdict"), [
    ([{"name": "id", "type": "long"}], [{"name": "id", "type": "long"}], AS_IS),
    ([{"name": "id", "type": "long"}],
     [{"name": "id", "type": "long"}, {"name": "tag", "type": ["null", "string"], "default": None}],
     AFTER_MIGRATION),
    ([{"name": "id", "type": "long"}], [{"name": "id", "type": "long"}, {"name": "tag", "type": "string"}],
     INCOMPATIBLE),  # a new field without default cannot be read from old data
    ([{"name": "id", "type": "int"}], [{"name": "id", "type": "long"}], AFTER_MIGRATION),  # promotion
    ([{"name": "id", "type": "long"}], [{"name": "id", "type": "int"}], INCOMPATIBLE),
    ([{"name": "id", "type": "long"}, {"name": "x", "type": "string"}], [{"name": "id", "type": "long"}],
     AFTER_MIGRATION),  # removed field
    ([{"name": "c", "type": {"type": "enum", "name": "C", "symbols": ["A", "B"]}}],
     [{"name": "c", "type": {"type": "enum", "name": "C", "symbols": ["A"]}}], INCOMPATIBLE),
    ([{"name": "id", "type": "string"}], [{"name": "id", "type": ["null", "string"]}], AFTER_MIGRATION),
], ids=["same", "optional-field-added", "required-field-added", "int-to-long", "long-to-int", "field-removed",
        "enum-symbol-removed", "to-union"])
def test_avro_rules_follow_avros_reader_writer_compatibility(old, new, verdict):
    assert _avro(new).resolve_compatibility(_avro(old), "value").verdict is verdict


def test_avro_record_renamed_is_incompatible():
    result = _avro([{"name": "id", "type": "long"}], "Person").resolve_compatibility(
        _avro([{"name": "id", "type": "long"}]), "value")
    assert result.verdict is INCOMPATIBLE and codes(result) == [("AVRO_SCHEMA_INCOMPATIBLE", "value")]


def test_another_family_is_incompatible():
    result = resolve(POJO, "Long")
    assert result.verdict is INCOMPATIBLE and codes(result) == [("TYPE_CHANGED", "value")]
    finding = result.findings[0]
    assert finding.old_type == "POJO sample.Stats{count: Long, key: String, total: Long}"
    assert finding.new_type == "Long"


def test_ttl_and_timer_paths():
    assert codes(resolve("TTL<Long>", "TTL<String>")) == [("TYPE_CHANGED", "value")]
    assert codes(resolve("Timer<String, VoidNamespace>", "Timer<Long, VoidNamespace>")) == [
        ("TYPE_CHANGED", "value.key")]
