"""Scheduled upgrades: the release file's validation, windows (over midnight, days, time zones), the diff against the
deployment registry, and one real Airflow run of flink_scheduled_upgrades against the real local Flink that triggers
flink_state_upgrade for exactly the job that is due."""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from flinkstate.engine import LocalFlinkCluster
from flinkstate.upgrades.journal import Outcome, Phase
from tests.support import sample_job
from tests.support.airflow_env import ROOT, load_dag, set_connection

if str(ROOT / "plugins") not in sys.path:  # the unit tests need no Airflow set-up, only the plugin on the path
    sys.path.insert(0, str(ROOT / "plugins"))

from flinkstate_airflow import releases
from flinkstate_airflow.releases import ReleaseError, Window, parse_release
from flinkstate_airflow.upgrade import DeploymentRegistry, JobVersion, UpgradeJournal

MANIFESTS = ROOT / "examples" / "sample-job" / "manifests"
V1 = JobVersion("/jars/v1.jar", "/m/v1.yaml", "sample.KeyedStatsJob", ["--keys", "5"], 2)
V2 = JobVersion("/jars/v2.jar", "/m/v2.yaml", "sample.KeyedStatsJob", ["--keys", "5"], 2)


def release_text(base: str, jobs: str) -> str:
    return f"savepoint_base: {base}\njobs:\n{jobs}"


def job_yaml(name: str, version: JobVersion, extra: str = "") -> str:
    args = ", ".join(f'"{a}"' for a in version.program_args)
    return (f"  {name}:\n    jar: {version.jar}\n    manifest: {version.manifest}\n"
            f"    entry_class: {version.entry_class}\n    program_args: [{args}]\n"
            f"    parallelism: {version.parallelism}\n{extra}")


def at(text: str, tz: str = "UTC") -> datetime:
    """An aware datetime from 'YYYY-MM-DD HH:MM' in ``tz``."""
    from zoneinfo import ZoneInfo

    return datetime.strptime(text, "%Y-%m-%d %H:%M").replace(tzinfo=ZoneInfo(tz))


# ------------------------------------------------------------------------------------------------------------ windows

def window(start: str, end: str, tz: str = "UTC", days: list[str] | None = None) -> Window:
    spec: dict[str, Any] = {"start": start, "end": end, "timezone": tz}
    if days:
        spec["days"] = days
    return releases.parse_window(spec, "w")


@pytest.mark.parametrize(("clock", "is_open"), [
    ("01:59", False), ("02:00", True), ("03:59", True), ("04:00", False), ("12:00", False)])
def test_window_same_day_is_half_open(clock: str, is_open: bool):
    assert window("02:00", "04:00").is_open(at(f"2026-03-04 {clock}")) is is_open


@pytest.mark.parametrize(("moment", "is_open"), [
    ("2026-03-06 21:59", False),   # Friday, before the start
    ("2026-03-06 22:00", True),    # Friday evening: the Friday window
    ("2026-03-07 01:30", True),    # Saturday morning: still the Friday window
    ("2026-03-07 02:00", False),   # its end
    ("2026-03-07 23:00", False),   # Saturday evening: no window starts on Saturday
    ("2026-03-08 01:00", False),   # Sunday morning: the Saturday window, which does not exist
    ("2026-03-05 23:00", True),    # Thursday evening
    ("2026-03-05 01:00", True),    # Thursday morning: Wednesday's window
])
def test_window_over_midnight_belongs_to_the_day_it_starts(moment: str, is_open: bool):
    assert window("22:00", "02:00", days=["mon", "tue", "wed", "thu", "fri"]).is_open(at(moment)) is is_open


def test_window_is_judged_in_its_time_zone():
    berlin = window("02:00", "04:00", tz="Europe/Berlin")
    assert berlin.is_open(at("2026-01-15 01:30"))           # 02:30 in Berlin (UTC+1)
    assert not berlin.is_open(at("2026-01-15 03:30"))       # 04:30 in Berlin
    assert berlin.is_open(at("2026-07-15 00:30"))           # summer time: UTC+2
    assert berlin.describe() == "02:00-04:00 Europe/Berlin"


# --------------------------------------------------------------------------------------------------------- validation

@pytest.mark.parametrize(("body", "message"), [
    ("jobs: [", "r.yaml: not YAML (line 1)"),
    ("- a\n", "r.yaml: expected a mapping with 'jobs' and 'savepoint_base'"),
    ("jobs: {a: {jar: j, manifest: m}}\n", "r.yaml: savepoint_base: required"),
    ("savepoint_base: /b\n", "r.yaml: jobs: required"),
    ("savepoint_base: /b\njobz: {}\n", "r.yaml: unknown key 'jobz'"),
    ("savepoint_base: /b\njobs: {a: {manifest: m}}\n", "r.yaml: jobs.a.jar: required"),
    ("savepoint_base: /b\njobs: {a: {jar: j, manifest: m, paralelism: 2}}\n", "r.yaml: jobs.a.paralelism: unknown key"),
    ("savepoint_base: /b\njobs: {a: {jar: j, manifest: m, parallelism: 0}}\n",
     "r.yaml: jobs.a.parallelism: expected a positive integer, got 0"),
    ("savepoint_base: /b\njobs: {a: {jar: j, manifest: m, program_args: --keys 5}}\n",
     "r.yaml: jobs.a.program_args: expected a list of strings"),
    ("savepoint_base: /b\njobs: {a: {jar: j, manifest: m, window: {start: 2:00, end: '04:00'}}}\n",
     "r.yaml: jobs.a.window.start: expected \"HH:MM\" (00:00-23:59), got 120 (quote it"),
    ("savepoint_base: /b\njobs: {a: {jar: j, manifest: m, window: {start: '24:00', end: '04:00'}}}\n",
     "r.yaml: jobs.a.window.start: expected \"HH:MM\" (00:00-23:59), got '24:00'"),
    ("savepoint_base: /b\njobs: {a: {jar: j, manifest: m, window: {start: '04:00', end: '04:00'}}}\n",
     "r.yaml: jobs.a.window: start equals end"),
    ("savepoint_base: /b\njobs: {a: {jar: j, manifest: m, window: {start: '01:00', end: '02:00', timezone: Mars/Base}}}"
     "\n", "r.yaml: jobs.a.window.timezone: unknown time zone 'Mars/Base'"),
    ("savepoint_base: /b\njobs: {a: {jar: j, manifest: m, window: {start: '01:00', end: '02:00', days: [mon, fun]}}}\n",
     "r.yaml: jobs.a.window.days: unknown day 'fun'"),
    ("savepoint_base: /b\njobs: {a: {jar: j, manifest: m, mode: dry}}\n", "r.yaml: jobs.a.mode: expected upgrade or"),
    ("savepoint_base: /b\njobs: {a: {jar: j, manifest: m, max_restarts: true}}\n",
     "r.yaml: jobs.a.max_restarts: expected a non-negative int, got True"),
    ("savepoint_base: /b\njobs: {a: {jar: j, approval: 'yes'}}\n",
     "r.yaml: jobs.a.approval: expected a bool, got 'yes'"),
    ("savepoint_base: /b\njobs: {a: {jar: j, approval: true, approval_timeout: -5}}\n",
     "r.yaml: jobs.a.approval_timeout: expected a non-negative int, got -5"),
    ("savepoint_base: /b\njobs: {a: {jar: j, target_flink_conn_id: 5}}\n",
     "r.yaml: jobs.a.target_flink_conn_id: expected a str, got 5"),
    ("savepoint_base: /b\njobs: {a: {jar: j, manifest: [m], current: {jar: j}}}\n", "r.yaml: jobs.a.manifest: "
     "expected a path (optional: the version's schema is its jar's, and a manifest an overlay of it), got ['m']"),
    ("savepoint_base: /b\njobs: {a: {jar: j, current: {manifest: m}}}\n", "r.yaml: jobs.a.current.jar: required"),
])
def test_validation_errors_are_one_line_naming_file_and_path(body: str, message: str):
    with pytest.raises(ReleaseError) as info:
        parse_release(body, "r.yaml")
    assert str(info.value).startswith(message), str(info.value)
    assert "\n" not in str(info.value)


def test_a_version_without_a_manifest_is_its_jars():
    # The version's schema is its jar's (preflight_checks inspects it): no manifest, in the release or its current.
    release = parse_release("savepoint_base: /b\njobs: {a: {jar: /j/v2.jar, current: {jar: /j/v1.jar}}}\n", "r.yaml")
    job = release.jobs["a"]
    assert (job.version, job.current) == (JobVersion("/j/v2.jar"), JobVersion("/j/v1.jar"))
    conf = releases.upgrade_conf(release, job, "a" * 32, job.current)
    assert conf["manifest"] == "" and conf["current"]["manifest"] is None
    assert JobVersion.from_dict({"jar": conf["jar"], "manifest": conf["manifest"]}, "params") == job.version


def test_a_full_release_parses(tmp_path: Path):
    text = release_text("s3://bucket/sp/", job_yaml("keyed-stats", V2, (
        "    flink_job_name: keyed-stats-v1\n    window: {start: \"22:00\", end: \"02:00\", timezone: Europe/Berlin, "
        "days: [Friday, sat]}\n    max_restarts: 1\n    allow_non_restored_state: true\n    approval: true\n"
        "    approval_timeout: 600\n    target_flink_conn_id: flink_2x\n")))
    path = tmp_path / "release.yaml"
    path.write_text(text)
    release = releases.load_release(str(path))
    job = release.jobs["keyed-stats"]
    assert release.savepoint_base == "s3://bucket/sp" and release.source == str(path)
    assert job.version == V2 and job.flink_job_name == "keyed-stats-v1" and job.mode == "upgrade"
    assert job.window == Window(at("2026-01-01 22:00").time(), at("2026-01-01 02:00").time().replace(), "Europe/Berlin",
                                ("fri", "sat"))
    # A deployment that needs a person's approval before its stop: the scheduler's run asks (the DAG's params).
    assert job.options == {"max_restarts": 1, "allow_non_restored_state": True, "approval": True,
                           "approval_timeout": 600, "target_flink_conn_id": "flink_2x"}
    conf = releases.upgrade_conf(release, job, "a" * 32, None)
    assert (conf["approval"], conf["approval_timeout"], conf["target_flink_conn_id"]) == (True, 600, "flink_2x")
    with pytest.raises(ReleaseError, match=r"^/no/such/release.yaml: cannot read the release file"):
        releases.load_release("/no/such/release.yaml")


# ------------------------------------------------------------------------------------------------------------ decide

def test_diff_and_decisions_without_flink(tmp_path: Path):
    base = str(tmp_path / "sp")
    registry = DeploymentRegistry(base)
    registry.record("due", V1, "a" * 32, None, "r0")
    registry.record("same", V2, "b" * 32, None, "r0")
    registry.record("closed", V1, "c" * 32, None, "r0")
    later = "    window: {start: \"03:00\", end: \"04:00\"}\n"
    text = release_text(base, job_yaml("due", V2, "    max_restarts: 1\n") + job_yaml("same", V2)
                        + job_yaml("closed", V2, later) + job_yaml("unknown", V2)
                        + job_yaml("bootstrap", V2, f"    current: {{jar: {V1.jar}, manifest: {V1.manifest}}}\n"))
    release = parse_release(text, "r.yaml")
    assert releases.version_diff(V1, V2) == ["jar", "manifest"]
    assert releases.version_diff(V2, V2) == []

    tick = releases.plan_tick(release, at("2026-03-04 12:00"), None)
    assert tick["skipped"]["same"] == "up to date"
    assert tick["skipped"]["closed"] == "outside its window 03:00-04:00 UTC (differs in jar, manifest)"
    assert tick["skipped"]["unknown"].startswith("error: no record of the running version in")
    # bootstrap has a 'current' but no job id in the registry, and without a Flink client nothing can resolve one.
    assert tick["problems"] == [f"r.yaml: jobs.unknown: {tick['skipped']['unknown'].removeprefix('error: ')}",
                                "r.yaml: jobs.bootstrap: no job id recorded and no Flink client to find it"]
    assert tick["triggers"] == [{"trigger_run_id": releases.upgrade_run_id("due", V2), "conf": {
        "job_name": "due", "job_id": "a" * 32, "jar": V2.jar, "entry_class": V2.entry_class,
        "program_args": V2.program_args, "parallelism": 2, "manifest": V2.manifest, "savepoint_base": base,
        "mode": "upgrade", "max_restarts": 1}}]
    # The run id is stable across ticks and changes with the release version.
    assert releases.upgrade_run_id("due", V2) == releases.upgrade_run_id("due", JobVersion(**vars(V2)))
    assert releases.upgrade_run_id("due", V1) != releases.upgrade_run_id("due", V2)
    # Inside the window, 'closed' is due as well.
    assert len(releases.plan_tick(release, at("2026-03-04 03:30"), None)["triggers"]) == 2
    # A deployment whose own run is unfinished waits for the next tick; the other is not held up by it.
    stuck = UpgradeJournal.start({"savepoint_base": base, "job_name": "due", "run_id": "stuck-run",
                                  "run_dir": f"{base}/due/stuck-run", "old": {}, "new": {}, "job_id": "a" * 32},
                                 "test")
    stuck.advance(Phase.STOPPING, "test")
    waiting = releases.plan_tick(release, at("2026-03-04 03:30"), None)
    assert [t["conf"]["job_name"] for t in waiting["triggers"]] == ["closed"]
    assert waiting["skipped"]["due"] == ("differs in jar, manifest, but its upgrade run stuck-run is unfinished "
                                         "(phase stopping): next tick")
    stuck.finish(Outcome.ROLLED_BACK, "test", running={"version": "old", "job_id": "a" * 32})
    assert len(releases.plan_tick(release, at("2026-03-04 03:30"), None)["triggers"]) == 2


# ------------------------------------------------------------------------------------------- real Airflow, real Flink

def hhmm(moment: datetime) -> str:
    return f'"{moment:%H:%M}"'


@pytest.mark.flink
def test_scheduled_dag_triggers_the_upgrade_of_the_due_job_only(airflow_home: Path, flink_cluster: LocalFlinkCluster,
                                                                webhook: Any, tmp_path: Path):
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    set_connection("flink_default", conn_type="http", host="127.0.0.1", port=flink_cluster.status()["rest_port"])
    client = flink_cluster.client
    running = sample_job.submit(client, "v1", tmp_path / "audit", keys=5, rate=50)
    try:
        args = running.program_args
        v1 = JobVersion(str(sample_job.jar("v1")), str(MANIFESTS / "v1.yaml"), sample_job.ENTRY_CLASS, args, 1)
        v2 = JobVersion(str(sample_job.jar("v2")), str(MANIFESTS / "v2.yaml"), sample_job.ENTRY_CLASS, args, 1)
        base = str(tmp_path / "savepoints")
        registry = DeploymentRegistry(base)
        # 'due' is recorded under a stale id: the job is found by its Flink name instead (as after a manual restart).
        registry.record("due", v1, "0" * 32, None, "r0")
        registry.record("same", v2, running.job_id, None, "r0")
        registry.record("later", v1, running.job_id, None, "r0")
        now = datetime.now(UTC)
        open_window = f"    window: {{start: {hhmm(now - timedelta(hours=1))}, end: {hhmm(now + timedelta(hours=1))}}}"
        closed = f"    window: {{start: {hhmm(now + timedelta(hours=2))}, end: {hhmm(now + timedelta(hours=3))}}}\n"
        release_file = tmp_path / "release.yaml"
        release_file.write_text(release_text(base, job_yaml("due", v2, open_window + "\n    flink_job_name: "
                                                            "keyed-stats-v1\n    gate_timeout: 120\n")
                                             + job_yaml("same", v2) + job_yaml("later", v2, closed)))

        load_dag(releases.UPGRADE_DAG_ID, ROOT / "dags")  # the triggered DAG must be known to Airflow
        dag = load_dag("flink_scheduled_upgrades", ROOT / "dags")
        run = dag.test(run_conf={"release_file": str(release_file)})
        states = {(ti.task_id, ti.map_index): str(ti.state) for ti in run.get_task_instances()}
        assert str(run.state) == "success", states
        assert states == {("plan", -1): "success", ("trigger_upgrade", 0): "success",
                          ("report_problems", -1): "success"}, states

        run_id = releases.upgrade_run_id("due", v2)
        with create_session() as session:
            triggered = session.query(DagRun).filter(DagRun.dag_id == releases.UPGRADE_DAG_ID,
                                                     DagRun.run_id.like("release__%")).all()
            assert [(r.run_id, str(r.state)) for r in triggered] == [(run_id, "queued")]
            assert triggered[0].conf == {
                "job_name": "due", "job_id": running.job_id, "jar": v2.jar, "entry_class": sample_job.ENTRY_CLASS,
                "program_args": args, "parallelism": 1, "manifest": v2.manifest, "savepoint_base": base,
                "mode": "upgrade", "gate_timeout": 120}

        # The next tick, with that upgrade still queued (no journal yet), asks for the same run id again: Airflow
        # skips the trigger, and there is never a second run of that release.
        second = dag.test(run_conf={"release_file": str(release_file)})
        states = {(ti.task_id, ti.map_index): str(ti.state) for ti in second.get_task_instances()}
        assert str(second.state) == "success" and states[("trigger_upgrade", 0)] == "skipped", states
        with create_session() as session:
            again = session.query(DagRun).filter(DagRun.dag_id == releases.UPGRADE_DAG_ID,
                                                 DagRun.run_id.like("release__%")).all()
            assert [r.run_id for r in again] == [run_id]
    finally:
        client.cancel(running.job_id)
        # The triggered run never executes here (no scheduler); leave no queued upgrade behind for other tests.
        with create_session() as session:
            session.query(DagRun).filter(DagRun.dag_id == releases.UPGRADE_DAG_ID,
                                         DagRun.run_id.like("release__%")).delete(synchronize_session=False)
