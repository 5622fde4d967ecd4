"""What the upgrade DAG decides, kept out of the DAG file: which job and versions a run is about, where its
savepoints and reports go, which branch the check's report leads to, what the deployment registry records, and how
a failed upgrade is rolled back.

Layout of one run (``savepoint_base`` is a local folder or ``s3://bucket/prefix``)::

    <savepoint_base>/deployments.json                  what runs: job name -> version (jar, entry class, args,
                                                        parallelism, manifest), job id, savepoint it started from
    <savepoint_base>/<job name>/<run id>/run.json      the run: old and new versions, decisions, outcome
        preflight/savepoint-...  preflight/check-report.{json,md}    taken while the old job keeps running
        stop/savepoint-...                                            stop-with-savepoint: the rollback point
        migrated/savepoint  migrated/check-report.{json,md}          the migrated savepoint and its re-check
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from flinkstate.engine.rest import FlinkJobFailed, FlinkRestClient, FlinkRestError
from flinkstate.errors import FlinkStateError
from flinkstate.storage import exists, read_file, write_file

REGISTRY_FILE = "deployments.json"
CHECK_REPORT = "check-report.json"
CHECK_REPORT_MARKDOWN = "check-report.md"

#: Branch targets (task ids in the DAG).
RESTORE, MIGRATE, INCOMPATIBLE, CHECK_ONLY = "stop_for_restore", "stop_for_migration", "alert_incompatible", \
    "check_only_done"


class UpgradeError(FlinkStateError):
    """The upgrade cannot go on; the message says why, in one line."""


@dataclass(frozen=True)
class JobVersion:
    """Everything needed to (re)start one version of a job: rollback never guesses."""

    jar: str
    manifest: str
    entry_class: str | None = None
    program_args: list[str] = field(default_factory=list)
    parallelism: int | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str) -> JobVersion:
        missing = [k for k in ("jar", "manifest") if not data.get(k)]
        if missing:
            raise UpgradeError(f"{where}: missing {', '.join(missing)}")
        args = data.get("program_args") or []
        if isinstance(args, str):
            args = args.split()
        parallelism = data.get("parallelism")
        return cls(str(data["jar"]), str(data["manifest"]), data.get("entry_class") or None, [str(a) for a in args],
                   int(parallelism) if parallelism not in (None, "") else None)


class DeploymentRegistry:
    """``deployments.json`` beside the savepoints: job name -> the version running, its job id, and the savepoint
    it started from. Written whole (local: write then rename; S3: one put)."""

    def __init__(self, savepoint_base: str) -> None:
        self.uri = f"{savepoint_base.rstrip('/')}/{REGISTRY_FILE}"

    def load(self) -> dict[str, Any]:
        if not exists(self.uri):
            return {}
        try:
            data = json.loads(read_file(self.uri))
        except ValueError as exc:
            raise UpgradeError(f"{self.uri}: not a deployment registry ({exc})") from None
        return data if isinstance(data, dict) else {}

    def current(self, job_name: str) -> JobVersion | None:
        entry = self.load().get(job_name)
        return JobVersion.from_dict(entry["version"], f"{self.uri}: {job_name}") if entry else None

    def record(self, job_name: str, version: JobVersion, job_id: str, savepoint: str | None, run_id: str) -> None:
        data = self.load()
        data[job_name] = {"version": asdict(version), "job_id": job_id, "savepoint": savepoint, "run_id": run_id,
                          "deployed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        write_file(self.uri, (json.dumps(data, indent=2, sort_keys=True) + "\n").encode())


def safe_name(text: str) -> str:
    """A run id or job name as one path segment."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "run"


def plan_run(params: dict[str, Any], run_id: str, client: FlinkRestClient) -> dict[str, Any]:
    """Resolves the job (RUNNING), the old version (the registry, else ``params['current']``) and the new one,
    and the run's folder; writes ``run.json``. Everything downstream reads this plan from XCom.

    ``job_name`` names the deployment, the registry's key, which stays the same across versions even when each
    version names its Flink job differently: its recorded job is upgraded while it runs; before any record, the
    running Flink job of that name. A ``job_id`` wins, and finds its deployment by the recorded id.
    """
    job_id, job_name = params.get("job_id") or None, params.get("job_name") or None
    if not params.get("savepoint_base"):
        raise UpgradeError("params: missing savepoint_base (a local folder or s3://bucket/prefix)")
    base = str(params["savepoint_base"]).rstrip("/")
    deployments = DeploymentRegistry(base).load()
    if job_id:
        job = client.job(job_id)
        recorded = next((name for name, entry in deployments.items() if entry.get("job_id") == job_id), None)
        job_name = job_name or recorded or job["name"]
        if job["state"] != "RUNNING":
            raise UpgradeError(f"job {job_id} ({job_name}) is {job['state']}, not RUNNING: nothing to upgrade")
    elif job_name:
        recorded_id = (deployments.get(job_name) or {}).get("job_id")
        if recorded_id and _is_running(client, recorded_id):
            job_id = recorded_id
        else:
            job_id = client.find_job(job_name)
    else:
        raise UpgradeError("give job_id or job_name")
    registry = DeploymentRegistry(base)
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
            "allow_non_restored_state": bool(params.get("allow_non_restored_state", False))}
    write_run_record(plan, {"stage": "planned"})
    return plan


def _is_running(client: FlinkRestClient, job_id: str) -> bool:
    try:
        return client.job_state(job_id) == "RUNNING"
    except FlinkRestError:
        return False


def write_run_record(plan: dict[str, Any], update: dict[str, Any]) -> None:
    """``run.json`` in the run's folder: the plan plus what happened so far."""
    uri = f"{plan['run_dir']}/run.json"
    record = json.loads(read_file(uri)) if exists(uri) else {"plan": plan, "events": []}
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


def choose_branch(report: dict[str, Any], mode: str) -> str:
    """The task that follows the preflight check."""
    if mode == "check-only":
        return CHECK_ONLY
    return {"restore": RESTORE, "migrate": MIGRATE, "incompatible": INCOMPATIBLE}[report["outcome"]]


def report_markdown(report_dir: str) -> str:
    uri = f"{report_dir.rstrip('/')}/{CHECK_REPORT_MARKDOWN}"
    return read_file(uri).decode() if exists(uri) else f"(no report at {uri})"


def local_path(location: str) -> str:
    """Flink reports savepoints as ``file:/path``; the Spark jobs and the REST API take the path as it is."""
    return location.removeprefix("file://").removeprefix("file:")


def roll_back(client: FlinkRestClient, plan: dict[str, Any], new_job_id: str | None, stop_savepoint: str | None,
              *, timeout: float = 300) -> str:
    """Cancels the new version's job (if it was started) and restarts the old version from the stop savepoint;
    returns a one-line account. When the old job was never stopped it is still running and nothing is restored."""
    steps = []
    if new_job_id:
        try:
            if client.job_state(new_job_id) not in ("CANCELED", "FAILED", "FINISHED"):
                client.cancel(new_job_id, timeout=timeout)
                steps.append(f"cancelled the new job {new_job_id}")
        except FlinkRestError as exc:
            steps.append(f"could not cancel the new job {new_job_id}: {exc}")
    if not stop_savepoint:
        state = client.job_state(plan["job_id"])
        steps.append(f"the old job {plan['job_id']} was not stopped and is {state}")
        return "; ".join(steps)
    old = JobVersion(**plan["old"])
    job_id = client.submit_jar(old.jar, entry_class=old.entry_class, program_args=old.program_args,
                               parallelism=old.parallelism, savepoint_path=stop_savepoint)
    try:
        client.wait_until_running(job_id, timeout=timeout)
    except FlinkJobFailed as exc:
        raise UpgradeError(f"rollback failed: the old version did not restart from {stop_savepoint}: {exc}") from None
    restored = client.checkpoints(job_id).restored_from
    if local_path(restored or "").rstrip("/") != local_path(stop_savepoint).rstrip("/"):
        raise UpgradeError(f"rollback: job {job_id} restored from {restored!r}, not from {stop_savepoint!r}")
    steps.append(f"restarted the old version ({old.jar}) as job {job_id} from {stop_savepoint}")
    DeploymentRegistry(plan["savepoint_base"]).record(plan["job_name"], old, job_id, stop_savepoint,
                                                                 plan["run_id"])
    return "; ".join(steps)


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
