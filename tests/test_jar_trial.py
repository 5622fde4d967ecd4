"""Issue 25, Flink's own verdict before the stop: ``flinkstate check SAVEPOINT --jar JAR --trial`` restores the
savepoint into the new version's operators with Flink's own classes and reports Flink's answer per state beside the
check's; a disagreement fails the check.

On the session's savepoints of the compatibility matrix's base version (the ones tests/test_compatibility_ground_truth
restores on real Flink, quoting what Flink did), for a handful of variants on HashMap and RocksDB:

- Flink's trial answer per state is what Flink did when the variant restored on the cluster: as is, values migrated
  by Flink (a POJO field added), reconfigured (an enum constant appended), and the failures with Flink's own error
  (the heap backend's restore of a POJO whose field type changed, RocksDB's StateMigrationException for a Tuple
  whose arity changed), and the check agrees with it (no TRIAL_DISAGREES, the exit status the ground truth has);
- a real disagreement fires: the check judges one variant's manifest while the jar is another's (the issue's
  "the manifest does not describe the jar"), in both directions, and the finding fails the check;
- the timer queues (rows of kind TIMERS) get Flink's answer too, resolved where the operator's timer service creates
  them: as is for the matrix's (empty) queues beside every variant's states, and for the sample job's, which hold a
  timer per key, on HashMap and RocksDB (the session's sample-job savepoints); so do the operator states (the
  source's splits, SourceReaderState: as is).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from flinkstate import Savepoint, check, render_html
from flinkstate.cli import main as cli_main
from flinkstate.engine.jar_schema import inspect_jar, trial_restore
from flinkstate.migration.trial import apply_trial
from tests.support import compat_matrix, sample_job
from tests.test_report_html import Page, words

pytestmark = pytest.mark.flink  # the inspector's JVM on Flink's runtime, the session cluster's savepoints

HEAP_FIELD_TYPE_ERROR = "java.lang.IllegalArgumentException: Can not set int field matrix.Item.count to java.lang.Long"
NEW_STATE_INCOMPATIBLE = "must not be incompatible with the old state serializer"
AS_IS = {"count": "as is", "pojo": "as is", "row": "as is", "tuple": "as is", "color": "as is"}
#: A KeyedProcessFunction's timer service ("user-timers"): its two queues, created when the operator opens.
TIMERS = ("_timer_state/processing_user-timers", "_timer_state/event_user-timers")
TIMERS_AS_IS = dict.fromkeys(TIMERS, "as is")


@pytest.fixture(scope="module", autouse=True)
def _jar_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("FLINKSTATE_CACHE_DIR", str(tmp_path_factory.mktemp("jar-cache")))
        yield


def _program(backend: str) -> list[str]:
    return ["--", "--set", f"state.backend.type={backend}"]


def _trial_report(tmp_path: Path, savepoint: Path, variant: str, backend: str) -> tuple[int, dict[str, Any]]:
    out = tmp_path / f"{variant}-{backend}.json"
    status = cli_main(["check", str(savepoint), "--jar", str(compat_matrix.jar(variant)), "--entry-class",
                       compat_matrix.ENTRY_CLASS, "--trial", "--previous", str(compat_matrix.manifest("base")),
                       "--format", "json", "-o", str(out), *_program(backend)])
    return status, json.loads(out.read_text())


def _trial_column(document: dict[str, Any], operator: str = "matrix") -> dict[str, str]:
    return {row["state"]: row.get("flink_trial") for row in document["states"] if row["operator"] == operator}


# (backend, variant) -> check's exit status (the ground truth's), Flink's trial answer for the matrix operator's states
CASES = {
    ("hashmap", "as-is"): (0, {**AS_IS, **TIMERS_AS_IS}),
    ("hashmap", "pojo-field-added"): (3, {**AS_IS, "pojo": "migrated by Flink", **TIMERS_AS_IS}),
    ("hashmap", "pojo-field-type-changed"): (4, dict.fromkeys([*AS_IS, *TIMERS], "FAILED (the operator's restore): "
                                                              + HEAP_FIELD_TYPE_ERROR)),
    ("hashmap", "enum-constant-appended"): (0, {**AS_IS, "color": "reconfigured", **TIMERS_AS_IS}),
    ("rocksdb", "pojo-field-added"): (3, {**AS_IS, "pojo": "migrated by Flink", **TIMERS_AS_IS}),
    ("rocksdb", "tuple-arity-changed"): (4, {**AS_IS, "tuple": "FAILED", **TIMERS_AS_IS}),
}


@pytest.mark.parametrize(("backend", "variant"), list(CASES), ids=[f"{v}-{b}" for b, v in CASES])
def test_the_trial_reports_what_flink_did_and_agrees_with_the_check(
    compat_matrix_base_savepoints: dict[str, Path], tmp_path: Path, backend: str, variant: str
):
    status, document = _trial_report(tmp_path, compat_matrix_base_savepoints[backend], variant, backend)
    expected_status, expected = CASES[(backend, variant)]
    trial = document["trial"]
    assert trial["backend"] == {"hashmap": "HashMapStateBackend", "rocksdb": "EmbeddedRocksDBStateBackend"}[backend]
    assert (trial["key_groups"], trial["disagreements"]) == ("one", 0), document
    assert "TRIAL_DISAGREES" not in {f["code"] for f in document["findings"]}, document
    assert status == expected_status, document
    column = _trial_column(document)
    if variant == "tuple-arity-changed":  # Flink's own exception, as the cluster quoted it
        assert column["tuple"].startswith("FAILED: org.apache.flink.util.StateMigrationException: The new state "
                                          "serializer (org.apache.flink.api.java.typeutils.runtime.TupleSerializer@")
        assert NEW_STATE_INCOMPATIBLE in column["tuple"]
        column["tuple"] = "FAILED"
    assert column == expected, document
    assert _trial_column(document, "extra") == {"seen": "as is", **TIMERS_AS_IS}, document
    assert _trial_column(document, "sequence-source") == {"SourceReaderState": "as is"}, document  # operator state
    # The HTML report of it: the jar the types came from, Flink's trial answer per state beside the check's
    page = Page(render_html(document))
    assert document["jar"] == str(compat_matrix.jar(variant)) and document["overlay"] is None
    assert page.tables["summary"][1][1].text == f"the job jar {document['jar']}"
    rows = [[c.text for c in cells] for cells in page.tables["states"][1:]]
    assert [(r[0], r[1], r[4], r[-1]) for r in rows if r[0] == "matrix" and r[3] == "kept"] == [
        (s["operator"], s["state"], "jar" if s["new_types"] else "—", s.get("flink_trial", ""))
        for s in document["states"] if s["operator"] == "matrix" and s["status"] == "kept"]
    assert page.tables["verdicts"][1][2].text == "0 disagreements with the check"


def test_a_disagreement_between_flink_and_the_check_fails_the_check(
    compat_matrix_base_savepoints: dict[str, Path]
):
    """The check judges a manifest that does not describe the jar Flink restores into, each way round: the check
    says Flink migrates the POJO while Flink fails, and the check says Flink fails while Flink migrates it."""
    savepoint = compat_matrix_base_savepoints["hashmap"]
    trials = {variant: trial_restore(compat_matrix.jar(variant), savepoint, entry_class=compat_matrix.ENTRY_CLASS,
                                     program_args=_program("hashmap")[1:])
              for variant in ("pojo-field-added", "pojo-field-type-changed")}
    for manifest, jar in (("pojo-field-added", "pojo-field-added"), ("pojo-field-added", "pojo-field-type-changed"),
                          ("pojo-field-type-changed", "pojo-field-added")):
        report = check(savepoint, compat_matrix.manifest(manifest), previous=compat_matrix.manifest("base"),
                       backend="hashmap")
        before = report.exit_code
        disagreements = apply_trial(report, trials[jar])
        findings = [f for f in report.findings if f.code == "TRIAL_DISAGREES"]
        if manifest == jar:  # the manifest describes the jar: Flink and the check agree, the verdict stands
            assert (disagreements, findings, report.exit_code) == (0, [], before), report.render_markdown()
            continue
        assert disagreements == 1 and len(findings) == 1, report.render_markdown()
        finding = findings[0]
        if jar == "pojo-field-type-changed":  # the operator's restore fails: the finding is on its first row
            assert finding.operator == "matrix" and finding.state in AS_IS, finding
            assert finding.message.startswith(f"Flink's own restore (HashMapStateBackend, one key group): Flink fails "
                                              f"the operator's restore ({HEAP_FIELD_TYPE_ERROR}); the check "
                                              f"predicted every state of the operator restorable (at worst "
                                              f"COMPATIBLE_AFTER_MIGRATION)."), finding.message
        else:
            assert (finding.operator, finding.state) == ("matrix", "pojo"), finding
            assert finding.message.startswith("Flink's own restore (HashMapStateBackend, one key group): Flink "
                                              "restores it (migrated by Flink); the check predicted INCOMPATIBLE."), \
                finding.message
        assert report.exit_code == 4 and report.outcome == "incompatible", report.render_markdown()
        assert "TRIAL_DISAGREES" in report.render_markdown()
        # The HTML report: the disagreeing state with Flink's answer and the check's prediction, the count in red
        page = Page(render_html(report.to_json()))
        assert [[c.text for c in cells] for cells in page.tables["disagreements"][1:]] == [
            [finding.operator, finding.state, next(r.trial for r in report.rows if r.state == finding.state
                                                  and r.operator == finding.operator),
             words(next(r.flink_verdict.name for r in report.rows if r.state == finding.state
                        and r.operator == finding.operator))]]
        disagreements_cell = page.tables["verdicts"][1][2]
        assert (disagreements_cell.text, disagreements_cell.classes) == ("1 disagreement with the check",
                                                                         "verdict v-incompatible")


def test_the_sample_jobs_timers_restore_as_is_on_hashmap_and_rocksdb(flink_savepoints: dict[str, Path]) -> None:
    """The sample job's operator holds a processing-time timer per key: Flink restores its queues (one key group's
    timers read back) and its timer service creates them with the same timer serializer, on either backend."""
    schema = inspect_jar(sample_job.jar("v1"))
    for savepoint, backend in ((flink_savepoints["heap-p1"], "hashmap"), (flink_savepoints["rocksdb-p2"], "rocksdb")):
        assert any(Savepoint.open(savepoint).iter_entries("stats", TIMERS[0])), "no timer to restore"
        trial = trial_restore(schema.jar, savepoint, program_args=_program(backend)[1:])  # the job's backend
        stats = next(op for op in trial.operators if op.uid == "stats")
        assert (stats.restore_failure, stats.open_failure, stats.key_groups) == (None, None, 1), stats
        assert {state.name: state.outcome for state in stats.states} == dict.fromkeys(
            ["stats", "count", "recent", "buckets", *TIMERS], "AS_IS"), (backend, stats)
        assert not any(state.operator_state for state in stats.states), stats
        source = next(op for op in trial.operators if op.uid == "sequence-source")  # its splits: an operator state
        assert [(s.name, s.operator_state, s.outcome) for s in source.states] == [
            ("SourceReaderState", True, "AS_IS")], source
        report = check(savepoint, schema.manifest(), backend=backend)
        assert apply_trial(report, trial) == 0 and report.exit_code == 0, report.render_markdown()
        timer_rows = {row.state: (row.kind, row.trial) for row in report.rows if row.state in TIMERS}
        assert timer_rows == dict.fromkeys(TIMERS, ("TIMERS", "as is")), (backend, timer_rows)
        assert [(row.state, row.kind, row.trial) for row in report.rows if row.operator == "sequence-source"] == [
            ("SourceReaderState", "OPERATOR_LIST", "as is")]
    # The job's next version on RocksDB (check --trial --backend rocksdb), its job graph built for HashMap: RocksDB
    # restores the HashMap savepoint (canonical) and Flink answers as is; before, the forced RocksDB had no share of
    # managed memory and the trial failed ("The fraction of memory to allocate should not be 0").
    moved = trial_restore(schema.jar, flink_savepoints["heap-p1"], program_args=_program("hashmap")[1:],
                          backend="rocksdb")
    stats = next(op for op in moved.operators if op.uid == "stats")
    assert moved.backend == "EmbeddedRocksDBStateBackend" and stats.restore_failure is None, stats
    assert {state.name: state.outcome for state in stats.states} == dict.fromkeys(
        ["stats", "count", "recent", "buckets", *TIMERS], "AS_IS"), stats
