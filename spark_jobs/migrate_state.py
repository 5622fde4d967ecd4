"""Spark job: rewrite a savepoint for a new job version, one Spark task per (operator, subtask) keyed stream.

    spark-submit --master local[2] spark_jobs/migrate_state.py SAVEPOINT --schema MANIFEST --output DIR \\
        [--old-schema MANIFEST] [--metadata-version 3|4|5|6] [--compression on|off] [--report DIR] [--json] \\
        [--allow-code[=MODULES|all]]

The same migration as ``flinkstate migrate`` (flinkstate.migration.job.MigrationJob), with the units run as Spark
tasks: each task rebuilds the plan from the same inputs (header reads only), rewrites its stream into the staging
area, and returns its handle, counts and dead letters. The driver then assembles ``_metadata``, re-reads and
verifies the new savepoint against the manifest, and only then publishes it. The result is byte for byte what the
single-process command writes. SAVEPOINT and DIR may be local paths (shared by all executors) or s3:// URIs.
"""

from __future__ import annotations

import argparse
import json
import sys
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # spark_jobs.common, when run as a script

from flinkstate import (
    CodePolicy,
    MigrationJob,
    MigrationPlan,
    Savepoint,
    SavepointOutput,
    SubtaskResult,
    migrate_subtask,
)
from flinkstate.cli.migrate import ALLOW_CODE_HELP, add_allow_code_argument, render_text
from spark_jobs.common import collect_guarded, guarded, run_main, spark_session


def migrate_unit(job: MigrationJob, output: SavepointOutput, unit: tuple[str, int]) -> SubtaskResult:
    """One Spark task: the keyed stream of one (source operator id, subtask)."""
    source = Savepoint.open(job.savepoint)
    return migrate_subtask(source, job.plan(source), unit[0], unit[1], output)


def spark_runner(spark: Any, job: MigrationJob) -> Any:
    def run(source: Savepoint, plan: MigrationPlan, units: list[tuple[str, int]],
            output: SavepointOutput) -> list[SubtaskResult]:
        if not units:
            return []
        task = guarded(partial(migrate_unit, job, output), lambda unit: f"operator {unit[0]}, subtask {unit[1]}")
        return collect_guarded(spark.sparkContext.parallelize(units, len(units)).map(task).collect())

    return run


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="migrate_state", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("savepoint")
    parser.add_argument("--schema", required=True)
    parser.add_argument("--old-schema")
    parser.add_argument("--output", required=True)
    parser.add_argument("--metadata-version", type=int, choices=(3, 4, 5, 6))
    parser.add_argument("--compression", choices=("on", "off"))
    parser.add_argument("--report")
    parser.add_argument("--max-dead-letters", type=int, default=0,
                        help="entries a dead-letter policy may skip before the migration fails (default 0)")
    parser.add_argument("--json", action="store_true")
    add_allow_code_argument(parser, ALLOW_CODE_HELP + " (the tasks follow the driver's policy)")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    job = MigrationJob(args.savepoint, args.schema, args.output, old_schema=args.old_schema,
                       metadata_version=args.metadata_version,
                       compression=None if args.compression is None else args.compression == "on",
                       report_dir=args.report, max_dead_letters=args.max_dead_letters,
                       allow_code=CodePolicy.resolve(args.allow_code))
    spark = spark_session("flinkstate-migrate-state")
    try:
        report = job.run(spark_runner(spark, job))
    finally:
        spark.stop()
    print(json.dumps(report.to_json(), indent=2) if args.json else render_text(report, job.report_path))
    return 0


if __name__ == "__main__":
    run_main("migrate_state", main)
