"""``flinkstate dump SAVEPOINT --operator UID_OR_HEX_ID --state NAME [--key TYPE]``: one JSON line per entry,
``{"key": K, "namespace": N, "value": V}`` (MAP state adds ``"user_key"``, one line per user key; timer states give
the timestamp as value). Value encoding: see :mod:`flinkstate.jsonify`; VoidNamespace is null.

An operator (non-keyed) state is dumped the same way, one line per stored element:
``{"subtask": S, "mode": "SPLIT_DISTRIBUTE"|"UNION", "index": I, "value": V}`` for list state, and per map entry
``{"subtask": S, "mode": "BROADCAST", "key": K, "value": V}`` for broadcast state. A source's splits
(``SourceReaderState``) add ``"split": {"split_serializer_version": N, "split_bytes": base64}`` (the split
serializer is the source's own, not recorded in the savepoint). An element whose serializer flinkstate cannot decode
is given as ``"bytes"`` (base64) with ``"undecoded"`` naming the serializer class."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

from flinkstate import (
    SOURCE_SPLITS_STATE,
    FlinkStateError,
    OperatorState,
    OperatorStateElement,
    Savepoint,
    _speedups,
    printable,
    source_split,
    to_json,
    track,
    type_snapshot,
)
from flinkstate.cli.verbose import log, phase, savepoint_opened


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("dump", help="print a keyed state's entries as JSON Lines",
                                   description="Print every entry of one keyed state as JSON Lines.")
    parser.add_argument("savepoint", metavar="SAVEPOINT", help="savepoint directory or its _metadata file")
    parser.add_argument("--operator", required=True, metavar="UID_OR_HEX_ID",
                        help="operator uid (hashed like Flink) or 32-hex operator id")
    parser.add_argument("--state", required=True, metavar="NAME", help="keyed or operator state name")
    parser.add_argument("--key", metavar="TYPE",
                        help="read the keys as TYPE where the snapshot records no key serializer (a changelog "
                             "checkpoint never materialized, without timers; keys are bytes otherwise): each must "
                             "decode to exactly its bytes and hash to its key group")
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    with phase("read _metadata"):
        savepoint = Savepoint.open(args.savepoint)
    operator = savepoint.operator(args.operator)
    savepoint_opened(savepoint, operator)
    if args.key is not None:
        if not savepoint.unrecorded_key(operator):
            raise FlinkStateError(f"--key: {savepoint.label(operator)} records its key serializer (--key is for "
                                  f"changelog checkpoints that do not)")
        try:
            savepoint.assume_key_serializer(operator, type_snapshot(args.key, "--key"))
        except FlinkStateError as exc:
            raise FlinkStateError(f"--key {printable(args.key)}: {exc}") from None
    if args.state in savepoint.operator_state_modes(operator) and not _is_keyed(savepoint, operator, args.state):
        with phase(f"dump {printable(args.state)}"):
            written = _write_operator_state(savepoint.iter_operator_state(operator, args.state), sys.stdout.write,
                                            partial(json.dumps, allow_nan=False))
        log.info("%d operator state records written", written)
        return 0
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
    """Writes each entry as one JSON line; returns how many. A key group's entries go out in one write from the
    compiled writer (flinkstate._speedups.fast_json_lines, the same bytes) when it is built; without it, or for a
    group it fails on, from the reference (:func:`_json_line`, line by line: an error is then raised after the same
    lines as always)."""
    compiled = _speedups.fast_json_lines(is_map, lambda value: dumps(to_json(value)))
    written = 0
    for _, entries in groups:
        if compiled is not None and isinstance(entries, (list, tuple)):  # a sequence: read twice on a failure
            try:
                text = compiled(entries)
            except Exception:  # the reference below writes the group, or raises its own error
                pass
            else:
                write(text)
                written += len(entries)
                continue
        for entry in entries:
            write(_json_line(entry, is_map, dumps))
            written += 1
    return written


def _json_line(entry: tuple[Any, ...], is_map: bool, dumps: Callable[[Any], str]) -> str:
    """The reference: one entry's JSON line."""
    if is_map:
        key, namespace, user_key, value = entry
        record = {"key": to_json(key), "namespace": to_json(namespace), "user_key": to_json(user_key),
                  "value": to_json(value)}
    else:
        key, namespace, value = entry
        record = {"key": to_json(key), "namespace": to_json(namespace), "value": to_json(value)}
    return dumps(record) + "\n"


def _is_keyed(savepoint: Savepoint, operator: OperatorState, name: str) -> bool:
    """Whether ``name`` is (also) a keyed state: keyed state wins. An unreadable keyed header does not stop the
    operator state of the same operator from being dumped."""
    try:
        return any(state.name == name for state in savepoint.keyed_states(operator))
    except FlinkStateError:
        return False


def _write_operator_state(elements: Iterable[tuple[int, OperatorStateElement]], write: Callable[[str], object],
                          dumps: Callable[[Any], str]) -> int:
    """Writes one JSON line per list element or broadcast entry; returns how many."""
    written = 0
    for subtask, element in elements:
        base: dict[str, Any] = {"subtask": subtask, "mode": element.mode}
        if element.undecoded is not None:
            records = [{**base, "index": element.index, "bytes": to_json(element.raw), "undecoded": element.undecoded}]
        elif element.mode == "BROADCAST":
            records = [{**base, "key": to_json(key), "value": to_json(value)} for key, value in element.value]
        else:
            record = {**base, "index": element.index, "value": to_json(element.value)}
            if element.state == SOURCE_SPLITS_STATE and isinstance(element.value, bytes):
                split = source_split(element.value)
                if split is not None:
                    record["split"] = to_json(split)
            records = [record]
        for record in records:
            write(dumps(record) + "\n")
            written += 1
    return written
