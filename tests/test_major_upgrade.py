"""Issue 27, first step: a Flink 1.x savepoint judged for a Flink 2.x job. Real savepoints of our KryoStateJob
(tests/support/kryo_job), written by Flink 1.20.3 (Kryo 2.24) and by Flink 2.3 (Kryo 5.6) in an earlier test run and
vendored (their ``_metadata`` only: the state is inline): every Kryo serializer in a state's tree (a whole value, a
POJO field, a list's elements) gets a finding and the state is INCOMPATIBLE for a 2.x target, named by the manifest's
``flink_version`` or ``--target-flink``; the same savepoint against a 1.x target, or a manifest that names no Flink,
is judged as before; ``migrate`` refuses in one line. Unit level: headers only, no JVM."""

from __future__ import annotations

from pathlib import Path

import pytest

from flinkstate import check
from flinkstate.cli import main
from flinkstate.engine.jar_schema import JarSchema
from flinkstate.major_upgrade import COLLECTION_CODE, KRYO_CODE, across_majors
from flinkstate.manifest import Manifest, ManifestError, manifest_from_savepoint, parse_manifest
from flinkstate.manifest_overlay import OverlayContradiction, parse_overlay
from flinkstate.report import Report
from flinkstate.savepoint import Savepoint
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
    as is, are now incompatible, and the Kryo payload and tags get their findings too."""
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
    """``check`` exits 4; ``migrate`` refuses before writing anything, in one line naming the operator, the state,
    the path and the finding; both with the version from the manifest or from --target-flink. For a 1.x target
    migrate copies the savepoint (exit 0), as before."""
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
        assert f"operator {OPAQUE_OP}, state opaque_holder" in err and f"{KRYO_CODE}: value.payload: Kryo data" in err
        assert "INCOMPATIBLE" in err and not out.exists()
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
