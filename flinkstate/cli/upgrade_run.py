"""``flinkstate upgrade run``: one run of the upgrade DAG ``flink_state_upgrade`` for a deployment, from the command
line, on a running Airflow through its REST API (``--airflow-url``) or on a local Airflow in a child process
(``--local``, as the demo runs it). The version to deploy comes from options (``--jar`` ...) or from one entry of a
scheduled-upgrades release file (``--release``); the conf is built as the scheduler builds it
(:func:`flinkstate.upgrade_conf`). The command prints the run's progress, then its outcome, its downtime and its one
alert, and exits with a status that says what happened (:data:`EXIT_CODES`)."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flinkstate import (
    DeploymentRegistry,
    FlinkRestClient,
    FlinkStateError,
    JobVersion,
    Outcome,
    Release,
    ReleaseJob,
    UpgradeJournal,
    load_release,
    printable,
    running_job_id,
    slack_text,
    upgrade_conf,
)
from flinkstate.cli.airflow_local import APPROVAL_TASK, DAG_ID, AlertReceiver, LocalAirflow, project_folder
from flinkstate.cli.airflow_rest import AirflowApi, AirflowError
from flinkstate.cli.jar_options import take_program_args
from flinkstate.cli.jobs import flink_url

EXIT_REFUSED, EXIT_UNCHANGED, EXIT_ROLLED_BACK, EXIT_DOWN = 3, 4, 5, 6
#: The run's outcome (its journal's) -> the command's exit status. A run with no outcome: 1 (an error).
EXIT_CODES = {Outcome.UPGRADED: 0, Outcome.CHECKED: 0, Outcome.REFUSED: EXIT_REFUSED,
              Outcome.UNCHANGED: EXIT_UNCHANGED, Outcome.ROLLED_BACK: EXIT_ROLLED_BACK, Outcome.DOWN: EXIT_DOWN}
#: The DAG's params given as options (None: the DAG's default), with their types.
PARAM_OPTIONS: dict[str, type] = {"min_checkpoints": int, "max_restarts": int, "gate_timeout": int,
                                  "min_running_seconds": int, "max_dead_letters": int, "rollback_timeout": int,
                                  "approval_timeout": int}
#: Task states worth a progress line (the ones before a task runs are not).
SHOWN_STATES = {"running", "success", "failed", "skipped", "upstream_failed", "up_for_retry", "up_for_reschedule",
                "deferred", "awaiting_input", "removed"}
USER_ENV, PASSWORD_ENV = "FLINKSTATE_AIRFLOW_USER", "FLINKSTATE_AIRFLOW_PASSWORD"


def add_parser(actions: Any) -> None:
    run = actions.add_parser(
        "run", help="trigger flink_state_upgrade for a deployment and follow it to its outcome",
        description="Trigger one run of the upgrade DAG flink_state_upgrade for a deployment, on a running Airflow "
                    "(--airflow-url, through its REST API) or on a local one (--local: airflow dags test in a child "
                    "process, as the demo runs it), print its progress, then its outcome, its downtime and its one "
                    "alert. The new version: --jar ... [-- PROGRAM ARGS], or one entry of a release file "
                    "(--release FILE; its window is not consulted: this is a manual run). Exit: 0 upgraded (or "
                    "checked), 3 refused (nothing was stopped), 4 failed before the stop (nothing changed), 5 "
                    "failed and rolled back (the old version runs again), 6 failed and the rollback failed "
                    "(production is DOWN: the alert says what to run), 1 error (also: no outcome known), 2 usage.")
    run.usage = "flinkstate upgrade run --deployment NAME (--airflow-url URL | --local) [options] [-- PROGRAM ARGS]"
    run.add_argument("--deployment", required=True, metavar="NAME",
                     help="the deployment (the registry key, the DAG's job_name); before its first record, the "
                          "running Flink job's name, unless --job-id names the job")
    where = run.add_mutually_exclusive_group(required=True)
    where.add_argument("--airflow-url", metavar="URL", help="a running Airflow's api-server, e.g. http://host:8080")
    where.add_argument("--local", action="store_true", help="a local Airflow in a child process (airflow dags test)")

    new = run.add_argument_group("the new version (or --release)")
    new.add_argument("--jar", help="the new version's job jar (a path the Airflow workers and Flink can read)")
    new.add_argument("--entry-class", metavar="CLASS", help="its main class (default: the jar's Main-Class)")
    new.add_argument("--manifest", help="optional: an overlay of the jar's state schema (migrations, renames ...)")
    new.add_argument("--parallelism", type=int, metavar="N", help="its parallelism")
    new.add_argument("--release", metavar="FILE", help="a scheduled-upgrades release file (local or s3://): the "
                                                       "new version, savepoint base and options are its entry's")
    run.add_argument("--savepoint-base", metavar="DIR", help="the savepoints, reports and registry (local folder or "
                                                             "s3://bucket/prefix); required without --release")
    run.add_argument("--job-id", help="the running Flink job (wins over the deployment's name)")
    current = run.add_argument_group("the running version, when the registry has no record of it yet (first run)")
    current.add_argument("--current-jar", metavar="JAR")
    current.add_argument("--current-entry-class", metavar="CLASS")
    current.add_argument("--current-manifest", metavar="MANIFEST")
    current.add_argument("--current-parallelism", type=int, metavar="N")
    current.add_argument("--current-program-args", metavar="ARGS", default="",
                         help='its program arguments, one string split as a shell does: --current-program-args='
                              '"--keys 5"')

    params = run.add_argument_group("the DAG's params (default: the release entry's, else the DAG's)")
    params.add_argument("--mode", choices=("upgrade", "check-only"))
    params.add_argument("--allow-non-restored-state", action="store_true", default=None)
    params.add_argument("--engine", choices=("auto", "spark", "in-process"))
    params.add_argument("--approval", action="store_true", default=None,
                        help="a person approves the stop in the Airflow UI (migrate/restore/abort) before anything is "
                             "stopped; no answer within --approval-timeout seconds aborts (the job runs on)")
    for name in PARAM_OPTIONS:
        params.add_argument(f"--{name.replace('_', '-')}", type=int, metavar="N")
    params.add_argument("--target-flink-conn-id", metavar="CONN_ID",
                        help="the Airflow connection of the Flink cluster the new version runs on, when it is not "
                             "the old one's (flink_default), e.g. a Flink 2.x cluster for a job on 1.x; the rollback "
                             "restarts the old version on the old cluster (--local: define it as "
                             "AIRFLOW_CONN_<CONN_ID> in the environment)")

    rest = run.add_argument_group("--airflow-url")
    rest.add_argument("--airflow-user", default=os.environ.get(USER_ENV),
                      help=f"the user whose token triggers the run (default ${USER_ENV})")
    rest.add_argument("--airflow-password", default=os.environ.get(PASSWORD_ENV),
                      help=f"its password (default ${PASSWORD_ENV})")
    rest.add_argument("--timeout", type=float, default=4 * 3600, metavar="SECONDS",
                      help="stop following the run after this long; the run goes on (default %(default)g)")
    rest.add_argument("--poll", type=float, default=2.0, metavar="SECONDS", help="seconds between two looks")

    local = run.add_argument_group("--local")
    local.add_argument("--airflow-home", metavar="DIR",
                       help="its AIRFLOW_HOME (default: $AIRFLOW_HOME, else ~/airflow); its database is migrated "
                            "on the first run")
    local.add_argument("--flink-url", metavar="URL",
                       help="Flink's REST address (flink_default; default: $FLINKSTATE_FLINK_URL, "
                            "$AIRFLOW_CONN_FLINK_DEFAULT, else http://127.0.0.1:8081); with --release, also where "
                            "the entry's flink_job_name is looked up")
    local.add_argument("--spark-master", default="local[2]", help="spark_default's master (default %(default)s)")
    local.add_argument("--webhook-url", metavar="URL", help="where the alert goes too (a chat's incoming webhook)")
    local.add_argument("--dags-folder", metavar="DIR", help="the project's dags/ (default: beside flinkstate)")
    local.add_argument("--plugins-folder", metavar="DIR", help="the project's plugins/ (default: beside flinkstate)")
    local.add_argument("--log", metavar="FILE", help="Airflow's log of the run (default: in AIRFLOW_HOME)")
    take_program_args(run)  # what follows '--': the new version's main() arguments
    run.set_defaults(handler=_run, usage_error=run.error)


# ---------------------------------------------------------------------------------------------------------- the conf

def build_conf(args: argparse.Namespace) -> dict[str, Any]:
    """flink_state_upgrade's conf from the options, or from the release file's entry for ``--deployment``."""
    if args.release:
        given = [f"--{n.replace('_', '-')}" for n in ("jar", "entry_class", "manifest", "parallelism",
                                                      "savepoint_base", "current_jar") if getattr(args, n)]
        if given or args.program_args:
            args.usage_error(f"--release names the version and the savepoint base: drop {(given or ['--'])[0]}")
        release = load_release(args.release)
        job = release.jobs.get(args.deployment)
        if job is None:
            raise FlinkStateError(f"{args.release}: jobs.{printable(args.deployment)}: no such deployment (the file "
                                  f"names {', '.join(printable(n) for n in release.jobs)})")
        conf = upgrade_conf(release, job, args.job_id or _release_job_id(args, release, job), job.current)
    else:
        if not args.jar or not args.savepoint_base:
            args.usage_error("give the new version (--jar JAR) and --savepoint-base, or --release FILE")
        version = JobVersion(args.jar, args.manifest, args.entry_class, list(args.program_args), args.parallelism)
        job = ReleaseJob(args.deployment, args.deployment, version, current=_current(args),
                         mode=args.mode or "upgrade")
        conf = upgrade_conf(Release("the command line", args.savepoint_base.rstrip("/"), {}), job,
                            args.job_id or "", job.current)
    overrides = {"mode": args.mode, "allow_non_restored_state": args.allow_non_restored_state, "engine": args.engine,
                 "approval": args.approval, "target_flink_conn_id": args.target_flink_conn_id,
                 **{name: getattr(args, name) for name in PARAM_OPTIONS}}
    conf.update({key: value for key, value in overrides.items() if value is not None})
    return conf


def _current(args: argparse.Namespace) -> JobVersion | None:
    others = [f"--current-{n}" for n in ("entry-class", "manifest", "parallelism", "program-args")
              if getattr(args, f"current_{n.replace('-', '_')}")]
    if not args.current_jar:
        if others:
            args.usage_error(f"{others[0]} describes the running version: give its --current-jar too")
        return None
    try:
        program_args = shlex.split(args.current_program_args)
    except ValueError as exc:
        args.usage_error(f"--current-program-args: {exc}")
    return JobVersion(args.current_jar, args.current_manifest, args.current_entry_class, program_args,
                      args.current_parallelism)


def _release_job_id(args: argparse.Namespace, release: Release, job: ReleaseJob) -> str:
    """The job to upgrade for a release entry, as the scheduler finds it; empty when the DAG finds the same one (the
    deployment's name is its Flink job's: the DAG takes the recorded job while it runs, else the job of that name)."""
    if job.flink_job_name == job.name:
        return ""
    recorded = (DeploymentRegistry(release.savepoint_base).load().get(job.name) or {}).get("job_id")
    client = FlinkRestClient(flink_url(args.flink_url), timeout=30)
    try:
        return running_job_id(client, recorded, job.flink_job_name)
    except FlinkStateError as exc:
        raise FlinkStateError(f"{args.release}: jobs.{printable(job.name)}: which job to upgrade: {exc} (give "
                              "--job-id, or --flink-url)") from None


# ---------------------------------------------------------------------------------------------------------- the run

@dataclass
class Concluded:
    """How a run ended, as the command reports it."""

    run_id: str | None
    state: str  # the DAG run's (success / failed), or the child's exit for a local run
    planned: bool | None = None  # whether the run got as far as its plan (False: it touched nothing); None: unknown
    outcome: str | None = None
    durations: dict[str, float] = field(default_factory=dict)
    alert: str | None = None
    notes: list[str] = field(default_factory=list)


def _run(args: argparse.Namespace) -> int:
    conf = build_conf(args)
    note = None if args.airflow_url else local_approval_note(conf)
    if note:
        print(note, flush=True)
    concluded = _follow_rest(args, conf) if args.airflow_url else _follow_local(args, conf)
    return _report(concluded)


def local_approval_note(conf: dict[str, Any]) -> str | None:
    """What a local run (airflow dags test) with an approval step waits for, said before it starts: no UI runs
    unless the user starts one on the same AIRFLOW_HOME."""
    if not conf.get("approval"):
        return None
    timeout = conf.get("approval_timeout")
    limit = "the DAG's default" if timeout is None else "no limit" if timeout == 0 else f"{timeout} s"
    return (f"{DAG_ID}: approval: the run waits for a person's answer before the stop ({limit}) in an Airflow UI "
            "on this AIRFLOW_HOME (airflow api-server); none in time aborts it (the job runs on)")


def _follow_rest(args: argparse.Namespace, conf: dict[str, Any]) -> Concluded:
    api = AirflowApi(args.airflow_url)
    if args.airflow_user:
        api.sign_in(args.airflow_user, args.airflow_password or "")
    if api.dag(DAG_ID).get("is_paused"):
        raise FlinkStateError(f"{DAG_ID} is paused in Airflow at {api.base_url}: a run would wait until it is "
                              "unpaused; unpause it first")
    run_id = str(api.trigger(DAG_ID, conf)["dag_run_id"])
    print(f"{DAG_ID}: run {printable(run_id)} of {printable(conf['job_name'])} triggered: "
          f"{printable(api.run_page(DAG_ID, run_id))}", flush=True)
    started = time.monotonic()
    seen: dict[str, str] = {}  # task id -> the state last shown
    run: dict[str, Any] = {}
    while True:
        try:
            run = api.dag_run(DAG_ID, run_id)
            tasks = api.task_instances(DAG_ID, run_id)
        except AirflowError as exc:
            # Only a look failed (a busy api-server, a restart), not the run: look again until the timeout.
            if (exc.status is not None and exc.status < 500) or time.monotonic() - started > args.timeout:
                raise
            _progress(started, f"(no answer from Airflow: {printable(exc)}; asking again)")
            time.sleep(args.poll)
            continue
        for task in sorted(tasks, key=lambda t: (str(t.get("start_date") or "~"), str(t.get("task_id")))):
            task_id, state = str(task.get("task_id")), str(task.get("state"))
            if state in SHOWN_STATES and seen.get(task_id) != state:
                seen[task_id] = state
                waiting = task_id == APPROVAL_TASK and state in ("deferred", "awaiting_input")  # asked
                hint = f" (waiting for a person's answer: migrate, restore or abort, in the run's required " \
                       f"actions: {printable(api.run_page(DAG_ID, run_id))})" if waiting else ""
                _progress(started, f"{printable(task_id)}: {printable(state)}{hint}")
        if run.get("state") in ("success", "failed"):
            break
        if time.monotonic() - started > args.timeout:
            raise FlinkStateError(f"run {printable(run_id)} is still {printable(run.get('state'))} after "
                                  f"{args.timeout:g} s; it goes on in Airflow: {api.run_page(DAG_ID, run_id)}")
        time.sleep(args.poll)
    concluded = Concluded(run_id, str(run["state"]))
    found = api.xcom(DAG_ID, run_id, "conclude", "conclusion")
    if isinstance(found, dict):
        concluded.outcome = found.get("outcome")
        # The alert as the webhook got it (flinkstate.slack_text: what the team read), as --local prints it too.
        concluded.alert = slack_text(found["alert"]) if isinstance(found.get("alert"), str) else None
        concluded.durations = found.get("durations") or {}
        concluded.planned = found.get("run_dir") is not None
    else:
        concluded.notes.append("its conclude task left no conclusion (see the run in Airflow)")
    return concluded


def _follow_local(args: argparse.Namespace, conf: dict[str, Any]) -> Concluded:
    home = Path(args.airflow_home or os.environ.get("AIRFLOW_HOME") or Path.home() / "airflow").resolve()
    dags = project_folder(args.dags_folder, "dags", f"{DAG_ID}.py")
    plugins = project_folder(args.plugins_folder, "plugins", "flinkstate_airflow")
    base, deployment = conf["savepoint_base"], conf["job_name"]
    before = UpgradeJournal.for_deployment(base, deployment)
    earlier_run = before.data.get("run_id") if before is not None else None
    with AlertReceiver(args.webhook_url).serving() as receiver:
        airflow = LocalAirflow(home, dags_folder=dags, plugins_folder=plugins, flink_url=flink_url(args.flink_url),
                               spark_master=args.spark_master, webhook_port=receiver.port)
        airflow.migrate_once()
        log = Path(args.log) if args.log else home / "flinkstate-runs" / f"{time.strftime('%Y%m%d-%H%M%S')}.log"
        print(f"{DAG_ID}: a run of {printable(deployment)} on the local Airflow in {printable(home)} (airflow dags "
              f"test; its log: {printable(log)})", flush=True)
        child, started, shown, working = airflow.start_run(conf, log), time.monotonic(), 0, None
        while True:  # the journal tells what the run does (each task claims it, each step is recorded)
            ended = child.poll() is not None
            journal = UpgradeJournal.for_deployment(base, deployment)
            if journal is not None and journal.data.get("run_id") != earlier_run:
                actor = (journal.data.get("owner") or {}).get("actor")
                if actor != working and len(journal.data["history"]) == shown:
                    _progress(started, f"{printable(actor)}: running")
                working = actor
                for step in journal.data["history"][shown:]:
                    details = "".join(f", {k} {printable(step[k])}" for k in
                                      ("stop_savepoint", "restore_path", "new_job_id") if step.get(k))
                    _progress(started, f"{printable(step['actor'])}: {printable(step['phase'])}{details}")
                shown = len(journal.data["history"])
            if ended:
                break
            time.sleep(1.0)
    mine = journal if journal is not None and journal.data.get("run_id") != earlier_run else None
    concluded = Concluded(mine.data["run_id"] if mine else None, "success" if child.returncode == 0 else "failed",
                          planned=mine is not None, outcome=mine.data["outcome"] if mine and mine.finished else None,
                          durations=mine.durations() if mine else {}, alert="\n\n".join(receiver.alerts) or None,
                          notes=receiver.forward_problems)
    if mine is None:
        concluded.notes.append("the run planned nothing (no journal of it)")
    concluded.notes.append(f"Airflow's log of the run: {log}")
    return concluded


def _progress(started: float, text: str) -> None:
    print(f"  [{time.monotonic() - started:5.0f} s] {text}", flush=True)


def _report(concluded: Concluded) -> int:
    """Prints the outcome, the downtime and the alert; the exit status."""
    outcome = concluded.outcome
    down = concluded.durations.get("down")
    figures = f"; down {down:.1f} s (stop request -> every subtask of the job that runs now RUNNING)" \
        if down is not None else ""
    print(f"run {printable(concluded.run_id or '(unknown)')}: {concluded.state}; outcome: "
          f"{printable(outcome or 'none recorded')}{figures}")
    if concluded.alert:
        # Split on newlines only, as the alert's lines are: a carriage return in a name stays in its line, escaped.
        print("alert:\n" + "\n".join(f"  {printable(line)}" for line in concluded.alert.split("\n")))
    else:
        print("alert: none received")
    for note in concluded.notes:
        print(f"note: {printable(note)}")
    if outcome in EXIT_CODES:
        return EXIT_CODES[outcome]
    if outcome is None and concluded.planned is False and concluded.state == "failed":
        return EXIT_UNCHANGED  # it failed before it planned anything: nothing was touched
    print("flinkstate: error: the run's outcome is not known (see the run and its journal)", file=sys.stderr)
    return 1
