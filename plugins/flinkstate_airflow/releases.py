"""Scheduled upgrades: what the ``flink_scheduled_upgrades`` DAG decides, kept out of the DAG file.

A release file (YAML, read by :mod:`flinkstate.upgrades.releases`, which ``flinkstate upgrade run --release`` reads too)
says which version of each deployment should run, and when it may be upgraded (its format: that module's docstring).

Every tick, each deployment whose release version differs from the version the registry
(``<savepoint_base>/deployments.json``) says runs, and whose window is open now, becomes one run of
``flink_state_upgrade``. Its run id is derived from the deployment and the release version, so a release is tried once
per deployment: while that run is queued or running, or after it failed (and rolled back), later ticks skip it rather
than retrying (or re-alerting) every 15 minutes. Clear or delete that run, or change the release, to try again.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from flinkstate import (
    FlinkRestClient,
    FlinkStateError,
    Release,
    ReleaseError,
    ReleaseJob,
    Window,
    load_release,
    parse_release,
    parse_window,
    running_job_id,
    upgrade_conf,
)
from flinkstate_airflow.upgrade import DeploymentRegistry, JobVersion, UpgradeJournal, safe_name

# The release file's format and a deployment's conf live in flinkstate (the CLI reads them too); named here as well for
# the DAG files and their tests.
__all__ = ["Release", "ReleaseError", "ReleaseJob", "Window", "load_release", "parse_release", "parse_window",
           "plan_tick", "release_file_location", "upgrade_conf"]

#: The Airflow Variable (else environment variable) holding the release file's path or s3:// URI.
RELEASE_FILE_VARIABLE = "flinkstate_release_file"
RELEASE_FILE_ENV = "FLINKSTATE_RELEASE_FILE"
UPGRADE_DAG_ID = "flink_state_upgrade"


@dataclass
class Decision:
    """What one tick does about one deployment: trigger (``conf`` and ``run_id`` set) or skip (``reason``)."""

    job: str
    trigger: bool
    reason: str
    run_id: str | None = None
    conf: dict[str, Any] | None = None


# ---------------------------------------------------------------------------------------------------------- deciding

def version_diff(running: JobVersion, wanted: JobVersion) -> list[str]:
    """The fields in which two versions differ, e.g. ['jar', 'manifest']; empty when they are the same."""
    old, new = asdict(running), asdict(wanted)
    return [key for key in new if old[key] != new[key]]


def version_digest(version: JobVersion) -> str:
    return hashlib.sha256(json.dumps(asdict(version), sort_keys=True).encode()).hexdigest()[:12]


def upgrade_run_id(job: str, version: JobVersion) -> str:
    """The run id of the upgrade of ``job`` to ``version``: the same for every tick, so a release is tried once."""
    return f"release__{safe_name(job)}__{version_digest(version)}"


def decide(release: Release, now: datetime, client: FlinkRestClient | None,
           connect: Callable[[str], FlinkRestClient] | None = None) -> list[Decision]:
    """One decision per deployment of the release, in file order. ``client`` resolves job ids (None: use only the
    registry's job ids, e.g. to preview); ``connect`` gives the client of the Airflow connection the registry
    records for a deployment an earlier upgrade moved to another cluster. Problems with one job (no RUNNING job, no
    record of its version) are that job's skip reason, prefixed 'error:', and do not stop the others."""
    registry = DeploymentRegistry(release.savepoint_base)
    records = registry.load()
    decisions = []
    for name, job in release.jobs.items():
        record = records.get(name)
        running: JobVersion | None
        if record:
            running = JobVersion.from_dict(record["version"], f"{registry.uri}: {name}")
        else:
            running = job.current
        if running is None:
            decisions.append(Decision(name, False, f"error: no record of the running version in {registry.uri} "
                                                   "and no 'current' in the release file"))
            continue
        changed = version_diff(running, job.version)
        if not changed:
            decisions.append(Decision(name, False, "up to date"))
            continue
        if job.window is not None and not job.window.is_open(now):
            decisions.append(Decision(name, False, f"outside its window {job.window.describe()} "
                                                   f"(differs in {', '.join(changed)})"))
            continue
        try:  # the journal is each deployment's lock: an unfinished run of its own holds it, no other's does
            journal = UpgradeJournal.for_deployment(release.savepoint_base, name)
        except FlinkStateError as exc:
            decisions.append(Decision(name, False, f"error: {exc}"))
            continue
        if journal is not None and not journal.finished:
            decisions.append(Decision(name, False, f"differs in {', '.join(changed)}, but its upgrade run "
                                                   f"{journal.data.get('run_id')} is unfinished (phase "
                                                   f"{journal.phase}): next tick"))
            continue
        recorded_id = record.get("job_id") if record else None
        try:
            moved_to = registry.cluster(name).flink_conn_id if client and connect else None
            job_client = connect(moved_to) if connect and moved_to else client
            job_id = running_job_id(job_client, recorded_id, job.flink_job_name) if job_client else recorded_id
        except FlinkStateError as exc:
            decisions.append(Decision(name, False, f"error: {exc}"))
            continue
        if not job_id:
            decisions.append(Decision(name, False, "error: no job id recorded and no Flink client to find it"))
            continue
        conf = upgrade_conf(release, job, job_id, running if not record else None)
        decisions.append(Decision(name, True, f"differs in {', '.join(changed)}", upgrade_run_id(name, job.version),
                                  conf))
    return decisions


def release_file_location(override: str | None = None) -> str:
    """The release file: ``override`` (the DAG's ``release_file`` param, for a manual run), else the Airflow Variable
    ``flinkstate_release_file``, else the environment variable ``FLINKSTATE_RELEASE_FILE``."""
    import os

    from airflow.sdk import Variable

    location = override or Variable.get(RELEASE_FILE_VARIABLE, default=None) or os.environ.get(RELEASE_FILE_ENV)
    if not location:
        raise ReleaseError(f"no release file: set the Airflow Variable {RELEASE_FILE_VARIABLE} or the environment "
                           f"variable {RELEASE_FILE_ENV} to its path or s3:// URI")
    return str(location)


def plan_tick(release: Release, now: datetime, client: FlinkRestClient | None,
              connect: Callable[[str], FlinkRestClient] | None = None) -> dict[str, Any]:
    """What one tick of ``flink_scheduled_upgrades`` does: ``triggers`` (TriggerDagRunOperator kwargs, one per
    deployment to upgrade), ``skipped`` (deployment -> reason) and ``problems`` (one line each).

    A deployment whose own upgrade run is unfinished (its journal) is skipped until the next tick: the job id a tick
    resolves would be stale once that run replaced the job, and the next tick decides again from the updated
    registry. Other deployments are not held up by it: one active run per deployment, not per DAG."""
    decisions = decide(release, now, client, connect)
    triggers, skipped, problems = [], {}, []
    for decision in decisions:
        if decision.trigger:
            triggers.append({"trigger_run_id": decision.run_id, "conf": decision.conf})
        else:
            skipped[decision.job] = decision.reason
            if decision.reason.startswith("error:"):
                problems.append(f"{release.source}: jobs.{decision.job}: {decision.reason.removeprefix('error: ')}")
    return {"triggers": triggers, "skipped": skipped, "problems": problems}
