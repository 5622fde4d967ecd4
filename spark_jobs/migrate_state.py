"""Spark job: rewrite a savepoint for a new job version, its work split by key-group ranges into Spark tasks.

    spark-submit --master local[2] spark_jobs/migrate_state.py SAVEPOINT --schema MANIFEST --output DIR \\
        [--jar JAR [--entry-class CLASS] [--program-args-json JSON]] \\
        [--old-schema MANIFEST] [--metadata-version 3|4|5|6] [--compression on|off] [--report DIR] [--json] \\
        [--units N] [--allow-code[=MODULES|all]] [--recheck-report-dir DIR [--recheck-exit-code]] \\
        [--fence-journal URI --fence-run JSON]
    spark-submit ... migrate_state.py --await-handoff DIR --handoff-token TOKEN [--handoff-timeout SECONDS] \\
        [--in-process-max-bytes N] --fence-journal URI --fence-run JSON --schema MANIFEST --output DIR ...

The new version's schema is ``--schema``'s manifest, or ``--jar``'s completed by ``--schema`` as an overlay, as
``flinkstate migrate --jar`` takes it (its ``main()`` runs in a JVM of its own on the driver, before Spark starts;
the upgrade DAG passes the schema it resolved before the stop, so no JVM runs while the job is down). The same
migration as ``flinkstate migrate`` (flinkstate.migration.job.MigrationJob), run as
:mod:`flinkstate.migration.units` describes: every rewritten keyed stream is cut into key-group ranges of about
equal size (``--units``, default three per core: a parallelism-1 savepoint uses every executor too); each Spark task
rebuilds the plan from the same inputs (header reads only, once per Python worker), rewrites its range's blocks into
a part file, and returns the part's offsets, counts and dead letters. The driver concatenates each subtask's parts
into its stream and assembles ``_metadata``; the Spark tasks then verify the new savepoint against the source range
by range, the driver the metadata level and that every range verified; only then is it published. The result is
byte for byte what the single-process command writes. SAVEPOINT and DIR may be local paths (shared by all executors)
or s3:// URIs.

With ``--recheck-report-dir``, the same application then re-checks what it published, as the upgrade pipeline's
``recheck`` step needs it while the job is down (one spark-submit, one JVM and Python workers start, instead of two):
exactly what ``check_compatibility.py OUTPUT --schema MANIFEST --dry-run never --exit-code --verify-against
SAVEPOINT --verify-old-schema OLD`` does (the published savepoint checked against the new manifest, then every entry
compared with the source's migration by the independent verifier), in the same SparkSession. It writes that job's
``check-report.json`` / ``.md`` / ``.html`` to DIR; a refusal by the verifier is written there too
(``verification_error``, one line). The exit status is 0 once the savepoint is published and the re-check's report
written (whoever runs the step judges the report, as the DAG's ``recheck`` task does); with ``--recheck-exit-code``,
the re-check's status as ``check_compatibility.py --exit-code``: 0 / 3 / 4, or 1 with the verifier's one line.

With ``--await-handoff`` (the upgrade DAG starts it before the stop, on the preflight savepoint's size), the
application learns the stop savepoint's real size only when it is handed over: one of at most
``--in-process-max-bytes`` (default: the DAG's ``in_process_max_bytes``, 256 MiB) is migrated and re-checked by the
driver, task after task, without Spark stages (``flinkstate.fits_one_process``: each stage would cost more to
schedule than the work it holds); a larger one by Spark tasks. The output is the same byte for byte.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # spark_jobs.common, when run as a script

from flinkstate import (
    ALLOW_CODE_HELP,
    HANDOFF_FILE,
    IN_PROCESS_MAX_BYTES,
    AppRef,
    CodePolicy,
    FlinkStateError,
    HandoffAbandoned,
    MigrationJob,
    add_allow_code_argument,
    fits_one_process,
    refuse_output_in_source,
)
from spark_jobs.common import (
    Recheck,
    add_in_process_argument,
    add_new_version_arguments,
    failure_line,
    new_version_schema,
    recheck,
    run_main,
    shared,
    spark_map,
    start_session,
    stop_session,
    unit_count,
    write_report_files,
    yield_cpu,
)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="migrate_state", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("savepoint", nargs="?", help="the savepoint to migrate (or --await-handoff)")
    add_new_version_arguments(parser)
    parser.add_argument("--old-schema")
    parser.add_argument("--output", required=True)
    parser.add_argument("--metadata-version", type=int, choices=(3, 4, 5, 6))
    parser.add_argument("--compression", choices=("on", "off"))
    parser.add_argument("--report")
    parser.add_argument("--max-dead-letters", type=int, default=0,
                        help="entries a dead-letter policy may skip before the migration fails (default 0)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--allow-non-restored-state", nargs="?", const="true", default="false",
                        choices=("true", "false"),
                        help="the new job runs with allowNonRestoredState: an operator the manifest lacks is copied, "
                             "not refused (as check_compatibility.py decides with the same flag)")
    parser.add_argument("--fence-journal", metavar="URI",
                        help="the upgrade run's journal: it must still be the run's (--fence-run), open, just "
                             "before the publish, or nothing is published (a run taken over publishes nothing)")
    parser.add_argument("--fence-run", metavar="JSON",
                        help='with --fence-journal: the run, as {"dag_id": ..., "run_id": ...}')
    parser.add_argument("--units", type=int, help="Spark tasks to split the work into (default: three per core)")
    add_in_process_argument(parser)
    add_allow_code_argument(parser, ALLOW_CODE_HELP + " (the tasks follow the driver's policy)")
    parser.add_argument("--recheck-report-dir", metavar="DIR",
                        help="after publishing, re-check the output against the new manifest and the source "
                             "(check_compatibility.py --verify-against) in this application; its report goes to DIR")
    parser.add_argument("--recheck-exit-code", action="store_true",
                        help="with --recheck-report-dir: exit with the re-check's status (0 / 3 / 4, 1 when the "
                             "verifier refuses the output)")
    parser.add_argument("--await-handoff", metavar="DIR",
                        help="instead of SAVEPOINT: build the session, write DIR/ready.json, then wait for the run "
                             "to hand over its stop savepoint in DIR/handoff.json (needs --handoff-token and the "
                             "fence: --fence-journal, --fence-run)")
    parser.add_argument("--handoff-token", metavar="TOKEN", help="with --await-handoff: this launch's token")
    parser.add_argument("--handoff-timeout", type=float, default=900, metavar="SECONDS",
                        help="with --await-handoff: the longest wait for the stop savepoint (default 900)")
    parser.add_argument("--in-process-max-bytes", type=int, default=IN_PROCESS_MAX_BYTES, metavar="N",
                        help="with --await-handoff: a stop savepoint of at most N bytes of files is migrated by the "
                             "driver, task after task, without Spark stages (default 256 MiB; 0: always Spark tasks)")
    args = parser.parse_args(argv)
    if bool(args.savepoint) == bool(args.await_handoff):
        parser.error("give SAVEPOINT or --await-handoff, not both")
    if args.await_handoff and not (args.handoff_token and args.fence_journal):
        parser.error("--await-handoff needs --handoff-token, --fence-journal and --fence-run")
    if args.recheck_exit_code and not args.recheck_report_dir:
        parser.error("--recheck-exit-code needs --recheck-report-dir")
    if bool(args.fence_journal) != bool(args.fence_run):
        parser.error("--fence-journal and --fence-run go together")
    if args.fence_run:
        try:
            args.fence_run = json.loads(args.fence_run)
        except ValueError:
            parser.error(f"--fence-run: not JSON: {args.fence_run[:200]!r}")
        if not isinstance(args.fence_run, dict) or not {"dag_id", "run_id"} <= set(args.fence_run):
            parser.error("--fence-run: expected a JSON object with dag_id and run_id")
    args.schema = new_version_schema(parser, args)
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if not args.await_handoff:
        job = prepare(args)  # a bad argument or output is refused before any JVM starts
        spark = start_session("flinkstate-migrate-state", args.in_process)
        try:
            return migrate(args, job, spark)
        finally:
            stop_session(spark)
    app = AppRef(args.await_handoff, {"dag_id": args.fence_run["dag_id"], "run_id": args.fence_run["run_id"]},
                 args.handoff_token)
    try:
        return await_and_migrate(args, app)
    except Exception as exc:  # its one line for the DAG's migrate task too, then as every job ends
        app.record_result("failed", failure_line(exc), 1)
        raise


def await_and_migrate(args: argparse.Namespace, app: AppRef) -> int:
    """The pre-started application: the session first, then the wait for the stop savepoint, then the migration."""
    started = time.monotonic()
    spark = start_session("flinkstate-migrate-state", args.in_process)
    try:
        app.say_ready(time.monotonic() - started)
        print(f"migrate_state: ready after {time.monotonic() - started:.1f} s; waiting for the stop savepoint in "
              f"{app.path(HANDOFF_FILE)} (at most {args.handoff_timeout:.0f} s)", flush=True)
        waited = time.monotonic()
        try:
            args.savepoint = app.await_stop_savepoint(args.fence_journal, args.handoff_timeout)
        except HandoffAbandoned as exc:
            line = f"migrated nothing: {exc}"
            print(f"migrate_state: {line}", flush=True)
            app.record_result("abandoned", line, 0)
            return 0
        print(f"migrate_state: the stop savepoint {args.savepoint} was handed over after "
              f"{time.monotonic() - waited:.1f} s", flush=True)
        job = prepare(args)
        in_driver, why = fits_one_process(args.savepoint, args.in_process_max_bytes)
        print(f"migrate_state: {'the driver migrates it, task after task' if in_driver else 'Spark tasks migrate it'}"
              f": {why}", flush=True)
        status = migrate(args, job, None if in_driver else spark)
    except BaseException:
        stop_session(spark)
        raise
    # The result before the session stops (a second or more): the run waits for it, not for this process's end.
    yield_cpu(spark)  # the session's stop must not slow the new job's restore, which starts with the result
    app.record_result("published", f"published {args.output} (exit {status})", status)
    try:
        stop_session(spark)
    except Exception as exc:  # published and recorded: a session that fails to stop changes nothing of it
        print(f"migrate_state: the Spark session did not stop cleanly: {failure_line(exc)}", file=sys.stderr)
    return status


def prepare(args: argparse.Namespace) -> MigrationJob:
    """The migration of ``args.savepoint`` planned in the driver: paths made absolute, outputs inside the source
    refused, the plan built (a bad schema or savepoint refused) before any Spark work."""
    for name in ("savepoint", "old_schema", "output", "report", "recheck_report_dir"):
        setattr(args, name, shared(getattr(args, name)))
    if args.recheck_report_dir:
        refuse_output_in_source(args.recheck_report_dir, args.savepoint, "--recheck-report-dir",
                                report_folder=True)
    return MigrationJob(args.savepoint, args.schema, args.output, old_schema=args.old_schema,
                        metadata_version=args.metadata_version,
                        compression=None if args.compression is None else args.compression == "on",
                        report_dir=args.report, max_dead_letters=args.max_dead_letters,
                        allow_code=CodePolicy.resolve(args.allow_code),
                        allow_non_restored_state=args.allow_non_restored_state == "true",
                        fence=(args.fence_journal, args.fence_run) if args.fence_journal else None)


def migrate(args: argparse.Namespace, job: MigrationJob, spark: object | None) -> int:
    policy = job.allow_code
    checked: Recheck | None = None
    report = job.run_in_units(spark_map(spark), unit_count(spark, args.units))
    print(json.dumps(report.to_json(), indent=2) if args.json else report.render_text(job.report_path))
    if args.recheck_report_dir:
        assert args.output is not None  # made absolute by shared(), never None: --output is required
        checked = recheck(spark, args.output, args.schema, args.savepoint, args.old_schema, policy, args.units,
                          job.now_ms, job.allow_non_restored_state)
        write_report_files(args.recheck_report_dir, checked.body, checked.markdown)
    if checked is None:
        return 0
    if not args.json:
        print(checked.markdown)
    if checked.error is not None and args.recheck_exit_code:
        raise FlinkStateError(f"re-check: {checked.error}")  # one line and status 1, as check_compatibility
    if checked.error is not None:
        print(f"migrate_state: the re-check REFUSED the published savepoint: {checked.error} (report: "
              f"{args.recheck_report_dir})", file=sys.stderr)
    return checked.exit_code if args.recheck_exit_code else 0


if __name__ == "__main__":
    run_main("migrate_state", main)
