"""Spark job: the compatibility check of a savepoint against the new version's manifest, plus a data-level dry run.

    spark-submit --master local[2] spark_jobs/check_compatibility.py SAVEPOINT --schema MANIFEST \\
        --report-dir DIR_OR_S3 [--previous MANIFEST] [--backend hashmap|rocksdb] \\
        [--jar JAR [--entry-class CLASS] [--program-args-json JSON]] \\
        [--allow-non-restored-state [true|false]] [--dry-run auto|always|never] [--examples N] [--exit-code] \\
        [--allow-code[=MODULES|all]]

The new version's schema is ``--schema``'s manifest, or ``--jar``'s (what its operators register when they open:
its ``main()`` runs in a JVM of its own on the driver, cached by the jar's hash), completed by ``--schema`` as an
overlay when both are given, exactly as ``flinkstate check --jar`` takes it; a manifest that contradicts the jar is
refused in one line before anything else runs.

1. The verdict (driver, header-only: its time does not depend on the number of entries): flinkstate's check, with
   declared migrations judged by flinkstate's own migration planner.
2. The dry run (Spark tasks, one per key-group range of each keyed stream the migration touches): every entry of
   the affected states is decoded with the old serializers and the planned migration applied in memory; failures
   are counted and the first few kept as examples. Nothing is written but the report. ``auto`` runs it when a
   migration is required and possible. A failure in a state whose policy is ``fail`` turns the outcome into
   ``incompatible``: the migration would not get through.

Writes ``check-report.json`` (the check's report, ``report_version`` 1, with a ``dry_run`` section),
``check-report.md`` and ``check-report.html`` (the page rendered from the JSON) to the report folder (local or
s3://), and prints the Markdown. Exits 0 once the report is written (the DAG branches on its ``outcome``); with
``--exit-code``, 0 / 3 / 4 as ``flinkstate check``.
"""

from __future__ import annotations

import argparse
import sys
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # spark_jobs.common, when run as a script

from flinkstate import (
    ALLOW_CODE_HELP,
    BACKENDS,
    CodePolicy,
    DryRunResult,
    DryRunUnit,
    MigrationJob,
    Savepoint,
    add_allow_code_argument,
    check,
    refuse_output_in_source,
    run_dry_run,
    run_dry_run_unit,
)
from spark_jobs.common import (
    REPORT_JSON,
    REPORT_MARKDOWN,
    add_in_process_argument,
    add_new_version_arguments,
    new_version_schema,
    report_files,
    run_main,
    runner_name,
    shared,
    spark_map,
    start_session,
    stop_session,
    verify_against,
    write_report_files,
)

__all__ = ["REPORT_JSON", "REPORT_MARKDOWN", "dry_run", "main", "verify_against"]


def dry_run_unit(job: MigrationJob, examples: int, unit: DryRunUnit) -> DryRunResult:
    """One Spark task: one key-group range of one (operator, subtask) stream."""
    source = Savepoint.open(job.savepoint)
    return run_dry_run_unit(source, job.plan(source), unit, examples)


def dry_run(spark: Any | None, job: MigrationJob, examples: int, max_dead_letters: int = 0) -> dict[str, Any]:
    """flinkstate's dry run (:mod:`flinkstate.migration.dry_run`) with its units as Spark tasks (None: in this
    process, ``--in-process``)."""
    source = Savepoint.open(job.savepoint)
    plan = job.plan(source)

    mapped = spark_map(spark, lambda unit: f"dry run of operator {unit[0]}, subtask {unit[1]}, key groups "
                                           f"{unit[2]}-{unit[3]}")

    def on_spark(units: list[DryRunUnit]) -> list[DryRunResult]:
        return mapped(partial(dry_run_unit, job, examples), units)

    workers = spark.sparkContext.defaultParallelism if spark is not None else 1
    return run_dry_run(source, plan, examples=examples, max_dead_letters=max_dead_letters, map_units=on_spark,
                       slices=max(2, workers * 2))


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="check_compatibility", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("savepoint")
    add_new_version_arguments(parser)
    parser.add_argument("--previous")
    parser.add_argument("--report-dir", required=True)
    parser.add_argument("--backend", choices=BACKENDS)
    parser.add_argument("--allow-non-restored-state", nargs="?", const="true", default="false",
                        choices=("true", "false"), help="the new job runs with allowNonRestoredState")
    parser.add_argument("--dry-run", choices=("auto", "always", "never"), default="auto")
    parser.add_argument("--examples", type=int, default=5)
    parser.add_argument("--max-dead-letters", type=int, default=0,
                        help="entries a dead-letter policy may skip before the migration counts as failing")
    parser.add_argument("--verify-against", metavar="SOURCE_SAVEPOINT",
                        help="SAVEPOINT is a migration of SOURCE_SAVEPOINT: compare every entry with it (the "
                             "independent verifier); a difference fails")
    parser.add_argument("--verify-old-schema", metavar="MANIFEST",
                        help="with --verify-against: the manifest of the version that wrote SOURCE_SAVEPOINT")
    parser.add_argument("--exit-code", action="store_true")
    parser.add_argument("--units", type=int, help="Spark tasks for --verify-against (default: three per core)")
    add_in_process_argument(parser)
    add_allow_code_argument(parser, ALLOW_CODE_HELP + " (for the dry run and --verify-against, which run the "
                                    "migration; the verdict imports nothing)")
    args = parser.parse_args(argv)
    args.schema = new_version_schema(parser, args)
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    for name in ("savepoint", "previous", "verify_against", "verify_old_schema"):
        setattr(args, name, shared(getattr(args, name)))
    refuse_output_in_source(args.report_dir, args.savepoint, "--report-dir", report_folder=True)
    policy = CodePolicy.resolve(args.allow_code)
    # With --verify-against, SAVEPOINT is a migration's output for SCHEMA (its renames are done).
    report = check(args.savepoint, args.schema, previous=args.previous, backend=args.backend,
                   allow_non_restored_state=args.allow_non_restored_state == "true",
                   migrated=args.verify_against is not None)
    verification: list[str] | None = None
    wanted = args.dry_run == "always" or (args.dry_run == "auto" and report.outcome == "migrate")
    section: dict[str, Any] = {"ran": False, "reason": f"the outcome is '{report.outcome}'"}
    dry = args.dry_run != "never" and wanted and report.outcome != "incompatible"
    if args.dry_run == "never":
        section["reason"] = "--dry-run never"
    runner = "one process" if args.in_process else "Spark"
    if dry or args.verify_against:
        spark = start_session("flinkstate-check-compatibility", args.in_process)
        runner = runner_name(spark)
        try:
            if args.verify_against:
                verification = verify_against(spark, args.verify_against, args.savepoint, args.schema,
                                              args.verify_old_schema, policy, args.units)
            if dry:
                job = MigrationJob(args.savepoint, args.schema, output="", old_schema=args.previous,
                                   max_dead_letters=args.max_dead_letters, allow_code=policy)
                section = dry_run(spark, job, args.examples, args.max_dead_letters)
        finally:
            stop_session(spark)
    report.dry_run, report.dry_run_runner = section, runner
    body, markdown = report_files(report, verification,
                                  verified_against=args.verify_against if verification is not None else None)
    write_report_files(args.report_dir, body, markdown)
    print(markdown)
    return body["exit_code"] if args.exit_code else 0


if __name__ == "__main__":
    run_main("check_compatibility", main)
