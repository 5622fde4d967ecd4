"""Spark job: the compatibility check of a savepoint against the new version's manifest, plus a data-level dry run.

    spark-submit --master local[2] spark_jobs/check_compatibility.py SAVEPOINT --schema MANIFEST \\
        --report-dir DIR_OR_S3 [--previous MANIFEST] [--backend hashmap|rocksdb] \\
        [--allow-non-restored-state [true|false]] [--dry-run auto|always|never] [--examples N] [--exit-code]

1. The verdict (driver, header-only: its time does not depend on the number of entries): flinkstate's check, with
   declared migrations judged by flinkstate's own migration planner.
2. The dry run (Spark tasks, one per key-group range of each keyed stream the migration touches): every entry of
   the affected states is decoded with the old serializers and the planned migration applied in memory; failures
   are counted and the first few kept as examples. Nothing is written but the report. ``auto`` runs it when a
   migration is required and possible. A failure in a state whose policy is ``fail`` turns the outcome into
   ``incompatible``: the migration would not get through.

Writes ``check-report.json`` (the check's report, ``report_version`` 1, with a ``dry_run`` section) and
``check-report.md`` to the report folder (local or s3://), and prints the Markdown. Exits 0 once the report is
written (the DAG branches on its ``outcome``); with ``--exit-code``, 0 / 3 / 4 as ``flinkstate check``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # spark_jobs.common, when run as a script

from flinkstate.migration.engine import DryRunResult, StateCount, dry_run_subtask, split_key_groups
from flinkstate.migration.job import MigrationJob
from flinkstate.migration.manifest_targets import plan_state_migration
from flinkstate.report import Report
from flinkstate.resolution import BACKENDS, check
from flinkstate.savepoint import Savepoint
from flinkstate.storage import write_file
from spark_jobs.common import run_main, spark_session

REPORT_JSON = "check-report.json"
REPORT_MARKDOWN = "check-report.md"


def dry_run_unit(job: MigrationJob, examples: int, unit: tuple[str, int, int, int]) -> DryRunResult:
    """One Spark task: one key-group range of one (operator, subtask) stream."""
    from flinkstate.binary import KeyGroupRange

    operator_id, subtask, start, end = unit
    source = Savepoint.open(job.savepoint)
    return dry_run_subtask(source, job.plan(source), operator_id, subtask, KeyGroupRange(start, end), examples)


def dry_run(spark: Any, job: MigrationJob, examples: int) -> dict[str, Any]:
    started = time.perf_counter()
    source = Savepoint.open(job.savepoint)
    plan = job.plan(source)
    units: list[tuple[str, int, int, int]] = []
    slices = max(2, spark.sparkContext.defaultParallelism * 2)
    for operator_id, subtask in plan.units():
        stream = dict(source.keyed_streams(plan.operators[operator_id].source))[subtask]
        for piece in split_key_groups(stream.key_group_range, max(1, slices // max(1, len(plan.units())))):
            units.append((operator_id, subtask, piece.start, piece.end))
    results: list[DryRunResult] = []
    if units:
        results = spark.sparkContext.parallelize(units, len(units)).map(partial(dry_run_unit, job, examples)).collect()
    totals: dict[str, StateCount] = {}
    found: list[dict[str, Any]] = []
    for result in results:
        label = plan.operators[result.operator_id].new_uid or plan.operators[result.operator_id].new_operator_id
        for name, count in result.counts.items():
            total = totals.setdefault(f"{label}/{name}", StateCount())
            total.read += count.read
            total.written += count.written
            total.dead_lettered += count.dead_lettered
        found += result.examples
    return {
        "tasks": len(units),
        "entries": sum(c.read for c in totals.values()),
        "failures": sum(c.dead_lettered for c in totals.values()),
        "failed_under_fail_policy": any(r.failed_under_fail_policy for r in results),
        "states": {name: {"read": c.read, "converted": c.written, "failed": c.dead_lettered}
                   for name, c in sorted(totals.items())},
        "examples": found[:examples],
        "seconds": round(time.perf_counter() - started, 3),
    }


def render_dry_run(section: dict[str, Any]) -> str:
    if not section.get("ran"):
        return f"\n## Dry run\n\nNot run: {section['reason']}.\n"
    lines = ["", "## Dry run", "",
             f"{section['entries']} entries decoded and migrated in memory by {section['tasks']} Spark tasks in "
             f"{section['seconds']} s; {section['failures']} failed.", "",
             "| state | read | converted | failed |", "|---|---|---|---|"]
    lines += [f"| {name} | {c['read']} | {c['converted']} | {c['failed']} |" for name, c in section["states"].items()]
    if section["examples"]:
        lines += ["", "Failing entries (first few):", ""]
        lines += [f"- `{e['operator']}/{e['state']}` key `{json.dumps(e['key'])}` ({e.get('on_error')}): "
                  f"{e['error']}" for e in section["examples"]]
    return "\n".join(lines) + "\n"


def outcome_after_dry_run(report: Report, section: dict[str, Any]) -> str:
    if report.outcome == "migrate" and section.get("failed_under_fail_policy"):
        return "incompatible"
    return report.outcome


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="check_compatibility", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("savepoint")
    parser.add_argument("--schema", required=True)
    parser.add_argument("--previous")
    parser.add_argument("--report-dir", required=True)
    parser.add_argument("--backend", choices=BACKENDS)
    parser.add_argument("--allow-non-restored-state", nargs="?", const="true", default="false",
                        choices=("true", "false"), help="the new job runs with allowNonRestoredState")
    parser.add_argument("--dry-run", choices=("auto", "always", "never"), default="auto")
    parser.add_argument("--examples", type=int, default=5)
    parser.add_argument("--exit-code", action="store_true")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    report = check(args.savepoint, args.schema, previous=args.previous, migration_planner=plan_state_migration,
                   backend=args.backend, allow_non_restored_state=args.allow_non_restored_state == "true")
    wanted = args.dry_run == "always" or (args.dry_run == "auto" and report.outcome == "migrate")
    section: dict[str, Any] = {"ran": False, "reason": f"the outcome is '{report.outcome}'"}
    if args.dry_run == "never":
        section["reason"] = "--dry-run never"
    elif wanted and report.outcome != "incompatible":
        spark = spark_session("flinkstate-check-compatibility")
        try:
            job = MigrationJob(args.savepoint, args.schema, output="", old_schema=args.previous)
            section = {"ran": True, **dry_run(spark, job, args.examples)}
        finally:
            spark.stop()
    outcome = outcome_after_dry_run(report, section)
    body = report.to_json()
    body.update({"dry_run": section, "outcome": outcome,
                 "exit_code": {"restore": 0, "migrate": 3, "incompatible": 4}[outcome]})
    markdown = report.render_markdown() + render_dry_run(section)
    if outcome != report.outcome:
        markdown = markdown.replace(markdown.splitlines()[0], "# Compatibility check: INCOMPATIBLE (the dry run "
                                    "failed under the fail policy)", 1)
    folder = args.report_dir.rstrip("/")
    write_file(f"{folder}/{REPORT_JSON}", (json.dumps(body, indent=2) + "\n").encode())
    write_file(f"{folder}/{REPORT_MARKDOWN}", markdown.encode())
    print(markdown)
    return body["exit_code"] if args.exit_code else 0


if __name__ == "__main__":
    run_main("check_compatibility", main)
