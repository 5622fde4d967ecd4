"""The options of a job jar (``--jar`` and how its ``main()`` runs), shared by ``schema``, ``check`` and
``migrate``, and the program arguments after ``--``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from flinkstate import (
    DEFAULT_MAX_HEAP,
    DEFAULT_TIMEOUT_SECONDS,
    JarSchema,
    Manifest,
    flink_version_problem,
    inspect_jar,
    manifest_of_jar,
    printable,
)
from flinkstate.cli.verbose import phase

JAR_WARNING = ("--jar runs the job's own main() and its operators' initializeState() and open() code (what runs in "
               "production anyway) in a JVM of its own, limited by --timeout and --max-heap; sources are only "
               "initialized, nothing is submitted, no record flows, no timer fires")


def add_jar_arguments(parser: argparse.ArgumentParser, title: str, jar_help: str) -> None:
    """``--jar`` and the options of its inspection (:func:`flinkstate.inspect_jar`), in a group titled ``title``."""
    jar = parser.add_argument_group(title)
    jar.add_argument("--jar", metavar="JAR", help=jar_help)
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


def take_program_args(parser: argparse.ArgumentParser) -> None:
    """Makes ``parser`` keep what follows the first ``--`` as ``program_args`` (the job's main() arguments).
    argparse alone cannot: it matches every positional at the first one, so in ``check SAVEPOINT --jar JAR -- ARGS``
    the ARGS after the option would be unrecognized."""
    parse = parser.parse_known_args

    def parse_known_args(args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
                         ) -> tuple[argparse.Namespace, list[str]]:
        given = list(sys.argv[1:] if args is None else args)
        program: list[str] = []
        if "--" in given:
            cut = given.index("--")
            given, program = given[:cut], given[cut + 1:]
        parsed, unknown = parse(given, namespace)
        parsed.program_args = program
        return parsed, unknown

    parser.parse_known_args = parse_known_args  # type: ignore[assignment,method-assign]


def inspect_jar_of(args: argparse.Namespace, program_args: Sequence[str]) -> JarSchema:
    """The jar's schema as the options say (one JVM, or the cache), with a line on stderr saying which."""
    with phase("run the job's main() and open its operators (one JVM)"):
        schema = inspect_jar(args.jar, entry_class=args.entry_class, program_args=program_args,
                             flink_home=args.flink_home, parallelism=args.parallelism, timeout=args.timeout,
                             max_heap=args.max_heap, use_cache=args.use_cache)
    stateful = sum(1 for op in schema.operators if op.keyed is not None or op.operator is not None)
    took = "from the cache" if schema.cached else f"in {schema.seconds:.1f} s (one JVM)"
    print(f"flinkstate: schema of {printable(args.jar)} (Flink {schema.flink_version}): {stateful} stateful "
          f"operators of {len(schema.operators)}, {took}", file=sys.stderr)
    return schema


def add_new_version_arguments(parser: argparse.ArgumentParser) -> None:
    """``--schema`` and ``--jar`` (with its options and ``-- ARGS``): where ``check`` and ``migrate`` take the new
    version's state schema from."""
    parser.add_argument("--schema", metavar="MANIFEST",
                        help="the new version's schema manifest; with --jar, an overlay: what the jar cannot say "
                             "(migrations, renames, dropped states, Row field names), any type given must be the "
                             "jar's")
    add_jar_arguments(parser, "the new version's job jar (runs its main() and open() code in a JVM of its own)",
                      "the new version's job jar: its schema is what its operators register when they open "
                      "('flinkstate schema --jar'); give main()'s arguments after --")
    take_program_args(parser)
    parser.set_defaults(usage_error=parser.error)


def add_target_flink_argument(parser: argparse.ArgumentParser) -> None:
    """``--target-flink VERSION``: the Flink the new version runs on, when its schema does not say it (a jar's
    does; a manifest may: ``flink_version``). A savepoint of Flink 1.x judged for 2.x has its Kryo data refused."""
    parser.add_argument("--target-flink", metavar="VERSION", type=_flink_version,
                        help="the Flink version the new job runs on (e.g. 2.3), when the schema does not say it "
                             "(flink_version: in the manifest; a jar's is its Flink's); default: the savepoint's "
                             "Flink major. Across 1.x -> 2.x, Kryo-serialized state is reported and refused")


def _flink_version(text: str) -> str:
    problem = flink_version_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return text


def new_version_schema(args: argparse.Namespace) -> str | Manifest:
    """The new version's schema the options give: the manifest file (--schema), or the jar's, completed by the
    overlay --schema names when both are given (:func:`flinkstate.manifest_of_jar`). Neither is a usage error."""
    if args.program_args and args.jar is None:
        args.usage_error(f"the arguments after -- ({printable(' '.join(args.program_args))}) are the job's main()'s: "
                         f"give them with --jar")
    if args.jar is None:
        if args.schema is None:
            args.usage_error("give the new version's schema: --jar JAR (the job jar), --schema MANIFEST, or both "
                             "(the manifest is then an overlay of the jar's)")
        return str(args.schema)
    return manifest_of_jar(inspect_jar_of(args, args.program_args), args.schema)


def schema_name(schema: str | Manifest) -> str:
    """The new version's schema, for the log: the file, or the jar (and its overlay)."""
    return schema if isinstance(schema, str) else str(schema.origin())
