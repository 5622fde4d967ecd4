"""Faults during an upgrade, injected into real processes while the upgrade DAG runs in real Airflow (dag.test)
against a real Flink cluster of this module's own (its TaskManager is killed) and Spark in local mode.

Each case ends with the old version RUNNING with exactly the stop savepoint's state and one alert saying so, or
with one alert saying production is DOWN and how to restore it:

- the TaskManager dies during the health gate: the gate fails naming the lost TaskManager, the rollback waits for
  slots, and once a TaskManager is back the old version runs again from the stop savepoint;
- the TaskManager dies during the health gate and none comes back in time: the rollback fails, the one alert says
  production is DOWN with the stop savepoint and the command that restores it; that command, run by a person once a
  TaskManager is back, restores the old version with its exact state;
- the Spark migration's JVM is killed: the run rolls back to the old version from the stop savepoint;
- the savepoint base's disk (a 20 MiB tmpfs) fills during the migration: the rollback, which only reads the stop
  savepoint, restores the old version although nothing can be recorded; the one alert says what was not recorded,
  out of space, and gives the command that records it, which (space freed) adopts the running job;
- the JobManager is killed during the health gate (no HA: its jobs die with it) and restarted: the rollback asks
  Flink again until it answers, within rollback_timeout, and restores the old version.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
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
from tests.support.small_disk import fill
from tests.support.small_disk import small_disk as mounted_small_disk

pytestmark = [pytest.mark.flink, pytest.mark.airflow, pytest.mark.spark]

MANIFESTS = ROOT / "examples" / "sample-job" / "manifests"
KEYS = 6
DEPLOYMENT = "keyed-stats-v1"  # the sample job's Flink job name: the first run finds the job by it
VENV_BIN = Path(sys.executable).parent


def _version(version: str, manifest: str, audit: Path) -> dict[str, Any]:
    return {"jar": str(sample_job.jar(version)), "manifest": str(MANIFESTS / manifest), "entry_class": ENTRY_CLASS,
            "program_args": ["--keys", str(KEYS), "--rate", "100", "--audit-dir", str(audit)], "parallelism": 2}


@pytest.fixture(scope="module")
def env(airflow_home: Path, webhook: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A cluster of this module's own (its TaskManager gets killed), v1 running on it, the DAG's connections."""
    cluster = LocalFlinkCluster(tmp_path_factory.mktemp("faults-cluster"), slots=4,
                                # Lost TaskManagers are noticed within seconds, not after the 50 s default.
                                options={"heartbeat.interval": 2000, "heartbeat.timeout": 8000})
    cluster.start()
    saved = os.environ.get("AIRFLOW_CONN_FLINK_DEFAULT")
    try:
        set_connection("flink_default", conn_type="http", host="127.0.0.1", port=cluster.status()["rest_port"])
        set_connection("spark_default", conn_type="spark", host="local[2]")
        os.environ["PATH"] = f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}"  # spark-submit
        os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
        work = tmp_path_factory.mktemp("faults")
        v1 = sample_job.submit(cluster.client, "v1", work / "audit-v1", keys=KEYS, rate=100, parallelism=2)
        v1.wait_for_keys()
        yield {"cluster": cluster, "client": cluster.client, "work": work, "base": work / "savepoints",
               "webhook": webhook, "v1_job": v1.job_id, "v1": _version("v1", "v1.yaml", work / "audit-v1")}
    finally:
        if saved is not None:
            os.environ["AIRFLOW_CONN_FLINK_DEFAULT"] = saved
        cluster.stop()


def _run(env: dict[str, Any], base: Path | None = None, **extra: Any) -> Any:
    """One run of the DAG upgrading the deployment from v1 to v2 through the migration branch (the first run finds
    v1 by its Flink job name and is told which version it is; later ones find the deployment's recorded job)."""
    base = base or env["base"]
    registry = base / "deployments.json"
    first = not registry.exists() or DEPLOYMENT not in json.loads(registry.read_text())
    conf = {"job_name": DEPLOYMENT if first else "", "job_id": "" if first else _registry(env, base)["job_id"],
            **_version("v2", "v2.yaml", env["work"] / "audit-v2"), "savepoint_base": str(base),
            "min_checkpoints": 2, "gate_timeout": 120, "min_running_seconds": 3, **extra}
    if first:
        conf["current"] = env["v1"]
    return load_dag("flink_state_upgrade", ROOT / "dags").test(run_conf=conf)


def _registry(env: dict[str, Any], base: Path | None = None) -> dict[str, Any]:
    return json.loads(((base or env["base"]) / "deployments.json").read_text())[DEPLOYMENT]


def _journal(env: dict[str, Any], base: Path | None = None) -> dict[str, Any]:
    path = (base or env["base"]) / "journal" / f"{DEPLOYMENT}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):  # not written yet, or being replaced
        return {}


def _states(run: Any) -> dict[str, str]:
    return {ti.task_id: str(ti.state) for ti in run.get_task_instances()}


def _messages(env: dict[str, Any], since: int) -> list[str]:
    return [m["text"] for m in env["webhook"].received[since:]]


def _taskmanagers(cluster: LocalFlinkCluster) -> list[int]:
    return [p["pid"] for name, p in cluster.status()["processes"].items()
            if name.startswith("taskexecutor") and p["alive"]]


class Fault(threading.Thread):
    """Runs ``act`` once, in the background, as soon as ``when()`` holds; remembers what happened."""

    def __init__(self, when: Callable[[], bool], act: Callable[[], None]) -> None:
        super().__init__(daemon=True)
        self.when, self.act, self.done, self.stop = when, act, threading.Event(), threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        while not self.stop.is_set():
            if self.when():
                try:
                    self.act()
                except BaseException as exc:  # reported by the test, not lost in a thread
                    self.error = exc
                self.done.set()
                return
            time.sleep(0.1)

    def __enter__(self) -> Fault:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.join(30)


def _assert_old_version_restored(env: dict[str, Any], stop: Path, since_seq: dict[str, int],
                                 base: Path | None = None) -> None:
    """The deployment runs v1 again, restored from ``stop``, and every key found exactly the state v1 had written:
    the records v1 wrote after the restore (sequence numbers above ``since_seq``) are checked value by value."""
    entry, client = _registry(env, base), env["client"]
    assert entry["version"]["jar"].endswith("sample-job-v1.jar"), entry
    assert client.job_state(entry["job_id"]) == "RUNNING"
    assert client.checkpoints(entry["job_id"]).restored_from.removeprefix("file:") == str(stop)
    assert entry["savepoint"] == str(stop)
    deadline = time.monotonic() + 90
    while True:
        first_after: dict[str, dict[str, Any]] = {}
        for record in sample_job.read_audit(env["work"] / "audit-v1", "v1"):
            if record["seq"] > since_seq.get(record["key"], -1) and record["key"] not in first_after:
                first_after[record["key"]] = record
        if len(first_after) == KEYS or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert len(first_after) == KEYS, f"{len(first_after)} of {KEYS} keys reported after the rollback"
    for record in first_after.values():
        assert sample_job.check_audit_record(record, "v1") > 0, record


def _last_seq(env: dict[str, Any]) -> dict[str, int]:
    last: dict[str, int] = {}
    for record in sample_job.read_audit(env["work"] / "audit-v1", "v1"):
        last[record["key"]] = max(last.get(record["key"], -1), record["seq"])
    return last


def _stop_savepoint(env: dict[str, Any], base: Path | None = None) -> Path:
    run_dir = Path(_journal(env, base)["run_dir"])
    return next((run_dir / "stop").glob("savepoint-*"))


def test_taskmanager_lost_during_the_gate_is_rolled_back_once_a_taskmanager_returns(env: dict[str, Any]):
    cluster, since = env["cluster"], len(env["webhook"].received)
    killed: list[int] = []

    def kill_taskmanager() -> None:
        time.sleep(1.0)  # the new job runs; its first checkpoints are under way
        for pid in _taskmanagers(cluster):
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    def bring_one_back() -> None:
        time.sleep(3.0)  # the rollback has submitted the old version, which now waits for slots
        cluster.start_taskmanager()

    before = _last_seq(env)
    with Fault(lambda: _journal(env).get("phase") == "gating", kill_taskmanager) as kill, \
            Fault(lambda: _journal(env).get("phase") == "rolling_back", bring_one_back) as revive:
        run = _run(env)
    assert kill.done.is_set() and killed and kill.error is None, kill.error
    assert revive.done.is_set() and revive.error is None, revive.error

    states = _states(run)
    assert str(run.state) == "failed" and states["health_gate"] == "failed" and states["conclude"] == "failed", states
    for task in ("stop_for_migration", "migrate", "recheck", "submit_new"):
        assert states[task] == "success", (task, states)
    stop = _stop_savepoint(env)
    _assert_old_version_restored(env, stop, before)
    entry = _registry(env)
    texts = _messages(env, since)
    assert len(texts) == 1, texts
    assert texts[0].startswith(f"Flink upgrade of {DEPLOYMENT} FAILED and was ROLLED BACK: health_gate: "), texts
    assert "TaskManager lost" in texts[0].splitlines()[0], texts
    assert f"RUNNING now: the old version (sample-job-v1.jar) as job {entry['job_id']}, restored from the stop " \
           f"savepoint {stop}" in texts[0], texts
    journal = _journal(env)
    assert journal["outcome"] == "rolled back" and journal["running"]["job_id"] == entry["job_id"]
    # The new job it gave up on is not left behind on the cluster.
    assert env["client"].job_state(journal["new_job_id"]) in ("CANCELED", "FAILED")


def test_taskmanager_lost_for_good_says_production_is_down_and_how_to_restore(env: dict[str, Any]):
    cluster, client, since = env["cluster"], env["client"], len(env["webhook"].received)

    def kill_taskmanager() -> None:
        time.sleep(1.0)
        for pid in _taskmanagers(cluster):
            os.kill(pid, signal.SIGKILL)

    before = _last_seq(env)
    with Fault(lambda: _journal(env).get("phase") == "gating", kill_taskmanager) as kill:
        # The rollback waits this long for slots that never come: the DAG's minimum (10 s) proves the same as more.
        run = _run(env, rollback_timeout=10)
    assert kill.done.is_set() and kill.error is None, kill.error
    states = _states(run)
    assert str(run.state) == "failed" and states["health_gate"] == "failed", states
    stop = _stop_savepoint(env)
    texts = _messages(env, since)
    assert len(texts) == 1, texts
    headline = texts[0].splitlines()[0]
    assert headline.startswith(f"Flink upgrade of {DEPLOYMENT} FAILED AND THE ROLLBACK FAILED: health_gate: "), texts
    assert "PRODUCTION IS DOWN" in texts[0] and str(stop) in texts[0], texts
    journal = _journal(env)
    assert journal["outcome"] == "DOWN" and journal["running"] is None
    # No job of the deployment is left running or restarting in a loop.
    for job_id in (journal["new_job_id"], journal["rollback_job_id"]):
        if job_id:
            assert client.job_state(job_id) in ("CANCELED", "FAILED", "FINISHED"), job_id

    # A person brings a TaskManager back and runs the command the alert gives, word for word.
    command = re.search(r"with: (flinkstate upgrade recover [^\n]+)\n", texts[0])
    assert command, texts[0]
    cluster.start_taskmanager()
    argv = shlex.split(command.group(1))
    result = subprocess.run([sys.executable, "-m", "flinkstate", *argv[1:]], capture_output=True, text=True,
                            timeout=300, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    _assert_old_version_restored(env, stop, before)


def test_the_spark_migration_killed_is_rolled_back(env: dict[str, Any]):
    since = len(env["webhook"].received)
    killed: list[int] = []
    base = str(env["base"]).encode()

    def spark_migration_jvms() -> list[int]:
        found = []
        for proc in Path("/proc").iterdir():
            if proc.name.isdigit():
                try:
                    cmdline = (proc / "cmdline").read_bytes().split(b"\0")
                except OSError:
                    continue
                # This run's migration only (its arguments name this module's savepoint base), not another's.
                if cmdline and cmdline[0].endswith(b"java") and any(a.endswith(b"migrate_state.py") for a in cmdline) \
                        and any(base in a for a in cmdline):
                    found.append(int(proc.name))
        return found

    def kill_spark() -> None:
        for pid in spark_migration_jvms():
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    def stopped_and_migrating() -> bool:
        # The application is pre-started (issue 28): up before the stop, killed once the job is stopped, as it is
        # handed (or migrates) the stop savepoint.
        return _journal(env).get("phase") in ("stopped", "migrating") and bool(spark_migration_jvms())

    before = _last_seq(env)
    with Fault(stopped_and_migrating, kill_spark) as kill:
        run = _run(env, engine="spark")
    assert kill.done.is_set() and killed and kill.error is None, (killed, kill.error)
    states = _states(run)
    assert str(run.state) == "failed" and states["migrate"] == "failed" and states["submit_new"] == "upstream_failed", \
        states
    stop = _stop_savepoint(env)
    _assert_old_version_restored(env, stop, before)
    entry = _registry(env)
    texts = _messages(env, since)
    assert len(texts) == 1, texts
    assert texts[0].startswith(f"Flink upgrade of {DEPLOYMENT} FAILED and was ROLLED BACK: migrate: "), texts
    assert f"RUNNING now: the old version (sample-job-v1.jar) as job {entry['job_id']}" in texts[0], texts
    # Nothing half-written was published as the migrated savepoint.
    run_dir = Path(_journal(env)["run_dir"])
    assert not (run_dir / "migrated" / "savepoint" / "_metadata").exists()


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 20 MiB file system of the test's own for the savepoint base, to fill up."""
    with mounted_small_disk(tmp_path / "small-disk", "20m") as mount:
        yield mount


def _running_jobs_of_v1(client: Any) -> list[str]:
    return [j["jid"] for j in client.list_jobs() if j.get("state") == "RUNNING" and
            client.job(j["jid"])["name"] == DEPLOYMENT]


def test_the_savepoint_disk_full_during_the_migration_is_rolled_back_without_a_write(env: dict[str, Any],
                                                                                       small_disk: Path):
    """The savepoint base fills up while Spark migrates: the rollback needs only to read the stop savepoint, so the
    old version runs again although no journal, registry or run record can be written; the one alert says so and
    gives the command that records it, which (space freed) adopts the running job instead of starting another."""
    client, since = env["client"], len(env["webhook"].received)
    base = small_disk / "savepoints"
    before = _last_seq(env)
    with Fault(lambda: _journal(env, base).get("phase") == "migrating", lambda: fill(small_disk)) as full:
        run = _run(env, base)
    assert full.done.is_set() and full.error is None, full.error
    states = _states(run)
    assert str(run.state) == "failed" and states["migrate"] == "failed" and states["conclude"] == "failed", states
    stop = _stop_savepoint(env, base)
    texts = _messages(env, since)
    assert len(texts) == 1, texts
    alert = texts[0]
    assert alert.startswith(f"Flink upgrade of {DEPLOYMENT} FAILED and was ROLLED BACK: migrate: "), alert
    running = re.search(r"RUNNING now: the old version \(sample-job-v1\.jar\) as job (\w+), restored from the stop "
                        rf"savepoint {re.escape(str(stop))}", alert)
    assert running, alert
    job_id = running.group(1)
    assert client.job_state(job_id) == "RUNNING"
    assert client.checkpoints(job_id).restored_from.removeprefix("file:") == str(stop)
    assert _running_jobs_of_v1(client) == [job_id]
    # Out of space, named with the path, not as a bug; and the command that records what runs.
    assert f"journal not written: {base}/journal/{DEPLOYMENT}.json: cannot write: out of space" in alert, alert
    assert "deployment registry not written: " in alert and "internal error" not in alert, alert
    assert _journal(env, base)["phase"] == "migrating" and not (base / "deployments.json").exists()
    command = re.search(r"record it with: (flinkstate upgrade recover [^\n]+?)\.?\n", alert)
    assert command, alert

    (small_disk / "filler").unlink()  # a person frees space and runs the command the alert gives
    argv = shlex.split(command.group(1))
    result = subprocess.run([sys.executable, "-m", "flinkstate", *argv[1:]], capture_output=True, text=True,
                            timeout=300, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    journal = _journal(env, base)
    assert journal["outcome"] == "rolled back" and journal["running"]["job_id"] == job_id, journal
    assert _registry(env, base)["job_id"] == job_id and _running_jobs_of_v1(client) == [job_id]
    _assert_old_version_restored(env, stop, before, base)
    # The next runs of this module use the module's savepoint base: its registry names the job that runs now.
    module_registry = env["base"] / "deployments.json"
    registry = json.loads(module_registry.read_text()) if module_registry.exists() else {}
    registry[DEPLOYMENT] = _registry(env, base)
    module_registry.parent.mkdir(parents=True, exist_ok=True)
    module_registry.write_text(json.dumps(registry))


def test_the_jobmanager_killed_during_the_gate_and_restarted_is_waited_out_by_the_rollback(env: dict[str, Any]):
    """The JobManager dies during the health gate (no HA: its jobs die with it) and comes back a few seconds
    later, within rollback_timeout: the rollback asks Flink again until it answers, instead of taking the first
    refused connection as final, and restores the old version from the stop savepoint."""
    cluster, since = env["cluster"], len(env["webhook"].received)
    killed: list[int] = []

    def kill_jobmanager() -> None:
        time.sleep(1.0)  # the new job runs; the gate polls it
        pid = next(p["pid"] for name, p in cluster.status()["processes"].items()
                   if name.startswith("standalonesession") and p["alive"])
        os.kill(pid, signal.SIGKILL)
        killed.append(pid)

    def restart_jobmanager() -> None:
        time.sleep(8.0)  # the rollback has met a refused connection, more than once
        cluster.start_jobmanager()

    before = _last_seq(env)
    with Fault(lambda: _journal(env).get("phase") == "gating", kill_jobmanager) as kill, \
            Fault(lambda: bool(killed), restart_jobmanager) as restart:
        run = _run(env, rollback_timeout=180)
    assert kill.done.is_set() and killed and kill.error is None, kill.error
    assert restart.done.is_set() and restart.error is None, restart.error
    states = _states(run)
    assert str(run.state) == "failed" and states["health_gate"] == "failed", states
    stop = _stop_savepoint(env)
    _assert_old_version_restored(env, stop, before)
    entry = _registry(env)
    texts = _messages(env, since)
    assert len(texts) == 1, texts
    assert texts[0].startswith(f"Flink upgrade of {DEPLOYMENT} FAILED and was ROLLED BACK: health_gate: "), texts
    assert f"RUNNING now: the old version (sample-job-v1.jar) as job {entry['job_id']}, restored from the stop " \
           f"savepoint {stop}" in texts[0], texts
    journal = _journal(env)
    assert journal["outcome"] == "rolled back" and journal["running"]["job_id"] == entry["job_id"]
    assert _running_jobs_of_v1(env["client"]) == [entry["job_id"]]
