"""``flinkstate schema SAVEPOINT [-o FILE] [--job NAME]``: the state schema manifest describing a savepoint, the
starting point of the next job version's manifest."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from flinkstate import FlinkStateError, Savepoint, manifest_from_savepoint
from flinkstate.cli.verbose import phase, savepoint_opened


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("schema", help="write the state schema manifest describing a savepoint",
                                   description="Write the YAML state schema manifest (operators, keyed states, "
                                               "kinds and types) describing SAVEPOINT. Edit it into the next "
                                               "version's manifest and give it to 'flinkstate check'.")
    parser.add_argument("savepoint", metavar="SAVEPOINT", help="savepoint directory or its _metadata file")
    parser.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of standard output")
    parser.add_argument("--job", metavar="NAME", help="the job name to record in the manifest")
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    with phase("read _metadata"):
        savepoint = Savepoint.open(args.savepoint)
    savepoint_opened(savepoint)
    with phase("read the keyed-state headers into a manifest"):
        manifest = manifest_from_savepoint(savepoint, args.job)
    text = (f"# State schema of {manifest.path}, written by 'flinkstate schema'.\n"
            "# Row field names are not stored in savepoints (f0, f1, ...): rename them to the job's names.\n"
            + manifest.dump())
    if args.output:
        try:
            Path(args.output).write_text(text, encoding="utf-8")
        except OSError as exc:
            raise FlinkStateError(f"{args.output}: cannot write: {exc.strerror or exc}") from None
    else:
        print(text, end="")
    return 0
