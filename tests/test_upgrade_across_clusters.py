"""The upgrade DAG across two Flink clusters (issue 27): the sample job's v1, its Flink 1.20.3 build, runs on a real
1.20.3 cluster (flink_default); its v2, the Flink 2.3 build, is to run on the session's 2.3 cluster (the DAG's
``target_flink_conn_id``). Two runs of the real DAG (dag.test, in-process):

1. the migration branch carries v1's state to v2 on 2.3, whose health gate is then not met (more checkpoints than
   its timeout allows): the run cancels v2 on 2.3 and restarts v1 on 1.20.3 from the stop savepoint, every key's
   state as v1 left it;
2. the same upgrade with a gate it meets: v2 RUNNING on 2.3, every key's state exactly v1's with the migration's
   label, v1 gone from 1.20.3.

Each version's schema is its jar's on the classes of the Flink its cluster runs (the new schema says 2.3: the
migration's target).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from flinkstate.engine import LocalFlinkCluster
from flinkstate.manifest import load_manifest
from flinkstate.savepoint import Savepoint
from tests.support import sample_job
from tests.support.airflow_env import ROOT, load_dag, set_connection
from tests.support.sample_job import ENTRY_CLASS, expected_count, expected_state

pytestmark = [pytest.mark.flink, pytest.mark.airflow]  # the check and the migration run in-process

KEYS = 6
FLINK1_HOME = ROOT / ".flink-dists" / "1.20.3" / "pyflink"
FLINK1_BUILD = sample_job.JOB_DIR / "build" / "flink-1.20.3"
OVERLAY = ROOT / "examples" / "sample-job" / "manifests" / "v2-overlay.yaml"
TARGET_CONN = "flink_target"
MIGRATED_LABEL = "migrated"  # the overlay's default for v2's new field


def _version(jar: Path, audit: Path, manifest: Path | None = None) -> dict[str, Any]:
    return {"jar": str(jar), "manifest": str(manifest) if manifest else "", "entry_class": ENTRY_CLASS,
            "program_args": ["--keys", str(KEYS), "--rate", "100", "--audit-dir", str(audit)], "parallelism": 2}


def _restarted(audit: Path, version: str, after: dict[str, int] | None = None) -> dict[str, dict[str, Any]]:
    """For each key, what the latest run of ``version`` found at the key's first event (its highest sequence; above
    ``after``'s for the key, where given: a later run's)."""
    latest: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + 60
    while True:
        for record in sample_job.read_audit(audit, version):
            if record["seq"] <= (after or {}).get(record["key"], -1):
                continue
            if record["key"] not in latest or record["seq"] > latest[record["key"]]["seq"]:
                latest[record["key"]] = record
        if len(latest) == KEYS or time.monotonic() > deadline:
            return latest
        time.sleep(0.5)


def _assert_state(record: dict[str, Any], label: str | None) -> None:
    """The exact state v1 wrote for the count the key's first sequence number implies (v2: with ``label``)."""
    n = expected_count(record["key"], record["seq"], record["keys"])
    assert n > 0, record
    expected = expected_state(record["key"], n)
    stats = expected["stats"] if label is None else {**expected["stats"], "label": label}
    assert record["stats"] == stats and record["count"] == n, record
    assert record["recent"] == expected["recent"] and record["buckets"] == expected["buckets"], record


def _active(client: Any, since_ms: int = 0) -> list[str]:
    return [j["jid"] for j in client.list_jobs() if j["start-time"] >= since_ms
            and j["state"] not in ("FINISHED", "CANCELED", "FAILED")]


@pytest.fixture(scope="module")
def flink1(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalFlinkCluster]:
    if not FLINK1_HOME.is_dir():
        pytest.fail(f"Flink 1.20.3 is missing at {FLINK1_HOME}: run 'make setup'")
    with LocalFlinkCluster(tmp_path_factory.mktemp("flink-1.20.3"), flink_home=FLINK1_HOME, slots=2) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def env(airflow_home: Path, flink_cluster: LocalFlinkCluster, flink1: LocalFlinkCluster, webhook: Any,
        tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    before = os.environ.get("AIRFLOW_CONN_FLINK_DEFAULT")
    set_connection("flink_default", conn_type="http", host="127.0.0.1", port=flink1.status()["rest_port"])
    set_connection(TARGET_CONN, conn_type="http", host="127.0.0.1", port=flink_cluster.status()["rest_port"])
    set_connection("spark_default", conn_type="spark", host="local[2]")
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"  # preflight's spark-submit
    work = tmp_path_factory.mktemp("across")
    v1 = sample_job.submit(flink1.client, "v1", work / "audit-v1", keys=KEYS, rate=100, parallelism=2,
                           build_dir=FLINK1_BUILD)
    v1.wait_for_keys()
    try:
        yield {"webhook": webhook, "work": work, "base": work / "savepoints", "v1_job": v1.job_id, "old": flink1.client,
               "new": flink_cluster.client, "current": _version(sample_job.jar("v1", FLINK1_BUILD), work / "audit-v1"),
               "v2": _version(sample_job.jar("v2"), work / "audit-v2", OVERLAY)}
    finally:  # the other Airflow modules' flink_default is the session cluster
        if before is None:
            os.environ.pop("AIRFLOW_CONN_FLINK_DEFAULT", None)
        else:
            os.environ["AIRFLOW_CONN_FLINK_DEFAULT"] = before


def _run(env: dict[str, Any], **gate: Any) -> tuple[Any, dict[str, str], Path, list[str]]:
    conf = {"job_name": "keyed-stats-v1", **env["v2"], "savepoint_base": str(env["base"]), "engine": "in-process",
            "target_flink_conn_id": TARGET_CONN, "current": env["current"], "min_running_seconds": 3, **gate}
    since = len(env["webhook"].received)
    run = load_dag("flink_state_upgrade", ROOT / "dags").test(run_conf=conf)
    run_dir = max((env["base"] / "keyed-stats-v1").iterdir(), key=lambda p: p.stat().st_mtime)
    alerts = [m["text"] for m in env["webhook"].received[since:]]
    return run, {ti.task_id: str(ti.state) for ti in run.get_task_instances()}, run_dir, alerts


@pytest.fixture(scope="module")
def rolled_back(env: dict[str, Any]) -> dict[str, Any]:
    """Run 1: v2's gate is not met on 2.3 (2 checkpoints a second), so the run rolls back to 1.20.3."""
    started_ms = int(time.time() * 1000)
    run, states, run_dir, alerts = _run(env, min_checkpoints=1000, gate_timeout=12)
    registry = json.loads((env["base"] / "deployments.json").read_text())["keyed-stats-v1"]
    return {"run": run, "states": states, "run_dir": run_dir, "registry": registry, "started_ms": started_ms,
            "alerts": alerts,
            "v2_records": _restarted(env["work"] / "audit-v2", "v2"),
            "v1_records": _restarted(env["work"] / "audit-v1", "v1")}


@pytest.fixture(scope="module")
def upgraded_again(env: dict[str, Any], upgraded: dict[str, Any]) -> dict[str, Any]:
    """Run 3: the deployment, moved to 2.3 by run 2, upgraded again with no target cluster and no ``current``: the
    registry says where it runs (flink_default is still the 1.20.3 cluster). The v2 jar alone (no overlay, whose
    declared label would be rewritten again): its state as the savepoint holds it, a restore as is."""
    conf = {"target_flink_conn_id": "", "current": None, "manifest": "", "min_checkpoints": 2, "gate_timeout": 90}
    run, states, run_dir, alerts = _run(env, **conf)
    registry = json.loads((env["base"] / "deployments.json").read_text())["keyed-stats-v1"]
    after = {key: record["seq"] for key, record in upgraded["v2_records"].items()}
    return {"run": run, "states": states, "run_dir": run_dir, "registry": registry, "alerts": alerts,
            "v2_records": _restarted(env["work"] / "audit-v2", "v2", after)}


@pytest.fixture(scope="module")
def upgraded(env: dict[str, Any], rolled_back: dict[str, Any]) -> dict[str, Any]:
    """Run 2: the same upgrade, from the rolled-back v1 on 1.20.3, with a gate v2 meets on 2.3."""
    run, states, run_dir, alerts = _run(env, min_checkpoints=2, gate_timeout=90)
    registry = json.loads((env["base"] / "deployments.json").read_text())["keyed-stats-v1"]
    return {"run": run, "states": states, "run_dir": run_dir, "registry": registry, "alerts": alerts,
            "v2_records": _restarted(env["work"] / "audit-v2", "v2")}


def test_a_failed_gate_on_the_new_cluster_rolls_back_to_the_old_one(env: dict[str, Any],
                                                                     rolled_back: dict[str, Any]):
    states, run_dir, old, new = rolled_back["states"], rolled_back["run_dir"], env["old"], env["new"]
    assert str(rolled_back["run"].state) == "failed", states
    for task in ("stop_for_migration", "migrate", "recheck", "submit_new"):
        assert states[task] == "success", (task, states)
    assert states["health_gate"] == "failed" and states["conclude"] == "failed", states

    # Each jar was inspected on the classes of its cluster's Flink: the new schema is the migration's target.
    assert str(load_manifest(run_dir / "new-schema.yaml").flink_version).startswith("2.3")
    assert str(load_manifest(run_dir / "old-schema.yaml").flink_version).startswith("1.20")
    stop = next((run_dir / "stop").glob("savepoint-*"))
    assert Savepoint.open(stop).metadata.version == 4
    assert Savepoint.open(run_dir / "migrated" / "savepoint").metadata.version == 6

    # v2 ran on 2.3 from the migrated savepoint, every key's state v1's with the migration's label; then cancelled.
    for record in rolled_back["v2_records"].values():
        _assert_state(record, MIGRATED_LABEL)
    assert len(rolled_back["v2_records"]) == KEYS
    assert not _active(new, rolled_back["started_ms"])
    assert any(j["start-time"] >= rolled_back["started_ms"] and j["state"] == "CANCELED" for j in new.list_jobs())

    # v1 runs again on 1.20.3, from the stop savepoint, with every key's state as it was stopped.
    entry = rolled_back["registry"]
    assert entry["version"]["jar"] == env["current"]["jar"] and entry["savepoint"] == str(stop)
    assert old.job_state(env["v1_job"]) == "FINISHED" and old.job_state(entry["job_id"]) == "RUNNING"
    assert old.checkpoints(entry["job_id"]).restored_from.removeprefix("file:") == str(stop)
    assert _active(old) == [entry["job_id"]]
    assert len(rolled_back["v1_records"]) == KEYS
    for record in rolled_back["v1_records"].values():
        _assert_state(record, None)
    journal = json.loads((env["base"] / "journal" / "keyed-stats-v1.json").read_text())
    assert journal["outcome"] == "rolled back" and journal["new_flink_url"] == new.base_url
    assert journal["flink_url"] == old.base_url
    alerts = rolled_back["alerts"]
    assert len(alerts) == 1 and alerts[0].startswith(
        "Flink upgrade of keyed-stats-v1 FAILED and was ROLLED BACK: health_gate: "), alerts
    assert f"RUNNING now: the old version (sample-job-v1.jar) as job {entry['job_id']}, restored from the stop " \
           f"savepoint {stop}" in alerts[0], alerts


def test_the_dag_upgrades_the_job_from_flink_1_to_a_flink_2_cluster(env: dict[str, Any],
                                                                    rolled_back: dict[str, Any],
                                                                    upgraded: dict[str, Any]):
    states, run_dir, old, new = upgraded["states"], upgraded["run_dir"], env["old"], env["new"]
    assert str(upgraded["run"].state) == "success", states
    for task in ("stop_for_migration", "migrate", "recheck", "submit_new", "health_gate", "record", "conclude"):
        assert states[task] == "success", (task, states)

    # v2 runs on 2.3 from this run's migrated savepoint; nothing of the deployment is left on 1.20.3.
    entry = upgraded["registry"]
    migrated = run_dir / "migrated" / "savepoint"
    assert entry["version"]["jar"] == env["v2"]["jar"] and entry["savepoint"] == str(migrated)
    assert new.job_state(entry["job_id"]) == "RUNNING"
    assert new.checkpoints(entry["job_id"]).restored_from.removeprefix("file:") == str(migrated)
    assert old.job_state(rolled_back["registry"]["job_id"]) == "FINISHED" and not _active(old)
    # Every key found exactly the state v1 had when it was stopped on 1.20.3, with the migration's label.
    records = upgraded["v2_records"]
    assert len(records) == KEYS
    for record in records.values():
        _assert_state(record, MIGRATED_LABEL)
    assert len(upgraded["alerts"]) == 1 and upgraded["alerts"][0].startswith(
        f"Flink upgrade of keyed-stats-v1 succeeded: RUNNING now: the new version (sample-job-v2.jar) as job "
        f"{entry['job_id']}, restored from {migrated}"), upgraded["alerts"]
    assert {r["seq"] for r in records.values()}.isdisjoint(r["seq"] for r in rolled_back["v2_records"].values())


def test_the_registry_records_the_cluster_and_the_next_upgrade_finds_the_job_there(
        env: dict[str, Any], rolled_back: dict[str, Any], upgraded: dict[str, Any], upgraded_again: dict[str, Any]):
    """The registry names each deployment's cluster: the old one after the rollback, the new one after the upgrade
    moved it; the next run of the DAG, which names no target, stops, restores and gates the job on 2.3, where it runs
    (before the registry recorded clusters it looked on flink_default, the 1.20.3 cluster, and found no job)."""
    old, new = env["old"], env["new"]
    assert (rolled_back["registry"]["flink_conn_id"], rolled_back["registry"]["flink_url"]) == \
        ("flink_default", old.base_url)
    assert (upgraded["registry"]["flink_conn_id"], upgraded["registry"]["flink_url"]) == (TARGET_CONN, new.base_url)
    states, entry = upgraded_again["states"], upgraded_again["registry"]
    assert str(upgraded_again["run"].state) == "success", states
    assert states["stop_for_restore"] == "success" and states["health_gate"] == "success", states
    assert (entry["flink_conn_id"], entry["flink_url"]) == (TARGET_CONN, new.base_url)
    stop = next((upgraded_again["run_dir"] / "stop").glob("savepoint-*"))
    assert entry["savepoint"] == str(stop) and new.job_state(entry["job_id"]) == "RUNNING"
    assert new.job_state(upgraded["registry"]["job_id"]) == "FINISHED" and not _active(old)
    assert new.checkpoints(entry["job_id"]).restored_from.removeprefix("file:") == str(stop)
    records = upgraded_again["v2_records"]  # restored as is: every key exactly as v2 left it on 2.3 (its own label)
    assert len(records) == KEYS
    for record in records.values():
        _assert_state(record, f"label-{record['key']}")


def test_the_watchdog_finishes_a_dead_run_on_the_cluster_its_journal_names(
        env: dict[str, Any], upgraded_again: dict[str, Any]):
    """A run of the moved deployment dies after its restore path was verified (v2 stopped on 2.3 with a savepoint,
    the journal at VERIFIED, its process gone). The watchdog, which holds flink_default's client (the 1.20.3
    cluster), finishes the upgrade on 2.3, where the journal says the run acts: the new version runs there from that
    savepoint, every key exact, and the registry still names 2.3."""
    from flinkstate_airflow import upgrade  # the plugin the watchdog DAG calls

    from flinkstate import UpgradeJournal

    old, new, base = env["old"], env["new"], env["base"]
    running = upgraded_again["registry"]
    version = {**env["v2"], "manifest": None}
    run_dir = base / "keyed-stats-v1" / "died"
    stop = new.stop_with_savepoint(running["job_id"], str(run_dir / "stop"))
    journal = UpgradeJournal.start({"savepoint_base": str(base), "job_name": "keyed-stats-v1", "run_id": "died",
                                    "run_dir": str(run_dir), "old": version, "new": version,
                                    "job_id": running["job_id"], "flink_url": new.base_url,
                                    "flink_conn_id": TARGET_CONN}, "resolve")
    journal.advance("stopping", "stop")
    journal.advance("stopped", "stop", stop_savepoint=stop)
    journal.advance("verified", "check", restore_path=stop)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    data = json.loads(Path(journal.uri).read_text())
    data["owner"]["pid"], data["owner"]["pid_start"] = dead.pid, "1"
    Path(journal.uri).write_text(json.dumps(data))

    alerts = upgrade.watchdog_sweep([str(base)], old, grace=0)
    assert len(alerts) == 1 and "DIED in phase verified" in alerts[0] and "finished the upgrade" in alerts[0], alerts
    entry = json.loads((base / "deployments.json").read_text())["keyed-stats-v1"]
    assert (entry["flink_conn_id"], entry["flink_url"], entry["run_id"]) == (TARGET_CONN, new.base_url, "died")
    assert new.job_state(entry["job_id"]) == "RUNNING" and not _active(old)
    assert new.checkpoints(entry["job_id"]).restored_from.removeprefix("file:") == stop.removeprefix("file:")
    after = {key: record["seq"] for key, record in upgraded_again["v2_records"].items()}
    records = _restarted(env["work"] / "audit-v2", "v2", after)
    assert len(records) == KEYS and all(r["seq"] > after[r["key"]] for r in records.values())
    for record in records.values():
        _assert_state(record, f"label-{record['key']}")
