"""``flinkstate schema SAVEPOINT [-o FILE] [--job NAME] [--key OPERATOR=TYPE]``: the state schema manifest
describing a savepoint, the starting point of the next job version's manifest.

``flinkstate schema --jar JAR [--entry-class CLASS] [--flink-home DIR] [-o FILE] [-- PROGRAM ARGS...]``: the manifest
of the version a job jar is, as Flink will see it (:mod:`flinkstate.engine.jar_schema`): this runs the job's own
main() and its operators' initializeState()/open() code, in a JVM of its own."""

from __future__ import annotations

import argparse
from typing import Any

from flinkstate import (
    FlinkStateError,
    Savepoint,
    TypeSerializerSnapshot,
    manifest_from_savepoint,
    printable,
    refuse_output_in_source,
    type_snapshot,
    write_file,
)
from flinkstate.cli.jar_options import JAR_WARNING, add_jar_arguments, inspect_jar_of
from flinkstate.cli.verbose import phase, savepoint_opened


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("schema", help="write the state schema manifest of a savepoint, or of a job jar",
                                   description="Write the YAML state schema manifest (operators, keyed states, "
                                               "kinds and types) describing SAVEPOINT, or the job jar given with "
                                               "--jar (the manifest of a savepoint that jar would take). Edit it "
                                               "into the next version's manifest and give it to 'flinkstate check'. "
                                               f"Note: {JAR_WARNING}.")
    parser.add_argument("inputs", nargs="*", metavar="SAVEPOINT | -- PROGRAM ARGS",
                        help="savepoint directory or its _metadata file; with --jar: the arguments of the job's "
                             "main(), after --")
    parser.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of standard output")
    parser.add_argument("--job", metavar="NAME", help="the job name to record in the manifest")
    parser.add_argument("--key", action="append", default=[], metavar="OPERATOR=TYPE",
                        help="the key type of an operator (uid or id) whose snapshot does not record it: a changelog "
                             "checkpoint never materialized, without timers (repeatable; e.g. --key "
                             "'my-uid=Tuple2<String, Long>')")
    add_jar_arguments(parser, "a job jar instead of a savepoint (runs the job's main() and open() code)",
                      "the job jar: its main() builds the job, each stateful operator is opened with empty state "
                      "and snapshotted with Flink's classes")
    parser.set_defaults(handler=_run)


def _keys(given: list[str]) -> dict[str, TypeSerializerSnapshot]:
    """``--key OPERATOR=TYPE`` options, the type in the manifest's notation."""
    keys: dict[str, TypeSerializerSnapshot] = {}
    for option in given:
        operator, sep, notation = option.partition("=")
        if not sep or not operator or not notation:
            raise FlinkStateError(f"--key {printable(option)}: expected OPERATOR=TYPE")
        try:
            keys[operator] = type_snapshot(notation, "--key")
        except FlinkStateError as exc:  # the notation's error
            raise FlinkStateError(f"--key {printable(option)}: {exc}") from None
    return keys


def _run(args: argparse.Namespace) -> int:
    if args.jar is not None:
        if args.key:
            raise FlinkStateError("--key is for savepoints whose snapshot does not record a key type; a jar's "
                                  "operators give theirs")
        manifest = inspect_jar_of(args, args.inputs).manifest(args.job)
        text = (f"# State schema of the job in {args.jar}, written by 'flinkstate schema --jar': what its operators "
                f"register when they open.\n"
                "# Row field names are not stored in savepoints (f0, f1, ...): rename them to the job's names.\n"
                + manifest.dump())
    else:
        if len(args.inputs) != 1:
            raise FlinkStateError("give one SAVEPOINT, or a job jar with --jar (its main()'s arguments after --)")
        if args.output:
            refuse_output_in_source(args.output, args.inputs[0], "-o")
        with phase("read _metadata"):
            savepoint = Savepoint.open(args.inputs[0])
        savepoint_opened(savepoint)
        with phase("read the keyed-state headers into a manifest"):
            manifest = manifest_from_savepoint(savepoint, args.job, _keys(args.key))
        text = (f"# State schema of {manifest.path}, written by 'flinkstate schema'.\n"
                "# Row field names are not stored in savepoints (f0, f1, ...): rename them to the job's names.\n"
                + manifest.dump())
    if args.output:
        write_file(args.output, text.encode("utf-8"))
    else:
        print(text, end="")
    return 0
