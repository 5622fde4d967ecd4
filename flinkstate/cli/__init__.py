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

from flinkstate import __version__, storage
from flinkstate.errors import FlinkStateError, printable

#: Modules that contribute subcommands, in the order ``--help`` lists them.
COMMAND_MODULES = (
    "flinkstate.cli.cluster",
    "flinkstate.cli.describe",
    "flinkstate.cli.dump",
    "flinkstate.cli.migrate",
    "flinkstate.cli.schema", "flinkstate.cli.check",
)

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="flinkstate", description="Read, check and migrate Apache Flink savepoints.")
    parser.add_argument("--version", action="version", version=f"flinkstate {__version__}")
    parser.add_argument("--debug", action="store_true", help="print the Python stack of an error as well")
    s3 = parser.add_argument_group("s3:// savepoints (default: boto3's usual AWS_* variables and ~/.aws)")
    s3.add_argument("--s3-endpoint-url", metavar="URL", help="S3 endpoint, e.g. http://127.0.0.1:9000 for MinIO")
    s3.add_argument("--s3-region", metavar="REGION", help="S3 region")
    s3.add_argument("--s3-profile", metavar="PROFILE", help="AWS profile for the credentials")
    parser.add_argument("--allow-external-handles", action="store_true",
                        help="read legacy savepoints whose absolute state handles point outside the savepoint "
                             "directory (off: such handles, '..', symlinks leaving it and non-regular files are "
                             "refused)")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    storage.s3_options = storage.S3Options(args.s3_endpoint_url, args.s3_region, args.s3_profile)
    storage.handle_policy = storage.HandlePolicy(args.allow_external_handles)
    try:
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
