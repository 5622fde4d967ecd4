"""What the upgrade DAG decides, kept out of the DAG file: which job and versions a run is about, where its
savepoints and reports go, the checks before the stop, which branch the check's report leads to, how each step is
journalled (``flinkstate.upgrades``: the journal and recovery, usable without Airflow), how a failed upgrade is
rolled back, and the one alert each run sends.

Layout of one run (``savepoint_base`` is a local folder or ``s3://bucket/prefix``)::

    <savepoint_base>/deployments.json                  what runs: job name -> version (jar, entry class, args,
                                                        parallelism, manifest), job id, savepoint it started from
    <savepoint_base>/journal/<job name>.json           the last upgrade's journal: phase, job ids, savepoints
    <savepoint_base>/<job name>/<run id>/run.json      the run: old and new versions, decisions, outcome, durations
        new-schema.yaml  old-schema.yaml                              each version's state schema: its jar's,
                                                                      completed by its manifest (an overlay)
        preflight/savepoint-...  preflight/check-report.{json,md,html}  taken while the old job keeps running
        stop/savepoint-...                                            stop-with-savepoint: the rollback point
        migrated/savepoint  migrated/check-report.{json,md,html}      the migrated savepoint and its re-check
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import socket
import time
import zipfile
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from flinkstate import (
    ClusterRef,
    DeploymentRegistry,
    FlinkRestClient,
    FlinkRestError,
    FlinkStateError,
    JobVersion,
    JournalConflict,
    Liveness,
    Manifest,
    Outcome,
    Phase,
    RunProbe,
    RunTakenOver,
    UpgradeError,
    UpgradeJournal,
    describe_outcome,
    describe_run,
    exists,
    flink_home_for_version,
    local_path,
    not_writable,
    printable,
    process_alive,
    process_start,
    read_file,
    recover,
    restore_old,
    safe_name,
    schema_of_jar,
    summary_lines,
    sweep,
    unrecorded,
    write_file,
    write_with_retries,
)

__all__ = ["DeploymentRegistry", "JobVersion", "UpgradeError", "UpgradeJournal", "local_path", "safe_name"]

log = logging.getLogger(__name__)

CHECK_REPORT = "check-report.json"
CHECK_REPORT_MARKDOWN = "check-report.md"
#: The report as one self-contained page (flinkstate.report_html), written beside the two by the Spark jobs.
CHECK_REPORT_HTML = "check-report.html"
#: Each version's state schema as preflight_checks resolved it, in the run's folder (see version_schema).
NEW_SCHEMA, OLD_SCHEMA = "new-schema.yaml", "old-schema.yaml"
#: A journal not written for this long, by a process on another host, belongs to a dead run (same host: the
#: process is asked directly). Override with FLINKSTATE_JOURNAL_STALE_AFTER (seconds).
STALE_AFTER = float(os.environ.get("FLINKSTATE_JOURNAL_STALE_AFTER", 2 * 3600))

#: Branch targets (task ids in the DAG).
RESTORE, MIGRATE, INCOMPATIBLE, CHECK_ONLY = "stop_for_restore", "stop_for_migration", "alert_incompatible", \
    "check_only_done"


def plan_run(params: dict[str, Any], run_id: str, client: FlinkRestClient, *, dag_id: str = "flink_state_upgrade",
             probe: RunProbe | None = None, target: FlinkRestClient | None = None,
             conn_ids: tuple[str, str] = ("flink_default", "flink_default"),
             connect: Callable[[str], FlinkRestClient] | None = None) -> dict[str, Any]:
    """Resolves the job (RUNNING), the old version (the registry, else ``params['current']``) and the new one,
    and the run's folder; writes ``run.json`` and opens the deployment's journal. Everything downstream reads this
    plan from XCom.

    ``job_name`` names the deployment, the registry's key, which stays the same across versions even when each
    version names its Flink job differently: its recorded job is upgraded while it runs; before any record, the
    running Flink job of that name. A ``job_id`` wins, and finds its deployment by the recorded id.

    The DAG run (``dag_id``, ``run_id``) owns the journal it opens: one active run per deployment. An unfinished
    journal of the same deployment whose owner lives (``probe``: Airflow's word on its DAG run) refuses this run.
    One whose owner is gone belongs to a run that died: it is recovered first (the old version restored from its
    stop savepoint, or its verified upgrade finished), and this run then upgrades what runs afterwards. The
    recovery's account goes into the plan, for this run's alert.

    ``target``: the cluster the new version is to run on when it is not the old one's (``client``); ``conn_ids``:
    the Airflow connections of the two (old, new). The plan records both (``flink_conn_id``, ``flink_url``,
    ``new_flink_conn_id``, ``new_flink_url``), and the journal the new one's address when it differs, so that
    every later step, the rollback and a recovery act on the right cluster.

    ``connect``: a client for an Airflow connection. The registry records the cluster each deployment runs on (an
    earlier upgrade may have moved it to another); when that is another connection than ``conn_ids[0]``, the old
    version is looked for there, and the new one runs there too unless ``target`` names a cluster.
    """
    job_id, job_name = params.get("job_id") or None, params.get("job_name") or None
    if not params.get("savepoint_base"):
        raise UpgradeError("params: missing savepoint_base (a local folder or s3://bucket/prefix)")
    if not job_id and not job_name:
        raise UpgradeError("give job_id or job_name")
    base = str(params["savepoint_base"]).rstrip("/")
    registry = DeploymentRegistry(base)
    deployments = registry.load()
    if job_id and not job_name:
        job_name = next((name for name, entry in deployments.items() if entry.get("job_id") == job_id), None)
        if job_name is None:  # the job of a run that died: its journal knows the deployment
            job_name = next((j.data["deployment"] for j in UpgradeJournal.all(base)
                             if j.data.get("old_job_id") == job_id), None)
    recovered = None
    journal = UpgradeJournal.for_deployment(base, job_name) if job_name else None
    if journal is not None and not journal.finished:
        liveness = journal.liveness(stale_after=STALE_AFTER, probe=probe)
        if liveness.alive:
            raise UpgradeError(f"{job_name}: an upgrade is in progress (run {journal.data['run_id']}, phase "
                               f"{journal.phase}: {liveness.why}; journal {journal.uri}): nothing started")
        died_in = journal.phase  # before recover() adds its own phases
        result = recover(client, journal, f"run {run_id} (recovering run {journal.data['run_id']})")
        recovered = {"run_id": journal.data["run_id"], "phase": died_in,
                     "outcome": result.outcome, "account": result.account, "running": result.running,
                     "journal": journal.uri}
        if result.outcome == Outcome.DOWN:
            raise UpgradeError(f"{job_name}: the dead run {journal.data['run_id']} could not be recovered: "
                               f"{result.account}; {describe_outcome(journal)}")
        if job_id == journal.data.get("old_job_id") and result.running:
            job_id = result.running["job_id"]  # the job that runs now, for the same deployment
        deployments = registry.load()
    recorded = registry.cluster(job_name).flink_conn_id if job_name else None
    if connect is not None and recorded and recorded != conn_ids[0]:  # an earlier upgrade moved the deployment
        if target is None or conn_ids[1] == recorded:
            target, conn_ids = None, (recorded, recorded)
        else:
            conn_ids = (recorded, conn_ids[1])
        client = connect(recorded)
    if job_id:
        job = client.job(job_id)
        job_name = job_name or job["name"]
        if job["state"] != "RUNNING":
            raise UpgradeError(f"job {job_id} ({job_name}) is {job['state']}, not RUNNING: nothing to upgrade")
    else:
        assert job_name is not None
        recorded_id = (deployments.get(job_name) or {}).get("job_id")
        if recorded_id and _is_running(client, recorded_id):
            job_id = recorded_id
        else:
            job_id = client.find_job(job_name)
    assert job_name is not None
    old = registry.current(job_name)
    if old is None and params.get("current"):
        old = JobVersion.from_dict(params["current"], "params.current")
    if old is None:
        raise UpgradeError(f"no record of the version job {job_name!r} runs (not in {registry.uri}, no "
                           "params.current): rollback would have to guess, so the upgrade does not start")
    new = JobVersion.from_dict({"jar": params.get("jar"), "manifest": params.get("manifest"),
                                "entry_class": params.get("entry_class"), "program_args": params.get("program_args"),
                                "parallelism": params.get("parallelism")}, "params")
    run_dir = f"{base}/{safe_name(job_name)}/{safe_name(run_id)}"
    plan = {"job_id": job_id, "job_name": job_name, "run_id": run_id, "run_dir": run_dir, "savepoint_base": base,
            "mode": params.get("mode", "upgrade"), "old": asdict(old), "new": asdict(new),
            # Written by preflight_checks (each version's jar, completed by its manifest): what the Spark jobs judge.
            "schemas": {"new": f"{run_dir}/{NEW_SCHEMA}", "old": f"{run_dir}/{OLD_SCHEMA}"},
            "allow_non_restored_state": bool(params.get("allow_non_restored_state", False)),
            "flink_url": client.base_url, "recovered": recovered, "dag_id": dag_id,
            "flink_conn_id": conn_ids[0], "new_flink_conn_id": conn_ids[1],
            "new_flink_url": (target or client).base_url,
            "journal": UpgradeJournal.start({"savepoint_base": base, "job_name": job_name, "run_id": run_id,
                                             "run_dir": run_dir, "old": asdict(old), "new": asdict(new),
                                             "job_id": job_id, "mode": params.get("mode", "upgrade"),
                                             "flink_url": client.base_url, "flink_conn_id": conn_ids[0],
                                             "new_flink_url": (target or client).base_url,
                                             "new_flink_conn_id": conn_ids[1],
                                             "allow_non_restored_state": params.get("allow_non_restored_state")},
                                            "resolve", run=run_of({"dag_id": dag_id, "run_id": run_id}, "resolve")
                                            ).uri}
    write_run_record(plan, {"stage": "planned", **({"recovered": recovered} if recovered else {})})
    return plan


def _is_running(client: FlinkRestClient | None, job_id: str) -> bool:
    if client is None:
        return False
    try:
        return client.job_state(job_id) == "RUNNING"
    except FlinkRestError:
        return False


def write_run_record(plan: dict[str, Any], update: dict[str, Any]) -> None:
    """``run.json`` in the run's folder: the plan plus what happened so far."""
    uri = f"{plan['run_dir']}/run.json"
    record: dict[str, Any] = json.loads(read_file(uri)) if exists(uri) else {"plan": plan, "events": []}
    record["events"].append({"at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **update})
    record.update({k: v for k, v in update.items() if k in ("outcome", "stage")})
    write_file(uri, (json.dumps(record, indent=2) + "\n").encode())


def read_check_report(report_dir: str) -> dict[str, Any]:
    uri = f"{report_dir.rstrip('/')}/{CHECK_REPORT}"
    try:
        report = json.loads(read_file(uri))
    except ValueError as exc:
        raise UpgradeError(f"{uri}: not a check report ({exc})") from None
    if report.get("report_version") != 1 or report.get("outcome") not in ("restore", "migrate", "incompatible"):
        raise UpgradeError(f"{uri}: unexpected report (version {report.get('report_version')}, outcome "
                           f"{report.get('outcome')!r})")
    return report


def record_check(plan: dict[str, Any], report: dict[str, Any]) -> None:
    """The check's outcome in ``run.json``, and the report's headline and the states that need more than a restore
    in this task's log (Airflow's log tab; the check task's own log is the Spark application's)."""
    write_run_record(plan, {"stage": "checked", "check_outcome": report["outcome"], "verdict": report["verdict"]})
    for line in summary_lines(report):
        log.info("%s", line)
    log.info("the check report: %s/preflight/%s (and its HTML beside it)", printable(plan["run_dir"]),
             CHECK_REPORT_MARKDOWN)


def choose_branch(report: dict[str, Any], mode: str) -> str:
    """The task that follows the preflight check."""
    if mode == "check-only":
        return CHECK_ONLY
    return {"restore": RESTORE, "migrate": MIGRATE, "incompatible": INCOMPATIBLE}[report["outcome"]]


def report_markdown(report_dir: str) -> str:
    uri = f"{report_dir.rstrip('/')}/{CHECK_REPORT_MARKDOWN}"
    return read_file(uri).decode() if exists(uri) else f"(no report at {uri})"


def journal_of(plan: dict[str, Any] | None) -> UpgradeJournal | None:
    """The journal this run opened (None before it was opened, or when a newer run replaced it)."""
    if not plan or not plan.get("journal") or not exists(plan["journal"]):
        return None
    journal = UpgradeJournal.load(plan["journal"])
    return journal if journal.data["run_id"] == plan["run_id"] else None


# ---------------------------------------------------------------------- checks before the stop


def version_schema(version: JobVersion, flink_home: Path | None = None) -> Manifest:
    """A version's state schema: what its jar's operators register when they open (its ``main()`` with the
    version's entry class, program arguments and parallelism, in a JVM of its own, cached by the jar's hash:
    :func:`flinkstate.schema_of_jar`), completed by the version's manifest as an overlay when it has one. Raises
    :class:`flinkstate.OverlayContradiction` (one line: the manifest, the operator, the state, both sides) when the
    manifest contradicts the jar, and the inspection's one line when the jar's ``main()`` or ``open()`` fails.
    ``flink_home``: the Flink whose classes run it (default: the default distribution); the schema records its
    version, which the check and the migration take as the target Flink."""
    return schema_of_jar(version.jar, version.manifest, entry_class=version.entry_class,
                         program_args=version.program_args, parallelism=version.parallelism or 1,
                         flink_home=flink_home)


def two_clusters(plan: dict[str, Any]) -> bool:
    """Whether the new version runs on another cluster than the old one (the DAG's ``target_flink_conn_id``)."""
    return bool(plan.get("new_flink_url")) and plan["new_flink_url"] != plan.get("flink_url")


def _flink_home_of(cluster: FlinkRestClient, which: str) -> Path | str:
    """A local distribution of the Flink ``cluster`` runs, or the one line that says why there is none."""
    try:
        return flink_home_for_version(str(cluster.config()["flink-version"]))
    except (FlinkStateError, KeyError) as exc:
        return f"the {which} version's Flink at {cluster.base_url}: {exc}"


def _resolve_schema(version: JobVersion, which: str, flink_home: Path | None = None) -> Manifest | str:
    """The ``which`` ("new" or "running") version's schema, or the one line that says why there is none."""
    if version.manifest and not exists(version.manifest):
        return f"the {which} version's manifest {version.manifest}: no such file"
    try:
        return version_schema(version, flink_home)
    except FlinkStateError as exc:  # a contradiction names the manifest; the inspection's line names the jar
        return f"the {which} version's schema: {exc}"


def preflight_checks(plan: dict[str, Any], client: FlinkRestClient, spark_master: str,
                     target: FlinkRestClient | None = None) -> list[str]:
    """Everything that can be known to fail before the old job is stopped; returns the problems (none: go on).

    Each version's state schema is resolved here, once (:func:`version_schema`: the new jar's, completed by the
    given manifest, which must not contradict it; the old version's likewise, from the jar the registry records),
    and written into the run's folder (``plan["schemas"]``), which is what the Spark check and migration judge:
    only this task runs the job's code. Changes nothing else but a probe file in the run's folder, deleted again.

    Across two clusters (``target``: the new version's), each jar is inspected on the classes of the Flink its
    cluster runs (a local distribution of that version: :func:`flinkstate.flink_home_for_version`), so
    that the new schema names the target Flink the migration writes for, and the new cluster must have the slots."""
    problems = []
    target = target if target is not None and two_clusters(plan) else None
    homes: dict[str, Path | None] = {"new": None, "old": None}
    if target is not None:
        for which, cluster in (("new", target), ("old", client)):
            home = _flink_home_of(cluster, which)
            if isinstance(home, str):
                problems.append(home)
            else:
                homes[which] = home
    new, old = JobVersion(**plan["new"]), JobVersion(**plan["old"])
    schemas: dict[str, Manifest] = {}
    problems += _jar_problems(new)
    if not Path(old.jar).is_file():
        problems.append(f"the running version's jar {old.jar}: no such file (the rollback needs it too)")
    for which, version, label in (("new", new, "new"), ("old", old, "running")):
        if problems:  # a jar to inspect is missing
            break
        resolved = _resolve_schema(version, label, homes[which])
        if isinstance(resolved, Manifest):
            schemas[which] = resolved
        else:
            problems.append(resolved)
    try:
        overview = client.overview()
        job = client.job(plan["job_id"])
        # With Flink's default slot sharing a job holds as many slots as its widest vertex is parallel.
        held = max((int(v.get("parallelism", 1)) for v in job.get("vertices") or []), default=0)
        held = held if job.get("state") == "RUNNING" else 0
        need = new.parallelism or held or 1
        if target is not None:  # the old job's slots are on the other cluster: the new one's must be free now
            free = int(target.overview().get("slots-available", 0))
            if free < need:
                problems.append(f"Flink at {target.base_url}: {free} task slots free, the new version needs {need}")
        elif int(overview.get("slots-available", 0)) + held < need:
            problems.append(f"Flink at {client.base_url}: {int(overview.get('slots-available', 0)) + held} task "
                            f"slots would be free once the old job stops ({overview.get('slots-available')} free "
                            f"now + {held} it holds), the new version needs {need}")
        if job.get("state") != "RUNNING":
            problems.append(f"job {plan['job_id']} is {job.get('state')}, not RUNNING")
    except FlinkRestError as exc:
        problems.append(f"Flink: {exc}")
    for folder in (plan["run_dir"], plan["savepoint_base"]):
        problem = not_writable(folder)
        if problem:
            problems.append(problem)
    problem = _spark_unreachable(spark_master)
    if problem:
        problems.append(problem)
    if not problems:
        problems += _write_schemas(plan, schemas)
    return problems


def _write_schemas(plan: dict[str, Any], schemas: dict[str, Manifest]) -> list[str]:
    """Writes each version's resolved schema where the plan says (with the jar and overlay it was made of, so that
    the Spark jobs judge it as the jar's and their reports name both), and records in ``run.json`` where each
    version's types came from."""
    sources: dict[str, Any] = {}
    for which, manifest in schemas.items():
        target = plan["schemas"][which]
        header = (f"# The {which} version's state schema, resolved by the upgrade run {plan['run_id']} before "
                  f"anything was stopped: {printable(str(manifest.origin()))}.\n")  # one comment line
        try:
            write_file(target, (header + manifest.dump(sources=True)).encode("utf-8"))
        except (OSError, FlinkStateError) as exc:
            return [f"{target}: cannot write the {which} version's schema: {exc}"]
        sources[which] = {"file": target, "jar": manifest.jar, "overlay": manifest.overlay, "origin": manifest.origin()}
    write_run_record(plan, {"stage": "schemas resolved", "schemas": sources})
    return []


def _jar_problems(version: JobVersion) -> list[str]:
    jar = Path(version.jar)
    if not jar.is_file():
        return [f"the new jar {jar}: no such file"]
    if not zipfile.is_zipfile(jar):
        return [f"the new jar {jar}: not a jar (not a zip archive)"]
    try:
        with zipfile.ZipFile(jar) as archive:
            names = set(archive.namelist())
            entry = version.entry_class
            if not entry:
                manifest = archive.read("META-INF/MANIFEST.MF") if "META-INF/MANIFEST.MF" in names else b""
                found = re.search(rb"^Main-Class:\s*(\S+)", manifest, re.MULTILINE)
                if not found:
                    return [f"the new jar {jar}: no entry class given and none in its META-INF/MANIFEST.MF"]
                entry = found.group(1).decode()
    except (zipfile.BadZipFile, OSError) as exc:
        return [f"the new jar {jar}: unreadable ({exc})"]
    if f"{entry.replace('.', '/')}.class" not in names:
        return [f"the new jar {jar}: has no entry class {entry}"]
    return []


def _spark_unreachable(master: str) -> str | None:
    """``local[...]``: spark-submit must be on the PATH; ``spark://host:port``: the master must accept a
    connection. Other masters (YARN, Kubernetes) are left to spark-submit."""
    if master.startswith("local"):
        return None if shutil.which("spark-submit") else "Spark: spark-submit is not on the PATH"
    parsed = urlparse(master)
    if parsed.scheme == "spark" and parsed.hostname:
        try:
            with socket.create_connection((parsed.hostname, parsed.port or 7077), timeout=5):
                return None
        except OSError as exc:
            return f"Spark master {master}: not reachable ({exc.strerror or exc})"
    return None


# ---------------------------------------------------------------------- the steps, journalled


def stop_old(plan: dict[str, Any], client: FlinkRestClient, actor: str, *, timeout: float = 600) -> str:
    """Stops the old job with a savepoint into ``<run_dir>/stop``, journalled before (STOPPING) and after (STOPPED,
    with the savepoint). A savepoint Flink created before failing the job while stopping is used."""
    journal = fence(plan, actor, "the stop is not made")
    journal.advance(Phase.STOPPING, actor)
    location = client.stop_job_with_savepoint(plan["job_id"], f"{plan['run_dir']}/stop", timeout=timeout)
    journal.advance(Phase.STOPPED, actor, stop_savepoint=local_path(location))
    return location


#: Phases a task enters when it starts, and when it succeeds (its XCom gives the detail worth recording).
START_PHASES = {"migrate": Phase.MIGRATING, "submit_new": Phase.SUBMITTING, "health_gate": Phase.GATING}
SUCCESS_PHASES = {"migrate": Phase.MIGRATED, "restore_path": Phase.VERIFIED, "submit_new": Phase.SUBMITTED,
                  "health_gate": Phase.GATE_PASSED}


def _plan(context: Any) -> dict[str, Any] | None:
    try:
        return context["ti"].xcom_pull(task_ids="resolve")
    except Exception:  # no plan yet (or none readable): the task journals nothing
        return None


def run_of(plan: dict[str, Any], task_id: str) -> dict[str, Any]:
    """The owner of a run's journal: its DAG run, and the task (with the process supervising it, for
    :func:`airflow_probe`) working for it now."""
    supervisor = os.getppid()
    return {"dag_id": plan.get("dag_id") or "flink_state_upgrade", "run_id": plan["run_id"], "task_id": task_id,
            "supervisor": {"pid": supervisor, "pid_start": process_start(supervisor)}}


def fence(plan: dict[str, Any], actor: str, refused: str, *, open_only: bool = True) -> UpgradeJournal:
    """The fence before a step: the run's journal, claimed for this DAG run (see ``UpgradeJournal.claim``). When
    another actor took the run over, the run's record notes it (for the run's one alert) and the task fails with
    ``refused`` (what is not done) and why, in one line."""
    try:
        return UpgradeJournal.claim(plan["journal"], run_of(plan, actor), actor, open_only=open_only)
    except RunTakenOver as exc:
        write_run_record(plan, {"stage": "taken over", "taken_over": f"{actor}: {refused}: {exc}"})
        from flinkstate_airflow.operators import TaskRefused

        raise TaskRefused(f"{refused}: {exc}") from None


def _claimed(plan: dict[str, Any] | None, actor: str, *, tolerate_write_failures: bool = False
             ) -> UpgradeJournal | None:
    """The run's journal claimed for ``actor``, for a callback that only records: None when there is none, or the
    run is another actor's now (then nothing is written into it)."""
    if not plan or not plan.get("journal"):
        return None
    try:
        return UpgradeJournal.claim(plan["journal"], run_of(plan, actor), actor,
                                    tolerate_write_failures=tolerate_write_failures)
    except RunTakenOver:
        return None


def task_started(context: Any) -> None:
    """Each task's fence (the DAG's ``pre_execute``, which fails the task when it raises): claims the run's journal
    for this DAG run before the task does anything, and records the phase it enters. A run another actor took over
    fails here, before its step, in one line."""
    ti = context["ti"]
    plan = _plan(context)
    if plan is None or not plan.get("journal") or ti.task_id == "conclude":  # conclude fences itself
        return
    journal = fence(plan, ti.task_id, f"{ti.task_id} not started")
    phase = START_PHASES.get(ti.task_id)
    if phase == Phase.SUBMITTING:
        journal.advance(phase, ti.task_id, restore_path=ti.xcom_pull(task_ids="restore_path"))
    elif phase == Phase.MIGRATING:
        journal.advance(phase, ti.task_id)
    elif phase == Phase.GATING:
        journal.advance(phase, ti.task_id, new_job_id=ti.xcom_pull(task_ids="submit_new"))
    else:
        journal.touch(ti.task_id)


def task_succeeded(context: Any) -> None:
    ti = context["ti"]
    plan = _plan(context)
    phase = SUCCESS_PHASES.get(ti.task_id)
    journal = _claimed(plan, ti.task_id) if phase is not None else None
    if journal is None or phase is None:
        return
    value = ti.xcom_pull(task_ids=ti.task_id)
    gate = value if isinstance(value, dict) else {}  # the dict is built whole: only the gate's value is a dict
    details: dict[str, Any] = {
        Phase.MIGRATED: {"migrated_savepoint": f"{plan['run_dir']}/migrated/savepoint" if plan else None},
        Phase.VERIFIED: {"restore_path": value},
        Phase.SUBMITTED: {"new_job_id": value},
        Phase.GATE_PASSED: {"gate": value, "running_again_at": gate.get("all_subtasks_running_at")},
    }[phase]
    journal.advance(phase, ti.task_id, **details)


#: What a task that fails once its run was taken over did not do (its own failure is the fence's doing).
TAKEN_OVER_STEPS = {"migrate": "the migrated savepoint is not published"}


def task_failed(context: Any) -> None:
    """Records what failed, in one line, where the run's conclusion finds it: the journal, else (no plan yet) an
    XCom of the failed task."""
    ti = context["ti"]
    exc = context.get("exception")
    text = str(exc).strip().splitlines()[0].rstrip(".") if exc is not None and str(exc).strip() else \
        type(exc).__name__  # the alert adds its own full stop
    what = f"{ti.task_id}: {text}"
    plan = _plan(context)
    if plan and plan.get("journal") and ti.task_id != "conclude":  # conclude's failure is the alert it sent
        try:
            UpgradeJournal.held_by(plan["journal"], run_of(plan, ti.task_id), open_only=False)
        except RunTakenOver as exc:
            # Another actor took the run over while this task worked (migrate: its publish was fenced): the failure
            # is no longer this run's to record, the refusal is what its one alert tells.
            write_run_record(plan, {"stage": "taken over",
                                    "taken_over": f"{ti.task_id}: {TAKEN_OVER_STEPS.get(ti.task_id, text)}: {exc}"})
            return
    # A full disk must not lose what failed: the claim's and the note's writes may fail, then the XCom holds it.
    journal = _claimed(plan, ti.task_id, tolerate_write_failures=True)
    if journal is not None and not journal.finished:
        if ti.task_id == "health_gate":
            journal.data["gate"] = {"passed": False, "reason": text}
        journal.note_failure(what)
        if not journal.unsaved:
            return
    # No journal to hold it, or it could not be written (a full disk): Airflow's database keeps it for conclude.
    ti.xcom_push(key="failure", value=what)


# ---------------------------------------------------------------------- the run's conclusion and its one alert


def finish_refused(plan: dict[str, Any]) -> None:
    journal = fence(plan, "alert_incompatible", "the refusal is not recorded")
    if journal is not None:
        journal.finish(Outcome.REFUSED, "alert_incompatible", running={"version": "old", "job_id": plan["job_id"]})
    write_run_record(plan, {"stage": "done", "outcome": "refused"})


def finish_not_approved(plan: dict[str, Any], decision: dict[str, Any]) -> None:
    """The approval before the stop was refused (``abort``, or no answer in time): nothing was stopped, the old job
    runs on; recorded as a refusal, with the decision (conclude's alert says who refused or that time ran out)."""
    journal = fence(plan, "approval_refused", "the refusal is not recorded")
    if journal is not None:
        journal.finish(Outcome.REFUSED, "approval_refused", running={"version": "old", "job_id": plan["job_id"]},
                       approval=decision)
    write_run_record(plan, {"stage": "done", "outcome": "refused", "approval": decision})


def not_approved_reason(journal_data: dict[str, Any]) -> str | None:
    """Why the stop was not approved, in a few words (None: the run was not refused at an approval)."""
    decision = next((step["approval"] for step in journal_data["history"] if step.get("approval")), None)
    if decision is None:
        return None
    if decision.get("timed_out"):
        return f"no answer within {decision.get('timeout_seconds')} s"
    return f"{decision.get('by') or 'someone'} chose {decision.get('chosen')!r}"


def finish_checked(plan: dict[str, Any]) -> None:
    journal = fence(plan, "check_only_done", "the check is not recorded")
    if journal is not None:
        journal.finish(Outcome.CHECKED, "check_only_done", running={"version": "old", "job_id": plan["job_id"]})
    write_run_record(plan, {"stage": "done", "outcome": "checked"})


def record_upgrade(plan: dict[str, Any], new_job_id: str, restored_from: str,
                   gate: dict[str, Any] | None = None) -> None:
    # Fenced before the registry is written: a run another actor took over never records.
    journal = fence(plan, "record", "the upgrade is not recorded")
    where = ClusterRef(plan.get("new_flink_conn_id"), plan.get("new_flink_url"))  # the next upgrade finds it there
    DeploymentRegistry(plan["savepoint_base"]).record(plan["job_name"], JobVersion(**plan["new"]), new_job_id,
                                                      restored_from, plan["run_id"], where)
    if journal is not None:
        journal.finish(Outcome.UPGRADED, "record", running={"version": "new", "job_id": new_job_id}, gate=gate,
                       new_job_id=new_job_id)
    write_run_record(plan, {"stage": "recorded", "job_id": new_job_id, "restored_from": restored_from})


def conclude(plan: dict[str, Any] | None, client: FlinkRestClient | None, *, deployment: str, failures: list[str],
             view: str, timeout: float = 300) -> tuple[bool, str | None]:
    """Ends the run whatever happened: rolls back when something was stopped and the upgrade did not finish (and
    only then), writes the outcome to ``run.json``, and returns (success, the one alert to send; None when a
    watchdog already told). Never rolls back when nothing was stopped. Never raises: when concluding itself fails,
    that is the alert, with the command that restores production. ``view``: where the alert says the run is seen
    (its page in the Airflow UI)."""
    try:
        return _conclude(plan, client, deployment=deployment, failures=failures, view=view, timeout=timeout)
    except JournalConflict:
        return False, None  # another actor (the watchdog) took the run over: its alert is the run's one alert
    except Exception as exc:  # whatever it is, production may be down: a person must hear of it, with what to do
        return False, _conclusion_failed(plan, deployment, exc, view)


def _conclusion_failed(plan: dict[str, Any] | None, deployment: str, exc: Exception, view: str) -> str:
    what = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if not plan:
        return (f"Flink upgrade of {deployment} FAILED and its conclusion failed too ({what}). See it in Airflow: "
                f"{view}")
    journal = UpgradeJournal(plan.get("journal") or "", {"savepoint_base": plan["savepoint_base"],
                                                        "deployment": plan["job_name"],
                                                        "flink_url": plan.get("flink_url")})
    return (f"Flink upgrade of {plan['job_name']}: its conclusion FAILED ({what}): production may be DOWN, or run "
            f"a version no record names. See what runs with: flinkstate upgrade status --savepoint-base "
            f"{plan['savepoint_base']} --deployment {plan['job_name']}; restore the old version from the stop "
            f"savepoint (in {plan['run_dir']}/stop) with: {journal.restore_command()}\nSee it in Airflow: {view}")


def _conclude(plan: dict[str, Any] | None, client: FlinkRestClient | None, *, deployment: str, failures: list[str],
              view: str, timeout: float) -> tuple[bool, str | None]:
    where = f"See it in Airflow: {view}"
    if plan is None:  # the run failed before it knew its job: nothing was touched
        failed = "; ".join(failures) or "resolve failed (see its log)"
        return False, (f"Flink upgrade of {deployment} FAILED before anything was changed: {failed}. Nothing was "
                       f"stopped; the running job was not touched. {where}")
    if client is None:  # the DAG connects to Flink whenever resolve produced a plan
        raise TypeError(f"conclude: the run of {deployment} has a plan but no Flink client")
    if not plan.get("journal") or not exists(plan["journal"]):
        return False, f"Flink upgrade of {deployment} FAILED: its journal {plan.get('journal')} is gone. {where}"
    try:
        # The run's end must not wait for a record: a full disk leaves the rollback to do, and the alert to send.
        journal = UpgradeJournal.claim(plan["journal"], run_of(plan, "conclude"), "conclude", open_only=False,
                                       tolerate_write_failures=True)
    except RunTakenOver as exc:
        return False, taken_over_alert(plan, exc, where)
    failures = list(dict.fromkeys([*journal.data["failures"], *failures]))
    failed = "; ".join(failures) or "(no task recorded a failure)"
    actor = "conclude"
    if not journal.finished:
        if journal.phase == Phase.PLANNED or (journal.phase == Phase.STOPPING and _is_running(client, plan["job_id"])):
            journal.finish(Outcome.UNCHANGED, actor, running={"version": "old", "job_id": plan["job_id"]})
        elif journal.phase == Phase.GATE_PASSED:
            recover(client, journal, actor, timeout=timeout)  # record the upgrade that passed its gate
        else:
            restore_old(client, journal, actor, timeout=timeout, reason=failed)
    data = journal.data
    outcome = data["outcome"]
    report = f"{plan['run_dir']}/preflight/{CHECK_REPORT_MARKDOWN}"
    durations = journal.durations()
    problem = write_with_retries(lambda: write_run_record(plan, {
        "stage": "done", "outcome": outcome, "stop_savepoint": data.get("stop_savepoint"), "gate": data.get("gate"),
        "durations": durations, "failures": failures, "running": data.get("running"),
        "journal": journal.uri}))
    if problem:
        journal.unsaved.append(f"run record not written: {problem}")
    if data.get("alert_sent"):
        return outcome == Outcome.UPGRADED, None
    files = f"Report: {report}; run record: {plan['run_dir']}/run.json; journal: {journal.uri}. {where}"
    now = describe_outcome(journal)
    prefix = f"Flink upgrade of {plan['job_name']}"
    before = ""
    if plan.get("recovered"):
        rec = plan["recovered"]
        before = (f" Before starting, this run recovered the dead run {rec['run_id']} (died in phase "
                  f"{rec['phase']}): {rec['outcome']}: {rec['account']}.")
    down = downtime_text(durations)
    not_approved = not_approved_reason(data)
    text = {
        Outcome.UPGRADED: f"{prefix} succeeded: {now}, restored from {data.get('restore_path')}.{down}",
        Outcome.CHECKED: f"{prefix} checked (check-only: nothing changed). {now}.",
        Outcome.REFUSED: f"{prefix} REFUSED: the new version cannot restore the state; nothing was stopped. {now}."
        if not_approved is None else f"{prefix} REFUSED: the stop was not approved ({not_approved}); nothing was "
                                     f"stopped. {now}.",
        Outcome.UNCHANGED: f"{prefix} FAILED before the old job was stopped: {failed}. Nothing changed. {now}.",
        Outcome.ROLLED_BACK: f"{prefix} FAILED and was ROLLED BACK: {failed}. {now}, restored from the stop savepoint "
                     f"{data.get('stop_savepoint')}.{down}",
        Outcome.DOWN: f"{prefix} FAILED AND THE ROLLBACK FAILED: {failed}. {now}",
    }[outcome]
    if journal.unsaved:
        text += f"\n{unrecorded(journal)}."
    data["alert_sent"] = True
    journal.save()
    preflight = f"{plan['run_dir']}/preflight"
    details = f"\n\n{report_markdown(preflight)}" if outcome in (Outcome.REFUSED, Outcome.CHECKED) else ""
    return outcome in (Outcome.UPGRADED, Outcome.CHECKED), f"{text}{before}\n{files}{details}"


def conclusion(plan: dict[str, Any] | None, alert: str | None) -> dict[str, Any]:
    """What the run's ``conclude`` task leaves for whoever triggered the run (its XCom ``conclusion``, which
    ``flinkstate upgrade run --airflow-url`` reads through Airflow's REST API, where the savepoint base may not be
    reachable): the journal's outcome (None when the run planned nothing, or a newer run replaced its journal), its
    durations (``down`` as in run.json) and the one alert (None when the actor that took the run over sent it)."""
    try:
        journal = journal_of(plan)
    except (FlinkStateError, OSError, ValueError):  # an unreadable journal: the alert says what is known
        journal = None
    finished = journal is not None and journal.finished
    return {"outcome": journal.data["outcome"] if journal is not None and finished else None,
            "durations": journal.durations() if journal is not None else {}, "alert": alert,
            "run_dir": plan.get("run_dir") if plan else None}


def downtime_text(durations: dict[str, float]) -> str:
    """The alert's figure of the downtime (``durations.down``: stop request -> every subtask of the job that runs
    now RUNNING, from Flink's timestamps), with the health gate's own time beside it; empty when it is unknown."""
    if "down" not in durations:
        return ""
    gate = f"; the health gate then took {durations['gate']:.1f} s" if "gate" in durations else ""
    return (f" Down {durations['down']:.1f} s (from the stop request until every subtask of the job that runs now "
            f"was RUNNING{gate}).")


def taken_over_alert(plan: dict[str, Any], exc: RunTakenOver, where: str) -> str | None:
    """The one alert of a run that was taken over while it lived: a step of it was refused by the fence (its
    run.json says which), so it stopped without acting further; what runs now is what the journal says. None when
    no step was refused: the run had died, and the actor that took it over sends the alert."""
    uri = f"{plan['run_dir']}/run.json"
    events = json.loads(read_file(uri)).get("events", []) if exists(uri) else []
    refused = [e["taken_over"] for e in events if e.get("taken_over")]
    if not refused:
        return None
    journal = UpgradeJournal.load(plan["journal"]) if exists(plan["journal"]) else None
    if journal is None or journal.data["run_id"] != plan["run_id"]:
        now = f"a newer run ({journal.data['run_id'] if journal else 'none'}) owns the deployment's journal now"
    elif journal.finished:
        now = describe_outcome(journal)
    else:
        now = (f"{(journal.data.get('owner') or {}).get('actor')} is still working on it (phase {journal.phase}); "
               "its own report says what runs once it is done")
    write_run_record(plan, {"stage": "done", "outcome": "taken over", "taken_over_by": str(exc)})
    return (f"Flink upgrade of {plan['job_name']}: run {plan['run_id']} was TAKEN OVER by another actor while it "
            f"was working, and stopped without acting further ({refused[0]}). {now}.\nRun record: {uri}; journal: "
            f"{plan['journal']}. {where}")


def airflow_probe(ti: Any) -> RunProbe:
    """Airflow's word on the DAG run that owns a journal, through the execution API a task has (Airflow 3 tasks
    have no database): gone when the DAG run has ended or no longer exists; gone too when its task that wrote last
    is, for Airflow, still running while that task's process and the process supervising it are both gone (killed:
    nobody is left to report it, Airflow would notice only at its heartbeat timeout). The processes are looked at
    before Airflow is asked: a supervisor reports its task's end before it exits, so both gone and the task still
    running afterwards means nobody will. Alive otherwise, between two tasks too. None (cannot tell) when Airflow
    does not answer, or the task ran on another host."""

    def probe(data: dict[str, Any]) -> Liveness | None:
        owner = data.get("owner") or {}
        run = owner.get("run") or {}
        supervisor = run.get("supervisor") or {}
        processes_gone = owner.get("host") == socket.gethostname() and bool(owner.get("pid")) and \
            process_alive(int(owner["pid"]), owner.get("pid_start")) is False and bool(supervisor.get("pid")) and \
            process_alive(int(supervisor["pid"]), supervisor.get("pid_start")) is False
        try:
            answer = ti.get_dagrun_state(dag_id=run["dag_id"], run_id=run["run_id"])
            state = str(getattr(answer, "value", answer))  # a DagRunState enum, or its string
        except Exception as exc:  # what Airflow answers when asked about a run it does not know
            if _status_code(exc) == 404:
                return Liveness(False, f"its {describe_run(run)} no longer exists in Airflow")
            return None
        if state not in ("queued", "running"):
            return Liveness(False, f"its {describe_run(run)} is {state}")
        task_state = None
        if processes_gone:
            try:
                states = ti.get_task_states(dag_id=run["dag_id"], run_ids=[run["run_id"]], task_ids=[run["task_id"]])
            except Exception:  # cannot tell: alive
                return None
            task_state = (states.get(run["run_id"]) or {}).get(run["task_id"])
            if str(getattr(task_state, "value", task_state)) == "running":
                return Liveness(False, f"its {describe_run(run)} is {state}, but its task {run['task_id']}, which "
                                       f"Airflow still counts as running, is gone (pid {owner['pid']} and its "
                                       f"supervisor {supervisor['pid']} on {owner['host']} have exited)")
        return Liveness(True, f"its {describe_run(run)} is {state} (task {run.get('task_id')} "
                              f"{'finished: between two tasks' if processes_gone else 'working'})")

    return probe


def _status_code(exc: BaseException) -> int | None:
    """The HTTP status of an Airflow execution-API error: a task process gets it in the error's detail, an
    in-process run (``dag.test``) the client's exception itself."""
    response = getattr(exc, "response", None)
    if response is not None:
        return getattr(response, "status_code", None)
    detail = getattr(getattr(exc, "error", None), "detail", None)
    return detail.get("status_code") if isinstance(detail, dict) else None


def spark_settings() -> dict[str, Any]:
    """How the DAG runs the Spark jobs, from the environment of the Airflow workers:

    - ``FLINKSTATE_SPARK_JOBS``: folder of the Spark jobs (default: ``spark_jobs/`` beside ``plugins/``);
    - ``FLINKSTATE_PYSPARK_PYTHON``: the Python (with flinkstate installed) Spark's workers run (default: this one);
    - ``FLINKSTATE_PYTHONPATH``: extra import path for the workers, e.g. where user migration functions live;
    - ``FLINKSTATE_SPARK_CONN_ID``: the Airflow Spark connection (default ``spark_default``).
    """
    import os
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = {"PYSPARK_PYTHON": os.environ.get("FLINKSTATE_PYSPARK_PYTHON", sys.executable)}
    for name in ("SPARK_LOCAL_IP", "AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                 "AWS_DEFAULT_REGION", "AWS_REGION"):
        if os.environ.get(name):
            env[name] = os.environ[name]
    extra_path = os.environ.get("FLINKSTATE_PYTHONPATH")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (extra_path, str(root)) if p)
    return {"jobs": os.environ.get("FLINKSTATE_SPARK_JOBS", str(root / "spark_jobs")),
            "env_vars": env, "conn_id": os.environ.get("FLINKSTATE_SPARK_CONN_ID", "spark_default")}


def watchdog_bases(configured: str | None) -> list[str]:
    """The savepoint bases the watchdog sweeps: the given value, else FLINKSTATE_SAVEPOINT_BASES (comma-separated)."""
    text = configured or os.environ.get("FLINKSTATE_SAVEPOINT_BASES", "")
    return [b.strip() for b in text.split(",") if b.strip()]


def watchdog_sweep(bases: list[str], client: FlinkRestClient, *, grace: float,
                   probe: RunProbe | None = None) -> list[str]:
    """Recovers every dead upgrade run under ``bases`` (``probe``: Airflow's word on the DAG runs that own them);
    returns one alert per run recovered."""
    alerts = []
    for base in bases:
        for _, _, alert in sweep(base, client, "watchdog (flink_upgrade_watchdog)", grace=grace,
                                 stale_after=STALE_AFTER, probe=probe):
            alerts.append(alert)
    return alerts
