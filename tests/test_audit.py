"""``flinkstate audit`` (issue 27): a savepoint's exposure before an upgrade is planned, without a JVM, on savepoints
real Flink wrote: KryoStateJob's (tests/support/kryo_job/savepoints: Flink 1.20.3, Kryo 2.24, metadata V4; Flink 2.3,
Kryo 5.6, V6) and Flink's own corpus (Java-serialized operator state). The Flink 1.x -> 2.x findings are the ones
``check --target-flink 2.3`` reports for the same savepoint, state by state."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from flinkstate import check
from flinkstate.audit import GENERATED_UID_CODE, JAVA_CODE, KRYO_CODE, UNKNOWN_UID_CODE, audit_savepoint
from flinkstate.cli import main as cli_main
from flinkstate.format.metadata import has_state, read_metadata, write_metadata
from flinkstate.major_upgrade import COLLECTION_CODE
from flinkstate.major_upgrade import KRYO_CODE as ACROSS_CODE
from flinkstate.manifest import manifest_from_savepoint
from flinkstate.savepoint import Savepoint

ROOT = Path(__file__).resolve().parent.parent
KRYO_SAVEPOINTS = ROOT / "tests" / "support" / "kryo_job" / "savepoints"
JAVA_SERIALIZED = (ROOT / "tests" / "corpus" / "savepoints" / "flink-tests" / "src" / "test" / "resources"
                   / "operatorstate" / "complexKeyed-flink2.1")
NOTHING_TO_SAY = (ROOT / "tests" / "corpus" / "savepoints" / "flink-libraries" / "flink-state-processing-api" / "src"
                  / "test" / "resources" / "table-state")
#: KryoStateJob's Kryo data: state -> its Kryo paths (whole values, a POJO's Object field, its List field in 1.x).
KRYO_PATHS = {"whole": {"value"}, "objects": {"value"}, "mixed": {"value"},
              "holder": {"value.payload"}, "opaque_holder": {"value.payload"}}
#: The java.util.List fields Flink 1.x wrote with Kryo and 2.x with its own list serializer.
KRYO_LISTS = {"holder": {"value.tags"}, "opaque_holder": {"value.tags"}}


def _found(audit_exposures: list, code: str) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for exposure in audit_exposures:
        if exposure.code == code:
            found.setdefault(exposure.state, set()).add(exposure.path)
    return found


def test_a_flink1_savepoint_lists_what_flink2_breaks_as_check_does() -> None:
    savepoint = Savepoint.open(KRYO_SAVEPOINTS / "flink-1.20.3")
    audit = audit_savepoint(savepoint)
    assert (audit.flink_major, audit.metadata_version) == (1, 4)
    assert _found(audit.exposures, ACROSS_CODE) == KRYO_PATHS
    assert _found(audit.exposures, COLLECTION_CODE) == KRYO_LISTS
    assert {e.state for e in audit.exposures if e.breaks_on_flink2} == set(KRYO_PATHS)
    # V4 does not record uids: every stateful operator is said to be unknown, none is guessed
    stateful = {op.operator_id for op in savepoint.operators if has_state(op)}
    assert {e.operator for e in audit.exposures if e.code == UNKNOWN_UID_CODE} == stateful
    assert not [e for e in audit.exposures if e.code == GENERATED_UID_CODE]
    # One verdict: the check of the same savepoint for the Flink 2.3 build reports these very findings per state.
    report = check(savepoint, manifest_from_savepoint(Savepoint.open(KRYO_SAVEPOINTS / "flink-2.3")),
                   target_flink="2.3")
    checked = {(row.state, f.code, f.path) for row in report.rows for f in row.findings
               if f.code in (ACROSS_CODE, COLLECTION_CODE)}
    assert checked == {(e.state, e.code, e.path) for e in audit.exposures if e.breaks_on_flink2}


def test_a_flink2_savepoint_lists_its_kryo_data_and_operators_without_a_uid(tmp_path: Path) -> None:
    audit = audit_savepoint(Savepoint.open(KRYO_SAVEPOINTS / "flink-2.3"))
    assert audit.flink_major == 2 and not [e for e in audit.exposures if e.breaks_on_flink2]
    assert _found(audit.exposures, KRYO_CODE) == KRYO_PATHS  # 2.x writes the List fields with its own serializer
    assert not [e for e in audit.exposures if e.code in (GENERATED_UID_CODE, UNKNOWN_UID_CODE)]  # V6 has the uids
    # The same savepoint with the uid of one stateful operator gone (as a job without .uid() writes it): named,
    # with the id to keep; the other stateful operators keep theirs.
    copy = tmp_path / "no-uid"
    shutil.copytree(KRYO_SAVEPOINTS / "flink-2.3", copy)
    metadata = read_metadata((copy / "_metadata").read_bytes())
    target = next(op for op in metadata.operators if op.uid == "kryo")
    target.uid = None
    (copy / "_metadata").write_bytes(write_metadata(metadata))
    generated = [e for e in audit_savepoint(Savepoint.open(copy)).exposures if e.code == GENERATED_UID_CODE]
    assert [(e.operator, e.state) for e in generated] == [(f"{target.name} ({target.operator_id})", None)]
    assert target.operator_id in generated[0].text and "setUidHash" in generated[0].text


def test_java_serialized_state_is_listed() -> None:
    audit = audit_savepoint(Savepoint.open(JAVA_SERIALIZED))
    java = [(e.operator, e.state, e.path) for e in audit.exposures if e.code == JAVA_CODE]
    assert sorted(java) == [("first", "_default_", "value"), ("second", "_default_", "value")]


def test_the_command_prints_text_or_json_and_exits_3_when_something_is_found(capsys: pytest.CaptureFixture[str],
                                                                             tmp_path: Path) -> None:
    assert cli_main(["audit", str(KRYO_SAVEPOINTS / "flink-1.20.3"), "--json"]) == 3
    printed = json.loads(capsys.readouterr().out)
    assert printed["flink_major"] == 1 and printed["counts"][ACROSS_CODE] == 5
    assert cli_main(["audit", str(KRYO_SAVEPOINTS / "flink-1.20.3")]) == 3
    text = capsys.readouterr().out
    assert "Flink 1.x -> 2.x: 5 state(s) a Flink 2.x job would misread or fail on" in text
    # Names from the file are printed escaped.
    copy = tmp_path / "hostile"
    shutil.copytree(KRYO_SAVEPOINTS / "flink-2.3", copy)
    metadata = read_metadata((copy / "_metadata").read_bytes())
    next(op for op in metadata.operators if op.uid == "kryo").uid = "kryo\x1b[2J\nflinkstate: error: forged"
    (copy / "_metadata").write_bytes(write_metadata(metadata))
    assert cli_main(["audit", str(copy)]) == 3
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\nflinkstate: error: forged" not in out and "kryo\\x1b[2J\\nflinkstate" in out
    # Nothing to say (Flink's corpus: a table job's state, every operator with a uid): exit 0.
    assert cli_main(["audit", str(NOTHING_TO_SAY)]) == 0
    assert capsys.readouterr().out.endswith("nothing found: no Kryo or Java serialization, every operator has a uid\n")
    # A savepoint that is not one: one line, exit 1.
    assert cli_main(["audit", str(tmp_path / "missing")]) == 1
    assert capsys.readouterr().err.count("\n") == 1
