"""The upgrade DAG's re-check, which runs inside the migration's Spark application (``migrate_state.py
--recheck-report-dir``) and is judged by the ``recheck`` task: real Airflow (dag.test), the real local Flink, Spark in
local mode.

- A migrated savepoint corrupted after it was published (one byte of one value, so that it still parses) is refused
  by the in-application re-check: ``migrate`` succeeds, ``recheck`` fails naming the key group, and the run rolls
  back to the old version from the stop savepoint.
- The re-check's report gone: ``recheck`` fails in one line saying so, and the run rolls back.

The Spark run is the DAG's pre-started path (issue 28): the migration application got its session before the stop
(its ready file is older than the journal's ``stopping``), was handed the stop savepoint, and published; ``migrate``
only waited for its result.

The corruption is made while the migration application is paused (SIGSTOP) between publishing the savepoint and
re-checking it: the test then asserts the re-check had not started, so that it never passes by luck.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from flinkstate.engine import LocalFlinkCluster
from tests.support import sample_job
from tests.support.airflow_env import ROOT, load_dag, set_connection
from tests.support.sample_job import ENTRY_CLASS

pytestmark = [pytest.mark.flink, pytest.mark.airflow, pytest.mark.spark]  # the DAG runs spark-submit

MANIFESTS = ROOT / "examples" / "sample-job" / "manifests"
KEYS = 6
DEPLOYMENT = "keyed-stats-recheck"


def migration_processes(output: Path) -> list[int]:
    """The processes of the migration application writing ``output``: spark-submit's JVM and the Python driver
    (both carry the job's arguments); its Python workers only run what the JVM hands them."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                argv = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if any(a.endswith(b"migrate_state.py") for a in argv) and str(output).encode() in argv:
                found.append(int(proc.name))
    return found


def flip_a_migrated_value(savepoint: Path) -> str:
    """Changes one letter of v2's new field's default ("migrated") in the last stats value of a keyed stream: the
    stream stays parseable, so only the comparison with the source can find it. Returns the stream's name."""
    stream = next(p for p in sorted(savepoint.iterdir()) if p.name.startswith("keyed-") and b"migrated" in
                  p.read_bytes())
    body = bytearray(stream.read_bytes())
    body[body.rindex(b"migrated")] ^= 0x01
    stream.write_bytes(bytes(body))
    return stream.name


class CorruptWhenPublished(threading.Thread):
    """Waits for the migration application to publish ``output`` (its ``_metadata`` appears), pauses the
    application, flips one byte of a value, and lets it go on to its re-check. ``report`` is the re-check's report,
    which must not exist yet when the byte is flipped."""

    def __init__(self, output: Callable[[], Path | None], report: Callable[[Path], Path]) -> None:
        super().__init__(daemon=True)
        self.output, self.report = output, report
        self.done, self.stop = threading.Event(), threading.Event()
        self.error: BaseException | None = None
        self.stream = ""
        self.paused: list[int] = []
        self.report_existed = True

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                output = self.output()
                if output is not None and (output / "_metadata").exists():
                    self.paused = migration_processes(output)
                    for pid in self.paused:
                        os.kill(pid, signal.SIGSTOP)
                    try:
                        self.report_existed = self.report(output).exists()
                        self.stream = flip_a_migrated_value(output)
                    finally:
                        for pid in self.paused:
                            os.kill(pid, signal.SIGCONT)
                    self.done.set()
                    return
                time.sleep(0.002)  # the window to the re-check's first read is hundreds of milliseconds
        except BaseException as exc:  # reported by the test, not lost in a thread
            self.error = exc
            self.done.set()

    def __enter__(self) -> CorruptWhenPublished:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.join(30)


def _version(version: str, manifest: str, audit: Path) -> dict[str, Any]:
    return {"jar": str(sample_job.jar(version)), "manifest": str(MANIFESTS / manifest), "entry_class": ENTRY_CLASS,
            "program_args": ["--keys", str(KEYS), "--rate", "100", "--audit-dir", str(audit)], "parallelism": 2}


@pytest.fixture(scope="module")
def env(airflow_home: Path, flink_cluster: LocalFlinkCluster, webhook: Any, tmp_path_factory: pytest.TempPathFactory
        ) -> Iterator[dict[str, Any]]:
    set_connection("flink_default", conn_type="http", host="127.0.0.1", port=flink_cluster.status()["rest_port"])
    set_connection("spark_default", conn_type="spark", host="local[2]")
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"  # spark-submit
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    work = tmp_path_factory.mktemp("recheck")
    v1 = sample_job.submit(flink_cluster.client, "v1", work / "audit-v1", keys=KEYS, rate=100, parallelism=2)
    v1.wait_for_keys()
    env = {"client": flink_cluster.client, "work": work, "base": work / "savepoints", "webhook": webhook,
           "v1_job": v1.job_id, "v1": _version("v1", "v1.yaml", work / "audit-v1")}
    yield env
    # This deployment's jobs end with the module (the session's cluster serves other modules, some of which find
    # the sample job by its name).
    ours = {v1.job_id, (_registry(env) or {}).get("job_id"), _journal(env).get("new_job_id")}
    for listed in flink_cluster.client.list_jobs():
        if listed["state"] == "RUNNING" and listed["jid"] in ours:
            flink_cluster.client.cancel(listed["jid"])


def _registry(env: dict[str, Any]) -> dict[str, Any] | None:
    path = env["base"] / "deployments.json"
    return json.loads(path.read_text()).get(DEPLOYMENT) if path.exists() else None


def _journal(env: dict[str, Any]) -> dict[str, Any]:
    try:
        return json.loads((env["base"] / "journal" / f"{DEPLOYMENT}.json").read_text())
    except (OSError, ValueError):  # not written yet, or being replaced
        return {}


def _migrated(env: dict[str, Any]) -> Path | None:
    """This run's migrated savepoint, once the run's folder is known (its journal names it). From the stop on: the
    pre-started application migrates as soon as it is handed the stop savepoint, maybe before ``migrate`` starts."""
    run_dir, phase = _journal(env).get("run_dir"), _journal(env).get("phase")
    return Path(run_dir) / "migrated" / "savepoint" if run_dir and phase in ("stopped", "migrating") else None


def _run(env: dict[str, Any], engine: str = "spark") -> Any:
    """v1 -> v2 through the migration branch (the first run finds v1 by its job id and is told its version).
    ``engine`` "spark": the re-check inside the migration's Spark application (in-process: test_spark_jobs)."""
    entry = _registry(env)
    conf = {"job_name": DEPLOYMENT, "job_id": entry["job_id"] if entry else env["v1_job"],
            **_version("v2", "v2.yaml", env["work"] / "audit-v2"), "savepoint_base": str(env["base"]),
            "min_checkpoints": 2, "gate_timeout": 90, "min_running_seconds": 3,
            "engine": engine}
    if entry is None:
        conf["current"] = env["v1"]
    return load_dag("flink_state_upgrade", ROOT / "dags").test(run_conf=conf)


def _last_seq(env: dict[str, Any]) -> dict[str, int]:
    last: dict[str, int] = {}
    for record in sample_job.read_audit(env["work"] / "audit-v1", "v1"):
        last[record["key"]] = max(last.get(record["key"], -1), record["seq"])
    return last


def _assert_rolled_back(env: dict[str, Any], run: Any, since: int, since_seq: dict[str, int], reason: str) -> str:
    """The run failed at ``recheck`` after ``migrate`` succeeded, v1 runs again from the stop savepoint with the
    exact state v1 had written, and one alert says so, its headline ending with ``reason``. Returns the alert."""
    states = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
    assert str(run.state) == "failed", states
    assert states["stop_for_migration"] == states["migrate"] == "success", states
    assert states["recheck"] == "failed" and states["conclude"] == "failed", states
    assert states["restore_path_migrated"] == states["submit_new"] == "upstream_failed", states
    journal = _journal(env)
    run_dir = Path(journal["run_dir"])
    stop = next((run_dir / "stop").glob("savepoint-*"))
    entry, client = _registry(env), env["client"]
    assert entry is not None and entry["version"]["jar"].endswith("sample-job-v1.jar"), entry
    assert client.job_state(entry["job_id"]) == "RUNNING" and entry["savepoint"] == str(stop)
    assert client.checkpoints(entry["job_id"]).restored_from.removeprefix("file:") == str(stop)
    assert journal["outcome"] == "rolled back" and journal["failures"] == [f"recheck: {reason}"], journal
    assert "verified" not in [step["phase"] for step in journal["history"]]
    texts = [m["text"] for m in env["webhook"].received[since:]]
    assert len(texts) == 1, texts
    assert texts[0].splitlines()[0].startswith(
        f"Flink upgrade of {DEPLOYMENT} FAILED and was ROLLED BACK: recheck: {reason}. RUNNING now: the old "
        f"version (sample-job-v1.jar) as job {entry['job_id']}, restored from the stop savepoint {stop}"), texts
    deadline = time.monotonic() + 90
    while True:  # each key's first record after the rollback: exactly the state v1 had written
        first: dict[str, dict[str, Any]] = {}
        for record in sample_job.read_audit(env["work"] / "audit-v1", "v1"):
            if record["seq"] > since_seq.get(record["key"], -1):
                first.setdefault(record["key"], record)
        if len(first) == KEYS or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert len(first) == KEYS, f"{len(first)} of {KEYS} keys reported after the rollback"
    for record in first.values():
        assert sample_job.check_audit_record(record, "v1") > 0, record
    return texts[0]


def _assert_prestarted(run_dir: Path, journal: dict[str, Any]) -> None:
    """The migration ran in the application started before the stop: ready (its session up) before the journal's
    ``stopping``, handed this run's stop savepoint after it, and it published (its result, in one line)."""
    launches = list((run_dir / "migrate-app").iterdir())
    assert len(launches) == 1, launches
    ready, handoff, result = (json.loads((launches[0] / name).read_text())
                              for name in ("ready.json", "handoff.json", "result.json"))
    stopping = next(step["epoch"] for step in journal["history"] if step["phase"] == "stopping")
    stop = next((run_dir / "stop").glob("savepoint-*"))
    assert ready["written_at"] < stopping < handoff["written_at"] < result["written_at"], (ready, handoff, result)
    assert ready["token"] == handoff["token"] == result["token"] == launches[0].name
    assert handoff["stop_savepoint"] == str(stop) and "called_off" not in handoff, handoff
    assert result["outcome"] == "published" and result["exit_code"] == 0, result
    assert result["line"] == f"published {run_dir / 'migrated' / 'savepoint'} (exit 0)"
    log = (launches[0] / "app.log").read_text()
    assert f"the stop savepoint {stop} was handed over after " in log, log[-3000:]
    # engine "spark": Spark tasks whatever the stop savepoint's size (a small one goes to the driver under "auto")
    assert "migrate_state: Spark tasks migrate it: the savepoint's " in log, log[-3000:]
    assert "bytes are more than in_process_max_bytes (0)" in log, log[-3000:]


def test_a_migration_corrupted_after_publishing_is_refused_by_the_in_application_recheck(env: dict[str, Any]):
    since, before = len(env["webhook"].received), _last_seq(env)
    with CorruptWhenPublished(lambda: _migrated(env), lambda output: output.parent / "check-report.json") as fault:
        run = _run(env)
    assert fault.done.is_set() and fault.error is None, fault.error
    assert len(fault.paused) >= 2, f"spark-submit's JVM and the Python driver, paused: {fault.paused}"
    assert not fault.report_existed, "the byte must be flipped before the re-check ran"
    run_dir = Path(_journal(env)["run_dir"])
    _assert_prestarted(run_dir, _journal(env))
    report = json.loads((run_dir / "migrated" / "check-report.json").read_text())
    error = report["verification_error"]
    migrated = run_dir / "migrated" / "savepoint"
    stop = next((run_dir / "stop").glob("savepoint-*"))
    assert error.startswith(f"{migrated} against its source ") and error.split(" against its source ")[1].startswith(
        (f"{stop}: operator stats, state stats, key group ", f"file:{stop}: operator stats, state stats, key group ")
    ), error
    assert "'label': 'ligrated'" in error and "\n" not in error  # the flipped letter, found by the comparison
    # The header-level check alone passes (the bytes still parse): only the verifier refuses the savepoint.
    assert report["outcome"] == "restore" and "verification" not in report
    _assert_rolled_back(env, run, since, before, f"the re-check refused the migrated savepoint: {error}".rstrip("."))


def test_the_recheck_fails_in_one_line_when_its_report_is_missing(env: dict[str, Any]):
    since, before = len(env["webhook"].received), _last_seq(env)
    removed: list[Path] = []
    earlier = _journal(env).get("run_dir")  # an earlier run's report stays where it is

    def report_of_this_run() -> Path | None:
        run_dir = _journal(env).get("run_dir")
        return Path(run_dir) / "migrated" / "check-report.json" if run_dir and run_dir != earlier else None

    def remove_the_report() -> None:
        # As soon as the migration application wrote it (long before the recheck task starts: the application
        # still has to stop Spark and exit, and Airflow to schedule the next task).
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            report = report_of_this_run()
            if report is not None and report.exists():
                report.unlink()
                removed.append(report)
                return
            time.sleep(0.002)

    remover = threading.Thread(target=remove_the_report, daemon=True)
    remover.start()
    # In one process: the missing report is judged by the recheck task whichever engine wrote it, and a
    # spark-submit here would only add its start to the run (the Spark application: the test above).
    run = _run(env, engine="in-process")
    remover.join(5)
    assert removed, "the report was never written"
    migrated = removed[0].parent / "savepoint"
    assert (migrated / "_metadata").is_file()  # the migration itself succeeded
    reason = (f"no re-check report at {removed[0]}: the migration job did not re-check the "
              f"savepoint it published, so {migrated} is not restored")
    _assert_rolled_back(env, run, since, before, reason)


def test_the_recheck_judges_reports_as_check_compatibility_exit_codes_would(airflow_home: Path, tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch):
    from flinkstate_airflow.recheck import recheck_problem

    migrated, source = str(tmp_path / "migrated" / "savepoint"), str(tmp_path / "stop" / "savepoint-1")
    folder = tmp_path / "migrated"
    folder.mkdir()
    assert recheck_problem(str(folder), migrated, source) == (
        f"no re-check report at {folder}/check-report.json: the migration job did not re-check the "
        f"savepoint it published, so {migrated} is not restored")
    passing = {"report_version": 1, "savepoint": migrated, "verified_against": f"file:{source}",
               "outcome": "restore", "verdict": "COMPATIBLE_AS_IS", "exit_code": 0,
               "verification": ["verified: 3 operators"]}
    cases: list[tuple[dict[str, Any], str | None]] = [
        (passing, None),
        ({**passing, "outcome": "migrate", "verdict": "COMPATIBLE_AFTER_MIGRATION", "exit_code": 3},
         f"the re-check of the migrated savepoint {migrated}: outcome 'migrate' (verdict COMPATIBLE_AFTER_MIGRATION),"
         f" not restorable as is by the new version (see {folder}/check-report.md)"),
        ({**passing, "verification_error": "x: differs"}, "the re-check refused the migrated savepoint: x: differs"),
        ({**passing, "savepoint": "/elsewhere"},
         f"{folder}/check-report.json: re-checks /elsewhere, not this run's migrated savepoint {migrated}"),
        ({**passing, "verified_against": "/other"},
         f"{folder}/check-report.json: the migrated savepoint was verified against /other, not against its source "
         f"{source}"),
        ({key: value for key, value in passing.items() if key != "verification"},
         f"{folder}/check-report.json: no verification against the source savepoint {source}"),
    ]
    for report, expected in cases:
        (folder / "check-report.json").write_text(json.dumps(report))
        assert recheck_problem(str(folder), migrated, source) == expected, report
    # A relative savepoint base: the job made the paths absolute in the task's working directory.
    (folder / "check-report.json").write_text(json.dumps(passing))
    monkeypatch.chdir(tmp_path)
    assert recheck_problem("migrated", "migrated/savepoint", "stop/savepoint-1") is None
    assert recheck_problem("migrated", "savepoint", "stop/savepoint-1") == (
        f"migrated/check-report.json: re-checks {migrated}, not this run's migrated savepoint savepoint")
    (folder / "check-report.json").write_text("{not json")
    problem = recheck_problem(str(folder), migrated, source)
    assert problem is not None and problem.startswith(f"{folder}/check-report.json: not a check report (")
