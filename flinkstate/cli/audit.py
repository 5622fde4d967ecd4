"""``flinkstate audit SAVEPOINT [--jar JAR ...] [--json]``: what in a savepoint an upgrade can break, before one is
planned (:mod:`flinkstate.audit`): Kryo and Java-serialized states and fields, operators without a uid, and for a
Flink 1.x savepoint every state a Flink 2.x job would misread or fail on. Exit 0 when nothing is found, 3 when
something is (a script can gate on it), 1 on an error."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from flinkstate import Savepoint, audit_savepoint
from flinkstate.cli.jar_options import JAR_WARNING, add_jar_arguments, inspect_jar_of, take_program_args
from flinkstate.cli.verbose import phase, savepoint_opened

#: Something was found (the listing says what).
EXIT_EXPOSED = 3


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "audit", help="what in a savepoint an upgrade can break: Kryo and Java serialization, operators without a "
                      "uid, Flink 1.x -> 2.x",
        description="List every state and field a savepoint holds in Kryo or Java serialization (whole values, POJO "
                    "fields, list elements, map keys and values, nested), every operator without a uid of its own, "
                    "and, for a savepoint of Flink 1.x, every state a Flink 2.x job would misread or fail on (the "
                    "codes 'check --target-flink 2.x' reports). Only serializer snapshots are read: the cost does "
                    "not grow with the state. Exit: 0 nothing found, 3 something found, 1 error.",
        epilog=f"With --jar: {JAR_WARNING}.")
    parser.add_argument("savepoint", metavar="SAVEPOINT", help="savepoint directory or its _metadata file")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    add_jar_arguments(parser, "the job that wrote it (optional: tells which operators have a uid in savepoints of "
                              "Flink 1.x, whose metadata does not record it)",
                      "the job's jar; program arguments after --")
    take_program_args(parser)
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    with phase("read _metadata"):
        savepoint = Savepoint.open(args.savepoint)
    savepoint_opened(savepoint)
    job_uids = None
    if args.jar:
        schema = inspect_jar_of(args, args.program_args)
        job_uids = {op.operator_id: op.uid for op in schema.operators}
    elif args.program_args:
        args.usage_error("program arguments (after --) are the --jar's: give --jar")
    with phase("read each operator's state headers"):
        audit = audit_savepoint(savepoint, job_uids)
    if args.json:
        sys.stdout.write(json.dumps(audit.to_json(), indent=2) + "\n")
    else:
        sys.stdout.write(audit.render_text())
    return EXIT_EXPOSED if audit.exposures else 0
