"""One owner per upgrade (issue 24), without Airflow: the owner of an orchestrated run is its DAG run, not the process
that wrote last, and the fence before each step refuses a run another actor took over. Real processes (a child that
exited, a zombie), real journal files; the orchestrator's verdict is the probe's, as the Airflow plugin gives it
(tested with real Airflow in test_upgrade_dag.py and test_airflow_standalone.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from flinkstate import JournalConflict, UpgradeJournal, recover
from flinkstate.upgrades.journal import RunTakenOver
from flinkstate.upgrades.ownership import Liveness, process_alive, process_start
from flinkstate.upgrades.recovery import dead_runs

RUN = {"dag_id": "flink_state_upgrade", "run_id": "r1", "task_id": "migrate"}


def _plan(base: Path) -> dict[str, Any]:
    return {"savepoint_base": str(base), "job_name": "orders", "run_id": "r1", "run_dir": str(base / "orders" / "r1"),
            "old": {"jar": "/a.jar", "manifest": "/a.yaml"}, "new": {"jar": "/b.jar", "manifest": "/b.yaml"},
            "job_id": "0" * 32}


def _written_by_a_process_that_exited(journal: UpgradeJournal) -> None:
    """The journal as a finished task process left it: its pid is gone (each Airflow task is a process)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    data = json.loads(Path(journal.uri).read_text())
    data["owner"]["pid"], data["owner"]["pid_start"] = child.pid, "1"
    data["updated_epoch"] = time.time() - 600  # quiet for ten minutes: far beyond any grace
    Path(journal.uri).write_text(json.dumps(data))


def test_a_dag_run_between_two_tasks_is_alive_though_its_last_process_is_gone(tmp_path: Path):
    """The scheduler gap of issue 24: the task that wrote last has exited, the next has not started. Without a word
    from Airflow the run is alive until stale_after; with one, Airflow's verdict decides, and the sweep follows it."""
    journal = UpgradeJournal.start(_plan(tmp_path), "resolve", run={**RUN, "task_id": "resolve"})
    journal.advance("stopping", "stop_for_migration")
    journal.advance("stopped", "stop_for_migration", stop_savepoint="/sp/savepoint-1")
    assert journal.data["owner"]["run"] == {**RUN, "task_id": "resolve"}  # kept by every write of this process
    _written_by_a_process_that_exited(journal)
    assert dead_runs(str(tmp_path), grace=0) == []
    again = UpgradeJournal.for_deployment(str(tmp_path), "orders")
    assert again is not None
    liveness = again.liveness(stale_after=3600)
    assert liveness.alive and "DAG run r1 of flink_state_upgrade" in liveness.why and "600 s ago" in liveness.why
    assert not again.liveness(stale_after=300).alive  # silent beyond stale_after: dead by its age
    asked: list[dict[str, Any]] = []

    def airflow_says(verdict: bool) -> Any:
        def probe(data: dict[str, Any]) -> Liveness:
            asked.append(data)
            return Liveness(verdict, "the DAG run is " + ("running" if verdict else "failed"))
        return probe

    assert dead_runs(str(tmp_path), grace=0, probe=airflow_says(True)) == []
    assert asked[-1]["owner"]["run"]["run_id"] == "r1"
    assert [j.data["run_id"] for j in dead_runs(str(tmp_path), grace=0, probe=airflow_says(False))] == ["r1"]
    # A probe that cannot tell leaves the age to decide.
    assert dead_runs(str(tmp_path), grace=0, probe=lambda data: None) == []


def test_a_process_owner_is_dead_when_its_process_is_a_zombie(tmp_path: Path):
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])  # never waited for until the end: a zombie
    try:
        deadline = time.monotonic() + 10
        while Path(f"/proc/{zombie.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert process_alive(zombie.pid, None) is False
        assert process_alive(os.getpid(), process_start(os.getpid())) is True
        assert process_alive(os.getpid(), "1") is False  # the pid of another process that reused it
        journal = UpgradeJournal.start(_plan(tmp_path), "recover")  # no DAG run: the process owns it
        journal.advance("stopping", "cli")
        data = json.loads(Path(journal.uri).read_text())
        data["owner"]["pid"], data["owner"]["pid_start"] = zombie.pid, None
        data["updated_epoch"] = time.time() - 600
        Path(journal.uri).write_text(json.dumps(data))
        assert [j.data["run_id"] for j in dead_runs(str(tmp_path), grace=0)] == ["r1"]
    finally:
        zombie.wait()


def test_the_fence_refuses_a_run_another_actor_took_over(tmp_path: Path):
    journal = UpgradeJournal.start(_plan(tmp_path), "resolve", run={**RUN, "task_id": "resolve"})
    # This run's next task claims it: the same DAG run, another process and task.
    claimed = UpgradeJournal.claim(journal.uri, RUN, "migrate")
    claimed.advance("migrating", "migrate")
    stored = json.loads(Path(journal.uri).read_text())
    assert stored["owner"]["run"] == RUN and stored["owner"]["actor"] == "migrate"
    # A watchdog takes it over (its own process owns what it writes) ...
    watchdog = UpgradeJournal.for_deployment(str(tmp_path), "orders")
    assert watchdog is not None
    watchdog.touch("watchdog")
    # ... so the run's next step is refused, in one line naming who holds it, and writes nothing.
    before = Path(journal.uri).read_bytes()
    with pytest.raises(RunTakenOver) as refused:
        UpgradeJournal.claim(journal.uri, {**RUN, "task_id": "submit_new"}, "submit_new")
    assert str(refused.value) == (f"{journal.uri}: run r1 was taken over by watchdog (pid {os.getpid()} on "
                                  f"{stored['owner']['host']}) in phase migrating")
    assert Path(journal.uri).read_bytes() == before
    # Closed by the watchdog: refused too, the outcome named; and even the run's conclusion cannot claim it.
    watchdog.finish("rolled back", "watchdog", running={"version": "old", "job_id": "1" * 32})
    with pytest.raises(RunTakenOver, match=r"in phase done, and closed it \(rolled back\)$"):
        UpgradeJournal.claim(journal.uri, {**RUN, "task_id": "conclude"}, "conclude", open_only=False)
    # Another DAG run of the same deployment (run_id equal by accident of naming: the dag differs) is not this one.
    with pytest.raises(RunTakenOver):
        UpgradeJournal.claim(journal.uri, {**RUN, "dag_id": "other"}, "record")
    # A newer run replaced the journal: refused, naming it.
    UpgradeJournal.start({**_plan(tmp_path), "run_id": "r2"}, "resolve", run={**RUN, "run_id": "r2"})
    with pytest.raises(RunTakenOver, match="now the journal of run r2, not of run r1"):
        UpgradeJournal.claim(journal.uri, RUN, "record")


def test_the_fence_refuses_a_closed_run_and_a_write_that_raced_it(tmp_path: Path):
    journal = UpgradeJournal.start(_plan(tmp_path), "resolve", run=RUN)
    journal.finish("refused", "alert_incompatible", running={"version": "old", "job_id": "0" * 32})
    with pytest.raises(RunTakenOver, match=r"already closed \(refused, by alert_incompatible\)"):
        UpgradeJournal.claim(journal.uri, RUN, "stop_for_migration")
    # The run's conclusion may read its own closed journal.
    assert UpgradeJournal.claim(journal.uri, RUN, "conclude", open_only=False).finished
    # The watchdog's recover claims with compare-and-swap: a run that claimed after the watchdog read wins.
    UpgradeJournal.start({**_plan(tmp_path), "run_id": "r3"}, "resolve", run={**RUN, "run_id": "r3"})
    read_by_watchdog = UpgradeJournal.for_deployment(str(tmp_path), "orders")
    assert read_by_watchdog is not None
    UpgradeJournal.claim(journal.uri, {**RUN, "run_id": "r3"}, "stop_for_migration").advance("stopping", "stop")
    with pytest.raises(JournalConflict):  # the watchdog does nothing
        recover(None, read_by_watchdog, "watchdog")  # type: ignore[arg-type]  # never reaches Flink


def test_a_migration_publishes_nothing_once_its_run_was_taken_over(tmp_path: Path):
    """The publish is fenced (the Spark migration's ``--fence-journal``): a run the watchdog took over while its
    migration ran leaves no published savepoint; the run's own, still open, publishes."""
    from flinkstate.manifest import manifest_from_savepoint
    from flinkstate.migration.job import MigrationJob
    from flinkstate.savepoint import Savepoint
    from tests.test_one_verdict import CORPUS, SAVEPOINTS

    source = str(CORPUS / SAVEPOINTS[0])
    manifest = tmp_path / "manifest.yaml"
    manifest.write_text(manifest_from_savepoint(Savepoint.open(source)).dump())
    base = tmp_path / "base"
    journal = UpgradeJournal.start(_plan(base), "resolve", run={**RUN, "task_id": "resolve"})
    UpgradeJournal.claim(journal.uri, RUN, "migrate").advance("migrating", "migrate")
    fence = (journal.uri, {"dag_id": RUN["dag_id"], "run_id": RUN["run_id"]})
    MigrationJob(source, str(manifest), str(tmp_path / "own"), fence=fence).run()
    assert (tmp_path / "own" / "_metadata").is_file()
    watchdog = UpgradeJournal.for_deployment(str(base), "orders")
    assert watchdog is not None
    watchdog.touch("watchdog")
    with pytest.raises(RunTakenOver, match="run r1 was taken over by watchdog"):
        MigrationJob(source, str(manifest), str(tmp_path / "taken"), fence=fence).run()
    assert not (tmp_path / "taken").exists() and not list(tmp_path.glob(".taken*"))
