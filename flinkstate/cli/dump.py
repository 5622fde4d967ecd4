"""``flinkstate dump SAVEPOINT --operator UID_OR_HEX_ID --state NAME``: one JSON line per entry,
``{"key": K, "namespace": N, "value": V}`` (MAP state adds ``"user_key"``, one line per user key; timer states give
the timestamp as value). Value encoding: see :mod:`flinkstate.jsonify`; VoidNamespace is null."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

from flinkstate import Savepoint, printable, to_json, track
from flinkstate.cli.verbose import log, phase, savepoint_opened


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("dump", help="print a keyed state's entries as JSON Lines",
                                   description="Print every entry of one keyed state as JSON Lines.")
    parser.add_argument("savepoint", metavar="SAVEPOINT", help="savepoint directory or its _metadata file")
    parser.add_argument("--operator", required=True, metavar="UID_OR_HEX_ID",
                        help="operator uid (hashed like Flink) or 32-hex operator id")
    parser.add_argument("--state", required=True, metavar="NAME", help="keyed state name")
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    with phase("read _metadata"):
        savepoint = Savepoint.open(args.savepoint)
    operator = savepoint.operator(args.operator)
    savepoint_opened(savepoint, operator)
    kind = savepoint.state_info(operator, args.state).kind
    is_map = kind == "MAP"
    write = sys.stdout.write
    # Strict JSON: to_json writes NaN and infinities as strings, so nothing here may produce a bare NaN.
    dumps = partial(json.dumps, allow_nan=False)
    blocks = sum(len(stream.blocks) for _, stream in savepoint.keyed_streams(operator))
    log.info("dump %s of %s: %s state, %d key-group blocks", printable(args.state), savepoint.label(operator),
             kind, blocks)
    groups = track(savepoint.iter_key_groups(operator, args.state), total=blocks,
                   description=f"dump {printable(args.state)}", unit="key groups")
    with phase(f"dump {printable(args.state)}"):
        written = _write_entries(groups, is_map, write, dumps)
    log.info("%d entries written", written)
    return 0


def _write_entries(groups: Iterable[tuple[int, Iterable[tuple[Any, ...]]]], is_map: bool,
                   write: Callable[[str], object], dumps: Callable[[Any], str]) -> int:
    """Writes each entry as one JSON line; returns how many."""
    written = 0
    for _, entries in groups:
        for entry in entries:
            if is_map:
                key, namespace, user_key, value = entry
                record = {"key": to_json(key), "namespace": to_json(namespace), "user_key": to_json(user_key),
                          "value": to_json(value)}
            else:
                key, namespace, value = entry
                record = {"key": to_json(key), "namespace": to_json(namespace), "value": to_json(value)}
            write(dumps(record) + "\n")
            written += 1
    return written
