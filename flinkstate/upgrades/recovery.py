"""Recovery of upgrades whose run died, from the journal and Flink: :func:`recover` makes the decision the run
would have made (nothing stopped yet: nothing to do; the restore path verified: :func:`finish_upgrade`; anything
else after the stop: :func:`restore_old` from the stop savepoint), and the watchdog's :func:`sweep` finds the dead
runs and words one alert for each. Used by the Airflow DAGs (``plugins/flinkstate_airflow``) and by ``flinkstate
upgrade recover``."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from flinkstate.engine.rest import TERMINAL_STATES, FlinkJobFailed, FlinkRestClient, FlinkRestError, FlinkUnreachable
from flinkstate.errors import FlinkStateError, is_out_of_space
from flinkstate.storage.locations import StorageError
from flinkstate.storage.s3 import s3_client, split_s3_uri
from flinkstate.upgrades.journal import (
    JobVersion,
    JournalConflict,
    Outcome,
    Phase,
    UpgradeError,
    UpgradeJournal,
    local_path,
    same_path,
    write_with_retries,
)
from flinkstate.upgrades.ownership import RunProbe
from flinkstate.upgrades.registry import ClusterRef, DeploymentRegistry


@dataclass
class Recovery:
    """What :func:`recover` did, in one line for an alert, and what runs afterwards."""

    outcome: str
    account: str
    running: dict[str, Any] | None


def find_stop_savepoint(journal: UpgradeJournal) -> str | None:
    """The stop savepoint: as recorded, else the newest complete one in the run's ``stop/`` folder (a run killed
    between Flink's stop and the journal's write leaves it only there)."""
    if journal.data.get("stop_savepoint"):
        return str(journal.data["stop_savepoint"])
    stop = f"{journal.data['run_dir']}/stop"
    if urlparse(stop).scheme in ("s3", "s3a"):
        bucket, prefix = split_s3_uri(stop)
        pages = s3_client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/")
        found = sorted({o["Key"].rsplit("/", 1)[0] for page in pages for o in page.get("Contents", [])
                        if o["Key"].endswith("/_metadata")})
        return f"s3://{bucket}/{found[-1]}" if found else None
    folder = Path(local_path(stop))
    found = sorted((p for p in folder.glob("savepoint-*") if (p / "_metadata").is_file()),
                   key=lambda p: p.stat().st_mtime) if folder.is_dir() else []
    return str(found[-1]) if found else None


def cluster_clients(client: FlinkRestClient, journal: UpgradeJournal) -> tuple[FlinkRestClient, FlinkRestClient]:
    """The clients of the old version's cluster and the new version's, as the journal records them (``flink_url``,
    and ``new_flink_url`` for a run that upgraded from one cluster to another): ``client`` serves the cluster whose
    address it has, a client of the same timeout any other. The journal's address wins over ``client``'s: a
    watchdog holds the default cluster's client, and a deployment an earlier upgrade moved runs elsewhere."""
    old_url = journal.data.get("flink_url") or client.base_url
    new_url = journal.data.get("new_flink_url") or old_url

    def serving(url: str) -> FlinkRestClient:
        same = url.rstrip("/") == client.base_url
        return client if same else FlinkRestClient(url, timeout=client.timeout)

    old = serving(old_url)
    return old, old if new_url == old_url else serving(new_url)


def _state(client: FlinkRestClient, job_id: str | None) -> str | None:
    if not job_id:
        return None
    try:
        return client.job_state(job_id)
    except FlinkRestError as exc:
        if exc.status == 404:
            return None
        raise


def _jobs_restored_from(client: FlinkRestClient, path: str, since_epoch: float) -> list[str]:
    """Active jobs started since ``since_epoch`` that restored from ``path``: a job a run submitted before it could
    record the job id."""
    found = []
    for job in client.list_jobs():
        if job.get("state") in TERMINAL_STATES or job.get("start-time", 0) < since_epoch * 1000 - 5000:
            continue
        try:
            if same_path(client.checkpoints(job["jid"]).restored_from, path):
                found.append(str(job["jid"]))
        except FlinkRestError:
            continue
    return found


def _healthy(client: FlinkRestClient, job_id: str, *, checkpoints: int, timeout: float) -> None:
    """Waits until the job runs with every task up and ``checkpoints`` checkpoints completed since (raises)."""
    client.wait_until_running(job_id, timeout=timeout)
    deadline = time.monotonic() + timeout
    while client.checkpoints(job_id).completed < checkpoints:
        state = client.job_state(job_id)
        if state != "RUNNING" or client.num_restarts(job_id) > 0:
            raise FlinkJobFailed(f"job {job_id} is {state} (restarted {client.num_restarts(job_id)} times) before "
                                 f"{checkpoints} checkpoints completed")
        if time.monotonic() > deadline:
            raise FlinkJobFailed(f"job {job_id}: fewer than {checkpoints} checkpoints within {timeout:.0f} s")
        time.sleep(1)


#: Seconds between two attempts of a rollback while Flink's REST API does not answer (a JobManager restarting).
UNREACHABLE_PAUSE = 2.0
#: HTTP statuses Flink answers while it is not yet able to (Service Unavailable: no leader yet): waited out too.
NOT_YET_SERVING = frozenset({502, 503, 504})
#: A rollback job that failed only for want of slots (a TaskManager just started has not registered yet) is
#: started again until the timeout, like one waiting for slots.
NO_SLOTS_YET = "NoResourceAvailableException"


def restore_old(client: FlinkRestClient, journal: UpgradeJournal, actor: str, *, timeout: float = 300,
                reason: str = "") -> Recovery:
    """Puts the old version back: cancels the new job if one runs, restarts the old version from the stop
    savepoint (waiting until every task runs, restored from exactly that path), records it in the registry and
    closes the journal. When the old job was never stopped it is left as it is. Never raises for Flink's answers:
    a failed restore closes the journal with outcome DOWN and says so.

    Bounded by ``timeout`` as a whole: a Flink that does not answer (a JobManager restarting) is asked again until
    then, not taken as final, and a rollback job that failed for want of slots is started again. Restoring needs
    only to read the stop savepoint, so the journal and registry writes may fail (a full disk): each is retried,
    then reported in :attr:`UpgradeJournal.unsaved` and the account, never fatal to the rollback."""
    deadline = time.monotonic() + timeout
    journal.tolerate_write_failures()
    while True:
        try:
            result = _restore_old_attempt(client, journal, actor, deadline)
        except JournalConflict:
            raise  # another actor owns the run now: do nothing more (in particular, cancel nothing)
        except FlinkRestError as exc:
            waiting = isinstance(exc, FlinkUnreachable) or exc.status in NOT_YET_SERVING or NO_SLOTS_YET in str(exc)
            if waiting and time.monotonic() + UNREACHABLE_PAUSE < deadline:
                time.sleep(UNREACHABLE_PAUSE)  # the JobManager may be on its way back: ask again
                continue
            return _rollback_failed(client, journal, actor, exc, reason, timeout)
        except (FlinkStateError, OSError) as exc:
            return _rollback_failed(client, journal, actor, exc, reason, timeout)
        if journal.unsaved:
            result.account += f"; {unrecorded(journal)}"
        return result


def _remaining(deadline: float) -> float:
    return max(deadline - time.monotonic(), 1.0)


def _restore_old_attempt(client: FlinkRestClient, journal: UpgradeJournal, actor: str, deadline: float) -> Recovery:
    """One attempt of :func:`restore_old` (raises): repeatable, for each step first looks at what an earlier
    attempt (or run) did."""
    data, steps = journal.data, []
    old = JobVersion(**data["old"])
    client, new_client = cluster_clients(client, journal)
    old_state = _state(client, data["old_job_id"])
    if old_state == "RUNNING" and not data.get("rollback_job_id"):
        # Nothing was stopped (the stop never reached Flink, or failed): production is as it was.
        journal.finish(Outcome.UNCHANGED, actor, running={"version": "old", "job_id": data["old_job_id"]})
        return Recovery(Outcome.UNCHANGED, f"nothing was stopped: the old version runs as job {data['old_job_id']}",
                        journal.data["running"])
    stop = find_stop_savepoint(journal)
    if not stop:
        raise UpgradeError(f"the old job {data['old_job_id']} is {old_state or 'gone'} and no stop savepoint "
                           f"is recorded or found in {data['run_dir']}/stop")
    if journal.phase != Phase.ROLLING_BACK or not same_path(data.get("stop_savepoint"), stop):
        journal.advance(Phase.ROLLING_BACK, actor, stop_savepoint=stop)
    new_ids = [data["new_job_id"]] if data.get("new_job_id") else []
    if data.get("restore_path") and journal.entered_at(Phase.SUBMITTING):
        new_ids += _jobs_restored_from(new_client, data["restore_path"], journal.entered_at(Phase.SUBMITTING) or 0)
    for job_id in dict.fromkeys(new_ids):
        if _state(new_client, job_id) not in (None, *TERMINAL_STATES):
            new_client.cancel(job_id, timeout=_remaining(deadline))
            steps.append(f"cancelled the new job {job_id}")
    # A rollback that an earlier attempt already started: use it when it runs from the stop savepoint.
    previous = data.get("rollback_job_id")
    if not previous and journal.reached(Phase.MIGRATING):
        # A run that migrated submits the new version only from the migrated savepoint, so a job restored from
        # the stop savepoint since the stop is a rollback an earlier attempt started and could not record (its
        # journal write failed): adopted, never started a second time.
        found = _jobs_restored_from(client, stop, journal.entered_at(Phase.STOPPING) or 0)
        previous = found[0] if found else None
    if previous and _state(client, previous) == "RUNNING" and \
            same_path(client.checkpoints(previous).restored_from, stop):
        job_id = previous
    else:
        if previous and _state(client, previous) not in (None, *TERMINAL_STATES):
            client.cancel(previous, timeout=_remaining(deadline))
        job_id = old.submit(client, local_path(stop), allow_non_restored_state=False)
        journal.advance(Phase.ROLLING_BACK, actor, rollback_job_id=job_id)
        client.wait_until_running(job_id, timeout=_remaining(deadline))
    restored = client.checkpoints(job_id).restored_from
    if not same_path(restored, stop):
        raise UpgradeError(f"job {job_id} restored from {restored!r}, not from the stop savepoint {stop}")
    registry = DeploymentRegistry(data["savepoint_base"])
    problem = write_with_retries(lambda: registry.record(data["deployment"], old, job_id, local_path(stop),
                                                         data["run_id"], ClusterRef.of_journal(data, "old")))
    if problem:
        journal.unsaved.append(f"deployment registry not written: {problem}")
    steps.append(f"restarted the old version ({old.jar}) as job {job_id} from {local_path(stop)}")
    journal.note_running_again(client, job_id)
    journal.finish(Outcome.ROLLED_BACK, actor, running={"version": "old", "job_id": job_id}, rollback_job_id=job_id)
    return Recovery(Outcome.ROLLED_BACK, "; ".join(steps), journal.data["running"])


def _rollback_failed(client: FlinkRestClient, journal: UpgradeJournal, actor: str, exc: BaseException, reason: str,
                     timeout: float) -> Recovery:
    """Closes the journal with outcome DOWN, saying why."""
    data, steps = journal.data, []
    client = cluster_clients(client, journal)[0]  # the rollback job runs on the old version's cluster
    why = f"rollback failed: {exc}"
    # A rollback job that could not run (say, waiting for slots no TaskManager offers) is cancelled, so that it
    # cannot come up later beside the restore a person starts from the alert. Its end is awaited for up to the
    # rollback's timeout (60 s at most), not only what is left of it: a job cancelled while restarting ends after.
    stuck = data.get("rollback_job_id")
    with contextlib.suppress(FlinkStateError, OSError):
        if stuck and _state(client, stuck) not in (None, *TERMINAL_STATES):
            client.cancel(stuck, timeout=min(timeout, 60))
            steps.append(f"cancelled the rollback job {stuck}, which did not run")
    if reason:
        why = f"{reason}; {why}"
    journal.data["failures"].append(why)
    journal.finish(Outcome.DOWN, actor, running=None)
    if journal.unsaved:
        steps.append(unrecorded(journal))
    return Recovery(Outcome.DOWN, "; ".join([*steps, why]), None)


def unrecorded(journal: UpgradeJournal) -> str:
    """What this process did and could not record (empty when every write went through), with the command that
    records it once the storage takes writes again."""
    if not journal.unsaved:
        return ""
    return (f"NOT RECORDED ({'; '.join(dict.fromkeys(journal.unsaved))}): the journal and the registry may not say "
            f"what runs; once {journal.data['savepoint_base']} takes writes again, record it with: "
            f"{journal.restore_command()}")


def finish_upgrade(client: FlinkRestClient, journal: UpgradeJournal, actor: str, *, checkpoints: int = 2,
                   timeout: float = 300) -> Recovery:
    """Completes an upgrade whose migrated (or as-is) savepoint was verified before the run died: the new version
    from that savepoint (reusing the job the run started, if it runs from it), health-checked, recorded. Falls
    back to :func:`restore_old` when the new version cannot be made healthy."""
    data = journal.data
    new = JobVersion(**data["new"])
    path = str(data.get("restore_path") or data.get("migrated_savepoint"))
    old_client, client = client, cluster_clients(client, journal)[1]  # the new version runs on its own cluster
    try:
        job_id = data.get("new_job_id")
        if not job_id and journal.entered_at(Phase.SUBMITTING):
            candidates = _jobs_restored_from(client, path, journal.entered_at(Phase.SUBMITTING) or 0)
            job_id = candidates[0] if candidates else None
        if not job_id or _state(client, job_id) in (None, *TERMINAL_STATES):
            journal.advance(Phase.SUBMITTING, actor, restore_path=path)
            job_id = new.submit(client, local_path(path),
                                allow_non_restored_state=bool(data.get("allow_non_restored_state")))
            journal.advance(Phase.SUBMITTED, actor, new_job_id=job_id)
        journal.advance(Phase.GATING, actor, new_job_id=job_id)
        _healthy(client, job_id, checkpoints=checkpoints, timeout=timeout)
        if not same_path(client.checkpoints(job_id).restored_from, path):
            raise UpgradeError(f"job {job_id} did not restore from {path}")
        journal.note_running_again(client, job_id)
        journal.advance(Phase.GATE_PASSED, actor)
    except JournalConflict:
        raise  # another actor owns the run now: do nothing more
    except FlinkStateError as exc:
        journal.data["failures"].append(f"finishing the upgrade failed: {exc}")
        return restore_old(old_client, journal, actor, timeout=timeout,
                           reason=f"finishing the upgrade failed: {exc}")
    DeploymentRegistry(data["savepoint_base"]).record(data["deployment"], new, job_id, local_path(path),
                                                      data["run_id"], ClusterRef.of_journal(data, "new"))
    journal.finish(Outcome.UPGRADED, actor, running={"version": "new", "job_id": job_id})
    return Recovery(Outcome.UPGRADED, f"finished the upgrade: the new version ({new.jar}) runs as job {job_id} from "
                              f"{local_path(path)}", journal.data["running"])


def recover(client: FlinkRestClient, journal: UpgradeJournal, actor: str, *, timeout: float = 300) -> Recovery:
    """Acts on an unfinished journal whose run is gone: the decision the run would have made.

    - nothing stopped yet (PLANNED, or STOPPING while the old job still runs): closes it, nothing to do;
    - the upgrade passed its gate: records the new version;
    - the restore path was verified (VERIFIED, or later with a new job): finishes the upgrade;
    - anything else after the stop: restores the old version from the stop savepoint.
    """
    _claim_for_recovery(journal, actor)
    result = _recover_claimed(client, journal, actor, timeout)
    if journal.unsaved and "NOT RECORDED" not in result.account:
        result.account += f"; {unrecorded(journal)}"
    return result


def _claim_for_recovery(journal: UpgradeJournal, actor: str) -> None:
    """Claims the run before asking Flink anything: a compare-and-swap write, so that when the run (or another
    watchdog) wrote the journal after it was read, this actor learns it here and does nothing. On a full disk the
    compare passed (nobody wrote since the read) and only the write failed: nobody else can write either, and the
    rollback needs only to read the stop savepoint, so the recovery goes on with its writes retried and noted."""
    try:
        journal.touch(actor)
    except (StorageError, OSError) as exc:
        cause = exc.__cause__ if isinstance(exc, StorageError) else exc
        if cause is None or not is_out_of_space(cause):
            raise
        journal.tolerate_write_failures()
        journal.unsaved.append(f"claim not written: {exc}")


def _recover_claimed(client: FlinkRestClient, journal: UpgradeJournal, actor: str, timeout: float) -> Recovery:
    if journal.finished and journal.data.get("outcome") == Outcome.DOWN:
        # Production is down since a rollback failed (e.g. no TaskManager to run it): try the rollback again.
        return restore_old(client, journal, actor, timeout=timeout)
    if journal.finished:
        running = journal.data.get("running")
        return Recovery(str(journal.data["outcome"]), "already finished", running)
    phase = journal.phase
    if phase == Phase.PLANNED:
        journal.finish(Outcome.UNCHANGED, actor, running={"version": "old", "job_id": journal.data["old_job_id"]})
        return Recovery(Outcome.UNCHANGED, "the run died before it stopped anything", journal.data["running"])
    if phase == Phase.GATE_PASSED:
        data = journal.data
        DeploymentRegistry(data["savepoint_base"]).record(
            data["deployment"], JobVersion(**data["new"]), data["new_job_id"], data["restore_path"], data["run_id"],
            ClusterRef.of_journal(data, "new"))
        journal.finish(Outcome.UPGRADED, actor, running={"version": "new", "job_id": data["new_job_id"]})
        return Recovery(Outcome.UPGRADED, f"the new job {data['new_job_id']} had passed its gate: recorded",
                        journal.data["running"])
    if phase != Phase.ROLLING_BACK and journal.reached(Phase.VERIFIED) and journal.data.get("restore_path"):
        return finish_upgrade(client, journal, actor, timeout=timeout)
    return restore_old(client, journal, actor, timeout=timeout)


def describe_outcome(journal: UpgradeJournal) -> str:
    """One line on what runs now, for alerts: loud when nothing does."""
    data, running = journal.data, journal.data.get("running")
    if running:
        version = JobVersion(**data[running["version"]])
        return f"RUNNING now: the {running['version']} version ({Path(version.jar).name}) as job {running['job_id']}"
    stop = find_stop_savepoint(journal)
    return (f"PRODUCTION IS DOWN: {data['deployment']} is not running. Restore it from the stop savepoint "
            f"{local_path(stop) if stop else '(none found in ' + data['run_dir'] + '/stop)'} with: "
            f"{journal.restore_command()}")


# ---------------------------------------------------------------------- the watchdog


#: Seconds a dead owner's journal is left alone, for the gap between one task's end and the next one's start.
DEFAULT_GRACE = 60.0


def dead_runs(savepoint_base: str, *, grace: float = DEFAULT_GRACE, stale_after: float = 2 * 3600,
              deployment: str | None = None, probe: RunProbe | None = None) -> list[UpgradeJournal]:
    """Unfinished journals whose run is gone, and nothing was written for ``grace`` seconds: the orchestrator
    (``probe``) says its run is gone, or, without one, the owner is silent for ``stale_after``; a process owner is
    dead (same host) or silent for ``stale_after`` (another host). See :mod:`flinkstate.upgrades.ownership`."""
    return [journal for journal in UpgradeJournal.all(savepoint_base)
            if not journal.finished and (not deployment or journal.data["deployment"] == deployment)
            and why_left_alone(journal, grace=grace, stale_after=stale_after, probe=probe) is None]


def why_left_alone(journal: UpgradeJournal, *, grace: float = DEFAULT_GRACE, stale_after: float = 2 * 3600,
                   probe: RunProbe | None = None) -> str | None:
    """Why the watchdog leaves an unfinished journal alone, in one line: its owner may be alive, or it was written
    within ``grace`` seconds (the next task may be about to start). None: its run is gone, to be recovered."""
    liveness = journal.liveness(stale_after=stale_after, probe=probe)
    if liveness.alive:
        return f"{liveness.why}; grace {grace:.0f} s"
    if time.time() - float(journal.data.get("updated_epoch") or 0) < grace:
        return f"{liveness.why}, within the grace of {grace:.0f} s"
    return None


def recovery_alert(journal: UpgradeJournal, died_in: str, result: Recovery, actor: str) -> str:
    """The one alert for a run recovered by the watchdog (or the CLI): what died, what was done, what runs now."""
    data = journal.data
    if died_in == Phase.DONE:  # a run that ended with production DOWN (its rollback failed): the rollback was retried
        head = (f"Flink upgrade of {data['deployment']}: run {data['run_id']} had left production DOWN (its rollback "
                f"failed). The {actor} retried the rollback: {result.outcome}: {result.account}.")
    else:
        head = (f"Flink upgrade of {data['deployment']}: run {data['run_id']} DIED in phase {died_in} (its process "
                f"is gone, so it could not finish or alert). The {actor} acted: {result.outcome}: {result.account}.")
    failures = f" Failures recorded before: {'; '.join(data['failures'])}." if data.get("failures") else ""
    return (f"{head}{failures} {describe_outcome(journal)}.\nRun record: {data['run_dir']}/run.json; journal: "
            f"{journal.uri}.")


def sweep(savepoint_base: str, client: FlinkRestClient, actor: str, *, grace: float = DEFAULT_GRACE,
          stale_after: float = 2 * 3600, deployment: str | None = None, force: bool = False,
          timeout: float = 300, probe: RunProbe | None = None) -> list[tuple[UpgradeJournal, Recovery, str]]:
    """Recovers every dead run's journal under ``savepoint_base`` (``force``: every unfinished one, alive owner or
    not: for a person who knows the run is gone). Returns (journal, what was done, the alert) per run."""
    if force:  # also the runs that ended with production DOWN: the alert's command retries their rollback
        journals = [j for j in UpgradeJournal.all(savepoint_base)
                    if (not j.finished or j.data.get("outcome") == Outcome.DOWN)
                    and (not deployment or j.data["deployment"] == deployment)]
    else:
        journals = dead_runs(savepoint_base, grace=grace, stale_after=stale_after, deployment=deployment, probe=probe)
    done = []
    for journal in journals:
        died_in = journal.phase
        try:
            result = recover(client, journal, actor, timeout=timeout)
            alert = recovery_alert(journal, died_in, result, actor)
            journal.data["alert_sent"] = True
            journal.save()
        except JournalConflict:
            continue  # another actor (the run itself, or a second watchdog) wrote it meanwhile: theirs to finish
        done.append((journal, result, alert))
    return done
