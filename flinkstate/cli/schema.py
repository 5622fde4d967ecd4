"""``flinkstate schema SAVEPOINT [-o FILE] [--job NAME] [--key OPERATOR=TYPE]``: the state schema manifest
describing a savepoint, the starting point of the next job version's manifest.

``flinkstate schema --jar JAR [--entry-class CLASS] [--flink-home DIR] [-o FILE] [-- PROGRAM ARGS...]``: the manifest
of the version a job jar is, as Flink will see it (:mod:`flinkstate.engine.jar_schema`): this runs the job's own
main() and its operators' initializeState()/open() code, in a JVM of its own."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from flinkstate import (
    DEFAULT_MAX_HEAP,
    DEFAULT_TIMEOUT_SECONDS,
    FlinkStateError,
    Savepoint,
    TypeSerializerSnapshot,
    inspect_jar,
    manifest_from_savepoint,
    printable,
    type_snapshot,
)
from flinkstate.cli.verbose import phase, savepoint_opened

JAR_WARNING = ("--jar runs the job's own main() and its operators' initializeState() and open() code (what runs in "
               "production anyway) in a JVM of its own, limited by --timeout and --max-heap; sources are only "
               "initialized, nothing is submitted, no record flows, no timer fires")


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
    jar = parser.add_argument_group("a job jar instead of a savepoint (runs the job's main() and open() code)")
    jar.add_argument("--jar", metavar="JAR", help="the job jar: its main() builds the job, each stateful operator "
                                                  "is opened with empty state and snapshotted with Flink's classes")
    jar.add_argument("--entry-class", metavar="CLASS", help="the class whose main() builds the job (default: the "
                                                            "jar manifest's Main-Class, as 'flink run')")
    jar.add_argument("--flink-home", metavar="DIR", help="the Flink distribution the jar is built for (default: "
                                                         "$FLINK_HOME or .venv-flink's pyflink, Flink 2.3)")
    jar.add_argument("--parallelism", type=int, default=1, metavar="N",
                     help="the default parallelism 'flink run' gives (parallelism.default; default 1): it shapes the "
                          "ids Flink generates for operators without a uid")
    jar.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_SECONDS, metavar="SECONDS",
                     help=f"stop the JVM after this long (default {DEFAULT_TIMEOUT_SECONDS:g})")
    jar.add_argument("--max-heap", default=DEFAULT_MAX_HEAP, metavar="SIZE",
                     help=f"the JVM's heap limit, as -Xmx (default {DEFAULT_MAX_HEAP})")
    jar.add_argument("--no-cache", dest="use_cache", action="store_false",
                     help="run the JVM even when the cache has this jar's schema (by the jar's hash, the arguments "
                          "and the Flink version): when main() reads files or the environment")
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
        with phase("run the job's main() and open its operators (one JVM)"):
            schema = inspect_jar(args.jar, entry_class=args.entry_class, program_args=args.inputs,
                                 flink_home=args.flink_home, parallelism=args.parallelism, timeout=args.timeout,
                                 max_heap=args.max_heap, use_cache=args.use_cache)
        manifest = schema.manifest(args.job)
        took = "from the cache" if schema.cached else f"in {schema.seconds:.1f} s (one JVM)"
        print(f"flinkstate: schema of {printable(args.jar)} (Flink {schema.flink_version}): "
              f"{len(manifest.operators)} stateful operators of {len(schema.operators)}, {took}", file=sys.stderr)
        text = (f"# State schema of the job in {args.jar}, written by 'flinkstate schema --jar': what its operators "
                f"register when they open.\n"
                "# Row field names are not stored in savepoints (f0, f1, ...): rename them to the job's names.\n"
                + manifest.dump())
    else:
        if len(args.inputs) != 1:
            raise FlinkStateError("give one SAVEPOINT, or a job jar with --jar (its main()'s arguments after --)")
        with phase("read _metadata"):
            savepoint = Savepoint.open(args.inputs[0])
        savepoint_opened(savepoint)
        with phase("read the keyed-state headers into a manifest"):
            manifest = manifest_from_savepoint(savepoint, args.job, _keys(args.key))
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
