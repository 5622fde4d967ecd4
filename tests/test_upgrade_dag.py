"""The upgrade DAG end to end, in real Airflow (dag.test), against the real local Flink and Spark in local mode.

One job is carried through the scenarios in order, its state checked value by value after each:
v1 -> v2 through the migration branch, v2's schema its jar's with v2's overlay (the ``label`` default, no
hand-written v2 manifest); v2 -> v3 refused (no conversion declared; no manifest at all: v3's jar alone): alert, v2
keeps running; the same in check-only mode changes nothing; v2 -> v3 with the conversion; then a release that fails
on start is rolled back to the running version from the stop savepoint. The first two runs go through ``flinkstate
upgrade run --local`` (``airflow dags test`` in a process of its own, as ``make demo`` runs it): its options make the
conf, it prints the outcome, the downtime and the alert the webhook got, and exits 0 or 3 (refused); Airflow's whole
log must be clean: no traceback, no error, a refusal's reason in one line. Issue 25's two user mistakes (a manifest
that misses a type change the jar made, one that keeps a state the jar renamed) are refused by preflight_checks,
before anything is stopped.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import requests

from flinkstate.cli.airflow_local import MIGRATED_MARKER
from flinkstate.engine import LocalFlinkCluster
from flinkstate.manifest import load_manifest
from flinkstate.savepoint import Savepoint
from flinkstate.serializers.registry import snapshot_bytes
from tests.support import sample_job
from tests.support.airflow_env import ROOT, load_dag, set_connection
from tests.support.sample_job import ENTRY_CLASS, expected_count

pytestmark = [pytest.mark.flink, pytest.mark.airflow, pytest.mark.spark]  # the DAG runs spark-submit

MANIFESTS = ROOT / "examples" / "sample-job" / "manifests"
KEYS = 8


def _args(audit: Path, *extra: str) -> list[str]:
    return ["--keys", str(KEYS), "--rate", "100", "--audit-dir", str(audit), *extra]


def _version(version: str, manifest: str | None, audit: Path, *extra: str) -> dict[str, Any]:
    """A version of the sample job; without ``manifest`` its schema is its jar's alone. (The versions that never
    run share v3's audit folder: preflight_checks's inspection of the jar runs main() and open() with the version's
    arguments, and is then cached.)"""
    return {"jar": str(sample_job.jar(version)), "manifest": str(MANIFESTS / manifest) if manifest else "",
            "entry_class": ENTRY_CLASS, "program_args": _args(audit, *extra), "parallelism": 2}


def _states(run: Any) -> dict[str, str]:
    return {ti.task_id: str(ti.state) for ti in run.get_task_instances()}


def _first_records(audit: Path, version: str) -> list[dict[str, Any]]:
    """The state each key found at its first event in the run that wrote ``audit`` (all keys)."""
    records = sample_job.read_audit(audit, version)
    first: dict[str, dict[str, Any]] = {}
    for record in records:
        first.setdefault(record["key"], record)
    assert len(first) == KEYS, f"{len(first)} of {KEYS} keys reported in {audit}"
    return list(first.values())


def _wait_for_keys(audit: Path, version: str) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 60
    while True:
        try:
            return _first_records(audit, version)
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


V2_LABEL = "v2's own"  # the label v2 writes on each event: label-<key>


def _assert_restored(record: dict[str, Any], *, count_type: type, label: Any) -> int:
    """What a key found after a restore: the exact state for the count its sequence number implies. ``label`` is
    the restored POJO's label: the migration's default, or V2_LABEL for state that v2 kept updating."""
    n = expected_count(record["key"], record["seq"], record["keys"])
    assert n > 0 and int(record["stats"]["count"]) == n and isinstance(record["stats"]["count"], count_type), record
    expected = sample_job.expected_state(record["key"], n)
    assert record["count"] == n
    assert record["stats"]["key"] == record["key"] and record["stats"]["total"] == n * (n + 1) // 2
    assert record["stats"].get("label") == (f"label-{record['key']}" if label == V2_LABEL else label), record
    assert record["recent"] == expected["recent"] and record["buckets"] == expected["buckets"]
    return n


@pytest.fixture(scope="module")
def env(airflow_home: Path, flink_cluster: LocalFlinkCluster, webhook: Any, tmp_path_factory: pytest.TempPathFactory
        ) -> dict[str, Any]:
    set_connection("flink_default", conn_type="http", host="127.0.0.1", port=flink_cluster.status()["rest_port"])
    set_connection("spark_default", conn_type="spark", host="local[2]")
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"  # spark-submit
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    work = tmp_path_factory.mktemp("upgrades")
    client = flink_cluster.client
    v1 = sample_job.submit(client, "v1", work / "audit-v1", keys=KEYS, rate=100, parallelism=2)
    v1.wait_for_keys()
    return {"client": client, "work": work,
            "base": work / "savepoints", "webhook": webhook, "v1_job": v1.job_id,
            "v1": _version("v1", "v1.yaml", work / "audit-v1")}


def _run(conf: dict[str, Any]) -> Any:
    """One run of the DAG, loaded afresh (dag.test leaves state on the DAG object it ran)."""
    return load_dag("flink_state_upgrade", ROOT / "dags").test(run_conf=conf)


def _conf(env: dict[str, Any], new: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"job_name": extra.pop("job_name", ""), "job_id": extra.pop("job_id", ""), **new,
            "savepoint_base": str(env["base"]), "min_checkpoints": 2, "gate_timeout": 90, "min_running_seconds": 3,
            **extra}


def _registry(env: dict[str, Any]) -> dict[str, Any]:
    return json.loads((env["base"] / "deployments.json").read_text())


def _run_dir(env: dict[str, Any], job_name: str, run: Any) -> Path:
    dirs = sorted((env["base"] / job_name).iterdir(), key=lambda p: p.stat().st_mtime)
    assert dirs, f"no run folder for {job_name}"
    return dirs[-1]


def _messages(env: dict[str, Any], since: int) -> list[str]:
    return [m["text"] for m in env["webhook"].received[since:]]


@pytest.fixture(scope="module")
def upgraded_to_v2(env: dict[str, Any]) -> dict[str, Any]:
    """v1 -> v2 with ``flinkstate upgrade run --local``, as ``make demo`` runs it: the run's outcome, Airflow's whole
    log and what the command printed, as a user reads them (one run serves all)."""
    since = len(env["webhook"].received)
    new = _version("v2", "v2-overlay.yaml", env["work"] / "audit-v2")  # v2's jar, and what it cannot say
    run, log, command = _run_cli(env, _conf(env, new, job_name="keyed-stats-v1", current=env["v1"]))
    return {"run": run, "since": since, "new": new, "log": log, "command": command}


def test_v1_to_v2_through_the_migration_branch(env: dict[str, Any], upgraded_to_v2: dict[str, Any]):
    run, client = upgraded_to_v2["run"], env["client"]
    states = _states(run)
    assert str(run.state) == "success", states
    for task in ("preflight_checks", "preflight_savepoint", "check", "stop_for_migration", "migrate", "recheck",
                 "submit_new", "health_gate", "record", "conclude"):
        assert states[task] == "success", (task, states)
    for task in ("stop_for_restore", "alert_incompatible", "check_only_done"):
        assert states[task] == "skipped", (task, states)

    # The old job was stopped with a savepoint; the new one runs from the migrated savepoint.
    assert client.job_state(env["v1_job"]) == "FINISHED"
    entry = _registry(env)["keyed-stats-v1"]
    assert entry["version"]["jar"].endswith("sample-job-v2.jar") and client.job_state(entry["job_id"]) == "RUNNING"
    run_dir = _run_dir(env, "keyed-stats-v1", run)
    assert entry["savepoint"] == str(run_dir / "migrated" / "savepoint")
    assert client.checkpoints(entry["job_id"]).restored_from.removeprefix("file:") == entry["savepoint"]
    assert (run_dir / "migrated" / "savepoint" / "_metadata").is_file() and not (run_dir / "as-is").exists()
    # The log is clean: through the migration branch restore_path_as_is was skipped, and nothing pulls what it never
    # pushed; no error, no traceback.
    log = upgraded_to_v2["log"]
    assert "XCom not found" not in log and "[error" not in log, log[-3000:]
    assert "Traceback" not in log, log[-3000:]

    # Every savepoint and report of the run is kept in its folder, the reports beside what they judged.
    preflight = json.loads((run_dir / "preflight" / "check-report.json").read_text())
    assert preflight["outcome"] == "migrate" and preflight["dry_run"]["ran"] and preflight["dry_run"]["failures"] == 0
    # The types came from the jars: v2's completed by its overlay, v1's by its manifest, both resolved before the
    # stop into the run's folder; the report and run.json say so.
    v2_jar, overlay = sample_job.jar("v2"), MANIFESTS / "v2-overlay.yaml"
    assert preflight["manifest"] == f"{v2_jar} with the overlay {overlay}"
    resolved = next(e["schemas"] for e in json.loads((run_dir / "run.json").read_text())["events"] if "schemas" in e)
    assert resolved == {
        "new": {"file": str(run_dir / "new-schema.yaml"), "jar": str(v2_jar), "overlay": str(overlay),
                "origin": f"{v2_jar} with the overlay {overlay}"},
        "old": {"file": str(run_dir / "old-schema.yaml"), "jar": env["v1"]["jar"], "overlay": env["v1"]["manifest"],
                "origin": f"{env['v1']['jar']} with the overlay {env['v1']['manifest']}"}}
    # v2's jar with its overlay is the hand-written v2 manifest, type by type (snapshot bytes) and migration.
    jar_schema, by_hand = load_manifest(run_dir / "new-schema.yaml"), load_manifest(MANIFESTS / "v2.yaml")
    assert jar_schema.jar == str(v2_jar) and set(jar_schema.operators) == set(by_hand.operators)
    for label, operator in by_hand.operators.items():
        states = jar_schema.operators[label].states
        assert set(states) == set(operator.states), label
        for name, state in operator.states.items():
            assert snapshot_bytes(states[name].state_serializer()) == snapshot_bytes(state.state_serializer()), name
            assert states[name].migration == state.migration, name
    assert len(list((run_dir / "preflight").glob("savepoint-*"))) == 1
    assert len(list((run_dir / "stop").glob("savepoint-*"))) == 1
    recheck = json.loads((run_dir / "migrated" / "check-report.json").read_text())
    assert recheck["outcome"] == "restore" and recheck["verdict"] == "COMPATIBLE_AS_IS"
    run_record = json.loads((run_dir / "run.json").read_text())
    assert run_record["outcome"] == "upgraded" and run_record["plan"]["old"]["jar"].endswith("sample-job-v1.jar")
    # run.json records the stop savepoint, the gate's result and each step's duration.
    final = run_record["events"][-1]
    assert final["stop_savepoint"] == str(next((run_dir / "stop").glob("savepoint-*")))
    assert final["gate"]["passed"] is True and final["gate"]["checkpoints"] >= 2 and final["gate"]["restarts"] == 0
    assert final["gate"]["running_seconds"] >= 3
    assert set(final["durations"]) == {"stop", "migrate", "submit", "restore", "gate", "down"}, final["durations"]
    assert final["running"] == {"version": "new", "job_id": entry["job_id"]}
    journal = json.loads((env["base"] / "journal" / "keyed-stats-v1.json").read_text())
    # The downtime: the stop request -> every subtask of v2 RUNNING by Flink's own timestamps (asked here directly),
    # not until the gate passed, which took at least its min_running_seconds (3 s) more: the gate is its own figure.
    at = {step["phase"]: step["epoch"] for step in reversed(journal["history"])}
    v2_running = max(subtask["timestamps"]["RUNNING"] for vertex in client.job(entry["job_id"])["vertices"]
                     for subtask in requests.get(f"{client.base_url}/jobs/{entry['job_id']}/vertices/{vertex['id']}"
                                                 "/subtasktimes", timeout=30).json()["subtasks"]) / 1000
    assert final["durations"]["down"] == round(v2_running - at["stopping"], 1), (final["durations"], at)
    assert at["gate_passed"] - at["stopping"] - final["durations"]["down"] >= 3, (final["durations"], at)
    assert journal["phase"] == "done" and journal["outcome"] == "upgraded" and journal["alert_sent"] is True
    assert [step["phase"] for step in journal["history"]] == [
        "planned", "stopping", "stopped", "migrating", "migrated", "verified", "submitting", "submitted", "gating",
        "gate_passed", "done"]

    # v2 found every key's state as v1 left it, with the field v2 added filled by the migration.
    for record in _wait_for_keys(env["work"] / "audit-v2", "v2"):
        _assert_restored(record, count_type=int, label="migrated")
    texts = _messages(env, upgraded_to_v2["since"])
    assert len(texts) == 1, texts  # one alert per outcome
    assert texts[0].startswith(f"Flink upgrade of keyed-stats-v1 succeeded: RUNNING now: the new version "
                               f"(sample-job-v2.jar) as job {entry['job_id']}"), texts
    assert f" Down {final['durations']['down']:.1f} s (from the stop request until every subtask" in texts[0], texts
    # The command said the same: exit 0, the outcome with run.json's downtime, each step the journal recorded, and
    # the alert the webhook got.
    command = upgraded_to_v2["command"]
    assert command.returncode == 0, command.stdout + command.stderr
    assert (f"run {run.run_id}: success; outcome: upgraded; down {final['durations']['down']:.1f} s (stop request -> "
            "every subtask of the job that runs now RUNNING)") in command.stdout.splitlines(), command.stdout
    steps = re.findall(r"^  \[ *\d+ s\] (\w+): (\w+)", command.stdout, re.MULTILINE)
    assert [phase for _, phase in steps if phase != "running"] == [s["phase"] for s in journal["history"]], steps
    assert _printed_alert(command.stdout) == texts[0]


def test_v2_to_v3_without_a_conversion_is_refused_and_v2_keeps_running(env: dict[str, Any],
                                                                        upgraded_to_v2: dict[str, Any]):
    since = len(env["webhook"].received)
    entry = _registry(env)["keyed-stats-v1"]
    new = _version("v3", None, env["work"] / "audit-v3")  # no manifest: v3's jar says count is a String now
    run, log, command = _run_cli(env, _conf(env, new, job_name="keyed-stats-v1", job_id=entry["job_id"]))
    assert command.returncode == 3, command.stdout + command.stderr  # refused: nothing was stopped
    assert f"run {run.run_id}: failed; outcome: refused" in command.stdout.splitlines(), command.stdout
    states = _states(run)
    assert str(run.state) == "failed", log[-5000:]
    assert states["alert_incompatible"] == "success" and states["conclude"] == "failed", states
    for task in ("stop_for_restore", "stop_for_migration", "migrate", "submit_new"):
        assert states[task] == "skipped", (task, states)
    # v2 runs on, untouched: same job, same state (it keeps counting), no savepoint but the preflight one.
    assert env["client"].job_state(entry["job_id"]) == "RUNNING"
    assert _registry(env)["keyed-stats-v1"] == entry
    run_dir = _run_dir(env, "keyed-stats-v1", run)
    assert not (run_dir / "stop").exists() and not (run_dir / "migrated").exists()
    assert sample_job.read_audit(env["work"] / "audit-v3", "v3") == []  # v3 never ran (its open() did, unstarted)
    report = json.loads((run_dir / "preflight" / "check-report.json").read_text())
    assert report["manifest"] == str(sample_job.jar("v3"))  # the jar alone
    preflight = next((run_dir / "preflight").glob("savepoint-*"))
    values = {key: value for key, _, value in Savepoint.open(preflight).iter_entries("stats", "stats")}
    assert len(values) == KEYS
    for key, value in values.items():  # v2's own state by now: it set `label` on every event since the restore
        n = value["count"]
        assert n > 0 and value == {"key": key, "count": n, "total": n * (n + 1) // 2, "label": f"label-{key}"}
    texts = _messages(env, since)
    assert len(texts) == 1, texts  # REFUSED only, not REFUSED then FAILED
    assert "REFUSED" in texts[0] and "nothing was stopped" in texts[0], texts
    assert f"RUNNING now: the old version (sample-job-v2.jar) as job {entry['job_id']}" in texts[0]
    assert "POJO_FIELD_TYPE_CHANGED" in texts[0] and "| stats | stats |" in texts[0]
    assert _printed_alert(command.stdout) == texts[0]
    # The log gives the reason in one line (the task's end), no traceback anywhere.
    assert "Traceback" not in log, log[-5000:]
    headline = ("Flink upgrade of keyed-stats-v1 REFUSED: the new version cannot restore the state; nothing was "
                f"stopped. RUNNING now: the old version (sample-job-v2.jar) as job {entry['job_id']}.")
    ended = [line for line in log.splitlines() if "Task exited" in line]
    assert len(ended) == 1 and f"exit_code='{headline}'" in ended[0], ended or log[-5000:]
    assert "XCom not found" not in log


def test_check_only_changes_nothing(env: dict[str, Any], upgraded_to_v2: dict[str, Any]):
    entry = _registry(env)["keyed-stats-v1"]
    jobs_before = {j["jid"]: j["state"] for j in env["client"].list_jobs()}
    new = _version("v3", "v3-with-conversion.yaml", env["work"] / "audit-v3")
    run = _run(_conf(env, new, job_id=entry["job_id"], mode="check-only"))
    states = _states(run)
    assert str(run.state) == "success" and states["check_only_done"] == "success", states
    assert states["stop_for_migration"] == "skipped" and states["submit_new"] == "skipped"
    assert {j["jid"]: j["state"] for j in env["client"].list_jobs()} == jobs_before
    assert _registry(env)["keyed-stats-v1"] == entry
    report = json.loads((_run_dir(env, "keyed-stats-v1", run) / "preflight" / "check-report.json").read_text())
    assert report["outcome"] == "migrate"  # what an upgrade would do, reported, not done


@pytest.fixture(scope="module")
def upgraded_to_v3(env: dict[str, Any], upgraded_to_v2: dict[str, Any]) -> dict[str, Any]:
    entry = _registry(env)["keyed-stats-v1"]
    new = _version("v3", "v3-with-conversion.yaml", env["work"] / "audit-v3")
    run = _run(_conf(env, new, job_id=entry["job_id"]))
    return {"run": run, "old_job": entry["job_id"], "new": new}


def test_v2_to_v3_with_the_conversion_flink_refuses(env: dict[str, Any], upgraded_to_v3: dict[str, Any]):
    run = upgraded_to_v3["run"]
    assert str(run.state) == "success", _states(run)
    entry = _registry(env)["keyed-stats-v1"]
    assert entry["version"]["manifest"].endswith("v3-with-conversion.yaml")
    assert env["client"].job_state(entry["job_id"]) == "RUNNING"
    assert env["client"].job_state(upgraded_to_v3["old_job"]) == "FINISHED"
    for record in _wait_for_keys(env["work"] / "audit-v3", "v3"):
        # count long -> String, done before the restore; label as v2 left it
        _assert_restored(record, count_type=str, label=V2_LABEL)


def test_a_release_that_fails_on_start_is_rolled_back(env: dict[str, Any], upgraded_to_v3: dict[str, Any]):
    since = len(env["webhook"].received)
    entry = _registry(env)["keyed-stats-v1"]
    # Its tasks fail as they start, which the jar's inspection cannot see (it opens the operators on a HashMap
    # backend): RocksDB's local folder cannot be created, and Flink restarts the job in a loop. (A release whose
    # open() throws, the sample job's --crash-on-start, no longer gets this far: the inspection runs its open().)
    blocked = env["work"] / "not-a-folder"
    blocked.write_text("a file where RocksDB's local folder must go")
    crashing = _version("v3", "v3-with-conversion.yaml", env["work"] / "audit-crash", "--set",
                        "state.backend.type=rocksdb", "--set", f"state.backend.rocksdb.localdir={blocked / 'rocksdb'}")
    started_ms = int(time.time() * 1000)
    run = _run(_conf(env, crashing, job_id=entry["job_id"]))
    states = _states(run)
    assert str(run.state) == "failed"
    assert states["stop_for_restore"] == "success" and states["submit_new"] == "failed", states
    assert states["conclude"] == "failed"  # it restored the old version, then failed the run on purpose

    # The running version (v3 with the conversion, as recorded) is back, from the stop savepoint, with its state.
    after = _registry(env)["keyed-stats-v1"]
    assert after["version"] == entry["version"] and after["job_id"] != entry["job_id"]
    client = env["client"]
    assert client.job_state(after["job_id"]) == "RUNNING"
    stop = next((_run_dir(env, "keyed-stats-v1", run) / "stop").glob("savepoint-*"))
    assert after["savepoint"] == str(stop)
    assert client.checkpoints(after["job_id"]).restored_from.removeprefix("file:") == str(stop)
    # The crashing job was cancelled: nothing started during this run is active but the rolled-back job.
    active = [j for j in client.list_jobs() if j["start-time"] >= started_ms and j["jid"] != after["job_id"]
              and j["state"] not in ("FINISHED", "CANCELED", "FAILED")]
    assert not active, f"the crashing job must be cancelled: {active}"
    assert any(j["start-time"] >= started_ms and j["state"] == "CANCELED" for j in client.list_jobs())
    # The rolled-back job restarted with the recorded arguments, so it audits into the same folder as the first v3
    # run: for each key, the record with the highest sequence number is what the restart found.
    restarted: dict[str, dict[str, Any]] = {}
    for record in sample_job.read_audit(env["work"] / "audit-v3", "v3"):
        if record["key"] not in restarted or record["seq"] > restarted[record["key"]]["seq"]:
            restarted[record["key"]] = record
    assert len(restarted) == KEYS
    for record in restarted.values():
        _assert_restored(record, count_type=str, label=V2_LABEL)
    texts = _messages(env, since)
    assert len(texts) == 1, texts
    assert texts[0].startswith("Flink upgrade of keyed-stats-v1 FAILED and was ROLLED BACK: submit_new: "), texts
    assert "No local storage directories available" in texts[0], texts  # Flink's own reason
    assert f"RUNNING now: the old version (sample-job-v3.jar) as job {after['job_id']}, restored from the stop " \
           f"savepoint {stop}" in texts[0], texts


def _unchanged_run(env: dict[str, Any], new: dict[str, Any]) -> tuple[Any, dict[str, Any], list[str], Path]:
    """A run that must change nothing: the registry's job before, the run, and the alerts it sent."""
    since = len(env["webhook"].received)
    entry = _registry(env)["keyed-stats-v1"]
    run = _run(_conf(env, new, job_id=entry["job_id"]))
    return run, entry, _messages(env, since), _run_dir(env, "keyed-stats-v1", run)


def _assert_nothing_changed(env: dict[str, Any], run: Any, entry: dict[str, Any], texts: list[str],
                            failed: str) -> None:
    states = _states(run)
    assert str(run.state) == "failed" and states[failed] == "failed" and states["conclude"] == "failed", states
    for task in ("stop_for_restore", "stop_for_migration", "submit_new"):
        assert states[task] in ("upstream_failed", "skipped"), (task, states)
    assert env["client"].job_state(entry["job_id"]) == "RUNNING" and _registry(env)["keyed-stats-v1"] == entry
    assert len(texts) == 1, texts  # one alert, and no rollback ran
    assert texts[0].startswith(f"Flink upgrade of keyed-stats-v1 FAILED before the old job was stopped: {failed}: ")
    assert f"Nothing changed. RUNNING now: the old version (sample-job-v3.jar) as job {entry['job_id']}" in texts[0]
    journal = json.loads((env["base"] / "journal" / "keyed-stats-v1.json").read_text())
    assert journal["outcome"] == "unchanged" and "rolling_back" not in [s["phase"] for s in journal["history"]]


def test_a_file_that_is_not_a_jar_is_found_before_the_stop(env: dict[str, Any], upgraded_to_v3: dict[str, Any]):
    not_a_jar = env["work"] / "not-a-jar.jar"
    not_a_jar.write_text("<html>404</html>")
    new = {**_version("v3", "v3-with-conversion.yaml", env["work"] / "audit-nojar"), "jar": str(not_a_jar)}
    run, entry, texts, run_dir = _unchanged_run(env, new)
    _assert_nothing_changed(env, run, entry, texts, "preflight_checks")
    assert f"the new jar {not_a_jar}: not a jar (not a zip archive)" in texts[0]
    assert not (run_dir / "preflight").exists() and not (run_dir / "stop").exists()


def test_a_manifest_that_misses_a_type_change_is_refused_before_the_stop(env: dict[str, Any],
                                                                          upgraded_to_v3: dict[str, Any]):
    # Issue 25's second mistake: v3's jar made `count` a String; the manifest given (v2's) still says Long. Flink
    # would find out after the stop, and the run would roll back; the jar's schema refuses it before anything runs.
    run, entry, texts, run_dir = _unchanged_run(env, _version("v3", "v2.yaml", env["work"] / "audit-v3"))
    _assert_nothing_changed(env, run, entry, texts, "preflight_checks")
    assert (f"preflight_checks: checks before the stop failed: the new version's schema: {MANIFESTS / 'v2.yaml'}: "
            f"operators.stats.states.stats.value: contradicts the jar {sample_job.jar('v3')}: operator stats, state "
            f"stats, value, field count: the overlay says Long, the jar registers String. Nothing changed.") in texts[0]
    assert not (run_dir / "preflight").exists() and not (run_dir / "new-schema.yaml").exists()


def test_a_manifest_that_keeps_a_state_the_jar_renamed_is_refused_by_preflight_checks(
        env: dict[str, Any], upgraded_to_v3: dict[str, Any], tmp_path: Path):
    # Issue 25's first mistake, asked of preflight_checks directly (its DAG run is the one above): the jar renamed
    # the ListState `recent` to `recent-tx`; the manifest given, otherwise right (v1's), keeps `recent`.
    from dataclasses import asdict

    from flinkstate_airflow import upgrade

    from flinkstate import JobVersion, check

    entry = _registry(env)["keyed-stats-v1"]
    jar = sample_job.renamed_state_jar(tmp_path)
    new = JobVersion(str(jar), str(MANIFESTS / "v1.yaml"), ENTRY_CLASS, _args(env["work"] / "audit-v3"), 2)
    run_dir = tmp_path / "run"
    plan = {"job_id": entry["job_id"], "run_id": "direct", "run_dir": str(run_dir), "savepoint_base": str(tmp_path),
            "new": asdict(new), "old": entry["version"],
            "schemas": {"new": str(run_dir / "new-schema.yaml"), "old": str(run_dir / "old-schema.yaml")}}
    assert upgrade.preflight_checks(plan, env["client"], "local[2]") == [
        f"the new version's schema: {MANIFESTS / 'v1.yaml'}: operators.stats.states.recent: contradicts the jar "
        f"{jar}: operator stats, state recent: the overlay declares it, but the jar does not register it when the "
        f"operator opens (it registers: _timer_state/event_user-timers, _timer_state/processing_user-timers, "
        f"buckets, count, recent-tx, stats); if the jar renamed it, declare the new name with renamed_from: recent "
        f"(e.g. recent-tx)"]
    assert not (run_dir / "new-schema.yaml").exists()
    assert env["client"].job_state(entry["job_id"]) == "RUNNING"  # nothing was stopped

    # Without a manifest the jar alone is the schema, and the file the Spark jobs judge keeps it the jar's: the
    # savepoint's `recent`, which the jar does not register, is reported as such (incompatible), never kept unseen.
    plan["new"] = asdict(JobVersion(str(jar), None, ENTRY_CLASS, new.program_args, 2))
    assert upgrade.preflight_checks(plan, env["client"], "local[2]") == []
    savepoint = next(env["base"].glob("keyed-stats-v1/*/stop/savepoint-*"))
    report = check(savepoint, str(run_dir / "new-schema.yaml"))
    assert report.outcome == "incompatible" and report.manifest == str(jar)
    [recent] = [row for row in report.rows if (row.operator, row.state) == ("stats", "recent")]
    assert [f.code for f in recent.findings] == ["STATE_NOT_REGISTERED"]
    assert load_manifest(run_dir / "old-schema.yaml").origin() == \
        f"{entry['version']['jar']} with the overlay {entry['version']['manifest']}"


def test_jar_checks_on_real_jars(airflow_home: Path, tmp_path: Path):
    from flinkstate_airflow.upgrade import _jar_problems

    from flinkstate import JobVersion

    jar = str(sample_job.jar("v3"))
    assert _jar_problems(JobVersion(jar, "m.yaml", ENTRY_CLASS)) == []
    assert _jar_problems(JobVersion(jar, "m.yaml", "com.example.Missing")) == [
        f"the new jar {jar}: has no entry class com.example.Missing"]
    assert _jar_problems(JobVersion(str(tmp_path / "gone.jar"), "m.yaml", ENTRY_CLASS)) == [
        f"the new jar {tmp_path / 'gone.jar'}: no such file"]


def test_a_failing_preflight_savepoint_changes_nothing(env: dict[str, Any], upgraded_to_v3: dict[str, Any]):
    # The fault: the preflight savepoint's target becomes unusable for Flink (a file where its folder must go), made
    # as soon as the run's folder exists, after the run's own writability checks.
    import threading

    job_dir, stop = env["base"] / "keyed-stats-v1", threading.Event()
    before = {p.name for p in job_dir.iterdir()}

    def block() -> None:
        while not stop.is_set():
            for folder in job_dir.iterdir():
                if folder.name not in before and not (folder / "preflight").exists():
                    (folder / "preflight").write_text("in the way")
                    return
            time.sleep(0.02)

    blocker = threading.Thread(target=block, daemon=True)
    blocker.start()
    try:
        run, entry, texts, run_dir = _unchanged_run(env, _version("v3", "v3-with-conversion.yaml",
                                                                  env["work"] / "audit-v3"))
    finally:
        stop.set()
    _assert_nothing_changed(env, run, entry, texts, "preflight_savepoint")
    assert json.loads((run_dir / "run.json").read_text())["outcome"] == "unchanged"


def test_flink_unreachable_changes_nothing_and_says_why(env: dict[str, Any], upgraded_to_v3: dict[str, Any]):
    from flinkstate.engine.local import free_port

    since = len(env["webhook"].received)
    entry = _registry(env)["keyed-stats-v1"]
    real = os.environ["AIRFLOW_CONN_FLINK_DEFAULT"]
    port = free_port()
    set_connection("flink_default", conn_type="http", host="127.0.0.1", port=port)
    try:
        run = _run(_conf(env, _version("v3", "v3-with-conversion.yaml", env["work"] / "audit-x"),
                         job_id=entry["job_id"]))
    finally:
        os.environ["AIRFLOW_CONN_FLINK_DEFAULT"] = real
    states = _states(run)
    assert str(run.state) == "failed" and states["resolve"] == "failed" and states["conclude"] == "failed", states
    texts = _messages(env, since)
    assert texts == [f"Flink upgrade of {entry['job_id']} FAILED before anything was changed: resolve: cannot reach "
                     f"the Flink REST API at http://127.0.0.1:{port}: connection refused or reset. Nothing was "
                     f"stopped; the running job was not touched. See it in Airflow: "
                     f"http://localhost:8080/dags/flink_state_upgrade/runs/"
                     f"{quote(run.run_id, safe='')}/plugin/flink-upgrade"], texts  # the run's tab in the UI
    assert env["client"].job_state(entry["job_id"]) == "RUNNING" and _registry(env)["keyed-stats-v1"] == entry


def _run_cli(env: dict[str, Any], conf: dict[str, Any]) -> tuple[Any, str, subprocess.CompletedProcess[str]]:
    """One run with ``flinkstate upgrade run --local`` (as ``make demo`` runs it: ``airflow dags test`` in a process of
    its own) on this session's Airflow home and database, its alert passed on to the session's webhook: the run (read
    back from the database), Airflow's whole log of it, and the command's result. The command's options give the
    conf: the DAG run's conf is exactly ``conf`` (the command adds only its default mode)."""
    from airflow.models.dagrun import DagRun

    home = Path(os.environ["AIRFLOW_HOME"])
    # The session's database was created by airflow_env.configure_airflow (initdb): no `airflow db migrate` again.
    (home / MIGRATED_MARKER).write_text("created by tests/support/airflow_env.py\n")
    options = ["--deployment", conf["job_name"], "--jar", conf["jar"], "--entry-class", conf["entry_class"],
               "--parallelism", str(conf["parallelism"]), "--savepoint-base", conf["savepoint_base"],
               *[f"--{key.replace('_', '-')}={conf[key]}"
                 for key in ("min_checkpoints", "gate_timeout", "min_running_seconds")]]
    options += ["--job-id", conf["job_id"]] if conf["job_id"] else []
    options += ["--manifest", conf["manifest"]] if conf["manifest"] else []
    if conf.get("current"):
        current = conf["current"]
        options += ["--current-jar", current["jar"], "--current-manifest", current["manifest"], "--current-entry-class",
                    current["entry_class"], "--current-parallelism", str(current["parallelism"]),
                    f"--current-program-args={shlex.join(current['program_args'])}"]
    log = env["work"] / f"airflow-{len(list(env['work'].glob('airflow-*.log')))}.log"
    before = {r.run_id for r in DagRun.find(dag_id="flink_state_upgrade")}
    command = subprocess.run(
        [sys.executable, "-m", "flinkstate", "upgrade", "run", "--local", "--airflow-home", str(home), "--flink-url",
         env["client"].base_url, "--webhook-url", f"http://127.0.0.1:{env['webhook'].port}/hooks/flink", "--log",
         str(log), *options, "--", *conf["program_args"]], cwd=ROOT, capture_output=True, text=True, timeout=900)
    runs = [r for r in DagRun.find(dag_id="flink_state_upgrade") if r.run_id not in before]
    assert len(runs) == 1, command.stdout + command.stderr
    assert runs[0].conf == {**conf, "mode": "upgrade"}, runs[0].conf
    return runs[0], log.read_text(), command


def _printed_alert(stdout: str) -> str:
    """The alert as ``flinkstate upgrade run`` printed it (as the webhook got it)."""
    printed = stdout.split("\nalert:\n", 1)[1].split("\nnote: ", 1)[0]
    return "\n".join(line.removeprefix("  ") for line in printed.split("\n"))
