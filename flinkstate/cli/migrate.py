"""``flinkstate migrate SAVEPOINT --schema MANIFEST --output DIR``: rewrites a savepoint so that the version the
manifest describes restores it as-is. The source is only read; the output appears only once verified. With ``--jar JAR
[--schema OVERLAY] [-- ARGS...]`` the version is the job jar's, completed by the overlay (as ``check --jar``)."""

from __future__ import annotations

import argparse
import json
import logging
import time
from typing import Any

from flinkstate import (
    CodePolicy,
    MigrationJob,
    MigrationPlan,
    Savepoint,
    SavepointOutput,
    SubtaskResult,
    add_allow_code_argument,
    migrate_subtask,
    track,
)
from flinkstate.cli.jar_options import (
    JAR_WARNING,
    add_new_version_arguments,
    add_target_flink_argument,
    new_version_schema,
)
from flinkstate.cli.verbose import log, phase, savepoint_opened


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "migrate", help="rewrite a savepoint for a new job version",
        description="Rewrite SAVEPOINT into a new, self-contained savepoint directory that the job version "
                    "described by MANIFEST restores as-is, applying each state's migration: block. The output is "
                    "written to a staging directory, re-read and checked, and only then renamed to OUTPUT. The "
                    "version is the job jar's (--jar), the manifest's (--schema), or the jar's with the manifest as "
                    f"an overlay (both). Note: {JAR_WARNING}.")
    parser.add_argument("savepoint", metavar="SAVEPOINT", help="savepoint directory or its _metadata file")
    add_new_version_arguments(parser)
    add_target_flink_argument(parser)
    parser.add_argument("--old-schema", metavar="MANIFEST",
                        help="the old version's manifest (names Row fields, which savepoints do not store)")
    parser.add_argument("--output", required=True, metavar="DIR", help="the new savepoint directory (must not exist)")
    parser.add_argument("--metadata-version", type=int, choices=(3, 4, 5, 6),
                        help="_metadata version to write (default: the source's)")
    parser.add_argument("--compression", choices=("on", "off"),
                        help="snappy-compress rewritten keyed state (default: as the source)")
    parser.add_argument("--report", metavar="DIR",
                        help="write report.json and dead-letters.jsonl there (default: OUTPUT.report beside OUTPUT)")
    parser.add_argument("--max-dead-letters", type=int, default=0, metavar="N",
                        help="entries a state with on_error: dead-letter may skip before the migration fails "
                             "(default 0: any failing entry fails the migration and nothing is published)")
    parser.add_argument("--allow-non-restored-state", action="store_true",
                        help="the new job will run with allowNonRestoredState: an operator the manifest lacks is "
                             "copied as it is instead of refused (as check decides with the same flag)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    add_allow_code_argument(parser)
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    job = MigrationJob(args.savepoint, new_version_schema(args), args.output, old_schema=args.old_schema,
                       metadata_version=args.metadata_version,
                       compression=None if args.compression is None else args.compression == "on",
                       report_dir=args.report, max_dead_letters=args.max_dead_letters,
                       allow_code=CodePolicy.resolve(args.allow_code),
                       allow_non_restored_state=args.allow_non_restored_state, target_flink=args.target_flink)
    with phase(f"migrate {args.savepoint} to {args.output}"):
        report = job.run(_logged_units) if log.isEnabledFor(logging.INFO) else job.run()
    for step, seconds in report.seconds.items():
        log.info("%s: %.3f s", step, seconds)
    log.info("report written to %s", job.report_path)
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        print(report.render_text(job.report_path))
    return 0




def _logged_units(source: Savepoint, plan: MigrationPlan, units: list[tuple[str, int]],
                  output: SavepointOutput) -> list[SubtaskResult]:
    """With --verbose: the plan per operator, then each keyed stream as it is rewritten (the state file read, the
    entries, the time), through the same :func:`migrate_subtask` the default runner calls."""
    savepoint_opened(source)
    for op_id, op_plan in sorted(plan.operators.items()):
        target = op_plan.new_uid or op_plan.new_operator_id
        streams = "rewrites its keyed streams" if op_plan.rewrites_stream else "keeps its keyed-state files as they are"
        key = ", keys converted" if op_plan.key_transform is not None else ""
        log.info("plan: %s -> %s (%s): %s%s", source.label(op_plan.source), target, op_id, streams, key)
        for old_id, rewrite in enumerate(op_plan.rewrites):
            if rewrite is None:
                log.info("  state #%d: dropped", old_id)
                continue
            renamed = f" -> {rewrite.new_name}" if rewrite.new_name != rewrite.old_name else ""
            how = ("values converted" if rewrite.transform is not None else
                   "re-encoded" if rewrite.reencode else "bytes copied")
            if rewrite.user_key_transform is not None:
                how += ", user keys converted"
            dead = ", failing entries dead-lettered" if rewrite.dead_letter else ""
            log.info("  %s %s%s: %s%s", rewrite.kind, rewrite.old_name, renamed, how, dead)
    log.info("%d keyed streams to rewrite", len(units))
    results = []
    for op_id, subtask in track(units, total=len(units), description="migrate", unit="keyed streams"):
        start = time.perf_counter()
        handle = plan.operators[op_id].source.subtasks[subtask].managed_keyed_state
        size = getattr(getattr(handle, "delegate", handle), "size", "?")
        result = migrate_subtask(source, plan, op_id, subtask, output)
        read = sum(c.read for c in result.counts.values())
        written = sum(c.written for c in result.counts.values())
        log.info("  %s, subtask %d (%s bytes of keyed state): %d entries read, %d written in %.3f s",
                 source.label(plan.operators[op_id].source), subtask, size, read, written,
                 time.perf_counter() - start)
        results.append(result)
    return results
