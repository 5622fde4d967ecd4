"""The handoff between an upgrade run and its pre-started migration application (flinkstate/upgrades/handoff.py,
``migrate_state.py --await-handoff``): the stop savepoint handed over, a bounded wait, a foreign or stale handoff
refused, a run that calls the migration off or loses its journal. No JVM: the application runs ``--in-process`` on a
savepoint of Flink's corpus (an identity migration: its own schema), as the DAG's Spark application would. One test
runs it on real Spark: where a handed-over savepoint is migrated (the driver or Spark tasks, by its size)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flinkstate import HANDOFF_FILE, UpgradeJournal
from flinkstate.upgrades.handoff import AppRef, HandoffAbandoned, HandoffRefused

ROOT = Path(__file__).resolve().parents[1]
SAVEPOINT = (ROOT / "tests" / "corpus" / "savepoints" / "flink-tests" / "src" / "test" / "resources"
             / "new-stateful-udf-migration-itcase-flink2.3-hashmap-checkpoint")
RUN = {"dag_id": "flink_state_upgrade", "run_id": "r1"}


def _journal(base: Path, run: dict[str, str] = RUN) -> UpgradeJournal:
    plan = {"savepoint_base": str(base), "job_name": "orders", "run_id": run["run_id"],
            "run_dir": str(base / "orders" / run["run_id"]), "old": {"jar": "/a.jar"}, "new": {"jar": "/b.jar"},
            "job_id": "0" * 32}
    return UpgradeJournal.start(plan, "resolve", {**run, "task_id": "resolve"})


def test_the_stop_savepoint_handed_over_is_what_the_application_gets(tmp_path: Path):
    journal = _journal(tmp_path)
    app = AppRef.new(str(tmp_path / "run"), RUN)
    assert app.folder == f"{tmp_path}/run/migrate-app/{app.token}" and app.ready() is None
    app.say_ready(12.5)
    ready = app.ready()
    assert ready is not None and ready["session_seconds"] == 12.5 and ready["run"] == RUN
    app.hand_over("/savepoints/stop/savepoint-1")
    assert app.await_stop_savepoint(journal.uri, timeout=5) == "/savepoints/stop/savepoint-1"
    app.call_off("the check chose the restore path")  # too late: the handoff stays (its publish is fenced)
    assert app.await_stop_savepoint(journal.uri, timeout=5) == "/savepoints/stop/savepoint-1"


def test_the_wait_is_bounded(tmp_path: Path):
    journal = _journal(tmp_path)
    app = AppRef.new(str(tmp_path / "run"), RUN)
    began = time.monotonic()
    with pytest.raises(HandoffAbandoned) as abandoned:
        app.await_stop_savepoint(journal.uri, timeout=0.5)
    assert 0.5 <= time.monotonic() - began < 3
    assert str(abandoned.value) == f"no stop savepoint handed over in {app.folder}/handoff.json within 0 s"
    # The run's side waits for the application likewise: bounded, and at once when its process is gone.
    began = time.monotonic()
    assert app.wait_for(app.ready, 0.3) is None and 0.3 <= time.monotonic() - began < 3
    began = time.monotonic()
    assert app.wait_for(app.result, 60, alive=lambda: False) is None and time.monotonic() - began < 1


def test_a_stale_or_foreign_handoff_is_refused(tmp_path: Path):
    journal = _journal(tmp_path)
    app = AppRef.new(str(tmp_path / "run"), RUN)
    # An earlier launch of this run's application (another token) wrote into this launch's folder.
    AppRef(app.folder, RUN, "0" * 32).hand_over("/savepoints/stop/savepoint-old")
    with pytest.raises(HandoffRefused) as stale:
        app.await_stop_savepoint(journal.uri, timeout=5)
    assert str(stale.value) == (f"{app.folder}/handoff.json: stale: written for another launch of this run's "
                                f"migration application (token 000000000000, not {app.token[:12]})")
    # Another run's handoff (its own token, even this one).
    AppRef(app.folder, {"dag_id": "flink_state_upgrade", "run_id": "r0"}, app.token).hand_over("/sp/other")
    with pytest.raises(HandoffRefused) as foreign:
        app.await_stop_savepoint(journal.uri, timeout=5)
    assert str(foreign.value) == (f"{app.folder}/handoff.json: foreign: written for run r0 of flink_state_upgrade, "
                                  f"not for run r1 of flink_state_upgrade")
    (Path(app.folder) / "handoff.json").write_text("{not json")
    with pytest.raises(HandoffRefused, match=r"handoff.json: not a handoff file"):
        app.await_stop_savepoint(journal.uri, timeout=5)


def test_a_run_that_calls_the_migration_off_or_loses_its_journal_is_abandoned(tmp_path: Path):
    journal = _journal(tmp_path)
    called_off = AppRef.new(str(tmp_path / "run"), RUN)
    called_off.call_off("the check chose the restore path")
    with pytest.raises(HandoffAbandoned, match=r"^the run called the migration off: the check chose the restore path$"):
        called_off.await_stop_savepoint(journal.uri, timeout=5)
    app = AppRef.new(str(tmp_path / "run"), RUN)
    # Taken over (the watchdog claims the run for itself): the application gives up within one look.
    watchdog = UpgradeJournal.for_deployment(str(tmp_path), "orders")
    assert watchdog is not None
    watchdog.touch("watchdog")
    began = time.monotonic()
    with pytest.raises(HandoffAbandoned, match=r"^the run no longer holds its journal: .*taken over by watchdog"):
        app.await_stop_savepoint(journal.uri, timeout=30)
    assert time.monotonic() - began < 2
    # Closed (the run concluded: rolled back, or refused).
    closed = _journal(tmp_path / "closed")
    closed.finish("rolled back", "conclude", running=None)
    with pytest.raises(HandoffAbandoned, match=r"^the run no longer holds its journal: .*already closed"):
        app.await_stop_savepoint(closed.uri, timeout=30)


def _start_app(app: AppRef, journal: UpgradeJournal, output: Path, timeout: float = 60) -> subprocess.Popen[str]:
    """migrate_state.py --await-handoff, in one process (what the DAG starts with spark-submit)."""
    schema = output.parent / "schema.yaml"
    if not schema.exists():
        subprocess.run([sys.executable, "-m", "flinkstate", "schema", str(SAVEPOINT), "-o", str(schema)], check=True,
                       capture_output=True)
    return subprocess.Popen(
        [sys.executable, str(ROOT / "spark_jobs" / "migrate_state.py"), "--await-handoff", app.folder,
         "--handoff-token", app.token, "--handoff-timeout", str(timeout), "--schema", str(schema), "--output",
         str(output), "--fence-journal", journal.uri, "--fence-run", json.dumps(app.run), "--in-process"],
        text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def test_the_application_waits_ready_then_migrates_what_is_handed_over(tmp_path: Path):
    journal = _journal(tmp_path)
    app = AppRef.new(str(tmp_path / "run"), RUN)
    process = _start_app(app, journal, tmp_path / "migrated")
    try:
        assert app.wait_for(app.ready, 60, alive=lambda: process.poll() is None) is not None
        time.sleep(0.5)  # it waits: nothing migrated before the handoff
        assert process.poll() is None and not (tmp_path / "migrated").exists()
        app.hand_over(str(SAVEPOINT))
        out, _ = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, out
    result = app.result()
    assert result is not None and result["outcome"] == "published" and result["exit_code"] == 0, result
    assert result["line"] == f"published {tmp_path / 'migrated'} (exit 0)"
    assert (tmp_path / "migrated" / "_metadata").exists()
    assert f"the stop savepoint {SAVEPOINT} was handed over after " in out


def test_the_application_ends_cleanly_when_the_run_concludes_and_refuses_a_stale_handoff(tmp_path: Path):
    journal = _journal(tmp_path)
    app = AppRef.new(str(tmp_path / "run"), RUN)
    process = _start_app(app, journal, tmp_path / "migrated")
    assert app.wait_for(app.ready, 60, alive=lambda: process.poll() is None) is not None
    journal.finish("rolled back", "conclude", running=None)  # the run lost its lease while the app waited
    out, _ = process.communicate(timeout=60)
    assert process.returncode == 0, out
    result = app.result()
    assert result is not None and result["outcome"] == "abandoned", result
    assert result["line"].startswith("migrated nothing: the run no longer holds its journal: ") and \
        "already closed (rolled back" in result["line"]
    assert "Traceback" not in out and not (tmp_path / "migrated").exists()
    # A stale handoff: one line, status 1, nothing migrated.
    journal = _journal(tmp_path / "again")
    app = AppRef.new(str(tmp_path / "run"), RUN)
    AppRef(app.folder, RUN, "f" * 32).hand_over(str(SAVEPOINT))
    out, _ = _start_app(app, journal, tmp_path / "migrated").communicate(timeout=60)
    result = app.result()
    assert result is not None and result["outcome"] == "failed" and result["exit_code"] == 1, result
    assert result["line"].startswith("error: ") and ": stale: written for another launch" in result["line"]
    assert out.strip().splitlines()[-1] == f"migrate_state: {result['line']}"
    assert "Traceback" not in out and not (tmp_path / "migrated").exists()


def _nice_values(pid: int) -> set[int]:
    """The nice values of a process's threads (field 19 of /proc/PID/task/TID/stat). A thread that ends between the
    listing and the read is skipped: the JVM's threads come and go while its session stops."""
    values = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            values.add(int((task / "stat").read_text().rpartition(")")[2].split()[16]))
        except (FileNotFoundError, ProcessLookupError):
            continue
    return values


@pytest.mark.spark
def test_a_small_stop_savepoint_is_migrated_by_the_driver_without_spark_stages(tmp_path: Path):
    """The pre-started application on real Spark (spark-submit, local[2]): handed a savepoint below
    ``--in-process-max-bytes``, its driver migrates and re-checks it without a Spark job (Spark's event log records
    none), and the output is what ``flinkstate migrate`` writes. With the bound below the savepoint's size, the same
    application runs Spark jobs: the event log check can fail. Once its result is recorded, the application (its
    Python driver and its JVM) runs at the lowest CPU priority."""
    expected = tmp_path / "expected"
    schema = tmp_path / "schema.yaml"
    subprocess.run([sys.executable, "-m", "flinkstate", "schema", str(SAVEPOINT), "-o", str(schema)], check=True,
                   capture_output=True)
    subprocess.run([sys.executable, "-m", "flinkstate", "migrate", str(SAVEPOINT), "--schema", str(schema),
                    "--output", str(expected)], check=True, capture_output=True)
    size = sum(path.stat().st_size for path in SAVEPOINT.iterdir())
    spark_submit = Path(sys.executable).parent / "spark-submit"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1", "PYTHONPATH": str(ROOT)}
    for bound, in_driver in ((size, True), (size - 1, False)):
        work = tmp_path / f"bound-{bound}"
        events = work / "events"
        events.mkdir(parents=True)
        journal = _journal(work)
        app = AppRef.new(str(work / "run"), RUN)
        process = subprocess.Popen(
            [str(spark_submit), "--master", "local[2]", "--conf", "spark.eventLog.enabled=true", "--conf",
             "spark.eventLog.compress=false", "--conf",
             f"spark.eventLog.dir={events.as_uri()}", str(ROOT / "spark_jobs" / "migrate_state.py"),
             "--await-handoff", app.folder, "--handoff-token", app.token, "--handoff-timeout", "120",
             f"--in-process-max-bytes={bound}", "--schema", str(schema), "--output", str(work / "migrated"),
             "--recheck-report-dir", str(work / "recheck"), "--recheck-exit-code", "--fence-journal", journal.uri,
             "--fence-run", json.dumps(app.run)], text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            env=env)
        try:
            ready = app.wait_for(app.ready, 240, alive=lambda process=process: process.poll() is None)
            assert ready is not None
            app.hand_over(str(SAVEPOINT))
            assert app.wait_for(app.result, 300, alive=lambda process=process: process.poll() is None,
                                poll=0.01) is not None
            # Its session stops after the result, at the lowest CPU priority (the new job restores meanwhile): the
            # Python driver's threads and its JVM's (spark-submit's, the driver's parent), lowered before the result
            # was written.
            driver = ready["pid"]
            jvm = int(Path(f"/proc/{driver}/stat").read_text().rpartition(")")[2].split()[1])
            assert Path(f"/proc/{jvm}/comm").read_text().strip() == "java"
            assert _nice_values(driver) == _nice_values(jvm) == {19}
            out, _ = process.communicate(timeout=300)
        finally:
            if process.poll() is None:
                process.kill()
        assert process.returncode == 0, out[-3000:]
        result = app.result()
        assert result is not None and result["outcome"] == "published", result
        relation = "at most" if in_driver else "more than"
        runner = "the driver migrates it, task after task" if in_driver else "Spark tasks migrate it"
        assert f"migrate_state: {runner}: the savepoint's {size:,} bytes are {relation} in_process_max_bytes " \
               f"({bound:,})" in out, out[-3000:]
        # Spark's jobs after the handoff (the session's warm-up job ran before the application was ready).
        handed = json.loads(Path(app.path(HANDOFF_FILE)).read_text())["written_at"]
        log = [json.loads(line) for path in events.rglob("events_*")  # Spark 4: a folder of rolled files
               for line in path.read_text().splitlines() if line.strip()]
        assert any(event["Event"] == "SparkListenerApplicationStart" for event in log)
        jobs = [event for event in log if event["Event"] == "SparkListenerJobStart"]
        after = sum(event["Submission Time"] / 1000 > handed for event in jobs)
        assert len(jobs) >= 1 and ((after == 0) if in_driver else (after >= 2)), (in_driver, handed, jobs)
        for path in expected.iterdir():
            assert (work / "migrated" / path.name).read_bytes() == path.read_bytes(), path.name
        assert json.loads((work / "recheck" / "check-report.json").read_text())["outcome"] == "restore"
