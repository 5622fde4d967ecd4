"""Spark job: rewrite a savepoint for a new job version, its work split by key-group ranges into Spark tasks.

    spark-submit --master local[2] spark_jobs/migrate_state.py SAVEPOINT --schema MANIFEST --output DIR \\
        [--old-schema MANIFEST] [--metadata-version 3|4|5|6] [--compression on|off] [--report DIR] [--json] \\
        [--units N] [--allow-code[=MODULES|all]]

The same migration as ``flinkstate migrate`` (flinkstate.migration.job.MigrationJob), run as
:mod:`flinkstate.migration.units` describes: every rewritten keyed stream is cut into key-group ranges of about
equal size (``--units``, default three per core: a parallelism-1 savepoint uses every executor too); each Spark task
rebuilds the plan from the same inputs (header reads only, once per Python worker), rewrites its range's blocks into
a part file, and returns the part's offsets, counts and dead letters. The driver concatenates each subtask's parts
into its stream and assembles ``_metadata``; the Spark tasks then verify the new savepoint against the source range
by range, the driver the metadata level and that every range verified; only then is it published. The result is
byte for byte what the single-process command writes. SAVEPOINT and DIR may be local paths (shared by all executors)
or s3:// URIs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # spark_jobs.common, when run as a script

from flinkstate import ALLOW_CODE_HELP, CodePolicy, MigrationJob, add_allow_code_argument
from spark_jobs.common import run_main, shared, spark_map, spark_session, unit_count


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
    parser.add_argument("--units", type=int, help="Spark tasks to split the work into (default: three per core)")
    add_allow_code_argument(parser, ALLOW_CODE_HELP + " (the tasks follow the driver's policy)")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    for name in ("savepoint", "schema", "old_schema", "output", "report"):
        setattr(args, name, shared(getattr(args, name)))
    job = MigrationJob(args.savepoint, args.schema, args.output, old_schema=args.old_schema,
                       metadata_version=args.metadata_version,
                       compression=None if args.compression is None else args.compression == "on",
                       report_dir=args.report, max_dead_letters=args.max_dead_letters,
                       allow_code=CodePolicy.resolve(args.allow_code))
    spark = spark_session("flinkstate-migrate-state")
    try:
        report = job.run_in_units(spark_map(spark), unit_count(spark, args.units))
    finally:
        spark.stop()
    print(json.dumps(report.to_json(), indent=2) if args.json else report.render_text(job.report_path))
    return 0


if __name__ == "__main__":
    run_main("migrate_state", main)
