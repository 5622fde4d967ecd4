"""The upgrade journal without Airflow: durable writes, phases, liveness of the owner, the savepoint a failed
stop-with-savepoint created (Flink's own message format), the CLI on an empty base, and the run's downtime figures
(run.json and the alert: until every subtask of the job that runs now was RUNNING, not until the gate passed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from flinkstate import (
    ClusterRef,
    DeploymentRegistry,
    FlinkRestClient,
    JobVersion,
    JournalConflict,
    Outcome,
    Phase,
    UpgradeJournal,
    not_writable,
    recover,
)
from flinkstate.engine.rest import savepoint_created_before_stop_failed
from flinkstate.upgrades.journal import journal_uri
from flinkstate.upgrades.recovery import cluster_clients, dead_runs, find_stop_savepoint


def _plan(base: Path) -> dict:
    return {"savepoint_base": str(base), "job_name": "orders", "run_id": "r1", "run_dir": str(base / "orders" / "r1"),
            "old": {"jar": "/a.jar", "manifest": "/a.yaml"}, "new": {"jar": "/b.jar", "manifest": "/b.yaml"},
            "job_id": "0" * 32}


def test_journal_phases_are_written_whole_and_read_back(tmp_path: Path):
    journal = UpgradeJournal.start(_plan(tmp_path), "resolve")
    journal.advance("stopping", "stop")
    journal.advance("stopped", "stop", stop_savepoint="/sp/savepoint-1")
    again = UpgradeJournal.for_deployment(str(tmp_path), "orders")
    assert again is not None and again.phase == "stopped" and again.data["stop_savepoint"] == "/sp/savepoint-1"
    assert [s["phase"] for s in again.data["history"]] == ["planned", "stopping", "stopped"]
    assert journal_uri(str(tmp_path), "orders") == str(tmp_path / "journal" / "orders.json")
    # No temporary file left; the lock file of compare-and-swap writes stays (empty).
    assert sorted(p.name for p in (tmp_path / "journal").iterdir()) == [".orders.json.lock", "orders.json"]
    # Our own live process owns it: not dead. A dead pid on this host: dead once quiet for the grace period.
    assert dead_runs(str(tmp_path), grace=0) == []
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    data = json.loads(Path(journal.uri).read_text())
    data["owner"]["pid"], data["owner"]["pid_start"] = child.pid, "1"
    Path(journal.uri).write_text(json.dumps(data))
    assert [j.data["run_id"] for j in dead_runs(str(tmp_path), grace=0)] == ["r1"]
    assert dead_runs(str(tmp_path), grace=3600) == []


def test_a_run_across_two_clusters_is_recovered_on_each_its_own(tmp_path: Path):
    """The journal of a run whose new version runs on another cluster names it; recovery (the watchdog's, conclude's,
    `upgrade recover`'s) asks the old cluster about the old version and the new one about the new, whichever address
    its client has; a run on one cluster is recovered on the cluster its journal names, whatever client the caller
    holds (a watchdog has the default cluster's, and an earlier upgrade may have moved the deployment; the real
    runs: test_upgrade_dag, test_upgrade_across_clusters)."""
    old_url, new_url = "http://127.0.0.1:18081", "http://127.0.0.1:28081"
    across = UpgradeJournal.start({**_plan(tmp_path), "flink_url": old_url, "new_flink_url": new_url}, "resolve")
    assert UpgradeJournal.load(across.uri).data["new_flink_url"] == new_url
    for given in (old_url, new_url):
        client = FlinkRestClient(given, timeout=7)
        old, new = cluster_clients(client, across)
        assert (old.base_url, new.base_url) == (old_url, new_url)
        assert (old if given == old_url else new) is client and old.timeout == new.timeout == 7
    single = UpgradeJournal.start({**_plan(tmp_path / "one"), "flink_url": old_url, "new_flink_url": old_url},
                                  "resolve")
    assert "new_flink_url" not in single.data
    client = FlinkRestClient("http://elsewhere:8081", timeout=7)
    old, new = cluster_clients(client, single)
    assert old is new and old.base_url == old_url and old.timeout == 7
    at_home = FlinkRestClient(old_url)
    assert cluster_clients(at_home, single) == (at_home, at_home)
    unnamed = UpgradeJournal.start(_plan(tmp_path / "unnamed"), "resolve")  # a journal that names no cluster
    assert cluster_clients(client, unnamed) == (client, client)


def test_the_registry_records_where_each_deployment_runs(tmp_path: Path):
    """An entry names the cluster its job runs on (the Airflow connection and the REST address), taken from the run's
    journal: the old version's after a rollback, the new one's after an upgrade (its own cluster when the run moved
    it); an entry without one (written before clusters were recorded) is the default cluster's."""
    registry = DeploymentRegistry(str(tmp_path))
    assert registry.cluster("orders") == ClusterRef()
    across = UpgradeJournal.start({**_plan(tmp_path), "flink_url": "http://a:8081", "flink_conn_id": "flink_1x",
                                   "new_flink_url": "http://b:8081", "new_flink_conn_id": "flink_2x"}, "resolve")
    data = UpgradeJournal.load(across.uri).data
    assert ClusterRef.of_journal(data, "old") == ClusterRef("flink_1x", "http://a:8081")
    assert ClusterRef.of_journal(data, "new") == ClusterRef("flink_2x", "http://b:8081")
    single = UpgradeJournal.start({**_plan(tmp_path / "one"), "flink_url": "http://a:8081", "flink_conn_id": "f1",
                                   "new_flink_url": "http://a:8081", "new_flink_conn_id": "f1"}, "resolve")
    assert ClusterRef.of_journal(single.data, "new") == ClusterRef("f1", "http://a:8081")
    assert "new_flink_conn_id" not in single.data
    version = JobVersion("/b.jar")
    registry.record("orders", version, "1" * 32, "/sp/1", "r1", ClusterRef.of_journal(data, "new"))
    registry.record("legacy", version, "2" * 32, "/sp/2", "r0")
    assert registry.cluster("orders") == ClusterRef("flink_2x", "http://b:8081")
    assert registry.cluster("legacy") == ClusterRef() and "flink_url" not in registry.load()["legacy"]
    assert registry.current("orders") == version


def test_phases_and_outcomes_keep_the_strings_journals_store():
    # Journals and alerts written by earlier versions hold these strings: renaming one would orphan them.
    phases = {k: v for k, v in vars(Phase).items() if not k.startswith("_")}
    assert phases == {"PLANNED": "planned", "STOPPING": "stopping", "STOPPED": "stopped", "MIGRATING": "migrating",
                      "MIGRATED": "migrated", "VERIFIED": "verified", "SUBMITTING": "submitting",
                      "SUBMITTED": "submitted", "GATING": "gating", "GATE_PASSED": "gate_passed",
                      "ROLLING_BACK": "rolling_back", "DONE": "done"}
    outcomes = {k: v for k, v in vars(Outcome).items() if not k.startswith("_")}
    assert outcomes == {"UPGRADED": "upgraded", "CHECKED": "checked", "REFUSED": "refused",
                        "UNCHANGED": "unchanged", "ROLLED_BACK": "rolled back", "DOWN": "DOWN"}


def test_a_location_is_probed_for_writing_before_anything_stops(tmp_path: Path):
    assert not_writable(str(tmp_path / "runs")) is None  # created, written, and the probe removed
    assert list((tmp_path / "runs").iterdir()) == []
    blocker = tmp_path / "a-file"
    blocker.write_bytes(b"")
    problem = not_writable(str(blocker / "runs"))
    assert problem is not None and problem.startswith(f"{blocker / 'runs'}: not writable (")
    assert "\n" not in problem


def test_the_stop_savepoint_is_found_in_the_run_folder_when_the_journal_missed_it(tmp_path: Path):
    journal = UpgradeJournal.start(_plan(tmp_path), "resolve")
    journal.advance("stopping", "stop")
    assert find_stop_savepoint(journal) is None
    half = tmp_path / "orders" / "r1" / "stop" / "savepoint-aa-1"
    half.mkdir(parents=True)  # no _metadata: not a complete savepoint
    assert find_stop_savepoint(journal) is None
    (half / "_metadata").write_bytes(b"x")
    assert find_stop_savepoint(journal) == str(half)


def test_a_savepoint_created_before_the_stop_failed_is_recognised():
    # The message of org.apache.flink.runtime.scheduler.stopwithsavepoint.StopWithSavepointStoppingException.
    trace = ("org.apache.flink.runtime.scheduler.stopwithsavepoint.StopWithSavepointStoppingException: A savepoint "
             "has been created at: file:/data/sp/savepoint-3f2a1b-9c8d7e6f5a4b, but the corresponding job "
             "3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c failed during stopping. The savepoint is consistent, but might have "
             "uncommitted transactions. If you want to commit the transaction please restart a job from this "
             "savepoint.\n\tat org.apache.flink...")
    assert savepoint_created_before_stop_failed(trace) == "file:/data/sp/savepoint-3f2a1b-9c8d7e6f5a4b"
    assert savepoint_created_before_stop_failed("java.util.concurrent.TimeoutException: savepoint timed out") is None


def test_recover_cli_with_nothing_to_do(tmp_path: Path):
    out = subprocess.run([str(Path(sys.executable).parent / "flinkstate"), "upgrade", "recover", "--savepoint-base",
                          str(tmp_path)], capture_output=True, text=True, env=dict(os.environ), check=False)
    assert out.returncode == 0 and out.stdout == f"no dead upgrade runs under {tmp_path}\n", out


def _conflict_between_two_readers(base: str) -> None:
    """Two actors read the same journal (the run and a watchdog, say); the first to write wins, the second is told
    so and writes nothing; a fresh read then writes again. The journal keeps the winner's phase."""
    plan = {**_plan(Path("/unused")), "savepoint_base": base, "run_dir": f"{base}/orders/r1"}
    UpgradeJournal.start(plan, "resolve").advance("stopping", "stop")
    run, watchdog = (UpgradeJournal.for_deployment(base, "orders") for _ in range(2))
    assert run is not None and watchdog is not None
    watchdog.advance("rolling_back", "watchdog")
    with pytest.raises(JournalConflict, match="written by another process meanwhile"):
        run.advance("stopped", "stop", stop_savepoint="/sp/savepoint-1")
    again = UpgradeJournal.for_deployment(base, "orders")
    assert again is not None and again.phase == "rolling_back" and again.data["stop_savepoint"] is None
    assert [s["phase"] for s in again.data["history"]] == ["planned", "stopping", "rolling_back"]
    again.finish("rolled back", "watchdog", running=None)
    # A new run replaces a finished journal, but only the one it read: a journal written meanwhile is not lost.
    stale = UpgradeJournal.for_deployment(base, "orders")
    assert stale is not None
    UpgradeJournal.start({**plan, "run_id": "r2"}, "resolve")
    with pytest.raises(JournalConflict):
        stale.save()
    assert UpgradeJournal.for_deployment(base, "orders").data["run_id"] == "r2"  # type: ignore[union-attr]


def test_two_actors_never_both_write_a_local_journal(tmp_path: Path):
    _conflict_between_two_readers(str(tmp_path))


def test_two_actors_never_both_write_a_journal_on_s3(s3_endpoint: str):
    import boto3

    boto3.client("s3").create_bucket(Bucket="journals")
    _conflict_between_two_readers("s3://journals/upgrades")


def test_sweep_leaves_a_journal_another_actor_took(tmp_path: Path):
    """The watchdog's sweep skips a run whose journal was written after it read it (no action, no alert)."""
    journal = UpgradeJournal.start(_plan(tmp_path), "resolve")
    journal.advance("stopping", "stop")
    taken = UpgradeJournal.for_deployment(str(tmp_path), "orders")
    assert taken is not None
    journal.advance("stopped", "stop", stop_savepoint="/sp/savepoint-1")  # the run lives on, after the read
    with pytest.raises(JournalConflict):
        recover(None, taken, "watchdog")  # type: ignore[arg-type]  # never reaches Flink: the claim fails first


def _upgraded_journal(base: Path, run: dict | None = None) -> UpgradeJournal:
    """A journal through every phase of an upgrade that migrated, at fixed times: the stop at 100 s, the new job
    submitted at 126 s, every subtask of it RUNNING at 133 s (as the gate's result records Flink's timestamps),
    the gate passed at 140 s."""
    journal = UpgradeJournal.start({**_plan(base), "run_id": (run or {}).get("run_id", "r1")}, "resolve", run=run)
    for phase in ("stopping", "stopped", "migrating", "migrated", "verified", "submitting", "submitted", "gating"):
        journal.advance(phase, "test")
    journal.advance("gate_passed", "test", running_again_at=133.0)
    journal.finish(Outcome.UPGRADED, "record", running={"version": "new", "job_id": "1" * 32})
    times = {"stopping": 100.0, "stopped": 101.0, "migrating": 101.5, "migrated": 110.0, "verified": 125.0,
             "submitting": 125.5, "submitted": 126.0, "gating": 126.0, "gate_passed": 140.0, "done": 140.5}
    for step in journal.data["history"]:
        step["epoch"] = times.get(step["phase"], 99.0)
    journal.save()
    return journal


def test_the_migrate_step_lasts_until_its_recheck(tmp_path: Path):
    """run.json's durations: the migrate step ends when the re-check passed (VERIFIED, after MIGRATED), or at
    MIGRATED where no re-check ran; ``down`` runs from the stop request until every subtask of the new job was
    RUNNING (Flink's timestamps), not until the gate passed: the gate is its own figure."""
    journal = _upgraded_journal(tmp_path)
    assert journal.durations() == {"stop": 1.0, "migrate": 23.5, "submit": 0.5, "restore": 7.5, "gate": 14.0,
                                   "down": 33.0}
    # The submit step waits until the tasks run: Flink's "every subtask RUNNING" may come before it ends, and the
    # restore (from the submit request) is still the time the state took to come back, never negative.
    journal.data["running_again_at"] = 125.9
    assert journal.durations()["restore"] == 0.4 and journal.durations()["down"] == 25.9
    journal.data["running_again_at"] = 133.0
    journal.data["history"] = [s for s in journal.data["history"] if s["phase"] != "verified"]
    assert journal.durations()["migrate"] == 8.5
    # Where the time the job was back is unknown, there is no downtime figure rather than one stretched to the gate.
    journal.data["running_again_at"] = None
    assert "down" not in journal.durations() and journal.durations()["gate"] == 14.0


def test_the_downtime_of_a_rollback_ends_when_the_old_version_runs_again(tmp_path: Path):
    journal = UpgradeJournal.start(_plan(tmp_path), "resolve")
    for phase in ("stopping", "stopped", "submitting", "submitted", "gating", "rolling_back"):
        journal.advance(phase, "test")
    journal.finish(Outcome.ROLLED_BACK, "conclude", running={"version": "old", "job_id": "2" * 32},
                   running_again_at=171.0)
    times = {"stopping": 100.0, "stopped": 101.0, "submitting": 101.5, "submitted": 102.0, "gating": 102.0,
             "rolling_back": 160.0, "done": 175.0}
    for step in journal.data["history"]:
        step["epoch"] = times.get(step["phase"], 99.0)
    assert journal.durations() == {"stop": 1.0, "submit": 0.5, "rollback": 15.0, "down": 71.0}


def test_run_json_and_the_alert_give_the_downtime_until_the_job_ran_again(tmp_path: Path):
    """conclude (the upgrade DAG's last task; it needs no Airflow) writes the honest figure to run.json and the
    alert: 33 s down, the 14 s health gate on its own. The run's journal is closed: Flink is not asked."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins"))
    from flinkstate_airflow import upgrade

    plan = {**_plan(tmp_path), "dag_id": "flink_state_upgrade", "run_id": "r1"}
    journal = _upgraded_journal(tmp_path, run=upgrade.run_of(plan, "resolve"))
    plan["journal"] = journal.uri
    ok, alert = upgrade.conclude(plan, FlinkRestClient("http://127.0.0.1:9"), deployment="orders", failures=[],
                                 view="(view)")
    assert ok and alert is not None
    record = json.loads((Path(plan["run_dir"]) / "run.json").read_text())
    assert record["events"][-1]["durations"]["down"] == 33.0 and record["events"][-1]["durations"]["gate"] == 14.0
    assert (" Down 33.0 s (from the stop request until every subtask of the job that runs now was RUNNING; the "
            "health gate then took 14.0 s).") in alert.splitlines()[0], alert
    assert alert.splitlines()[1].endswith(". See it in Airflow: (view)"), alert  # the run's page, not a log folder
