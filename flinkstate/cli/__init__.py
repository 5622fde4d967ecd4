"""The ``flinkstate`` command line. Each subcommand lives in its own module with ``register(subparsers)``, which
adds its parser and sets ``handler`` (a function taking the parsed arguments and returning the exit status).

Exit statuses: 0 success, 1 error (one line on stderr, no traceback), 2 usage; ``check`` adds 3 and 4.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from flinkstate import __version__, storage
from flinkstate.errors import FlinkStateError

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
    s3 = parser.add_argument_group("s3:// savepoints (default: boto3's usual AWS_* variables and ~/.aws)")
    s3.add_argument("--s3-endpoint-url", metavar="URL", help="S3 endpoint, e.g. http://127.0.0.1:9000 for MinIO")
    s3.add_argument("--s3-region", metavar="REGION", help="S3 region")
    s3.add_argument("--s3-profile", metavar="PROFILE", help="AWS profile for the credentials")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    storage.s3_options = storage.S3Options(args.s3_endpoint_url, args.s3_region, args.s3_profile)
    try:
        return int(args.handler(args) or EXIT_OK)
    except FlinkStateError as exc:
        print(f"flinkstate: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("flinkstate: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `flinkstate dump ... | head`
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
