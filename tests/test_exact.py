"""Exact or refused, on savepoints real Flink wrote in this test run: the independent verifier catches every kind of
wrong output (a changed value, a missing entry, a changed operator id, a dropped operator state), a migration whose
output it rejects publishes nothing, uid-less operators keep their ids, ``check --dry-run`` sees what the header-only
check cannot, dead letters are limited, and ``describe`` says when it could not read something."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from flinkstate.cli import main
from flinkstate.format.keyed_stream import iter_raw_entries
from flinkstate.format.metadata import read_metadata, write_metadata
from flinkstate.migration.code_policy import CodePolicy
from flinkstate.migration.plan import MigrationError, OperatorTarget, StateTarget, plan_migration
from flinkstate.migration.rewrite import SubtaskResult
from flinkstate.migration.runner import migrate_savepoint, run_units_locally
from flinkstate.migration.spec import parse_migration
from flinkstate.migration.verify import VerificationError, verify_migration
from flinkstate.savepoint import Savepoint
from flinkstate.serializers.pojo import PojoSnapshot
from flinkstate.serializers.primitives import simple
from flinkstate.storage.uri import open_output

pytestmark = pytest.mark.flink


def _stats_v2() -> PojoSnapshot:
    return PojoSnapshot.create("sample.Stats", [("key", simple("String")), ("total", simple("Long")),
                                                ("count", simple("Long")), ("label", simple("String"))])


def _v2_targets(default: str = "n/a") -> list[OperatorTarget]:
    return [OperatorTarget("stats", states=[StateTarget("stats", value=_stats_v2(),
                                                        migration=parse_migration({"fields": {
                                                            "label": {"default": default}}}))])]


@pytest.fixture(scope="module")
def source(flink_savepoints: dict[str, Path]) -> Path:
    return flink_savepoints["heap-p1"]  # uncompressed: value bytes can be flipped in place


@pytest.fixture(scope="module")
def migrated(source: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("exact") / "v2"
    report = migrate_savepoint(str(source), _v2_targets(), open_output(str(out)))
    assert any("entries equal" in line for line in report.verification), report.verification
    assert any(line.startswith("verified:") for line in report.verification)
    return out


def _verify(source: Path, output: Path, targets: list[OperatorTarget]) -> Any:
    src = Savepoint.open(source)
    return verify_migration(src, Savepoint.open(output), plan_migration(src, targets))


def _copy(path: Path, tmp_path: Path) -> Path:
    target = tmp_path / "copy"
    shutil.copytree(path, target)
    return target


def test_verifier_accepts_the_migration_and_reports_what_it_compared(source: Path, migrated: Path):
    report = _verify(source, migrated, _v2_targets())
    by_state = {s.state: s for s in report.states}
    assert by_state["stats"].mode == "values" and by_state["stats"].entries == 20
    assert by_state["count"].mode == "bytes" and by_state["count"].entries == 20
    assert by_state["recent"].entries == 20 and by_state["buckets"].entries > 20
    assert report.operators == len(Savepoint.open(source).operators)
    assert report.non_keyed_handles >= 1  # the source's operator state


def _flip_value_byte(savepoint: Path, state_name: str) -> None:
    """Changes one byte of the first stored value of a state in its uncompressed keyed stream, in place."""
    sp = Savepoint.open(savepoint)
    op = sp.operator("stats")
    header = sp.keyed_header(op)
    assert header is not None and not header.compressed
    state_id = header.state_index(state_name)
    _, stream = sp.keyed_streams(op)[0]
    for key_group, start, end in stream.blocks:
        data = stream.read_block(key_group, start, end)
        for sid, _ks, _ke, vs, ve in iter_raw_entries(data):
            if sid == state_id and ve > vs:
                file = savepoint / stream.source.name  # type: ignore[operator]
                raw = bytearray(file.read_bytes())
                raw[start + ve - 1] ^= 0x01
                file.write_bytes(bytes(raw))
                return
    raise AssertionError(f"no entry of {state_name}")


@pytest.mark.parametrize("state_name", ["count", "stats"])
def test_verifier_refuses_a_changed_value(source: Path, migrated: Path, tmp_path: Path, state_name: str):
    corrupted = _copy(migrated, tmp_path)
    _flip_value_byte(corrupted, state_name)
    with pytest.raises(VerificationError, match=f"state {state_name}, key group"):
        _verify(source, corrupted, _v2_targets())


def test_verifier_refuses_values_the_declaration_does_not_give(source: Path, migrated: Path):
    # The output holds label "n/a"; a declaration of "other" must not pass.
    with pytest.raises(VerificationError, match=r"state stats.*not found"):
        _verify(source, migrated, _v2_targets(default="other"))


def test_verifier_refuses_a_missing_entry(source: Path, tmp_path: Path):
    # An engine that loses entries: a function drops every entry of one key, but the verifier is told the manifest
    # declares none.
    out = tmp_path / "lossy"
    lossy = [OperatorTarget("stats", states=[StateTarget("stats", migration=parse_migration(
        {"function": "tests.test_exact:drop_key_3"}))])]
    migrate_savepoint(str(source), lossy, open_output(str(out)), code=CodePolicy(modules=("tests.test_exact",)))
    honest = [OperatorTarget("stats", states=[StateTarget("stats")])]
    with pytest.raises(VerificationError, match=r"state stats, key group .*1 source entries missing"):
        _verify(source, out, honest)


def drop_key_3(value: Any) -> Any:
    """Used by name by a migration above: drops the POJO of key-3."""
    from flinkstate.migration.plan import DROP

    return DROP if value["key"] == "key-3" else value


def _rewrite_metadata(savepoint: Path, change: Any) -> None:
    metadata = read_metadata((savepoint / "_metadata").read_bytes(), str(savepoint / "_metadata"))
    change(metadata)
    (savepoint / "_metadata").write_bytes(write_metadata(metadata))


def test_verifier_refuses_a_changed_operator_id(source: Path, migrated: Path, tmp_path: Path):
    corrupted = _copy(migrated, tmp_path)

    def change(metadata: Any) -> None:
        op = next(o for o in metadata.operators if any(s.managed_keyed_state for s in o.subtasks.values()))
        op.operator_id = "0" * 32

    _rewrite_metadata(corrupted, change)
    with pytest.raises(VerificationError, match="missing from the output"):
        _verify(source, corrupted, _v2_targets())


def test_verifier_refuses_a_dropped_operator_state(source: Path, migrated: Path, tmp_path: Path):
    corrupted = _copy(migrated, tmp_path)

    def change(metadata: Any) -> None:
        for op in metadata.operators:
            for sub in op.subtasks.values():
                if sub.managed_operator_state is not None:
                    sub.managed_operator_state = None
                    return
        raise AssertionError("no operator state in the savepoint")

    _rewrite_metadata(corrupted, change)
    with pytest.raises(VerificationError, match="managed operator state missing"):
        _verify(source, corrupted, _v2_targets())


@pytest.mark.parametrize("corruption", ["value", "key length"])
def test_a_migration_whose_output_fails_verification_publishes_nothing(source: Path, tmp_path: Path,
                                                                       corruption: str):
    """A changed value byte and a block that no longer decodes are both the verification's refusal (a MigrationError
    naming it), never a reader's error escaping the migration."""
    out = tmp_path / "never"

    def corrupting_runner(sp: Savepoint, plan: Any, units: list[tuple[str, int]], output: Any
                          ) -> list[SubtaskResult]:
        results = run_units_locally(sp, plan, units, output)
        handle = results[0].handle
        file = output.staging / handle.delegate.relative_path
        offsets = sorted(o for o in handle.offsets.offsets if o)
        raw = bytearray(file.read_bytes())
        block = bytes(raw[offsets[0]:offsets[1]])
        _, _, _, _, ve = next(iter_raw_entries(block))
        if corruption == "value":
            raw[offsets[0] + ve - 1] ^= 0x01  # the last byte of the first stored value
        else:
            raw[offsets[0] + 2] ^= 0x40  # the high byte of the first key's length (after the state id)
        file.write_bytes(bytes(raw))
        return results

    with pytest.raises(MigrationError, match="verification"):
        migrate_savepoint(str(source), _v2_targets(), open_output(str(out)), run_units=corrupting_runner)
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name != "never"]  # no staging left either


# -- operator identity ---------------------------------------------------------------------------------------------


def test_identity_migration_keeps_the_ids_of_operators_without_uids(source: Path, tmp_path: Path):
    # Metadata V4 (Flink 1.15-1.20) records no uids: the manifest names operators by their 32-hex ids.
    v4 = tmp_path / "v4"
    assert main(["migrate", str(source), "--schema", str(_schema(source, tmp_path / "m.yaml")), "--output",
                 str(v4), "--metadata-version", "4"]) == 0
    manifest = _schema(v4, tmp_path / "m4.yaml")
    assert all(len(label) == 32 for label in yaml.safe_load(manifest.read_text())["operators"])
    out = tmp_path / "identity"
    assert main(["migrate", str(v4), "--schema", str(manifest), "--output", str(out)]) == 0
    before = {op.operator_id for op in Savepoint.open(v4).operators}
    after = {op.operator_id for op in Savepoint.open(out).operators}
    assert before == after
    for op in Savepoint.open(v4).operators:
        for info in Savepoint.open(v4).keyed_states(op):
            assert list(Savepoint.open(v4).iter_entries(op.operator_id, info.name)) == \
                list(Savepoint.open(out).iter_entries(op.operator_id, info.name))


def _schema(savepoint: Path, path: Path) -> Path:
    assert main(["schema", str(savepoint), "-o", str(path)]) == 0
    return path


# -- check --dry-run and dead letters --------------------------------------------------------------------------------


def _key_to_long_manifest(source: Path, tmp_path: Path, on_error: str | None = None) -> Path:
    """The POJO's String field ``key`` declared as a Long with a to-long conversion: plannable, but no key
    ("key-7") parses."""
    path = _schema(source, tmp_path / "v1.yaml")
    data = yaml.safe_load(path.read_text())
    state = data["operators"]["stats"]["states"]["stats"]
    state["value"]["fields"]["key"] = "Long"
    state["migration"] = {"fields": {"key": {"convert": "to-long"}}}
    if on_error:
        state["migration"]["on_error"] = on_error
    out = tmp_path / f"to-long-{on_error}.yaml"
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


def test_check_dry_run_refuses_a_migration_that_fails_on_every_entry(source: Path, tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]):
    manifest = _key_to_long_manifest(source, tmp_path)
    assert main(["check", str(source), "--schema", str(manifest)]) == 3  # header-only: plannable
    assert "--dry-run" in capsys.readouterr().out
    assert main(["check", str(source), "--schema", str(manifest), "--dry-run"]) == 4
    out = capsys.readouterr().out
    assert "would fail" in out and "not an integer" in out
    assert main(["check", str(source), "--schema", str(manifest), "--dry-run", "--format", "json"]) == 4
    report = yaml.safe_load(capsys.readouterr().out)
    assert report["outcome"] == "incompatible" and report["dry_run"]["failures"] == 20


def test_dead_letters_need_an_explicit_limit(source: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    manifest = _key_to_long_manifest(source, tmp_path, on_error="dead-letter")
    assert main(["check", str(source), "--schema", str(manifest), "--dry-run"]) == 4
    assert "more than the limit of 0" in capsys.readouterr().out
    assert main(["check", str(source), "--schema", str(manifest), "--dry-run", "--max-dead-letters", "20"]) == 3
    capsys.readouterr()
    out = tmp_path / "out"
    assert main(["migrate", str(source), "--schema", str(manifest), "--output", str(out)]) == 1
    assert "--max-dead-letters" in capsys.readouterr().err
    assert not out.exists()


# -- describe ----------------------------------------------------------------------------------------------------------


def test_describe_exits_1_when_a_state_cannot_be_read(source: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]):
    broken = _copy(source, tmp_path)
    keyed = next(p for p in broken.iterdir() if p.name != "_metadata" and p.stat().st_size > 1000)
    raw = bytearray(keyed.read_bytes())
    raw[8:40] = b"\xff" * 32  # inside the keyed backend header: its serializer snapshots
    keyed.write_bytes(bytes(raw))
    assert main(["describe", str(broken)]) == 1
    captured = capsys.readouterr()
    assert "operator" in captured.out  # the listing is still printed
    errors = captured.err.strip().splitlines()
    assert errors and all(line.startswith("flinkstate: error: ") for line in errors)
    assert "Traceback" not in captured.err


def test_a_lossy_codec_cannot_hide_behind_equal_values(source: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch):
    # A codec that loses precision (as the microsecond timestamps once did) decodes the source and the output the
    # same way, so comparing decoded values says "equal". The verifier also re-encodes every source value and
    # compares the bytes with Flink's, which catches it. Simulated here by a Long decoder that rounds to tens.
    from flinkstate.serializers.primitives import SimpleSnapshot

    make_decoder = SimpleSnapshot.make_decoder

    def lossy(self: SimpleSnapshot) -> Any:
        decode = make_decoder(self)
        if self.type_name() != "Long":
            return decode

        def rounded(buf: bytes, off: int) -> tuple[Any, int]:
            value, end = decode(buf, off)
            return value // 10 * 10, end

        return rounded

    monkeypatch.setattr(SimpleSnapshot, "make_decoder", lossy)
    # The lossy codec is the pure-Python one: the compiled twin (differentially tested against it) is kept out.
    monkeypatch.setenv("FLINKSTATE_PURE_PYTHON", "1")
    out = tmp_path / "lossy"
    with pytest.raises(MigrationError, match="does not re-encode to the bytes Flink wrote"):
        migrate_savepoint(str(source), _v2_targets(), open_output(str(out)))
    assert not out.exists()


def test_a_manifest_that_matches_no_operator_is_an_error(source: Path, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]):
    manifest = tmp_path / "other-job.yaml"
    manifest.write_text("manifest_version: 1\noperators:\n  another-job-operator: {}\n")
    out = tmp_path / "out"
    assert main(["migrate", str(source), "--schema", str(manifest), "--output", str(out)]) == 1
    err = capsys.readouterr().err
    assert "no operator of the manifest (another-job-operator) is in the savepoint" in err
    assert not out.exists()


def test_a_missing_state_file_names_its_operator(source: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    broken = _copy(source, tmp_path)
    sp = Savepoint.open(broken)
    ((_, stream),) = sp.keyed_streams("stats")
    (broken / stream.source.name).unlink()  # type: ignore[operator]
    assert main(["dump", str(broken), "--operator", "stats", "--state", "count"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "operator stats, subtask 0: keyed state file:" in err
    assert main(["describe", str(broken)]) == 1
    captured = capsys.readouterr()
    assert "operator" in captured.out and "operator stats, subtask 0" in captured.err


def test_the_report_never_contradicts_itself(source: Path, capsys: pytest.CaptureFixture[str]):
    manifests = Path(__file__).resolve().parents[1] / "examples" / "sample-job" / "manifests"
    assert main(["check", str(source), "--schema", str(manifests / "v2.yaml")]) == 3
    report = capsys.readouterr().out
    assert "field label added; the declared migration sets it to 'migrated' (new: `String`)" in report
    assert "`None`" not in report and "restores as null" not in report
    assert main(["check", str(source), "--schema", str(manifests / "v3-with-conversion.yaml")]) == 3
    report = capsys.readouterr().out
    assert report.startswith("# Compatibility check: migration required and possible")
    # The verdict of migrate's plan under the headline, and Flink's own on the savepoint as it is, named as such:
    # never an INCOMPATIBLE verdict under a "possible" headline
    assert "- verdict: **COMPATIBLE_AFTER_MIGRATION**: `flinkstate migrate` runs the plan; the new version restores " \
           "its output as is\n- Flink on its own, restoring the savepoint as it is: INCOMPATIBLE\n" in report


def test_check_writes_its_report_to_a_file(source: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    manifests = Path(__file__).resolve().parents[1] / "examples" / "sample-job" / "manifests"
    out = tmp_path / "reports" / "check.json"
    assert main(["check", str(source), "--schema", str(manifests / "v2.yaml"), "--format", "json", "-o",
                 str(out)]) == 3
    captured = capsys.readouterr()
    assert captured.out == "" and "report written to" in captured.err
    assert yaml.safe_load(out.read_text())["outcome"] == "migrate"
