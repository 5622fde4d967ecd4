"""``flinkstate history DEPLOYMENT``: the savepoints of a deployment's upgrade runs, and their retention."""

from __future__ import annotations

import argparse
import json
from typing import Any

from flinkstate import deployment_history, printable, remove_savepoint, retention


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "history", help="a deployment's upgrade runs and their savepoints (preflight, stop, migrated); retention",
        description="The runs of a deployment under a savepoint base, oldest first: when, the check's verdict, the "
                    "outcome, and each savepoint with what still needs it. With --keep N the savepoints of all but "
                    "the newest N runs are removed (never the one the running job was restored from, nor any of an "
                    "unfinished run); --dry-run only says what would go.")
    parser.add_argument("deployment", help="the deployment (job name) as the upgrade DAG records it")
    parser.add_argument("--savepoint-base", required=True,
                        help="the upgrades' savepoint_base (local folder or s3://bucket/prefix)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.add_argument("--keep", type=int, metavar="N", help="remove the savepoints of all but the newest N runs")
    parser.add_argument("--dry-run", action="store_true", help="with --keep: say what would be removed, remove nothing")
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    history = deployment_history(args.savepoint_base, args.deployment)
    doomed = retention(history, args.keep) if args.keep is not None else []
    if not args.dry_run:
        for savepoint in doomed:
            remove_savepoint(savepoint.location)
    if args.json:
        print(json.dumps({"deployment": args.deployment, "runs": [r.to_dict() for r in history],
                          "removed" if not args.dry_run else "would_remove": [s.location for s in doomed]},
                         indent=2))
        return 0
    if not history:
        print(f"no upgrade runs of {printable(args.deployment)} under {printable(args.savepoint_base)}")
    for run in history:
        verdict = f"{run.check_outcome} ({run.verdict})" if run.check_outcome else "not checked"
        print(f"{run.planned_at or '?'}  run {printable(run.run_id)}: {printable(run.outcome or run.stage)}; "
              f"check: {printable(verdict)}; new version {printable(run.version)}")
        for savepoint in run.savepoints:
            gone = " (removed)" if savepoint in doomed and not args.dry_run else \
                " (would be removed)" if savepoint in doomed else ""
            needed = f"  [kept: {savepoint.needed}]" if savepoint.needed else ""
            print(f"    {savepoint.kind:<9} {printable(savepoint.location)}{gone}{needed}")
    if args.keep is not None:
        print(f"{'would remove' if args.dry_run else 'removed'} {len(doomed)} savepoint(s), keeping those of the "
              f"newest {args.keep} run(s) and every one still needed")
    return 0
