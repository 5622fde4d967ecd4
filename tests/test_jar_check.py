"""Issue 25, the job is the truth: ``flinkstate check --jar`` and ``migrate --jar`` against the real jars of the sample
job (and a variant of v1 that renames a state), on the session's v1 savepoints.

- ``check --jar`` gives the verdict ``check --schema`` gives with the hand-written manifest of the same version
  (state by state, findings and all), with and without an overlay;
- the issue's two user mistakes are refused before anything runs, in one line naming operator, state and the
  difference: an overlay that keeps a state the jar renamed, and one that misses a type change the jar made;
- a state the savepoint has and the jar does not register is reported as such (never kept or dropped unseen), and
  the overlay's ``renamed_from`` is the way out;
- ``migrate --jar`` with the v2 overlay (its ``label`` default) writes a savepoint that real Flink restores, every
  key's value checked in the job (one restore).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from flinkstate.cli import main as cli_main
from flinkstate.engine.local import LocalFlinkCluster
from tests.support import sample_job

pytestmark = pytest.mark.flink  # the inspector's JVM on Flink's runtime, the session cluster's savepoints

MANIFESTS = sample_job.JOB_DIR / "manifests"
KEYS = 20  # the session savepoints' (tests/conftest.py SAVEPOINT_KEYS)
PROGRAM = ["--", "--keys", str(KEYS)]
CONVERSION_OVERLAY = ("manifest_version: 1\noperators:\n  stats:\n    states:\n      stats:\n        migration:\n"
                      "          fields:\n            count: {convert: to-string}\n")
RENAME_OVERLAY = "manifest_version: 1\noperators:\n  stats:\n    states:\n      recent-tx: {renamed_from: recent}\n"


@pytest.fixture(scope="module", autouse=True)
def _jar_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The inspections are cached by jar hash: in a folder of this module's, not the user's cache."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("FLINKSTATE_CACHE_DIR", str(tmp_path_factory.mktemp("jar-cache")))
        yield


@pytest.fixture(scope="module")
def renamed_jar(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample job's v1 with its ListState ``recent`` renamed ``recent-tx`` (the issue's first mistake)."""
    return sample_job.renamed_state_jar(tmp_path_factory.mktemp("renamed"))


def report(tmp_path: Path, capsys: pytest.CaptureFixture[str], savepoint: Path, *schema: str | Path,
           jar: Path | None = None) -> tuple[int, dict[str, Any]]:
    """``check``'s exit status and JSON report, the new version from ``--jar`` (with ``schema`` as the overlay) or
    from ``--schema`` alone."""
    out = tmp_path / f"report-{len(list(tmp_path.glob('report-*')))}.json"
    argv = ["check", str(savepoint), "--format", "json", "-o", str(out), *map(str, schema)]
    if jar is not None:
        argv += ["--jar", str(jar), *PROGRAM]
    status = cli_main(argv)
    capsys.readouterr()
    return status, json.loads(out.read_text())


def verdicts(document: dict[str, Any]) -> dict[str, Any]:
    """Everything a report judges, by operator and state: the rows and their findings (the manifest's name and the
    jar's order of states aside)."""
    return {"outcome": document["outcome"], "exit_code": document["exit_code"],
            "flink_verdict": document["flink_verdict"], "verdict": document["verdict"],
            "states": {(s["operator"], s["state"]): s for s in document["states"]},
            "findings": sorted(json.dumps(f, sort_keys=True) for f in document["findings"])}


def test_check_jar_gives_the_verdict_of_the_hand_written_manifests(
        flink_savepoints: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    conversion = tmp_path / "v3-conversion-overlay.yaml"
    conversion.write_text(CONVERSION_OVERLAY)
    cases = [  # (jar version, overlay or None, the hand-written manifest of the same version, its exit status)
        ("v2", MANIFESTS / "v2-overlay.yaml", "v2", 3),
        ("v2", MANIFESTS / "v2.yaml", "v2", 3),  # a full manifest that describes the jar is an overlay too
        ("v3", None, "v3", 4),
        ("v3", conversion, "v3-with-conversion", 3),
    ]
    for name in ("heap-p2", "rocksdb-p2-snappy"):
        savepoint = flink_savepoints[name]
        for version, overlay, manifest, status in cases:
            overlay_args = ["--schema", overlay] if overlay is not None else []
            from_jar = report(tmp_path, capsys, savepoint, *overlay_args, jar=sample_job.jar(version))
            by_hand = report(tmp_path, capsys, savepoint, "--schema", MANIFESTS / f"{manifest}.yaml")
            assert from_jar[0] == by_hand[0] == status, (name, version, overlay)
            assert verdicts(from_jar[1]) == verdicts(by_hand[1]), (name, version, overlay)
            assert from_jar[1]["manifest"] == (f"{sample_job.jar(version)} with the overlay {overlay}"
                                               if overlay is not None else str(sample_job.jar(version)))
        # the comparison can fail: without its overlay the v2 jar leaves the new field null, not 'migrated'
        bare = report(tmp_path, capsys, savepoint, jar=sample_job.jar("v2"))
        with_default = report(tmp_path, capsys, savepoint, "--schema", MANIFESTS / "v2.yaml")
        assert bare[0] == 3 and verdicts(bare[1]) != verdicts(with_default[1])


def test_the_two_mistakes_are_refused_before_anything_runs(
        flink_savepoints: dict[str, Path], renamed_jar: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    savepoint = flink_savepoints["heap-p2"]
    mistakes = [
        # the jar renamed `recent` to `recent-tx`; the overlay, otherwise right, keeps the old name
        (renamed_jar, MANIFESTS / "v1.yaml",
         f"{MANIFESTS / 'v1.yaml'}: operators.stats.states.recent: contradicts the jar {renamed_jar}: operator stats, "
         f"state recent: the overlay declares it, but the jar does not register it when the operator opens (it "
         f"registers: _timer_state/event_user-timers, _timer_state/processing_user-timers, buckets, count, "
         f"recent-tx, stats); if the jar renamed it, declare the new name with renamed_from: recent (e.g. "
         f"recent-tx)"),
        # the jar made `count` a String; the overlay (v2's manifest) still says Long
        (sample_job.jar("v3"), MANIFESTS / "v2.yaml",
         f"{MANIFESTS / 'v2.yaml'}: operators.stats.states.stats.value: contradicts the jar {sample_job.jar('v3')}: "
         f"operator stats, state stats, value, field count: the overlay says Long, the jar registers String"),
    ]
    for jar, overlay, line in mistakes:
        for command in (["check", savepoint], ["migrate", savepoint, "--output", tmp_path / "out"]):
            status = cli_main([*map(str, command), "--jar", str(jar), "--schema", str(overlay), *PROGRAM])
            err = capsys.readouterr().err.splitlines()
            assert status == 1, (command, err)
            assert err[0].startswith(f"flinkstate: schema of {jar} (Flink 2.3.0): 2 stateful operators of 3, ")
            assert err[1:] == [f"flinkstate: error: {line}"], command
            assert not (tmp_path / "out").exists() and not (tmp_path / "out.report").exists()


def test_a_state_the_jar_does_not_register_is_reported_with_the_way_out(
        flink_savepoints: dict[str, Path], renamed_jar: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    savepoint = flink_savepoints["rocksdb-p2"]
    status, document = report(tmp_path, capsys, savepoint, jar=renamed_jar)
    assert status == 4 and document["outcome"] == "incompatible"
    rows = {(s["operator"], s["state"]): s for s in document["states"]}
    assert (rows["stats", "recent"]["status"], rows["stats", "recent"]["verdict"]) == ("not-registered",
                                                                                       "INCOMPATIBLE")
    assert (rows["stats", "recent-tx"]["status"], rows["stats", "recent-tx"]["findings"]) == ("added",
                                                                                              ["STATE_ADDED"])
    finding = next(f for f in document["findings"] if f["state"] == "recent")
    assert (finding["code"], finding["verdict"], finding["silent_misread"], finding["migratable"]) == (
        "STATE_NOT_REGISTERED", "COMPATIBLE_AS_IS", True, False)
    reason = ("the savepoint holds it but the jar does not register it when the operator opens (registered lazily on "
              "first use, or removed): register it in open(), or declare it in the manifest (renamed_from, or "
              "dropped_states)")
    assert finding["message"] == reason
    # migrate refuses it, writing nothing
    out = tmp_path / "out"
    assert cli_main(["migrate", str(savepoint), "--jar", str(renamed_jar), "--output", str(out), *PROGRAM]) == 1
    err = capsys.readouterr().err.splitlines()[-1]
    assert err.startswith("flinkstate: error: ") and "operator stats, state recent" in err and reason in err, err
    assert not out.exists()
    # the way out: the overlay says what became of it
    rename = tmp_path / "rename-overlay.yaml"
    rename.write_text(RENAME_OVERLAY)
    status, document = report(tmp_path, capsys, savepoint, "--schema", rename, jar=renamed_jar)
    rows = {(s["operator"], s["state"]): s for s in document["states"]}
    assert status == 3 and ("stats", "recent") not in rows
    assert (rows["stats", "recent-tx"]["status"], rows["stats", "recent-tx"]["migration"]) == ("renamed",
                                                                                               "renamed from recent")


def test_migrate_jar_with_the_v2_overlay_restores_on_flink(
        flink_cluster: LocalFlinkCluster, flink_savepoints: dict[str, Path], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "migrated"
    assert cli_main(["migrate", str(flink_savepoints["heap-p2"]), "--jar", str(sample_job.jar("v2")), "--schema",
                     str(MANIFESTS / "v2-overlay.yaml"), "--output", str(out), *PROGRAM]) == 0, capsys.readouterr()
    records = sample_job.restore_audit(flink_cluster.client, "v2", out, tmp_path / "audit", keys=KEYS)
    assert sorted(r["key"] for r in records) == sorted(sample_job.key_name(k) for k in range(KEYS))
    for record in records:
        assert record["version"] == "v2"
        assert record["stats"].pop("label") == "migrated", record  # the overlay's default, not Flink's null
        assert sample_job.check_audit_record(record, "v1") > 0  # every other value as v1 wrote it


def test_the_spark_jobs_take_the_jar_as_the_cli_does(
        flink_savepoints: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # check_compatibility.py and migrate_state.py with --jar (and --schema as the overlay) run the CLI's merge: the
    # same verdict and origin as `check --jar` (no dry run: no Spark starts), the same one-line refusal before Spark
    # starts (migrate's included).
    from spark_jobs import check_compatibility, migrate_state
    from spark_jobs.common import run_main

    savepoint, overlay, v2 = flink_savepoints["heap-p2"], MANIFESTS / "v2-overlay.yaml", sample_job.jar("v2")
    jar_args = ["--program-args-json", json.dumps(PROGRAM[1:]), "--entry-class", sample_job.ENTRY_CLASS]
    status = check_compatibility.main([str(savepoint), "--jar", str(v2), "--schema", str(overlay), *jar_args,
                                       "--report-dir", str(tmp_path / "spark"), "--dry-run", "never", "--exit-code"])
    spark = json.loads((tmp_path / "spark" / "check-report.json").read_text())
    cli = report(tmp_path, capsys, savepoint, "--schema", overlay, jar=v2)
    assert status == cli[0] == 3 and verdicts(spark) == verdicts(cli[1])
    assert spark["manifest"] == cli[1]["manifest"] == f"{v2} with the overlay {overlay}"

    v3 = sample_job.jar("v3")
    line = (f"{MANIFESTS / 'v2.yaml'}: operators.stats.states.stats.value: contradicts the jar {v3}: operator stats, "
            f"state stats, value, field count: the overlay says Long, the jar registers String")
    for name, job, output in (("check_compatibility", check_compatibility, "--report-dir"),
                              ("migrate_state", migrate_state, "--output")):
        with pytest.raises(SystemExit) as ended:
            run_main(name, job.main, [str(savepoint), "--jar", str(v3), "--schema", str(MANIFESTS / "v2.yaml"),
                                      *jar_args, output, str(tmp_path / name)])
        assert ended.value.code == 1 and capsys.readouterr().err == f"{name}: error: {line}\n", name
        assert not (tmp_path / name).exists()
