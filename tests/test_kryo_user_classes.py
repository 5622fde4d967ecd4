"""Issue 27: Kryo records of user classes (Kryo's FieldSerializer, a user enum) carried from Flink 1.20.3 (Kryo 2.24)
to Flink 2.3 (Kryo 5.6) with the class layouts Kryo itself reports. tests/support/kryo_job/KryoUserClasses.java runs
on each Flink's lib/ in the test run: Flink's own KryoSerializer writes the same values (fixed shapes and 25 seeded
random ones: nulls, shared and enclosing references, user classes in lists and maps, lists in user classes, nested
generics, primitives of every kind, double[]/int[]/String[], enums, boxed numbers; object arrays of user classes,
final or not, nested, whole or in a list, 10 seeded random holders of them; a generic class bound to a class that
is not final, and one bound to a final class, which is refused) and the jar inspector's
KryoLayouts reads the layouts from that Flink's Kryo. Each 1.20.3 record, carried with the 1.20.3 layouts read and
the 2.3 layouts written, is byte for byte the record Flink 2.3 wrote."""

from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from flinkstate.serializers.kryo_carry import kryo2_to_kryo5
from flinkstate.serializers.kryo_data import KRYO2, KRYO5, KryoOpaque
from flinkstate.serializers.kryo_fields import carry_user_record, read_user_record, tree_value
from flinkstate.serializers.kryo_layout import (
    KryoGeneric,
    KryoLayoutError,
    KryoLayouts,
    layouts_from_json,
    layouts_to_json,
)

pytestmark = pytest.mark.flink  # runs Flink's KryoSerializer in a JVM

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "tests" / "support" / "kryo_job" / "build.sh"
LIBS = {KRYO2: ROOT / ".flink-dists" / "1.20.3" / "pyflink" / "lib",
        KRYO5: ROOT / ".venv-flink" / "lib" / "python3.11" / "site-packages" / "pyflink" / "lib"}
NODE, READING, COLOR, HOLDER, POINT, BOX, PAIR, LABELLED = (
    f"kryojob.KryoUserClasses${n}" for n in ("Node", "Reading", "Color", "Holder", "Point", "Box", "Pair", "Labelled"))
REFUSED = "pair_bound_final"  # Pair<String> in a field: a generic class bound to a final class
NAMES = {"node_full", "node_empty", "node_typed", "reading", "enum", "list_shared", "map_of_user",
         "holder", "holder_empty", "points_whole", "points_typed", "readings_whole", "arrays_in_list", "box_whole",
         REFUSED, *(f"random_{i}" for i in range(25)), *(f"holder_random_{i}" for i in range(10))}


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[int, tuple[dict[str, tuple[str, bytes]], Any]]:
    """Kryo version -> (record name -> (the serializer's type, bytes), the layouts as the inspector wrote them)."""
    tmp = tmp_path_factory.mktemp("kryo-user")
    found = {}
    for version, lib in LIBS.items():
        if not lib.is_dir():
            pytest.fail(f"no Flink distribution at {lib}: run 'make setup'")
        out = tmp / f"user{version}.jsonl"
        subprocess.run([str(BUILD), str(lib), str(out), "KryoUserClasses"], check=True, timeout=300)
        records, layouts = {}, None
        for line in out.read_text().splitlines():
            item = json.loads(line)
            if "layouts" in item:
                layouts = item["layouts"]
            else:
                records[item["name"]] = (item["type"], bytes.fromhex(item["hex"]))
        found[version] = (records, layouts)
    return found


def _layouts(written: dict[int, tuple[dict[str, tuple[str, bytes]], Any]], version: int) -> KryoLayouts:
    return layouts_from_json(written[version][1], f"Kryo {version}")


def _carry(written: dict[int, tuple[dict[str, tuple[str, bytes]], Any]], name: str,
           old: KryoLayouts | None = None, new: KryoLayouts | None = None) -> bytes:
    type_class, record = written[KRYO2][0][name]
    registrations = [(type_class, True)]  # Flink registers the serializer's type first
    return carry_user_record(record, registrations, registrations, old or _layouts(written, KRYO2),
                             new or _layouts(written, KRYO5))


def test_each_kryo_reports_its_own_layout(written: dict[int, tuple[dict[str, tuple[str, bytes]], Any]]) -> None:
    """What the inspector read from each Kryo: the same fields in the same (name) order, transient ones left out,
    final types known; but Kryo 2.24 passes one level of type arguments where Kryo 5 passes the whole tree."""
    old, new = _layouts(written, KRYO2), _layouts(written, KRYO5)
    assert set(old) == set(new) == {NODE, READING, COLOR, HOLDER, POINT, BOX, PAIR, LABELLED}
    for layouts in (old, new):  # what decides whether an array of the class writes its elements' classes
        assert [layouts[c].final for c in (READING, COLOR, POINT, BOX)] == [True, True, False, False]
        assert (layouts[BOX].type_parameters, layouts[PAIR].type_parameters, layouts[NODE].type_parameters) == (1, 1, 0)
    assert old[COLOR].constants == new[COLOR].constants == ("RED", "GREEN", "BLUE")
    for layouts in (old, new):
        fields = {f.name: f for f in layouts[NODE].fields or ()}
        assert list(fields) == sorted(fields) and "cached" not in fields and len(fields) == 22
        assert (fields["id"].value_class, fields["label"].value_class, fields["values"].value_class) == (
            "int", "java.lang.String", "[D")
        assert fields["next"].value_class is None and fields["any"].value_class is None  # class and object
        assert fields["color"].value_class == COLOR and fields["reading"].value_class == READING  # final classes
        assert [f.name for f in layouts[READING].fields or ()] == ["at", "color", "samples", "sensor"]
    nested_old = {f.name: f for f in old[NODE].fields or ()}["nested"].generics
    nested_new = {f.name: f for f in new[NODE].fields or ()}["nested"].generics
    assert nested_old is not None and nested_new is not None
    assert nested_old[0].java_class == nested_new[0].java_class == "java.util.List"
    assert nested_old[0].generics is None  # Kryo 2.24: List<List<Long>>'s inner Long is not passed on
    assert nested_new[0].generics is not None and nested_new[0].generics[0].java_class == "java.lang.Long"
    # the notation round-trips (a manifest's kryo_classes:)
    assert layouts_from_json(json.loads(json.dumps(layouts_to_json(new))), "again") == new


def test_user_class_records_carry_to_the_bytes_flink2_writes(
        written: dict[int, tuple[dict[str, tuple[str, bytes]], Any]]) -> None:
    old, new = written[KRYO2][0], written[KRYO5][0]
    assert set(old) == set(new) == NAMES
    for name in NAMES - {REFUSED}:
        assert _carry(written, name).hex() == new[name][1].hex(), name
    # the old bytes are not already the new ones: fixed-width numbers turn around, the records differ
    assert all(old[name][1] != new[name][1] for name in ("node_full", "reading", "holder", "readings_whole"))


def test_an_array_needs_its_element_class_finality(written: dict[int, tuple[dict[str, tuple[str, bytes]], Any]]
                                                   ) -> None:
    """Kryo's ObjectArraySerializer writes the elements' classes only when the element class is not final: a layout
    that does not say is refused in one line, one that says it wrongly never gives Flink 2.3's bytes."""
    old, new = _layouts(written, KRYO2), _layouts(written, KRYO5)
    unknown = {**old, POINT: dataclasses.replace(old[POINT], final=None)}
    with pytest.raises(KryoOpaque) as refused:
        _carry(written, "points_whole", old=unknown)
    assert str(refused.value).startswith(f"[L{POINT};") and "whether the class is final" in str(refused.value)
    assert "\n" not in str(refused.value)
    for name, cls in (("points_whole", POINT), ("readings_whole", READING)):
        flipped = {**new, cls: dataclasses.replace(new[cls], final=not new[cls].final)}
        assert _carry(written, name, new=flipped) != written[KRYO5][0][name][1], name


def test_a_generic_class_bound_to_a_final_class_is_refused(
        written: dict[int, tuple[dict[str, tuple[str, bytes]], Any]]) -> None:
    """Pair<String> in a field: Kryo writes Pair's A field as a String without its class (Box<Point>, Point not
    final, is carried above). Kryo 2.24 keeps such a binding for later uses of the class, so a class that a field of
    the layouts binds to a final class is refused wherever it is met: a whole Box once Holder's field says
    Box<Reading>."""
    with pytest.raises(KryoOpaque) as refused:
        _carry(written, REFUSED)
    refusals = [str(refused.value)]
    old = _layouts(written, KRYO2)
    box_of_reading = [dataclasses.replace(f, generics=(KryoGeneric(READING, True, None),)) if f.name == "box" else f
                      for f in old[HOLDER].fields or ()]
    with pytest.raises(KryoOpaque) as refused:
        _carry(written, "box_whole", old=_changed(old, HOLDER, box_of_reading))
    refusals.append(str(refused.value))
    for cls, refusal in zip((PAIR, BOX), refusals, strict=True):
        assert refusal.startswith(f"{cls}: a generic class whose type parameter is bound to a final class"), refusal
        assert "\n" not in refusal


def test_without_layouts_a_user_class_is_refused(written: dict[int, tuple[dict[str, tuple[str, bytes]], Any]]
                                                 ) -> None:
    type_class, record = written[KRYO2][0]["node_full"]
    with pytest.raises(KryoOpaque) as refused:
        kryo2_to_kryo5(record, [(type_class, True)])
    assert NODE in str(refused.value) and "\n" not in str(refused.value)
    old = {k: v for k, v in _layouts(written, KRYO2).items() if k != READING}  # the class's layout missing
    with pytest.raises(KryoOpaque) as refused:
        _carry(written, "reading", old=old)
    assert str(refused.value).startswith(READING) and "\n" not in str(refused.value)


def _changed(layouts: KryoLayouts, cls: str, fields: Any) -> KryoLayouts:
    return {**layouts, cls: dataclasses.replace(layouts[cls], fields=tuple(fields))}


def test_a_field_added_removed_or_retyped_is_refused_in_one_line(
        written: dict[int, tuple[dict[str, tuple[str, bytes]], Any]]) -> None:
    new = _layouts(written, KRYO5)
    reading = new[READING].fields or ()
    added = dataclasses.replace(reading[0], name="unit")
    retyped = dataclasses.replace(reading[0], type="int", value_class="int")
    cases = {"field 'unit' (long) added": [*reading, added], "field 'at' (long) removed": reading[1:],
             "field 'at' changed type from long to int": [retyped, *reading[1:]]}
    for expected, fields in cases.items():
        with pytest.raises(KryoOpaque) as refused:
            _carry(written, "reading", new=_changed(new, READING, fields))
        assert str(refused.value).startswith(f"{READING}: {expected}") and "\n" not in str(refused.value)


def test_a_wrong_layout_does_not_give_flinks_bytes(written: dict[int, tuple[dict[str, tuple[str, bytes]], Any]]
                                                   ) -> None:
    """The comparison can fail: the old layout with ints written fixed-width, or two fields swapped, reads other
    values (or fails), never Flink 2.3's record."""
    old, want = _layouts(written, KRYO2), written[KRYO5][0]["node_full"][1]
    fields = old[NODE].fields or ()
    fixed = [dataclasses.replace(f, var_int=False) if f.type == "int" else f for f in fields]
    swapped = [fields[1], fields[0], *fields[2:]]
    for wrong in (fixed, swapped):
        try:
            carried = _carry(written, "node_full", old=_changed(old, NODE, wrong))
        except Exception as exc:  # any one-line refusal of the misread bytes will do
            assert "\n" not in str(exc)
            continue
        assert carried != want


def test_an_enum_constant_is_carried_by_name(written: dict[int, tuple[dict[str, tuple[str, bytes]], Any]]) -> None:
    """Kryo writes an enum's ordinal: the new version's enum with its constants reordered gets GREEN's new one."""
    new = _layouts(written, KRYO5)
    reordered = {**new, COLOR: dataclasses.replace(new[COLOR], constants=("GREEN", "BLUE", "RED"))}
    flink2 = written[KRYO5][0]["enum"][1]
    assert flink2[-1] == 2  # ordinal 1 + 1
    assert _carry(written, "enum", new=reordered) == flink2[:-1] + b"\x01"
    gone = {**new, COLOR: dataclasses.replace(new[COLOR], constants=("RED", "BLUE"))}
    with pytest.raises(KryoOpaque, match="enum constant GREEN is not in the new version's enum"):
        _carry(written, "enum", new=gone)


def test_a_malformed_layout_is_refused_in_one_line() -> None:
    for data, expected in (({"class": "x"}, "must be a list"), ([{"fields": []}], "'class' missing"),
                           ([{"class": "a.B", "fields": [{"name": "x"}]}], "a.B: 'type' missing")):
        with pytest.raises(KryoLayoutError) as refused:
            layouts_from_json(data, "m.yaml")
        assert str(refused.value).startswith("m.yaml: kryo_classes") and expected in str(refused.value)


def test_both_records_read_as_the_same_values(written: dict[int, tuple[dict[str, tuple[str, bytes]], Any]]) -> None:
    """What the migration's verification rests on: each value read from Flink 1.20.3's record with the Kryo 2.24
    layouts equals the value read from Flink 2.3's record with the Kryo 5 layouts (fields by name, shared objects
    as references), and a record of another value does not."""
    values = {}
    for version in (KRYO2, KRYO5):
        layouts = _layouts(written, version)
        for name, (type_class, record) in written[version][0].items():
            if name == REFUSED:
                continue
            tree, end = read_user_record(record, 0, [(type_class, True)], layouts, version)
            assert end == len(record), name
            values[version, name] = tree_value(tree)
    for name in NAMES - {REFUSED}:
        assert values[KRYO2, name] == values[KRYO5, name], name
    assert values[KRYO2, "random_0"] != values[KRYO5, "random_1"]
    full = values[KRYO5, "node_full"]
    assert full["next"] == {"@ref": 0} and full["children"]["elements"][1] == {"@ref": 3}  # itself, a shared child
    assert full["reading"]["samples"]["elements"] == [37.5, -0.0, 1.7976931348623157e308] and full["color"] == "BLUE"
