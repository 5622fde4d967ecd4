"""``flinkstate upgrade status|recover``: the upgrade journals beside a deployment registry, and the recovery of
upgrades whose run died (the old version restored from the stop savepoint, or a verified upgrade finished); ``flinkstate
upgrade run`` (:mod:`flinkstate.cli.upgrade_run`) triggers an upgrade."""

from __future__ import annotations

import argparse
import json
from typing import Any

from flinkstate import (
    DEFAULT_GRACE,
    FlinkStateError,
    Outcome,
    UpgradeJournal,
    client_for,
    describe_outcome,
    sweep,
    why_left_alone,
)
from flinkstate.cli import upgrade_run


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("upgrade", help="run an upgrade through Airflow, inspect upgrade journals and "
                                                   "recover upgrades whose run died",
                                   description="Upgrade journals (<savepoint-base>/journal/<deployment>.json) and "
                                               "their recovery.")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    upgrade_run.add_parser(actions)
    for action, help_text in (("status", "print each deployment's last upgrade: phase, outcome, what runs"),
                              ("recover", "recover the upgrades whose run died (or, with --force, every "
                                          "unfinished one); says why a run is left alone, and exits 1 while one is")):
        sub = actions.add_parser(action, help=help_text)
        sub.add_argument("--savepoint-base", required=True,
                         help="the upgrades' savepoint_base (local folder or s3://bucket/prefix)")
        sub.add_argument("--deployment", help="only this deployment (job name)")
        sub.add_argument("--json", action="store_true", help="print JSON instead of text")
        if action == "recover":
            sub.add_argument("--flink-url", help="Flink's REST address (default: the one each journal records)")
            sub.add_argument("--force", action="store_true",
                             help="act even when the run's process may be alive (only when you know it is gone)")
            sub.add_argument("--grace", type=float, default=DEFAULT_GRACE,
                             help="seconds a journal must be quiet before it counts as dead (default %(default)s)")
            sub.add_argument("--timeout", type=float, default=300, help="seconds to wait for a job to run")
        sub.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    if args.action == "status":
        journals = [j for j in UpgradeJournal.all(args.savepoint_base)
                    if not args.deployment or j.data["deployment"] == args.deployment]
        if args.json:
            print(json.dumps([j.data for j in journals], indent=2))
        for journal in journals if not args.json else []:
            data = journal.data
            state = f"done: {data['outcome']}" if journal.finished else f"UNFINISHED in phase {journal.phase}"
            print(f"{data['deployment']}: run {data['run_id']} {state}; "
                  f"{describe_outcome(journal) if journal.finished else 'owner ' + str(data.get('owner'))}")
        return 0
    urls = {args.flink_url} if args.flink_url else {j.data.get("flink_url") for j in
                                                     UpgradeJournal.all(args.savepoint_base) if not j.finished}
    results = []
    for url in sorted(u for u in urls if u):
        results += sweep(args.savepoint_base, client_for(url), "flinkstate upgrade recover", grace=args.grace,
                         deployment=args.deployment, force=args.force, timeout=args.timeout)
    if None in urls and not args.flink_url:
        raise FlinkStateError("a journal records no Flink address: give --flink-url")
    # The runs still unfinished, each with why it was left alone: a person must not read "nothing to do" while
    # `upgrade status` says UNFINISHED.
    left = [(j, why_left_alone(j, grace=args.grace) or "another actor wrote its journal meanwhile: run this again")
            for j in UpgradeJournal.all(args.savepoint_base)
            if not j.finished and (not args.deployment or j.data["deployment"] == args.deployment)]
    if args.json:
        print(json.dumps([{"deployment": j.data["deployment"], "run_id": j.data["run_id"], "outcome": r.outcome,
                           "account": r.account, "running": r.running} for j, r, _ in results] +
                         [{"deployment": j.data["deployment"], "run_id": j.data["run_id"], "outcome": None,
                           "phase": j.phase, "not_recovered": why} for j, why in left], indent=2))
    else:
        for _, _, alert in results:
            print(alert)
        for journal, why in left:
            print(f"{journal.data['deployment']}: run {journal.data['run_id']} UNFINISHED in phase {journal.phase}, "
                  f"not recovered: {why}")
        if not results and not left:
            print(f"no dead upgrade runs under {args.savepoint_base}")
    return 1 if left or any(r.outcome == Outcome.DOWN for _, r, _ in results) else 0
