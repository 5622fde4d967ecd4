"""``flinkstate check SAVEPOINT --schema MANIFEST [--format markdown|json|html]``: what Flink will do with the
savepoint's state when the version MANIFEST describes restores it, and why. ``check SAVEPOINT --jar JAR [--schema
OVERLAY] [-- ARGS...]``: the version is the job jar's (its ``main()`` runs in a JVM of its own), completed by the
overlay.

Exit status: 0 restorable as is or reconfigured; 3 migration required and possible (the plan ``flinkstate migrate``
runs, and its output restores as is); 4 incompatible (``migrate`` refuses); 1 error; 2 usage.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from flinkstate import (
    BACKENDS,
    CodePolicy,
    CodeRefused,
    FlinkStateError,
    Manifest,
    MigrationJob,
    Report,
    Savepoint,
    TrialRestore,
    add_allow_code_argument,
    apply_trial,
    check,
    printable,
    refuse_output_in_source,
    render_html,
    run_dry_run,
    trial_restore,
    write_file,
)
from flinkstate.cli.jar_options import (
    JAR_WARNING,
    add_new_version_arguments,
    add_target_flink_argument,
    new_version_schema,
    schema_name,
)
from flinkstate.cli.verbose import log, phase


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("check", help="check a savepoint against the new version's state schema",
                                   description="Resolve every state of the manifest against the savepoint's "
                                               "serializer snapshots as Flink would, plan the migration "
                                               "'flinkstate migrate' would run, and report both verdicts: the "
                                               "check's verdict is that plan. Exit status: 0 restorable (as is or "
                                               "reconfigured), 3 migration required and possible, 4 incompatible "
                                               "(migrate refuses), 1 error, 2 usage. The new version's schema "
                                               "is the job jar's (--jar), the manifest's (--schema), or the jar's "
                                               "with the manifest as an overlay (both). "
                                               f"Note: {JAR_WARNING}.")
    parser.add_argument("savepoint", metavar="SAVEPOINT", help="savepoint directory or its _metadata file")
    add_new_version_arguments(parser)
    add_target_flink_argument(parser)
    parser.add_argument("--previous", metavar="MANIFEST",
                        help="the manifest of the version that wrote the savepoint (knows Row field names)")
    parser.add_argument("--format", choices=("markdown", "json", "html"), default="markdown",
                        help="report format (html: one self-contained page, rendered from the JSON report)")
    parser.add_argument("-o", "--output", metavar="FILE",
                        help="write the report to FILE (local or s3://) instead of stdout; the exit status is the same")
    parser.add_argument("--backend", choices=BACKENDS,
                        help="the new job's state backend (default: the stricter rule of both)")
    parser.add_argument("--allow-non-restored-state", action="store_true",
                        help="the new job will run with allowNonRestoredState (removed operators are skipped)")
    parser.add_argument("--dry-run", action="store_true",
                        help="also decode and migrate every entry of the states a migration touches, in memory "
                             "(nothing is written); a failing entry makes the outcome incompatible")
    parser.add_argument("--max-dead-letters", type=int, default=0, metavar="N",
                        help="with --dry-run: entries a dead-letter policy may skip before the migration counts "
                             "as failing (default 0)")
    parser.add_argument("--examples", type=int, default=5, metavar="N", help="failing entries kept as examples")
    parser.add_argument("--trial", nargs="?", const="one", choices=("one", "full"), metavar="full",
                        help="with --jar: also restore the savepoint into the jar's operators with Flink's own "
                             "classes (one key group of each operator's keyed state; --trial=full: all of them), on "
                             "the backend the job configures (or --backend), in the same kind of JVM, and report "
                             "Flink's answer per state beside the check's; a disagreement is the finding "
                             "TRIAL_DISAGREES and fails the check (exit 4)")
    add_allow_code_argument(parser, "the code --dry-run may import (the manifest's migration functions): "
                                    "--allow-code MODULES (comma-separated) or --allow-code=all (any but the "
                                    "standard library); default $FLINKSTATE_ALLOW_CODE, else none. Without "
                                    "--dry-run, check imports nothing")
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    policy = CodePolicy.resolve(args.allow_code)
    if args.output:
        refuse_output_in_source(args.output, args.savepoint, "-o")
    if args.trial is not None and args.jar is None:
        args.usage_error("--trial restores the savepoint into the jar's operators: give the jar (--jar JAR)")
    schema = new_version_schema(args)
    trial = _trial(args) if args.trial is not None else None
    # The check judges the backend Flink's trial ran on (the job's), unless --backend names one.
    backend = args.backend or (trial.backend_name if trial is not None else None)
    with phase(f"check {args.savepoint} against {schema_name(schema)}"):
        report = check(args.savepoint, schema, previous=args.previous, backend=backend,
                       allow_non_restored_state=args.allow_non_restored_state, target_flink=args.target_flink)
    if trial is not None:
        disagreements = apply_trial(report, trial, allow_non_restored_state=args.allow_non_restored_state)
        print(f"flinkstate: Flink's trial restore ({trial.backend}, {trial.key_groups} key group(s) of each "
              f"operator, {trial.seconds:.1f} s): {disagreements} disagreements with the check", file=sys.stderr)
    for row in report.rows:
        log.info("  %s/%s: %s, Flink %s, verdict %s%s", row.operator, row.state or "-", row.status,
                 row.flink_verdict.name, row.verdict.name, f", migration {row.migration}" if row.migration else "")
    log.info("outcome: %s (exit status %d)", report.outcome, report.exit_code)
    if args.dry_run:
        with phase("dry run (decode and migrate every entry in memory)"):
            report.dry_run = dry_run_section(report, args.savepoint, schema, args.previous,
                                             examples=args.examples, max_dead_letters=args.max_dead_letters,
                                             allow_code=policy)
        counts = {k: v for k, v in report.dry_run.items() if not isinstance(v, (list, dict))}  # not the examples
        log.info("dry run: %s; outcome now %s", counts, report.outcome)
    if args.format == "json":
        text = report.render_json() + "\n"
    elif args.format == "html":  # rendered from the JSON form, as the DAG renders a check-report.json
        text = render_html(report.to_json())
    else:
        text = report.render_markdown()
    if args.output:
        write_file(args.output, text.encode("utf-8"))
        print(f"flinkstate: report written to {printable(args.output)} ({report.outcome})", file=sys.stderr)
    else:
        print(text, end="")
    return report.exit_code


def _trial(args: argparse.Namespace) -> TrialRestore:
    with phase("restore the savepoint into the jar's operators with Flink's own classes (one JVM)"):
        return trial_restore(args.jar, args.savepoint, full=args.trial == "full", backend=args.backend,
                             entry_class=args.entry_class, program_args=args.program_args,
                             flink_home=args.flink_home, parallelism=args.parallelism, timeout=args.timeout,
                             max_heap=args.max_heap)


def dry_run_section(report: Report, savepoint: str, schema: str | Manifest, previous: str | None, *,
                    examples: int = 5,
                    max_dead_letters: int = 0, allow_code: CodePolicy | None = None) -> dict[str, Any]:
    """The dry run of the migration ``flinkstate migrate`` would run, in this process (the report's section). A
    migration function the code policy does not allow is an error (exit 1), not a verdict: nothing was judged."""
    if report.outcome != "migrate":
        return {"ran": False, "reason": f"the outcome is '{report.outcome}'"}
    job = MigrationJob(savepoint, schema, output="", old_schema=previous, max_dead_letters=max_dead_letters,
                       allow_code=allow_code)
    source = Savepoint.open(savepoint)
    try:
        plan = job.plan(source)
    except CodeRefused:
        raise
    except FlinkStateError as exc:
        return {"ran": False, "reason": f"the migration cannot be planned: {exc}", "plan_error": str(exc)}
    return run_dry_run(source, plan, examples=examples, max_dead_letters=max_dead_letters)
