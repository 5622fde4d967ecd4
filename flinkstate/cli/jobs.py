"""``flinkstate jobs``, ``flinkstate jobs submit JAR`` and ``flinkstate savepoint JOB [--stop]``: a Flink cluster's
jobs, a job started from its jar (and a savepoint), and a canonical savepoint of one (optionally stopping it), over
the REST API with the same client the Airflow hook uses.

Where Flink is: ``--flink-url``, else ``$FLINKSTATE_FLINK_URL``, else the Airflow connection the hook uses
(``$AIRFLOW_CONN_FLINK_DEFAULT``, in its JSON or URI form, read without Airflow), else ``http://127.0.0.1:8081``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from typing import Any
from urllib.parse import urlsplit

from flinkstate import FlinkRestClient, FlinkStateError, printable
from flinkstate.cli.jar_options import take_program_args

DEFAULT_FLINK_URL = "http://127.0.0.1:8081"
_JOB_ID = re.compile(r"^[0-9a-fA-F]{32}$")


def flink_url(explicit: str | None = None) -> str:
    """The REST URL, from the option, the environment, or the Airflow connection ``flink_default``."""
    if explicit:
        return explicit.rstrip("/")
    if os.environ.get("FLINKSTATE_FLINK_URL"):
        return os.environ["FLINKSTATE_FLINK_URL"].rstrip("/")
    conn = os.environ.get("AIRFLOW_CONN_FLINK_DEFAULT")
    if conn:
        return _url_of_airflow_connection(conn)
    return DEFAULT_FLINK_URL


def _url_of_airflow_connection(text: str) -> str:
    """What :class:`FlinkHook.base_url` makes of the connection: schema (http/https), host and port."""
    text = text.strip()
    if text.startswith("{"):
        try:
            conn = json.loads(text)
        except json.JSONDecodeError:
            raise FlinkStateError("AIRFLOW_CONN_FLINK_DEFAULT: neither JSON nor a URI") from None
        host = str(conn.get("host") or "127.0.0.1")
        if "://" in host:
            return host.rstrip("/")
        scheme = conn.get("schema") or "http"
        return f"{scheme}://{host}" + (f":{conn['port']}" if conn.get("port") else "")
    parts = urlsplit(text)  # e.g. http://127.0.0.1:8081 or http://host:8081/https (schema in the path)
    scheme = parts.path.strip("/") or "http"
    return f"{scheme}://{parts.hostname or '127.0.0.1'}" + (f":{parts.port}" if parts.port else "")


def register(subparsers: Any) -> None:
    jobs = subparsers.add_parser("jobs", help="list a Flink cluster's jobs",
                                 description="List the jobs of a Flink cluster (id, state, name).")
    _flink_options(jobs)
    jobs.add_argument("--all", action="store_true", help="also finished, canceled and failed jobs")
    jobs.add_argument("--json", action="store_true", help="print JSON instead of text")
    jobs.set_defaults(handler=_run_jobs)
    actions = jobs.add_subparsers(dest="jobs_action", metavar="{submit}")
    submit = actions.add_parser(
        "submit", help="submit a job jar (optionally from a savepoint), as 'flink run' does",
        description="Upload a job jar to the cluster and run it, optionally restoring a savepoint (as 'flink run "
                    "[-c CLASS] [-p N] [-s SAVEPOINT] [--allowNonRestoredState] JAR ARGS' does), wait until every "
                    "task is RUNNING (its state restored), and print the job id. The job's own arguments follow "
                    "'--'. A job that fails while starting is reported with Flink's error, in one line.")
    _flink_options(submit)
    submit.add_argument("jar", metavar="JAR")
    submit.add_argument("--entry-class", "-c", metavar="CLASS", help="the class whose main() builds the job "
                                                                    "(default: the jar's Main-Class)")
    submit.add_argument("--parallelism", "-p", type=int, metavar="N", help="the job's default parallelism")
    submit.add_argument("--from-savepoint", "-s", metavar="PATH", help="restore this savepoint (a path the "
                                                                       "JobManager can read)")
    submit.add_argument("--allow-non-restored-state", action="store_true",
                        help="with --from-savepoint: skip state no operator of the job claims")
    submit.add_argument("--restore-mode", choices=("CLAIM", "NO_CLAIM", "LEGACY"),
                        help="with --from-savepoint: Flink's restore mode (default: Flink's, NO_CLAIM)")
    submit.add_argument("--detached", action="store_true",
                        help="print the job id at once, without waiting for every task to run")
    submit.add_argument("--timeout", type=float, default=300.0, metavar="SECONDS",
                        help="how long to wait for every task to run (default %(default)s)")
    submit.usage = "flinkstate jobs submit [options] JAR [-- ARGS]"
    take_program_args(submit)  # what follows '--': the job's own arguments
    submit.set_defaults(handler=_run_submit)

    savepoint = subparsers.add_parser(
        "savepoint", help="take a canonical savepoint of a running job (--stop: and stop it)",
        description="Take a canonical savepoint of a running job, named by its 32-hex id or by its name (the one "
                    "running job of that name), and print the savepoint's location. With --stop the job is stopped "
                    "with the savepoint (stop-with-savepoint); a savepoint Flink completed before it failed to stop "
                    "the job is still returned.")
    _flink_options(savepoint)
    savepoint.add_argument("job", metavar="JOB_ID_OR_NAME")
    savepoint.add_argument("--target-directory", metavar="DIR", required=True,
                           help="where Flink writes the savepoint (a path Flink's JobManager can write)")
    savepoint.add_argument("--stop", action="store_true", help="stop the job with the savepoint")
    savepoint.add_argument("--drain", action="store_true", help="with --stop: drain the pipeline first (MAX_WATERMARK)")
    savepoint.add_argument("--timeout", type=float, default=300.0, metavar="SECONDS",
                           help="how long to wait for the savepoint (default %(default)s)")
    savepoint.set_defaults(handler=_run_savepoint)


def _flink_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--flink-url", metavar="URL",
                        help="the JobManager's REST URL (default: $FLINKSTATE_FLINK_URL, the Airflow connection "
                             f"$AIRFLOW_CONN_FLINK_DEFAULT, or {DEFAULT_FLINK_URL})")


def _client(args: argparse.Namespace) -> FlinkRestClient:
    return FlinkRestClient(flink_url(args.flink_url), timeout=30)


def _run_jobs(args: argparse.Namespace) -> int:
    jobs = _client(args).list_jobs()
    if not args.all:
        jobs = [j for j in jobs if j.get("state") not in ("FINISHED", "CANCELED", "FAILED")]
    jobs.sort(key=lambda j: j.get("start-time", 0), reverse=True)
    if args.json:
        print(json.dumps(jobs, indent=2))
        return 0
    if not jobs:
        print("no jobs" if args.all else "no running jobs (--all lists finished ones too)")
    for job in jobs:
        print(f"{job.get('jid')}  {job.get('state', '?'):<10}  {printable(job.get('name', ''))}")
    return 0


def _run_submit(args: argparse.Namespace) -> int:
    if (args.allow_non_restored_state or args.restore_mode) and not args.from_savepoint:
        raise FlinkStateError("--allow-non-restored-state and --restore-mode go with --from-savepoint")
    client = _client(args)
    job_id = client.submit_jar(args.jar, entry_class=args.entry_class, program_args=args.program_args,
                               parallelism=args.parallelism, savepoint_path=args.from_savepoint,
                               allow_non_restored_state=args.allow_non_restored_state,
                               restore_mode=args.restore_mode)
    if not args.detached:
        client.wait_until_running(job_id, timeout=args.timeout)
    print(job_id)
    return 0


def _run_savepoint(args: argparse.Namespace) -> int:
    client = _client(args)
    job_id = args.job.lower() if _JOB_ID.match(args.job) else client.find_job(args.job)
    if args.stop:
        location = client.stop_job_with_savepoint(job_id, args.target_directory, drain=args.drain,
                                                  timeout=args.timeout)
    else:
        location = client.savepoint(job_id, args.target_directory, timeout=args.timeout)
    print(location)
    return 0
