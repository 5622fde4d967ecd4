"""``flinkstate schema`` and ``flinkstate check`` on savepoints real Flink wrote in this test run: the schema round
trip is byte-exact, and ``check`` gives the sample job's known outcomes (v2 after migration, v3 incompatible) with
its exit statuses, JSON and Markdown."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from flinkstate import check
from flinkstate.cli import main
from flinkstate.manifest import ManifestError, load_manifest
from flinkstate.savepoint import Savepoint
from flinkstate.serializers.registry import snapshot_bytes

pytestmark = pytest.mark.flink


@pytest.fixture(scope="module")
def savepoint(flink_savepoints: dict[str, Path]) -> Path:
    return flink_savepoints["heap-p2"]


@pytest.fixture(scope="module")
def v1(savepoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("manifests") / "v1.yaml"
    assert main(["schema", str(savepoint), "-o", str(path), "--job", "keyed-stats"]) == 0
    return path


def _edit(v1: Path, tmp_path: Path, name: str, change) -> Path:  # type: ignore[no-untyped-def]
    data = yaml.safe_load(v1.read_text())
    change(data["operators"]["stats"]["states"])
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _v2(states: dict) -> None:  # the sample job's v2: the POJO gains `label`
    states["stats"]["value"]["fields"]["label"] = "String"


def _v3(states: dict) -> None:  # v3: the POJO's count becomes a String (and label is there)
    states["stats"]["value"]["fields"].update(count="String", label="String")


def test_schema_round_trip_is_byte_exact_on_every_savepoint(flink_savepoints: dict[str, Path], tmp_path: Path):
    for name, path in flink_savepoints.items():
        out = tmp_path / f"{name}.yaml"
        assert main(["schema", str(path), "-o", str(out)]) == 0
        manifest = load_manifest(out)
        sp = Savepoint.open(path)
        compared = 0
        for op in sp.operators:
            header = sp.keyed_header(op)
            schema = manifest.find(op.operator_id)
            if header is None:
                continue
            assert schema is not None and schema.key is not None
            assert snapshot_bytes(schema.key, True) == snapshot_bytes(header.key_serializer, True)
            for meta in header.states:
                state = schema.states[meta.name]
                assert state.kind == meta.kind
                written = meta.serializer("VALUE_SERIALIZER")
                assert snapshot_bytes(state.state_serializer(), True) == snapshot_bytes(written, True), meta.name
                if meta.kind != "TIMERS":
                    assert snapshot_bytes(state.namespace) == snapshot_bytes(meta.namespace_serializer)
                compared += 1
        assert compared == 6, name  # stats, count, recent, buckets and two timer states


def test_check_exit_statuses_follow_flinks_outcomes(savepoint: Path, v1: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]):
    assert main(["check", str(savepoint), "--schema", str(v1)]) == 0
    assert "restorable" in capsys.readouterr().out
    assert main(["check", str(savepoint), "--schema", str(_edit(v1, tmp_path, "v2.yaml", _v2))]) == 3
    out = capsys.readouterr().out
    assert "POJO_FIELD_ADDED" in out and "| stats | stats | VALUE |" in out
    assert main(["check", str(savepoint), "--schema", str(_edit(v1, tmp_path, "v3.yaml", _v3))]) == 4
    assert "`POJO_FIELD_TYPE_CHANGED` at `stats / stats / value.count`" in capsys.readouterr().out


def test_check_json_report(savepoint: Path, v1: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    v3 = _edit(v1, tmp_path, "v3.yaml", _v3)
    assert main(["check", str(savepoint), "--schema", str(v3), "--format", "json"]) == 4
    report = json.loads(capsys.readouterr().out)
    assert report["report_version"] == 1 and report["manifest"] == str(v3)
    assert report["flink_verdict"] == "INCOMPATIBLE" and report["outcome"] == "incompatible"
    rows = {(r["operator"], r["state"]): r for r in report["states"]}
    assert rows[("stats", "stats")]["verdict"] == "INCOMPATIBLE"
    assert rows[("stats", "count")]["verdict"] == "COMPATIBLE_AS_IS"
    assert (rows[("sequence-source", "SourceReaderState")]["kind"], rows[("sequence-source", "SourceReaderState")][
        "verdict"]) == ("OPERATOR_LIST", "COMPATIBLE_AS_IS")  # the source's operator state, from schema
    finding = next(f for f in report["findings"] if f["code"] == "POJO_FIELD_TYPE_CHANGED")
    assert finding == {"code": "POJO_FIELD_TYPE_CHANGED", "operator": "stats", "state": "stats",
                       "path": "value.count", "old_type": "Long", "new_type": "String",
                       "verdict": "INCOMPATIBLE", "silent_misread": False, "migratable": False,
                       "message": "type changed from Long to String"}


def test_declared_migrations_are_judged_by_migrates_plan(savepoint: Path, v1: Path, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]):
    def v3_with_migration(states: dict) -> None:
        _v3(states)
        states["stats"]["migration"] = {"fields": {"count": {"convert": "to-string"}}}

    manifest = _edit(v1, tmp_path, "v3m.yaml", v3_with_migration)
    # By default flinkstate's migration engine judges declared migrations: long -> String converts.
    report = check(savepoint, manifest)
    finding = next(f for f in report.findings if f.code == "POJO_FIELD_TYPE_CHANGED")
    assert finding.migratable is True and report.exit_code == 3 and report.outcome == "migrate"
    unknown = _edit(v1, tmp_path, "v3u.yaml", lambda states: (v3_with_migration(states), states["stats"][
        "migration"]["fields"]["count"].update(convert="to-roman")))
    # An unknown conversion is refused when the manifest is loaded, for check and migrate alike.
    with pytest.raises(ManifestError, match=r"count.*to-roman"):
        check(savepoint, unknown)
    assert main(["check", str(savepoint), "--schema", str(unknown)]) == 1
    assert "to-roman" in capsys.readouterr().err
    # A known conversion that cannot produce the new type is planned as impossible: incompatible.
    impossible = _edit(v1, tmp_path, "v3i.yaml", lambda states: (v3_with_migration(states), states["stats"][
        "migration"]["fields"]["count"].update(convert="to-boolean")))
    report = check(savepoint, impossible)
    finding = next(f for f in report.findings if f.code == "POJO_FIELD_TYPE_CHANGED")
    assert finding.migratable is False and report.exit_code == 4
    # The refusal is migrate's own, word for word.
    refused = next(f for f in report.findings if f.code == "MIGRATION_REFUSED")
    assert "to-boolean" in refused.message or "Boolean" in refused.message, refused.message


def test_renames_removed_operators_and_new_states(savepoint: Path, v1: Path, tmp_path: Path):
    def rename(states: dict) -> None:
        states["total_count"] = {**states.pop("count"), "renamed_from": "count"}
        states["fresh"] = {"kind": "VALUE", "value": "Long"}

    report = check(savepoint, _edit(v1, tmp_path, "renamed.yaml", rename))
    codes = {(f.code, f.state) for f in report.findings}
    assert ("STATE_RENAMED", "total_count") in codes and ("STATE_ADDED", "fresh") in codes
    renamed = next(r for r in report.rows if r.state == "total_count")
    # Flink would restore the old state under its old name (silent loss); migrate's plan renames it (one verdict)
    assert renamed.flink_verdict.name == "COMPATIBLE_AS_IS" and renamed.verdict.name == "COMPATIBLE_AFTER_MIGRATION"
    assert all(f.migratable for f in renamed.findings if f.code == "STATE_RENAMED") and report.exit_code == 3

    data = yaml.safe_load(v1.read_text())
    del data["operators"]["sequence-source"]
    no_source = tmp_path / "no-source.yaml"
    no_source.write_text(yaml.safe_dump(data))
    assert check(savepoint, no_source).exit_code == 4
    assert check(savepoint, no_source, allow_non_restored_state=True).exit_code == 0


def test_errors_are_one_line_with_exit_1_and_usage_exit_2(savepoint: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]):
    bad = tmp_path / "bad.yaml"
    bad.write_text("manifest_version: 1\noperators:\n  stats:\n    key: String\n    states:\n"
                   "      count: {kind: VALUE, value: Lnog}\n")
    assert main(["check", str(savepoint), "--schema", str(bad)]) == 1
    err = capsys.readouterr().err
    assert err == f"flinkstate: error: {bad}: operators.stats.states.count.value: unknown type 'Lnog'\n"
    assert main(["check", str(tmp_path / "nowhere"), "--schema", str(bad)]) == 1
    assert "Traceback" not in capsys.readouterr().err
    with pytest.raises(SystemExit) as usage:
        main(["check", str(savepoint)])
    assert usage.value.code == 2
