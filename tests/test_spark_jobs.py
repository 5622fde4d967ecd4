"""The Spark jobs run with spark-submit on real Spark (local[2]): the check with its dry run, and the migration,
which must write byte for byte what `flinkstate migrate` writes and be restored by real Flink."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from functools import partial
from pathlib import Path
from typing import Any

import boto3
import pytest

from flinkstate import MigrationJob, Savepoint, VerificationError, verify_migration
from flinkstate.cli import main as flinkstate_main
from flinkstate.engine import LocalFlinkCluster
from flinkstate.migration.assemble import assemble_metadata
from flinkstate.migration.units import (
    assemble_streams,
    map_locally,
    migrate_unit,
    split_units,
    verification_units,
    verify_in_units,
    verify_unit,
)
from flinkstate.storage.uri import open_output
from tests.support import sample_job
from tests.support.sample_job import ROOT, check_audit_record, key_index

pytestmark = [pytest.mark.flink, pytest.mark.spark]

MANIFESTS = ROOT / "examples" / "sample-job" / "manifests"
SPARK_SUBMIT = Path(sys.executable).parent / "spark-submit"


def spark_submit(job: str, *args: str | Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1",
           "PYTHONPATH": str(ROOT)}  # user migration functions (tests.*) must import in the Python workers
    return subprocess.run([str(SPARK_SUBMIT), "--master", "local[2]", str(ROOT / "spark_jobs" / job),
                           *map(str, args)], capture_output=True, text=True, env=env, timeout=300)


def in_process(job: str, *args: str | Path) -> subprocess.CompletedProcess[str]:
    """The same job without Spark (``--in-process``), as the upgrade DAG runs it for a small savepoint."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, str(ROOT / "spark_jobs" / job), *map(str, args), "--in-process"],
                          capture_output=True, text=True, env=env, timeout=300)


def _manifest_with(tmp_path: Path, name: str, base: str, old: str, new: str) -> Path:
    text = (MANIFESTS / base).read_text()
    assert old in text
    path = tmp_path / name
    path.write_text(text.replace(old, new))
    return path


#: The check of heap-p2 for v2 (with v1's manifest as the previous one), on Spark and in one process.
V2_CHECK = ("--schema", MANIFESTS / "v2.yaml", "--previous", MANIFESTS / "v1.yaml")


@pytest.fixture(scope="module")
def v2_check_on_spark(flink_savepoints: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
                      ) -> tuple[subprocess.CompletedProcess[str], Path]:
    """One spark-submit of the check for v2, whose report two tests read (an application costs 25 to 30 s)."""
    report_dir = tmp_path_factory.mktemp("v2-check") / "report"
    return spark_submit("check_compatibility.py", flink_savepoints["heap-p2"], *V2_CHECK, "--report-dir",
                        report_dir), report_dir


def test_check_job_reports_the_migration_and_its_dry_run(
        v2_check_on_spark: tuple[subprocess.CompletedProcess[str], Path]):
    result, report_dir = v2_check_on_spark
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads((report_dir / "check-report.json").read_text())
    assert report["report_version"] == 1 and report["outcome"] == "migrate" and report["exit_code"] == 3
    assert report["flink_verdict"] == "COMPATIBLE_AFTER_MIGRATION"
    dry = report["dry_run"]
    assert dry["ran"] and dry["tasks"] >= 2 and dry["failures"] == 0
    # Every entry of the savepoint's keyed state was decoded: 20 keys x (stats, count, recent, timer) + 4 buckets.
    assert dry["entries"] == 20 * 4 + 80 and dry["states"]["stats/stats"] == {"read": 20, "converted": 20,
                                                                             "failed": 0}
    markdown = (report_dir / "check-report.md").read_text()
    assert markdown.startswith("# Compatibility check: migration required and possible")
    assert "## Dry run" in markdown and "| stats/stats | 20 | 20 | 0 |" in markdown


def test_check_job_refuses_v3_without_a_conversion(flink_savepoints: dict[str, Path], tmp_path: Path):
    result = spark_submit("check_compatibility.py", flink_savepoints["rocksdb-p2"], "--schema",
                          MANIFESTS / "v3.yaml", "--report-dir", tmp_path, "--exit-code")
    assert result.returncode == 4, result.stderr[-2000:]
    report = json.loads((tmp_path / "check-report.json").read_text())
    assert report["outcome"] == "incompatible" and not report["dry_run"]["ran"]
    codes = {f["code"] for f in report["findings"]}
    assert "POJO_FIELD_TYPE_CHANGED" in codes


@pytest.mark.parametrize("policy, limit, outcome", [("fail", 5, "incompatible"), ("dead-letter", 5, "migrate"),
                                                   ("dead-letter", 4, "incompatible")])
def test_check_job_dry_run_counts_failing_entries(flink_savepoints: dict[str, Path], tmp_path: Path, policy: str,
                                                  limit: int, outcome: str):
    manifest = _manifest_with(tmp_path, "v3-fn.yaml", "v3-with-conversion.yaml",
                              "            count: {convert: to-string}\n",
                              "            count: {convert: to-string}\n"
                              "          function: tests.test_migration:fail_on_some_keys\n"
                              f"          on_error: {policy}\n")
    # The policies are flinkstate's, not Spark's: one runs on Spark, the others in one process (the same job,
    # --in-process, which test_the_check_job_in_process_reports_what_it_reports_on_spark holds to Spark's report).
    run = spark_submit if policy == "fail" else in_process
    result = run("check_compatibility.py", flink_savepoints["heap-p2"], "--schema", manifest,
                 "--report-dir", tmp_path / "r", "--examples", "3", "--max-dead-letters", str(limit),
                 "--allow-code=tests.test_migration")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    report = json.loads((tmp_path / "r" / "check-report.json").read_text())
    failing = sorted(f"key-{k}" for k in range(20) if k % 4 == 0)
    assert report["outcome"] == outcome
    assert report["dry_run"]["failures"] == len(failing)
    assert report["dry_run"]["states"]["stats/stats"]["failed"] == len(failing)
    assert report["dry_run"]["too_many_dead_letters"] == (policy == "dead-letter" and limit < len(failing))
    examples = report["dry_run"]["examples"]
    assert len(examples) == 3 and all(e["key"] in failing and "cannot upgrade" in e["error"] for e in examples)


def test_check_job_writes_its_report_to_s3(flink_savepoints: dict[str, Path], s3_endpoint: str):
    boto3.client("s3").create_bucket(Bucket="reports")
    result = spark_submit("check_compatibility.py", flink_savepoints["heap-p1"], "--schema", MANIFESTS / "v1.yaml",
                          "--report-dir", "s3://reports/run-1")
    assert result.returncode == 0, result.stderr[-2000:]
    body = boto3.client("s3").get_object(Bucket="reports", Key="run-1/check-report.json")["Body"].read()
    report = json.loads(body)
    assert report["outcome"] == "restore" and report["verdict"] == "COMPATIBLE_AS_IS"
    assert report["dry_run"] == {"ran": False, "reason": "the outcome is 'restore'"}


def test_migrate_job_writes_what_the_cli_writes_and_flink_restores_it(
    flink_cluster: LocalFlinkCluster, flink_savepoints: dict[str, Path], tmp_path: Path
):
    source = flink_savepoints["rocksdb-p2-snappy"]
    before = {p.name: p.read_bytes() for p in source.iterdir()}
    result = spark_submit("migrate_state.py", source, "--schema", MANIFESTS / "v3-with-conversion.yaml",
                          "--output", tmp_path / "spark")
    assert result.returncode == 0, result.stderr[-2000:]
    assert flinkstate_main(["migrate", str(source), "--schema", str(MANIFESTS / "v3-with-conversion.yaml"),
                            "--output", str(tmp_path / "cli")]) == 0
    spark_files = {p.name: p.read_bytes() for p in (tmp_path / "spark").iterdir()}
    cli_files = {p.name: p.read_bytes() for p in (tmp_path / "cli").iterdir()}
    assert spark_files == cli_files, "the Spark job must write the same savepoint byte for byte"
    assert {p.name: p.read_bytes() for p in source.iterdir()} == before, "the source must not change"
    assert json.loads((tmp_path / "spark.report" / "report.json").read_text())["states"]["stats"]["stats"][
        "written"] == 20

    records = sample_job.restore_audit(flink_cluster.client, "v3", tmp_path / "spark", tmp_path / "audit", keys=20,
                                       state_backend="rocksdb")
    for record in records:
        assert isinstance(record["stats"]["count"], str)  # v3 restored the converted state Flink itself refuses
        stats: dict[str, Any] = dict(record["stats"])
        n = int(stats["count"])
        assert stats == {"key": record["key"], "count": str(n), "total": n * (n + 1) // 2, "label": None}
        record = {**record, "stats": {**stats, "count": n, "label": None}}
        assert check_audit_record({**record, "stats": {k: v for k, v in record["stats"].items() if k != "label"}},
                                  "v1") == n


def test_migrate_job_failure_is_one_line_and_leaves_nothing(flink_savepoints: dict[str, Path], tmp_path: Path):
    manifest = _manifest_with(tmp_path, "v3-fn.yaml", "v3-with-conversion.yaml",
                              "            count: {convert: to-string}\n",
                              "            count: {convert: to-string}\n"
                              "          function: tests.test_migration:fail_on_some_keys\n")
    result = spark_submit("migrate_state.py", flink_savepoints["heap-p2"], "--schema", manifest,
                          "--output", tmp_path / "out", "--allow-code=tests.test_migration")
    assert result.returncode == 1
    # spark-submit passes the Python driver's stderr to its stdout; Spark's own task-failure logs are silenced.
    error = result.stdout.strip().splitlines()[-1]
    assert "ERROR Executor" not in result.stderr and "Traceback" not in result.stdout + result.stderr
    assert error.startswith("migrate_state: error: operator stats, state stats, key ")
    assert "cannot upgrade key-" in error and key_index(error.split("'")[1]) % 4 == 0
    assert not (tmp_path / "out").exists() and not (tmp_path / ".out.inprogress").exists()


# -- key-group-range units (flinkstate.migration.units): what the Spark tasks run, here in one process -------------


def _unit_job(source: Path, tmp_path: Path, name: str, manifest: str = "v3-with-conversion.yaml") -> MigrationJob:
    return MigrationJob(str(source), str(MANIFESTS / manifest), str(tmp_path / name))


@pytest.mark.parametrize("variant", ["heap-p1", "rocksdb-p2-snappy"])
def test_units_split_each_stream_by_key_groups_and_write_the_single_process_bytes(
    flink_savepoints: dict[str, Path], tmp_path: Path, variant: str
):
    source = flink_savepoints[variant]
    single = _unit_job(source, tmp_path, "single").run()
    opened = Savepoint.open(source)
    plan = _unit_job(source, tmp_path, "plan").plan(opened)
    for target in (1, 4, 9):
        units = split_units(opened, plan, target)
        # Every rewritten stream is covered by contiguous ranges, exactly once, however many units.
        for operator_id, subtask in plan.units():
            ranges = [u.key_groups for u in units if (u.operator_id, u.subtask) == (operator_id, subtask)]
            full = plan.operators[operator_id].source.subtasks[subtask].managed_keyed_state.key_group_range
            assert ranges and ranges[0].start == full.start and ranges[-1].end == full.end
            assert all(a.end + 1 == b.start for a, b in itertools.pairwise(ranges))
        if target > 1:
            assert len(units) > len(plan.units()), "a stream must split into several units"
        report = _unit_job(source, tmp_path, f"units-{target}").run_in_units(units=target)
        assert {p.name: p.read_bytes() for p in (tmp_path / f"units-{target}").iterdir()} == \
            {p.name: p.read_bytes() for p in (tmp_path / "single").iterdir()}, "units must write the same bytes"
        assert report.verification == single.verification and report.to_json()["states"] == \
            single.to_json()["states"]
        assert not (tmp_path / f"units-{target}.parts").exists() and not (tmp_path / f".units-{target}.parts"
                                                                           ".inprogress").exists()


def test_distributed_verification_refuses_one_corrupted_block_of_one_unit(flink_savepoints: dict[str, Path],
                                                                          tmp_path: Path):
    source_path = flink_savepoints["heap-p1"]  # uncompressed: a block's bytes sit at its file offsets
    job = _unit_job(source_path, tmp_path, "out")
    source = Savepoint.open(str(source_path))
    plan = job.plan(source)
    units = split_units(source, plan, 4)
    output, scratch = open_output(job.output), open_output(f"{job.output}.parts")
    try:
        pieces = map_locally(partial(migrate_unit, job, output, scratch), units)
        results = assemble_streams(plan, pieces, scratch, output)
        scratch.abort()
        assemble_metadata(source, plan, results, output)
        staged = Savepoint(output.staged())
        checks = verification_units(source, plan, 4)
        assert len(checks) == 4
        # Untouched, the distributed verification passes and agrees with the single-process verifier.
        verified = map_locally(partial(verify_unit, job, output), checks)
        assert verify_in_units(source, staged, plan, checks, verified).lines() == \
            verify_migration(source, staged, plan).lines()

        # Flip the last byte of one `count` value (kept byte for byte) in a block of the third unit's range.
        op = staged.operator("stats")
        stream = staged.keyed_streams(op)[0][1]
        count_id = stream.header().state_index("count")
        victim = checks[2]
        key_group, start, end = next(b for b in stream.blocks if b[0] in victim.key_groups)
        data = stream.read_block(key_group, start, end)
        value_end = next(ve for sid, _, _, _, ve in stream.raw_entries(data, key_group, start) if sid == count_id)
        path = Path(str(output.staged().describe(stream.source.name)))
        raw = bytearray(path.read_bytes())
        raw[start + value_end - 1] ^= 0x01
        path.write_bytes(bytes(raw))

        staged = Savepoint(output.staged())  # reread: no cached blocks
        failures = []
        for unit in checks:
            try:
                verify_unit(job, output, unit)
            except VerificationError as exc:
                failures.append((unit, str(exc)))
        assert [unit for unit, _ in failures] == [victim], "exactly the corrupted unit fails"
        message = failures[0][1]
        assert f"operator stats, state count, key group {key_group}: 1 source entries missing or changed" in message
        assert "\n" not in message
        # And the driver never passes a run in which that unit's verification is missing.
        with pytest.raises(VerificationError, match="not every unit was verified"):
            verify_in_units(source, staged, plan, checks, [v for v in verified if v.unit != victim])
    finally:
        output.abort()


# -- the pipeline's re-check inside the migration's application (migrate_state.py --recheck-report-dir) ------------


def test_migrate_job_rechecks_in_its_own_application_as_the_check_job_does(flink_savepoints: dict[str, Path],
                                                                            tmp_path: Path):
    source = flink_savepoints["rocksdb-p2-snappy"]
    new, old = MANIFESTS / "v3-with-conversion.yaml", MANIFESTS / "v1.yaml"
    output = tmp_path / "migrated" / "savepoint"
    result = spark_submit("migrate_state.py", source, "--schema", new, "--old-schema", old, "--output", output,
                          "--recheck-report-dir", tmp_path / "migrated", "--recheck-exit-code")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    # What the DAG's recheck ran as a second application until now, on the same published savepoint (the check job
    # in one process: it reports what it reports on Spark, test_the_check_job_in_process_reports_what_it_reports_on_
    # spark; a second application would add 25 s).
    alone = in_process("check_compatibility.py", output, "--schema", new, "--report-dir", tmp_path / "alone",
                         "--dry-run", "never", "--exit-code", "--verify-against", source, "--verify-old-schema", old)
    assert alone.returncode == 0, alone.stdout[-2000:] + alone.stderr[-2000:]
    for name in ("check-report.json", "check-report.md"):
        assert (tmp_path / "migrated" / name).read_text() == (tmp_path / "alone" / name).read_text(), name
    report = json.loads((tmp_path / "migrated" / "check-report.json").read_text())
    assert report["outcome"] == "restore" and report["exit_code"] == 0 and report["verified_against"] == str(source)
    assert report["dry_run"] == {"ran": False, "reason": "--dry-run never"}
    migration = json.loads((tmp_path / "migrated" / "savepoint.report" / "report.json").read_text())
    # The re-check compared every entry again, after publishing: the same figures as the migration's own verifier
    # (whose report goes on with the manifest's checks of the output).
    assert report["verification"] == migration["verification"][:len(report["verification"])]
    assert "stats/stats: 20 entries equal to the declared transform of the source's" in report["verification"]
    assert report["verification"][-1].startswith("verified: 3 operators (ids, uids, parallelism), ")
    assert "## Verification against the source savepoint" in result.stdout

    # In one process, without Spark: the same savepoint byte for byte, the same re-check report.
    here = tmp_path / "in-process"
    alone = in_process("migrate_state.py", source, "--schema", new, "--old-schema", old, "--output",
                       here / "savepoint", "--recheck-report-dir", here, "--recheck-exit-code")
    assert alone.returncode == 0, alone.stdout[-2000:] + alone.stderr[-2000:]
    assert {p.name: p.read_bytes() for p in (here / "savepoint").iterdir()} == \
        {p.name: p.read_bytes() for p in output.iterdir()}
    mine = json.loads((here / "check-report.json").read_text())
    assert {**mine, "savepoint": str(output)} == report
    assert "SparkSession" not in alone.stdout + alone.stderr


def test_the_check_job_in_process_reports_what_it_reports_on_spark(
        flink_savepoints: dict[str, Path], v2_check_on_spark: tuple[subprocess.CompletedProcess[str], Path],
        tmp_path: Path):
    on_spark, spark_dir = v2_check_on_spark
    here = in_process("check_compatibility.py", flink_savepoints["heap-p2"], *V2_CHECK, "--report-dir",
                      tmp_path / "here")
    assert on_spark.returncode == here.returncode == 0, here.stdout[-2000:] + here.stderr[-2000:]
    spark_report, report = (json.loads((folder / "check-report.json").read_text())
                            for folder in (spark_dir, tmp_path / "here"))
    # The dry run is split into as many tasks as there are workers, and timed; what it read and converted is the
    # same.
    for dry in (spark_report["dry_run"], report["dry_run"]):
        dry.pop("tasks"), dry.pop("seconds")
    assert report == spark_report and report["dry_run"]["ran"] and report["dry_run"]["entries"] == 20 * 4 + 80
    assert "2 tasks, one process)" in (tmp_path / "here" / "check-report.md").read_text()


def test_migrate_job_recheck_refuses_a_savepoint_corrupted_after_publishing(flink_savepoints: dict[str, Path],
                                                                            tmp_path: Path):
    from tests.test_upgrade_recheck import CorruptWhenPublished

    source = flink_savepoints["heap-p1"]  # uncompressed: a flipped byte inside a value keeps the block parseable
    output = tmp_path / "migrated" / "savepoint"
    with CorruptWhenPublished(lambda: output, lambda out: out.parent / "check-report.json") as fault:
        result = spark_submit("migrate_state.py", source, "--schema", MANIFESTS / "v2.yaml", "--old-schema",
                              MANIFESTS / "v1.yaml", "--output", output, "--recheck-report-dir",
                              tmp_path / "migrated", "--recheck-exit-code")
    assert fault.done.is_set() and fault.error is None and not fault.report_existed, fault.error
    # As check_compatibility --exit-code: status 1 and the verifier's one line naming operator, state and key group.
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-2000:]
    error = result.stdout.strip().splitlines()[-1]
    assert error.startswith(f"migrate_state: error: re-check: {output} against its source {source}: operator stats, "
                            f"state stats, key group "), error
    assert "'label': 'ligrated'" in error and "Traceback" not in result.stdout + result.stderr
    # The report is written all the same, with that line, for the DAG's recheck task (which refuses the savepoint
    # with it: tests/test_upgrade_recheck.py). The header-level check alone passes: the bytes still parse.
    report = json.loads((tmp_path / "migrated" / "check-report.json").read_text())
    assert f"migrate_state: error: re-check: {report['verification_error']}" == error
    assert report["outcome"] == "restore" and "verification" not in report
    assert f"**FAILED**: {report['verification_error']}" in (tmp_path / "migrated" / "check-report.md").read_text()
