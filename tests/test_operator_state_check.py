"""Operator states in the schema and the check (issue 25, "one verdict"), without a cluster: Flink's own broadcast job
savepoint (StatefulJobWBroadcastStateMigrationITCase, Flink 2.3: split and union list states of its sources, three
broadcast states) carries its operator states through ``schema`` and the manifest, and ``check`` judges each as
Flink's ``DefaultOperatorStateBackend`` does; what it calls incompatible ``migrate`` refuses in the same line
(tests/support/one_verdict.py). The real-Flink ground truth (a CheckpointedFunction's POJO list state whose field
changes type) is tests/test_operator_state_flink.py.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from flinkstate import check
from flinkstate.cli import main as cli_main
from flinkstate.format.metadata import read_metadata, write_metadata
from flinkstate.format.operator_state import write_operator_stream
from flinkstate.manifest import ManifestError, load_manifest, manifest_from_savepoint, parse_manifest
from flinkstate.manifest_overlay import parse_overlay
from flinkstate.migration.plan import MigrationError
from flinkstate.migration.verdict import check_against_manifest
from flinkstate.savepoint import Savepoint
from flinkstate.typenotation import to_snapshot
from tests.support.one_verdict import assert_one_verdict

pytestmark = pytest.mark.corpus

CORPUS = Path(__file__).parent / "corpus" / "savepoints" / "flink-tests" / "src" / "test" / "resources"
BROADCAST_JOB = CORPUS / "new-stateful-broadcast-udf-migration-itcase-flink2.3-hashmap-savepoint"
#: The job's operators with operator state, by uid, as Flink's test builds them.
SPLIT_SOURCE, UNION_SOURCE, TWO_BROADCASTS = "CheckpointingSource1", "CheckpointingSource2", "BrProcess1"

Document = dict[str, Any]


def _schema() -> Document:
    document: Document = yaml.safe_load(manifest_from_savepoint(Savepoint.open(BROADCAST_JOB)).dump())
    return document


def _write(tmp_path: Path, document: Document, name: str = "v2.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def _rows(report: Any) -> dict[tuple[str, str | None], Any]:
    return {(row.operator, row.state): row for row in report.rows}


def test_schema_records_every_operator_state_and_reads_it_back() -> None:
    document = _schema()
    operators = document["operators"]
    assert operators[SPLIT_SOURCE]["operator_states"] == {"source-state": {"mode": "SPLIT_DISTRIBUTE",
                                                                           "value": "String"}}
    assert operators[UNION_SOURCE]["operator_states"] == {"source-state": {"mode": "UNION", "value": "String"}}
    assert operators[TWO_BROADCASTS]["operator_states"] == {
        "broadcast-state-2": {"mode": "BROADCAST", "user_key": "String", "value": "Long"},
        "broadcast-state-1": {"mode": "BROADCAST", "user_key": "Long", "value": "Long"}}
    text = yaml.safe_dump(document, sort_keys=False)
    assert yaml.safe_load(parse_manifest(text).dump()) == document  # read back: the same document


def test_check_judges_each_operator_state_with_its_kind() -> None:
    report = check(BROADCAST_JOB, parse_manifest(yaml.safe_dump(_schema())))
    rows = _rows(report)
    operator_rows = {key: (row.kind, row.old_kind, row.status, row.verdict.name) for key, row in rows.items()
                     if row.kind in ("OPERATOR_LIST", "UNION_LIST", "BROADCAST")}
    assert operator_rows[(SPLIT_SOURCE, "source-state")] == ("OPERATOR_LIST", "OPERATOR_LIST", "kept",
                                                             "COMPATIBLE_AS_IS")
    assert operator_rows[(UNION_SOURCE, "source-state")] == ("UNION_LIST", "UNION_LIST", "kept", "COMPATIBLE_AS_IS")
    assert operator_rows[(TWO_BROADCASTS, "broadcast-state-1")] == ("BROADCAST", "BROADCAST", "kept",
                                                                    "COMPATIBLE_AS_IS")
    assert len(operator_rows) == 7 and report.exit_code == 0
    assert rows[(TWO_BROADCASTS, "broadcast-state-2")].old_types == {"user_key": "String", "value": "Long"}


def test_a_manifest_without_operator_states_leaves_them_unjudged() -> None:
    """Manifests written before operator states were recorded keep working: no row, no finding for them."""
    document = _schema()
    for operator in document["operators"].values():
        operator.pop("operator_states", None)
    report = check(BROADCAST_JOB, parse_manifest(yaml.safe_dump(document)))
    assert report.exit_code == 0
    assert not [row for row in report.rows if row.kind in ("OPERATOR_LIST", "UNION_LIST", "BROADCAST")]
    assert (SPLIT_SOURCE, None) in _rows(report)


@pytest.mark.parametrize(("change", "code", "flink_verdict"), [
    ("value", "TYPE_CHANGED", "INCOMPATIBLE"),
    ("user_key", "TYPE_CHANGED", "INCOMPATIBLE"),
    ("mode", "OPERATOR_STATE_MODE_CHANGED", "INCOMPATIBLE"),
    ("kind", "OPERATOR_STATE_KIND_CHANGED", "COMPATIBLE_AS_IS"),
])
def test_a_changed_operator_state_is_incompatible_and_migrate_refuses_it_in_the_same_line(
        tmp_path: Path, change: str, code: str, flink_verdict: str) -> None:
    document = _schema()
    operator, state = (UNION_SOURCE, "source-state") if change in ("mode", "kind") else \
        (TWO_BROADCASTS, "broadcast-state-1")
    entry = document["operators"][operator]["operator_states"][state]
    if change == "mode":
        entry["mode"] = "SPLIT_DISTRIBUTE"  # getListState where the job had getUnionListState
    elif change == "kind":
        document["operators"][operator]["operator_states"][state] = {"mode": "BROADCAST", "user_key": "String",
                                                                     "value": "String"}
    else:
        entry[change] = "String"
    manifest = _write(tmp_path, document)
    report = assert_one_verdict(BROADCAST_JOB, manifest, tmp_path / "out")
    row = _rows(report)[(operator, state)]
    assert report.exit_code == 4 and row.verdict.name == "INCOMPATIBLE" and row.flink_verdict.name == flink_verdict
    assert [f.code for f in row.findings] == [code, "MIGRATION_REFUSED"]
    refusal = row.findings[-1].message
    assert refusal.startswith(f"{BROADCAST_JOB}: operator {operator}, operator state {state} (") and code in refusal
    status = cli_main(["migrate", str(BROADCAST_JOB), "--schema", str(manifest), "--output", str(tmp_path / "o2")])
    assert status == 4 or status == 1
    assert not (tmp_path / "o2").exists()
    # Every other state of the savepoint is untouched by the change: still as is.
    assert all(r.verdict.name == "COMPATIBLE_AS_IS" for key, r in _rows(report).items() if key != (operator, state))


def test_the_as_is_schema_migrates_and_copies_operator_state(tmp_path: Path) -> None:
    report = assert_one_verdict(BROADCAST_JOB, _write(tmp_path, _schema()), tmp_path / "out")
    assert report.exit_code == 0
    source, written = Savepoint.open(BROADCAST_JOB), Savepoint.open(tmp_path / "out")
    for op in (SPLIT_SOURCE, UNION_SOURCE, TWO_BROADCASTS):
        for name in source.operator_state_modes(op):
            assert [e.value for _, e in written.iter_operator_state(op, name)] == \
                [e.value for _, e in source.iter_operator_state(op, name)]


def test_states_the_new_version_does_not_register(tmp_path: Path) -> None:
    """Flink restores an operator state nobody registers and keeps it in every later snapshot: a jar's schema that
    lacks it is a possible silent loss (a rename), a manifest that leaves it out or drops it keeps it as is."""
    document = _schema()
    del document["operators"][TWO_BROADCASTS]["operator_states"]["broadcast-state-2"]
    document["operators"][TWO_BROADCASTS]["operator_states"]["broadcast-state-9"] = {
        "mode": "BROADCAST", "user_key": "Long", "value": "Long"}
    manifest = parse_manifest(yaml.safe_dump(document))
    rows = _rows(check(BROADCAST_JOB, manifest))
    assert (rows[(TWO_BROADCASTS, "broadcast-state-2")].status,
            [f.code for f in rows[(TWO_BROADCASTS, "broadcast-state-2")].findings]) == (
        "not-declared", ["OPERATOR_STATE_NOT_DECLARED"])
    assert rows[(TWO_BROADCASTS, "broadcast-state-2")].verdict.name == "COMPATIBLE_AS_IS"
    assert [f.code for f in rows[(TWO_BROADCASTS, "broadcast-state-9")].findings] == ["STATE_ADDED"]
    as_jar = copy.copy(manifest)
    as_jar.jar = "job-v2.jar"
    report = check(BROADCAST_JOB, as_jar)
    row = _rows(report)[(TWO_BROADCASTS, "broadcast-state-2")]
    assert (row.status, row.verdict.name, [f.code for f in row.findings]) == (
        "not-registered", "INCOMPATIBLE", ["OPERATOR_STATE_NOT_REGISTERED", "MIGRATION_REFUSED"])
    assert report.exit_code == 4
    document["operators"][TWO_BROADCASTS]["dropped_states"] = ["broadcast-state-2"]
    dropped = parse_manifest(yaml.safe_dump(document))
    dropped.jar = "job-v2.jar"
    row = _rows(check(BROADCAST_JOB, dropped))[(TWO_BROADCASTS, "broadcast-state-2")]
    assert (row.status, row.verdict.name, [f.code for f in row.findings]) == (
        "dropped", "COMPATIBLE_AS_IS", ["OPERATOR_STATE_DROPPED"])


@pytest.mark.parametrize(("entry", "path", "message"), [
    ({"mode": "SPLIT", "value": "String"}, "mode", "expected one of SPLIT_DISTRIBUTE, UNION, BROADCAST, got 'SPLIT'"),
    ({"mode": "UNION", "user_key": "Long", "value": "String"}, "user_key",
     "only a BROADCAST state has a map key, not a UNION list state"),
    ({"mode": "BROADCAST", "value": "String"}, "user_key", "missing type"),
    ({"mode": "UNION", "value": "String", "kind": "LIST"}, "kind", "unknown key (expected one of mode, user_key, "
                                                                   "value)"),
])
def test_a_malformed_operator_state_is_one_line_naming_the_file_and_path(
        entry: Document, path: str, message: str) -> None:
    document = {"manifest_version": 1, "operators": {"src": {"operator_states": {"splits": entry}}}}
    with pytest.raises(ManifestError) as raised:
        parse_manifest(yaml.safe_dump(document), "v2.yaml")
    assert str(raised.value) == f"v2.yaml: operators.src.operator_states.splits.{path}: {message}"


def test_a_renamed_operator_takes_its_operator_states_along(tmp_path: Path) -> None:
    document = _schema()
    document["operators"]["source-one"] = {**document["operators"].pop(SPLIT_SOURCE), "renamed_from": SPLIT_SOURCE}
    report = assert_one_verdict(BROADCAST_JOB, _write(tmp_path, document), tmp_path / "out")
    row = _rows(report)[("source-one", "source-state")]
    assert report.exit_code == 3 and row.verdict.name == "COMPATIBLE_AFTER_MIGRATION"
    assert row.migration == f"copied as is with the operator, moved from {SPLIT_SOURCE}"
    assert [e.value for _, e in Savepoint.open(tmp_path / "out").iter_operator_state("source-one", "source-state")] \
        == [e.value for _, e in Savepoint.open(BROADCAST_JOB).iter_operator_state(SPLIT_SOURCE, "source-state")]


def test_an_overlay_is_completed_with_the_jars_operator_states_and_may_not_contradict_them(tmp_path: Path) -> None:
    jar = manifest_from_savepoint(Savepoint.open(BROADCAST_JOB))
    jar.jar = "job.jar"  # as JarSchema.manifest() makes it: the jar's states
    completed = parse_overlay(jar, yaml.safe_dump({"manifest_version": 1, "operators": {UNION_SOURCE: {}}}), "o.yaml")
    assert completed.operators[UNION_SOURCE].to_dict()["operator_states"] == {
        "source-state": {"mode": "UNION", "value": "String"}}
    assert check(BROADCAST_JOB, completed).exit_code == 0
    for entry, path, message in [
        ({"mode": "SPLIT_DISTRIBUTE"}, "mode", "mode: the overlay says SPLIT_DISTRIBUTE, the jar registers UNION"),
        ({"value": "Long"}, "value", "value: the overlay says Long, the jar registers String")]:
        overlay = {"manifest_version": 1, "operators": {UNION_SOURCE: {"operator_states": {"source-state": entry}}}}
        with pytest.raises(ManifestError) as raised:
            parse_overlay(jar, yaml.safe_dump(overlay), "o.yaml")
        assert str(raised.value) == (f"o.yaml: operators.{UNION_SOURCE}.operator_states.source-state.{path}: "
                                     f"contradicts the jar job.jar: operator {UNION_SOURCE}, operator state "
                                     f"source-state, {message}")
    unknown = {"manifest_version": 1, "operators": {UNION_SOURCE: {"operator_states": {"splits": {}}}}}
    with pytest.raises(ManifestError, match="operator state splits: the overlay declares it, but the jar does not "
                                            "register it when the operator initializes \\(it registers: "
                                            "source-state\\)"):
        parse_overlay(jar, yaml.safe_dump(unknown), "o.yaml")


def test_migrates_output_check_refuses_an_operator_state_written_with_another_serializer(tmp_path: Path) -> None:
    """The check migrate runs on what it wrote (check_against_manifest) judges operator states too: the as-is output
    with one source's split state rewritten under a Long serializer snapshot is refused, naming the state."""
    manifest = _write(tmp_path, _schema())
    assert_one_verdict(BROADCAST_JOB, manifest, tmp_path / "out")
    written = Savepoint.open(tmp_path / "out")
    metadata = read_metadata((tmp_path / "out" / "_metadata").read_bytes())
    source = next(op for op in metadata.operators if op.uid == SPLIT_SOURCE)
    for index, stream in written.operator_state_streams(SPLIT_SOURCE):
        header = copy.deepcopy(stream.header())
        meta = header.list_states[0]
        meta.serializers = [(key, to_snapshot("Long")) for key, _ in meta.serializers]
        elements = [raw for _, raw in stream.element_bytes(meta.name)]
        _, handle = write_operator_stream(header, {meta.name: (stream.handle.states[meta.name].mode, elements)})
        source.subtasks[index].managed_operator_state = handle
    (tmp_path / "out" / "_metadata").write_bytes(write_metadata(metadata))
    with pytest.raises(MigrationError, match=f"operator {SPLIT_SOURCE}, state source-state: the new version would "
                                             f"not restore the written state as is \\(TYPE_CHANGED: "):
        check_against_manifest(Savepoint.open(tmp_path / "out"), load_manifest(manifest))
