"""Issue 27: a Flink 1.x savepoint judged and migrated for a Flink 2.x job. Real savepoints of our KryoStateJob
(tests/support/kryo_job), written by Flink 1.20.3 (Kryo 2.24) and by Flink 2.3 (Kryo 5.6) in an earlier test run and
vendored (their ``_metadata`` only: the state is inline): every Kryo serializer in a state's tree (a whole value, a
POJO field, a list's elements) gets a finding for a 2.x target, named by the manifest's ``flink_version`` or
``--target-flink``; the same savepoint against a 1.x target, or a manifest that names no Flink, is judged as before.
``check`` says what ``migrate`` does: against the 2.3 build's schema, the Kryo records are re-encoded for Kryo 5 and
the Kryo'd List field becomes Flink 2.x's list (COMPATIBLE_AFTER_MIGRATION; the output, _metadata version 6, holds
exactly the values Flink 2.3 wrote itself); a state holding a user class's records, or a schema that keeps a List
field Kryo, is INCOMPATIBLE and ``migrate`` refuses in one line; a broken re-encoding fails the verification. Unit
level: headers and inline state only, no JVM (the restore on Flink 2.3 is in test_kryo_savepoint)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from flinkstate import check
from flinkstate.cli import main
from flinkstate.engine.jar_schema import JarSchema
from flinkstate.jsonify import to_json
from flinkstate.major_upgrade import COLLECTION_CODE, KRYO_CODE, across_majors, output_metadata_version
from flinkstate.manifest import Manifest, ManifestError, manifest_from_savepoint, parse_manifest
from flinkstate.manifest_overlay import OverlayContradiction, parse_overlay
from flinkstate.report import Report
from flinkstate.savepoint import Savepoint
from flinkstate.serializers import kryo_carry
from flinkstate.serializers.kryo import set_kryo_layouts
from flinkstate.serializers.kryo_layout import KryoCarryLayouts, KryoLayouts, layouts_from_json
from flinkstate.typenotation import to_snapshot

SAVEPOINTS = Path(__file__).resolve().parent / "support" / "kryo_job" / "savepoints"
FLINK1 = SAVEPOINTS / "flink-1.20.3"
FLINK2 = SAVEPOINTS / "flink-2.3"
#: Operator ids of KryoStateJob's uids (Flink 1.x metadata records no uid).
KRYO_OP, OPAQUE_OP = "b52fea6fabe942eb147928a6c03aa0f9", "3f4128b0747a41303e0eff8e8c05ab1a"
KRYO_STATES = {"holder", "objects", "whole", "opaque_holder", "mixed"}
#: What the 1.20.3 savepoint holds in Kryo, as (state, code, path): Holder's Object payload and its List<String>
#: tags (a java.util.List: Flink 2.x's list serializer), the Object elements of two list states, a whole Object value.
EXPECTED = {("holder", KRYO_CODE, "value.payload"), ("holder", COLLECTION_CODE, "value.tags"),
            ("opaque_holder", KRYO_CODE, "value.payload"), ("opaque_holder", COLLECTION_CODE, "value.tags"),
            ("objects", KRYO_CODE, "value"), ("mixed", KRYO_CODE, "value"), ("whole", KRYO_CODE, "value")}
NEW_CODES = {KRYO_CODE, COLLECTION_CODE}


def _manifest_text(savepoint: Path, flink_version: str | None) -> str:
    """The savepoint's own schema as a manifest file, naming ``flink_version`` (or no Flink)."""
    manifest = manifest_from_savepoint(Savepoint.open(savepoint))
    manifest.flink_version = flink_version
    return manifest.dump()


def _manifest(savepoint: Path, flink_version: str | None) -> Manifest:
    return parse_manifest(_manifest_text(savepoint, flink_version))


def _new_findings(report: Report) -> set[tuple[str | None, str, str]]:
    return {(row.state, f.code, f.path) for row in report.rows for f in row.findings if f.code in NEW_CODES}


def _verdicts(report: Report) -> dict[str | None, str]:
    return {row.state: row.verdict.name for row in report.rows if row.state is not None}


def test_the_savepoints_are_the_two_flinks() -> None:
    assert Savepoint.open(FLINK1).metadata.version == 4 and Savepoint.open(FLINK2).metadata.version == 6


def test_a_flink1_savepoint_for_flink2_names_every_kryo_serializer_and_is_incompatible() -> None:
    """The 1.20.3 job's own schema declared for Flink 2.3: Flink's snapshot check says "as is" for every state (the
    Kryo snapshots of both majors are the same bytes), and today's check said COMPATIBLE_AS_IS; Flink 2.3 misreads
    or refuses every Kryo value. Each Kryo serializer is one finding, each Kryo state INCOMPATIBLE, not migratable."""
    report = check(FLINK1, _manifest(FLINK1, "2.3"))
    assert _new_findings(report) == EXPECTED
    verdicts = _verdicts(report)
    assert {state: verdicts[state] for state in KRYO_STATES} == dict.fromkeys(KRYO_STATES, "INCOMPATIBLE")
    assert {v for state, v in verdicts.items() if state not in KRYO_STATES} == {"COMPATIBLE_AS_IS"}  # the timers
    assert {row.flink_verdict.name for row in report.rows} == {"COMPATIBLE_AS_IS"}  # what Flink itself says
    assert report.outcome == "incompatible" and report.exit_code == 4
    for row in report.rows:
        for finding in row.findings:
            if finding.code in NEW_CODES:
                assert finding.silent_misread and finding.migratable is False
                assert finding.message.startswith(f"{finding.path}: ") and "\n" not in finding.message
                assert finding.operator == row.operator and finding.state == row.state


def test_target_flink_names_the_version_the_manifest_does_not() -> None:
    assert _new_findings(check(FLINK1, _manifest(FLINK1, None), target_flink="2.3")) == EXPECTED
    assert _new_findings(check(FLINK1, _manifest(FLINK1, "2.0"), target_flink="2.3.1")) == EXPECTED


@pytest.mark.parametrize("flink_version", [None, "1.20", "1.20.3"])
def test_the_same_major_is_judged_as_before(flink_version: str | None) -> None:
    """No Flink named (the default: the savepoint's major), or a 1.x one: every state restores as is."""
    report = check(FLINK1, _manifest(FLINK1, flink_version))
    assert not _new_findings(report)
    assert set(_verdicts(report).values()) == {"COMPATIBLE_AS_IS"} and report.outcome == "restore"


def test_a_flink2_savepoint_for_its_own_flink_is_as_is() -> None:
    report = check(FLINK2, _manifest(FLINK2, "2.3"))
    assert not _new_findings(report) and report.outcome == "restore"


def test_the_flink2_jobs_schema_against_the_flink1_savepoint() -> None:
    """The 2.3 build's schema (Holder.tags is Flink 2.x's Nullable<List<Nullable<String>>>, the rest Kryo): the
    List field was already a type change; the whole Kryo value and the lists of Kryo elements, which the check called
    as is, get their findings, and every state is incompatible: each operator has a state whose Kryo records hold a
    user class (Point), which cannot be re-encoded, so the plan of its operator is refused
    (test_check_says_what_migrate_cannot_carry)."""
    manifest = _manifest(FLINK2, None)
    before = check(FLINK1, manifest)
    assert not _new_findings(before)
    assert {s: v for s, v in _verdicts(before).items() if s in ("whole", "objects", "mixed")} == \
        dict.fromkeys(("whole", "objects", "mixed"), "COMPATIBLE_AS_IS")
    after = check(FLINK1, _manifest(FLINK2, "2.3"))
    assert _new_findings(after) == EXPECTED
    assert {s: v for s, v in _verdicts(after).items() if s in KRYO_STATES} == dict.fromkeys(KRYO_STATES,
                                                                                             "INCOMPATIBLE")


def test_nested_kryo_is_found_at_its_path() -> None:
    """Map keys, list elements, POJO fields inside a Nullable inside a list, a tuple field, under TTL: each Kryo
    serializer once, at its path; Flink 2.x -> 1.x is refused too (Kryo 5 bytes read with Kryo 2), the same major
    never."""
    snapshot = to_snapshot({"ttl": {"map": {"key": {"kryo": "java.util.UUID"}, "value": {"list": {"nullable": {
        "pojo": "a.B", "fields": {"xs": {"kryo": "java.util.Set"}, "n": "Long",
                                  "inner": {"tuple": ["Long", {"kryo": "java.util.Map"}]}}}}}}}})
    up = {(f.code, f.path) for f in across_majors(1, 2, [("value", snapshot), ("key", None)])}
    assert up == {(KRYO_CODE, "value.key"), (COLLECTION_CODE, "value.value.element.xs"),
                  (COLLECTION_CODE, "value.value.element.inner.f1")}
    down = {(f.code, f.path) for f in across_majors(2, 1, [("value", snapshot)])}
    assert down == {(KRYO_CODE, "value.key"), (KRYO_CODE, "value.value.element.xs"),
                    (KRYO_CODE, "value.value.element.inner.f1")}
    assert across_majors(1, 1, [("value", snapshot)]) == across_majors(2, 2, [("value", snapshot)]) == []


def test_check_cli_reports_and_migrate_refuses_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                           ) -> None:
    """The 1.x job's own schema said to be a 2.x job's (its List field still Kryo, which Flink 2.x gives its list
    serializer): ``check`` exits 4; ``migrate`` refuses before writing anything, in one line naming the file, the
    operator, the state, the field and why; both with the version from the manifest or from --target-flink. For a
    1.x target migrate copies the savepoint (exit 0), as before."""
    declared = tmp_path / "v2.yaml"
    declared.write_text(_manifest_text(FLINK1, "2.3"))
    plain = tmp_path / "plain.yaml"
    plain.write_text(_manifest_text(FLINK1, None))
    assert main(["check", str(FLINK1), "--schema", str(declared)]) == 4
    assert KRYO_CODE in capsys.readouterr().out
    assert main(["check", str(FLINK1), "--schema", str(plain), "--target-flink", "2.3"]) == 4
    assert COLLECTION_CODE in capsys.readouterr().out
    for args in (["--schema", str(declared)], ["--schema", str(plain), "--target-flink", "2.3"]):
        out = tmp_path / "out"
        assert main(["migrate", str(FLINK1), *args, "--output", str(out)]) == 1
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and "Traceback" not in err
        assert f"operator {OPAQUE_OP}, state opaque_holder: a java.util.List serialized by Kryo (field tags), which " \
               f"the new version's schema keeps as Kryo: Flink 2.x serializes java.util.List fields with its own " \
               f"serializers (FLINK-34123)" in err
        assert not out.exists()
    out = tmp_path / "same-major"
    assert main(["migrate", str(FLINK1), "--schema", str(plain), "--target-flink", "1.20", "--output", str(out)]) == 0
    assert Savepoint.open(out).metadata.version == 4


def test_target_flink_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    declared = tmp_path / "v2.yaml"
    declared.write_text(_manifest_text(FLINK1, "2.3"))
    assert main(["check", str(FLINK1), "--schema", str(declared), "--target-flink", "1.20"]) == 1
    err = capsys.readouterr().err.strip()
    assert err == f"flinkstate: error: {declared}: flink_version: Flink 2.3, but --target-flink says 1.20: a " \
                  f"schema describes one Flink's job"
    with pytest.raises(SystemExit) as usage:
        main(["check", str(FLINK1), "--schema", str(declared), "--target-flink", "3.0"])
    assert usage.value.code == 2
    assert "flinkstate knows Flink 1.x and 2.x" in capsys.readouterr().err


def test_manifest_flink_version_parses_round_trips_and_refuses_bad_values() -> None:
    text = "manifest_version: 1\nflink_version: \"1.20\"\noperators: {}\n"
    manifest = parse_manifest(text, "m.yaml")
    assert manifest.flink_version == "1.20"
    assert parse_manifest(manifest.dump()).flink_version == "1.20"
    assert parse_manifest("manifest_version: 1\noperators: {}\n").flink_version is None
    assert "flink_version" not in parse_manifest("manifest_version: 1\noperators: {}\n").dump()
    for value, says in (("1.20", "m.yaml: flink_version: quote the Flink version (YAML reads it as the number 1.2)"),
                        ("\"3.0\"", "m.yaml: flink_version: Flink 3.0: flinkstate knows Flink 1.x and 2.x"),
                        ("\"two\"", "m.yaml: flink_version: expected a Flink version such as \"2.3\" or \"1.20.3\", "
                                    "got 'two'")):
        with pytest.raises(ManifestError) as error:
            parse_manifest(f"manifest_version: 1\nflink_version: {value}\noperators: {{}}\n", "m.yaml")
        assert str(error.value) == says


def test_a_jars_schema_is_its_flinks_and_an_overlay_may_not_say_another() -> None:
    jar = JarSchema("job.jar", "2.3.0", "job", [], 0.0, False).manifest()
    assert jar.flink_version == "2.3.0"
    assert parse_overlay(jar, "manifest_version: 1\n", "o.yaml").flink_version == "2.3.0"
    assert parse_overlay(jar, "manifest_version: 1\nflink_version: \"2.3\"\n", "o.yaml").flink_version == "2.3"
    with pytest.raises(OverlayContradiction) as error:
        parse_overlay(jar, "manifest_version: 1\nflink_version: \"1.20\"\n", "o.yaml")
    assert str(error.value) == "o.yaml: flink_version: contradicts the jar job.jar: the overlay says Flink 1.20, the " \
                               "jar is built for Flink 2.3.0"


def _flink2_schema(tmp_path: Path, dropped: tuple[tuple[str, str], ...]) -> Path:
    """The 2.3 build's schema for Flink 2.3, with ``dropped`` (operator, state) declared dropped."""
    manifest = _manifest(FLINK2, "2.3")
    for operator, state in dropped:
        manifest.operators[operator].states.pop(state)
        manifest.operators[operator].dropped_states.append(state)
    path = tmp_path / "v2.yaml"
    path.write_text(manifest.dump())
    return path


#: The states holding a user class's Kryo records (Point): what the ground truth's migration drops.
USER_CLASS_STATES = (("opaque", "opaque_holder"), ("opaque", "mixed"), ("kryo", "whole"))


def _values(savepoint: Path | Savepoint, state: str) -> dict[str, object]:
    sp = savepoint if isinstance(savepoint, Savepoint) else Savepoint.open(savepoint)
    return {key: to_json(value) for key, _, value in sp.iter_entries(KRYO_OP, state)}


def test_migrate_carries_kryo_records_and_a_kryod_list_to_flink2(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """The 1.20.3 savepoint migrated for the 2.3 build (its user-class states dropped): ``check`` says
    COMPATIBLE_AFTER_MIGRATION (exit 3) for the carried states, with the findings migratable; ``migrate`` writes
    _metadata version 6 (Kryo 5 for Flink and flinkstate), and the output's values, read with Kryo 5, are exactly
    those Flink 2.3 wrote itself for the same keys (the Kryo payloads and list elements, and tags as Flink 2.x's
    list); re-checked against the 2.3 build's schema, every state restores as is (the dropped ones start empty)."""
    schema = _flink2_schema(tmp_path, USER_CLASS_STATES)
    report = check(FLINK1, schema)
    assert report.exit_code == 3
    verdicts = _verdicts(report)
    assert {state: verdicts[state] for state in KRYO_STATES} == dict.fromkeys(KRYO_STATES,
                                                                              "COMPATIBLE_AFTER_MIGRATION")
    rows = {row.state: row for row in report.rows}
    assert rows["objects"].migration == rows["holder"].migration == "values rewritten by flinkstate"
    assert {(f.code, f.path, f.migratable) for f in rows["holder"].findings if f.code in NEW_CODES} == {
        (KRYO_CODE, "value.payload", True), (COLLECTION_CODE, "value.tags", True)}
    out = tmp_path / "out"
    assert main(["migrate", str(FLINK1), "--schema", str(schema), "--output", str(out)]) == 0
    assert "(_metadata version 6)" in capsys.readouterr().out
    migrated, source = Savepoint.open(out), Savepoint.open(FLINK1)
    assert (migrated.metadata.version, migrated.kryo_version, source.kryo_version) == (6, 5, 2)
    for state in ("objects", "holder"):
        assert _values(migrated, state) == _values(FLINK2, state), state
    assert _values(migrated, "objects") == _values(source, "objects")  # the same objects ...
    assert _records(migrated) == _records(FLINK2) != _records(source)  # ... in Flink 2.3's own Kryo 5 records
    assert _values(source, "holder") != _values(migrated, "holder")  # tags: a Kryo record in 1.x
    again = check(out, _manifest(FLINK2, "2.3"))  # the 2.3 build's own schema: the dropped states start empty
    assert again.exit_code == 0, [(row.state, row.verdict.name) for row in again.rows]


def _records(savepoint: Path | Savepoint) -> dict[str, list[bytes]]:
    """The Kryo records of ``objects``, key by key."""
    sp = savepoint if isinstance(savepoint, Savepoint) else Savepoint.open(savepoint)
    return {key: [element.data for element in value] for key, _, value in sp.iter_entries(KRYO_OP, "objects")}


def test_check_says_what_migrate_cannot_carry(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A state whose sampled Kryo records hold a user class (``whole``: Point for k0) cannot be re-encoded: ``check``
    says INCOMPATIBLE with the plan's refusal naming the class (and the operator's other states cannot be planned
    with it); ``migrate`` refuses with the same line before writing anything."""
    schema = _flink2_schema(tmp_path, USER_CLASS_STATES[:2])
    report = check(FLINK1, schema)
    assert report.exit_code == 4
    rows = {row.state: row for row in report.rows if row.operator == "kryo"}
    refusal = next(f for f in rows["whole"].findings if f.code == "MIGRATION_REFUSED")
    assert "operator kryo, state whole: its Kryo records cannot be re-encoded for Flink 2.x (Kryo 5.6): a sampled " \
           "Kryo record holds kryojob.KryoStateJob$Point" in refusal.message and "\n" not in refusal.message
    assert {state: rows[state].verdict.name for state in ("whole", "objects", "holder")} == dict.fromkeys(
        ("whole", "objects", "holder"), "INCOMPATIBLE")
    out = tmp_path / "out"
    assert main(["migrate", str(FLINK1), "--schema", str(schema), "--output", str(out)]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and refusal.message in err and not out.exists()


def test_a_broken_reencoding_fails_the_verification(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """The verification decodes the output with Kryo 5 and compares with the source read with Kryo 2: a Kryo 5
    writer that wrote another String (every "s0" as "s9") is caught, and nothing is published."""
    write_string = kryo_carry.WRITERS["java.lang.String"]

    def wrong(out: Any, node: Any) -> None:
        write_string(out, kryo_carry.KryoNode(node.java_class, "s9" if node.value == "s0" else node.value))

    monkeypatch.setitem(kryo_carry.WRITERS, "java.lang.String", wrong)
    out = tmp_path / "out"
    assert main(["migrate", str(FLINK1), "--schema", str(_flink2_schema(tmp_path, USER_CLASS_STATES)), "--output",
                 str(out)]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "verification" in err and "objects" in err, err
    assert not out.exists()


def test_kryo_data_carried_to_flink2_needs_flink2s_metadata_version(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert main(["migrate", str(FLINK1), "--schema", str(_flink2_schema(tmp_path, USER_CLASS_STATES)), "--output",
                 str(out), "--metadata-version", "4"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.endswith("Kryo data re-encoded for Flink 2.x (Kryo 5.6) needs the _metadata version Flink 2.x writes "
                        "(5 or 6), not 4") and not out.exists()
    assert output_metadata_version(4, "2.0.1") == 5 and output_metadata_version(4, "2.3") == 6
    assert output_metadata_version(4, "1.20") is output_metadata_version(6, "2.3") is None


def test_kryo_state_the_schema_does_not_declare_is_refused(tmp_path: Path) -> None:
    """A Kryo state the 2.x schema leaves out (neither declared nor dropped) would keep its Kryo 2.24 bytes, which
    Flink 2.x reads with Kryo 5: refused by the plan, in one line naming it."""
    manifest = parse_manifest(_flink2_schema(tmp_path, USER_CLASS_STATES).read_text())
    manifest.operators["kryo"].states.pop("objects")
    report = check(FLINK1, manifest)
    assert report.exit_code == 4
    row = next(row for row in report.rows if row.state == "objects")  # the savepoint's state, not declared
    refusal = next(f for f in row.findings if f.code == "MIGRATION_REFUSED")
    assert row.verdict.name == "INCOMPATIBLE"
    assert refusal.message.endswith(
        "operator kryo, state objects: its Kryo data of Flink 1.x (Kryo 2.24) would be kept as it is, and Flink 2.x "
        "reads it with Kryo 5.6: declare the state's type in the manifest (its records are then re-encoded), or "
        "drop it"), refusal.message


def _layouts(flink: str) -> KryoLayouts:
    """KryoStateJob's Holder and Point as ``schema --jar`` of its jar on that Flink gives them (vendored)."""
    return layouts_from_json(json.loads((SAVEPOINTS / f"kryo-classes-{flink}.json").read_text()), flink)


def _with_layouts(path: Path, layouts: KryoLayouts) -> Path:
    manifest = parse_manifest(path.read_text())
    manifest.kryo_classes = layouts
    path.write_text(manifest.dump())
    return path


def _user_values(savepoint: Path | Savepoint, operator: str, state: str) -> dict[str, Any]:
    """A state's values read with the 2.3 jar's layouts (a Kryo 5 user class record delimited and decoded)."""
    sp = savepoint if isinstance(savepoint, Savepoint) else Savepoint.open(savepoint)
    header = sp.keyed_header(operator)
    assert header is not None
    meta = next(s for s in header.states if s.name == state)
    set_kryo_layouts([meta.value_serializer], KryoCarryLayouts(_layouts("2.3"), _layouts("2.3"), False))
    return {key: to_json(value) for key, _, value in sp.iter_entries(operator, state)}


def test_user_classes_are_carried_with_the_jars_layouts(tmp_path: Path) -> None:
    """With the layouts of the 2.3 jar's schema (kryo_classes), the states holding Point (a POJO's Object field, list
    elements, a whole value) are COMPATIBLE_AFTER_MIGRATION, the finding saying the old classes are assumed to be
    the new ones; ``migrate`` carries them: the output's values are Flink 2.3's own, its whole Point record
    Flink 2.3's bytes. Before (no layouts), the same states were refused (test_check_says_what_migrate_cannot_carry)."""
    schema = _with_layouts(_flink2_schema(tmp_path, ()), _layouts("2.3"))
    report = check(FLINK1, schema)
    assert report.exit_code == 3
    assert {state: verdict for state, verdict in _verdicts(report).items() if state in KRYO_STATES} == dict.fromkeys(
        KRYO_STATES, "COMPATIBLE_AFTER_MIGRATION")
    payload = next(f for row in report.rows if row.state == "opaque_holder" for f in row.findings
                   if f.path == "value.payload")
    assert "assumed to be the same classes compiled against both Flinks" in payload.message
    out = tmp_path / "out"
    assert main(["migrate", str(FLINK1), "--schema", str(schema), "--output", str(out)]) == 0
    for operator, state in (("opaque", "opaque_holder"), ("opaque", "mixed"), ("kryo", "whole")):
        assert _user_values(out, operator, state) == _user_values(FLINK2, operator, state), state
    point = _user_values(out, "opaque", "opaque_holder")["k2"]["payload"]
    assert point["value"] == {"@class": "kryojob.KryoStateJob$Point", "x": 2, "y": -2}
    whole = {key: v for key, _, v in Savepoint.open(out).iter_entries(KRYO_OP, "whole")}["k0"]
    assert whole.data == {key: v for key, _, v in Savepoint.open(FLINK2).iter_entries(KRYO_OP, "whole")}["k0"].data


def test_a_user_class_changed_between_the_versions_is_refused_in_one_line(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """The old version's layouts given (--old-schema / --previous: its jar's schema on Flink 1.20.3) and the new
    version's Point with a field more: the old records give it no value, so ``check`` says INCOMPATIBLE naming the
    class and the field, and ``migrate`` refuses with the same line before writing anything."""
    point = "kryojob.KryoStateJob$Point"
    new = _layouts("2.3")
    fields = new[point].fields or ()
    new[point] = dataclasses.replace(new[point], fields=(*fields, dataclasses.replace(fields[0], name="z")))
    schema = _with_layouts(_flink2_schema(tmp_path, ()), new)
    old = tmp_path / "v1.yaml"
    old.write_text(_manifest_text(FLINK1, None))
    _with_layouts(old, _layouts("1.20.3"))
    report = check(FLINK1, schema, previous=parse_manifest(old.read_text()))
    assert report.exit_code == 4
    rows = {row.state: row for row in report.rows if row.operator == "opaque"}
    refusal = next(f for f in rows["opaque_holder"].findings if f.code == "MIGRATION_REFUSED")
    assert f"{point}: field 'z' (int) added in the new version" in refusal.message and "\n" not in refusal.message
    payload = next(f for f in rows["opaque_holder"].findings if f.path == "value.payload")
    assert "carried with the old version's and the new version's kryo_classes" in payload.message
    out = tmp_path / "out"
    assert main(["migrate", str(FLINK1), "--schema", str(schema), "--old-schema", str(old), "--output",
                 str(out)]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"{point}: field 'z' (int) added" in err and not out.exists()


# --------------------------------------------------------------------------- snapshot classes Flink 2.x lacks

TWO_PHASE_1_20 = Path(__file__).resolve().parent / "corpus" / "serializers" / \
    "two-phase-commit-sink-state-serializer-1.20" / "serializer-snapshot"
TWO_PHASE_CLASS = "org.apache.flink.streaming.api.functions.sink.TwoPhaseCommitSinkFunction$StateSerializerSnapshot"


def _corpus_snapshot(folder: str) -> Any:
    from flinkstate.binary import Reader
    from flinkstate.serializers.registry import read_snapshot

    path = Path(__file__).resolve().parent / "corpus" / "serializers" / folder / "serializer-snapshot"
    return read_snapshot(Reader(path.read_bytes()), top_level=True)


def test_snapshot_classes_flink_2_no_longer_has_are_findings_for_a_2x_target() -> None:
    """Flink 1.20's TwoPhaseCommitSinkFunction snapshot (Flink wrote it: its corpus): its class is not in Flink 2.x
    (moved to a legacy package), so a 2.x job fails to load it; for a 1.x target nothing. The 2.x snapshots of the
    same serializers (the legacy package's, the table module's Scala Option, the Either and NFA ones) are none."""
    from flinkstate.compatibility import INCOMPATIBLE
    from flinkstate.major_upgrade import GONE_CODE, GONE_IN_FLINK2, gone_in_target

    sink = _corpus_snapshot("two-phase-commit-sink-state-serializer-1.20")
    assert sink.class_name == TWO_PHASE_CLASS and TWO_PHASE_CLASS in GONE_IN_FLINK2
    findings = gone_in_target(2, [("key", None), ("value", sink)])
    assert [(f.code, f.path, f.old_type, f.verdict) for f in findings] == \
        [(GONE_CODE, "value", TWO_PHASE_CLASS, INCOMPATIBLE)]
    assert "not in Flink 2.x" in findings[0].message
    assert gone_in_target(1, [("value", sink)]) == []
    for folder in ("scala-option-serializer-2.3", "either-serializer-2.3", "nfa-state-serializer-2.3",
                   "either-serializer-1.20"):
        assert gone_in_target(2, [("value", _corpus_snapshot(folder))]) == [], folder


def test_a_state_whose_snapshot_class_flink_2_lacks_is_refused_by_check_and_migrate(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A state of Flink's own 2.3 savepoint given Flink 1.20's TwoPhaseCommitSinkFunction snapshot (as a 1.x job's
    sink state carried into a 2.x savepoint would hold it): Flink's snapshot rules say as is against a schema that
    keeps it, Flink 2.x cannot load the class; check says INCOMPATIBLE naming it (exit 4) and migrate refuses with
    the same finding, nothing written."""
    import shutil

    from flinkstate.major_upgrade import GONE_CODE
    from tests.test_hostile_data import HEAP_23, KRYO_UID, rewrite_values

    source = tmp_path / "source"
    shutil.copytree(HEAP_23, source)
    rewrite_values(source, KRYO_UID, "state-name", None, TWO_PHASE_1_20.read_bytes())
    schema = tmp_path / "schema.yaml"
    schema.write_text(_manifest_text(source, "2.3"))
    report = check(source, parse_manifest(schema.read_text()))
    rows = [row for row in report.rows if any(f.code == GONE_CODE for f in row.findings)]
    assert [(row.state, row.verdict.name) for row in rows] == [("state-name", "INCOMPATIBLE")]
    assert report.exit_code == 4
    assert main(["check", str(source), "--schema", str(schema)]) == 4
    assert GONE_CODE in capsys.readouterr().out
    out = tmp_path / "out"
    assert main(["migrate", str(source), "--schema", str(schema), "--output", str(out)]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err and "state-name" in err and TWO_PHASE_CLASS in err, err
    assert not out.exists()
