"""The ``flinkstate`` command line. Each subcommand lives in its own module with ``register(subparsers)``, which
adds its parser and sets ``handler`` (a function taking the parsed arguments and returning the exit status).

Exit statuses: 0 success, 1 error (one line on stderr, no traceback), 2 usage; ``check`` adds 3 and 4.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import flinkstate
from flinkstate import SUPPORTED_VERSIONS, FlinkStateError, S3Options, __version__, os_error_line, printable

#: Modules that contribute subcommands, in the order ``--help`` lists them.
COMMAND_MODULES = (
    "flinkstate.cli.cluster",
    "flinkstate.cli.jobs",
    "flinkstate.cli.describe",
    "flinkstate.cli.audit",
    "flinkstate.cli.dump",
    "flinkstate.cli.migrate",
    "flinkstate.cli.schema", "flinkstate.cli.check",
    "flinkstate.cli.upgrade", "flinkstate.cli.history",
    "flinkstate.cli.completion",
)

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2


def _global_options(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    """The options every command takes, before or after the command's name. Given after it (``suppress``), they
    only set what was given, so the subcommand's parser never overwrites a value given before it."""
    default: dict[str, Any] = {"default": argparse.SUPPRESS} if suppress else {}
    parser.add_argument("--debug", action="store_true", help="print the Python stack of an error as well", **default)
    shown = parser.add_mutually_exclusive_group()
    shown.add_argument("-q", "--quiet", dest="progress", action="store_false",
                       help="no progress bars (they show only on a terminal anyway)", **default)
    # Not in the group: -q may come before the command and -v after it (two parsers); main() refuses the pair.
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="log what the command does on stderr: files opened, the plan per operator, how long "
                             "each phase took (stdout is unchanged)", **default)
    shown.add_argument("--progress", dest="progress", action="store_true",
                       help="progress bars on stderr even when it is not a terminal", **default)
    if not suppress:
        parser.set_defaults(progress=None)  # neither: follow the terminal
    s3 = parser.add_argument_group("s3:// savepoints (default: boto3's usual AWS_* variables and ~/.aws)")
    s3.add_argument("--s3-endpoint-url", metavar="URL", help="S3 endpoint, e.g. http://127.0.0.1:9000 for MinIO",
                    **default)
    s3.add_argument("--s3-region", metavar="REGION", help="S3 region", **default)
    s3.add_argument("--s3-profile", metavar="PROFILE", help="AWS profile for the credentials", **default)
    parser.add_argument("--allow-external-handles", action="store_true",
                        help="read legacy savepoints whose absolute state handles point outside the savepoint "
                             "directory (off: such handles, '..', symlinks leaving it and non-regular files are "
                             "refused)", **default)


def version_text() -> str:
    return (f"flinkstate {__version__}\n"
            f"savepoints: _metadata versions {', '.join(map(str, sorted(SUPPORTED_VERSIONS)))} (Flink 1.8 to 2.3), "
            f"canonical format (HashMap and RocksDB backends, snappy or uncompressed; read, checked, migrated), the "
            f"HashMap backend's native format (read), operator state (read); Table/SQL RowData state; local paths "
            f"and s3://\n"
            f"tested against Flink 2.3.0, 2.2.0 and 1.20.3, and Apache Flink's own test savepoints (1.8 to 2.3)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="flinkstate", description="Read, check and migrate Apache Flink savepoints.",
        epilog="Examples:\n"
               "  flinkstate describe s3://bucket/savepoints/savepoint-1a2b3c\n"
               "  flinkstate schema SAVEPOINT -o v1.yaml          # then edit it into the next version's manifest\n"
               "  flinkstate check SAVEPOINT --jar job-v2.jar --schema v2-overlay.yaml -- ARGS   # runs its main()\n"
               "  flinkstate check SAVEPOINT --schema v2.yaml --dry-run\n"
               "  flinkstate migrate SAVEPOINT --schema v2.yaml --output migrated/\n"
               "  flinkstate upgrade run --local --deployment D --jar job-v2.jar --savepoint-base B -- ARGS  # DAG\n"
               "  flinkstate -v describe SAVEPOINT                # -v: what it does, on stderr\n"
               '  eval "$(flinkstate completion bash)"            # tab completion (zsh, fish too)\n'
               "The manifest format: docs/manifest.md; the check report and the exit statuses:\n"
               "README.md#checking-compatibility-schema-and-check",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=version_text())
    _global_options(parser, suppress=False)
    common = argparse.ArgumentParser(add_help=False)
    _global_options(common, suppress=True)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    add_parser = subparsers.add_parser

    def add_with_common(name: str, **kwargs: object) -> argparse.ArgumentParser:
        kwargs["parents"] = [*kwargs.get("parents", []), common]  # type: ignore[misc]
        return add_parser(name, **kwargs)  # type: ignore[arg-type]

    subparsers.add_parser = add_with_common  # type: ignore[method-assign]
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from flinkstate.cli.completion import autocomplete
    from flinkstate.cli.verbose import logging_to_stderr, phase

    parser = build_parser()
    autocomplete(parser)  # answers the shell's completion request and exits, when that is why we run
    args = parser.parse_args(argv)
    if args.verbose and args.progress is False:
        parser.error("-q/--quiet and -v/--verbose contradict each other: give one")
    flinkstate.configure(s3=S3Options(args.s3_endpoint_url, args.s3_region, args.s3_profile),
                         allow_external_handles=args.allow_external_handles, progress=args.progress)
    try:
        with logging_to_stderr(args.verbose), phase(f"flinkstate {args.command}"):
            return int(args.handler(args) or EXIT_OK)
    except FlinkStateError as exc:
        if args.debug:
            traceback.print_exc()
        print(f"flinkstate: error: {printable(exc)}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("flinkstate: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `flinkstate dump ... | head`
        return EXIT_OK
    except RecursionError:
        print("flinkstate: error: the input nests too deeply to be processed", file=sys.stderr)
        return EXIT_ERROR
    except MemoryError:
        print("flinkstate: error: out of memory (the input is larger than this machine can hold)", file=sys.stderr)
        return EXIT_ERROR
    except OSError as exc:  # the machine's storage (a full disk, a vanished folder), not a bug: say which file
        if args.debug:
            traceback.print_exc()
        print(f"flinkstate: error: {os_error_line(exc)}", file=sys.stderr)
        return EXIT_ERROR
    except Exception as exc:  # the last guard: one line, never a traceback unless asked for
        if args.debug:
            traceback.print_exc()
        where = ""
        tb = exc.__traceback__
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        if tb is not None:
            where = f" at {Path(tb.tb_frame.f_code.co_filename).name}:{tb.tb_lineno}"
        print(f"flinkstate: internal error: {type(exc).__name__}: {printable(exc)}{where} (a bug in flinkstate; "
              f"please report it with the output of the same command run with --debug)", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
