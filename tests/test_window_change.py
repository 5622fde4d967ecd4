"""A window operator whose window changed (issue 23): the savepoint does not record it, the two versions' manifests
do (``window:``, which ``schema --jar`` writes). A SQL window TVF's state is held by slice end, which Flink restores
under a new size and misreads: ``check`` calls it incompatible and ``migrate`` refuses it, by the same verdict. A
DataStream window holds its bounds: the change is a finding, not a refusal.

Without a JVM, on one of Flink's own savepoints with windows written into the manifests (the rule); the window lines
the inspector writes for real jobs are tested in tests/test_window_spec.py."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from flinkstate import Savepoint
from flinkstate.cli import main as flinkstate_main
from flinkstate.compatibility import AS_IS, INCOMPATIBLE
from flinkstate.manifest import Manifest, load_manifest, manifest_from_savepoint
from flinkstate.migration.job import MigrationJob
from flinkstate.migration.plan import MigrationError
from flinkstate.migration.verdict import check

SOURCE = (Path(__file__).parent / "corpus" / "savepoints" / "flink-tests" / "src" / "test" / "resources"
          / "new-stateful-udf-migration-itcase-flink2.1-hashmap-savepoint")
OPERATOR = "CheckpointingTimelyStatefulOperator1"
SLICE_30S = "slice:SliceAssigners$TumblingSliceAssigner(isEventTime=false, offset=0, shiftTimeZone=UTC, size=30000)"
SLICE_60S = SLICE_30S.replace("size=30000", "size=60000")
WINDOW_40 = "window:TumblingEventTimeWindows(globalOffset=0, size=40, windowStagger=ALIGNED)"
WINDOW_80 = WINDOW_40.replace("size=40", "size=80")


def _versions(old_window: str | None, new_window: str | None) -> tuple[Manifest, Manifest]:
    previous = manifest_from_savepoint(Savepoint.open(SOURCE))
    new = copy.deepcopy(previous)
    previous.operators[OPERATOR].window = old_window
    new.operators[OPERATOR].window = new_window
    return previous, new


def _migrate(new: Manifest, previous: Manifest, tmp_path: Path) -> Path:
    (tmp_path / "previous.yaml").write_text(previous.dump())
    MigrationJob(str(SOURCE), new, str(tmp_path / "out"), old_schema=str(tmp_path / "previous.yaml")).run()
    return tmp_path / "out"


def _rows(report, operator: str = OPERATOR):  # type: ignore[no-untyped-def]
    return [row for row in report.rows if row.operator == operator]


def test_a_changed_slice_window_is_a_silent_misread_and_migrate_refuses_it(tmp_path: Path) -> None:
    previous, new = _versions(SLICE_30S, SLICE_60S)
    report = check(SOURCE, new, previous=previous)
    rows = _rows(report)
    assert rows and all(row.verdict is INCOMPATIBLE for row in rows)
    assert all(row.flink_verdict is AS_IS for row in rows), "Flink restores it as is: that is the misread"
    finding = rows[0].findings[0]
    assert finding.code == "WINDOW_CHANGED" and finding.silent_misread and finding.migratable is False
    assert finding.old_type == SLICE_30S and finding.new_type == SLICE_60S and "size=60000" in finding.message
    assert report.exit_code == 4
    # Every other operator is untouched by the rule.
    assert all(row.verdict is AS_IS for row in report.rows if row.operator != OPERATOR)
    # migrate refuses the same upgrade before writing anything.
    with pytest.raises(MigrationError, match=f"operator {OPERATOR}.*would misread the state.*WINDOW_CHANGED"):
        _migrate(new, previous, tmp_path)
    assert not (tmp_path / "out").exists()


def test_a_changed_datastream_window_is_a_finding_not_a_refusal(tmp_path: Path) -> None:
    previous, new = _versions(WINDOW_40, WINDOW_80)
    report = check(SOURCE, new, previous=previous)
    rows = _rows(report)
    assert all(row.verdict is AS_IS for row in rows) and report.exit_code == 0
    finding = rows[0].findings[0]
    assert finding.code == "WINDOW_CHANGED" and not finding.silent_misread
    assert "open windows keep their bounds" in finding.message
    assert "WINDOW_CHANGED" in report.render_markdown()
    # One verdict: restorable, so migrate copies it.
    assert (_migrate(new, previous, tmp_path) / "_metadata").is_file()


@pytest.mark.parametrize(("old", "new"), [(SLICE_30S, SLICE_30S), (None, SLICE_60S), (SLICE_30S, None)],
                         ids=["same", "old-unknown", "new-unknown"])
def test_no_finding_when_the_window_is_the_same_or_one_side_does_not_know_it(old: str | None,
                                                                           new: str | None) -> None:
    previous, manifest = _versions(old, new)
    report = check(SOURCE, manifest, previous=previous)
    assert not any(f.code == "WINDOW_CHANGED" for row in report.rows for f in row.findings)
    assert report.exit_code == 0


def test_the_manifest_carries_the_window_and_the_cli_judges_by_previous(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    previous, new = _versions(SLICE_30S, SLICE_60S)
    (tmp_path / "old.yaml").write_text(previous.dump())
    (tmp_path / "new.yaml").write_text(new.dump())
    assert load_manifest(tmp_path / "new.yaml").operators[OPERATOR].window == SLICE_60S
    assert f"window: {SLICE_60S}" in (tmp_path / "new.yaml").read_text()
    code = flinkstate_main(["check", str(SOURCE), "--schema", str(tmp_path / "new.yaml"),
                            "--previous", str(tmp_path / "old.yaml")])
    assert code == 4 and "WINDOW_CHANGED" in capsys.readouterr().out
    # Without the previous version's manifest nothing says what the window was: no finding, as Flink sees it.
    assert flinkstate_main(["check", str(SOURCE), "--schema", str(tmp_path / "new.yaml")]) == 0
