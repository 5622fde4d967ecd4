"""``flinkstate describe SAVEPOINT [--json]``: metadata version, checkpoint id, operators and their keyed states
with kinds and types. A keyed state whose values hold Kryo data also says whether its Kryo records decode or pass
through byte for byte, from a bounded sample (the first key-group blocks): what a user wants to know before a
migration, at a cost that does not grow with the state."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from flinkstate import Savepoint, printable
from flinkstate.binary import KeyGroupRange
from flinkstate.cli.verbose import phase, savepoint_opened
from flinkstate.format.keyed_header import StateMetaInfo
from flinkstate.format.rocksdb_native import NativeRocksDBStream
from flinkstate.format_errors import SavepointFormatError
from flinkstate.serializers.kryo import KryoSnapshot, OpaqueValue, kryo_snapshots
from flinkstate.serializers.kryo_data import KryoValue
from flinkstate.storage.locations import StorageError

#: Some operator's state could not be read (the listing is printed all the same).
EXIT_UNREADABLE = 1
#: The Kryo sample of a state: at most this many key-group blocks read, and values looked at.
SAMPLE_BLOCKS = 4
SAMPLE_VALUES = 200


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("describe", help="show a savepoint's operators and keyed states",
                                   description="Show the metadata version, checkpoint id, operators and, for each "
                                               "keyed state, its kind and key/namespace/value/user-key types.")
    parser.add_argument("savepoint", metavar="SAVEPOINT", help="savepoint directory or its _metadata file")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    with phase("read _metadata"):
        savepoint = Savepoint.open(args.savepoint)
    savepoint_opened(savepoint)
    with phase("read each operator's keyed-state header"):
        description = savepoint.describe()
    with phase(f"sample Kryo states (at most {SAMPLE_BLOCKS} key-group blocks each)"):
        add_kryo_verdicts(savepoint, description)
    if args.json:
        print(json.dumps(description, indent=2))
    else:
        print(render_text(description))  # every line escaped: names come from the file
    # What could not be read is also said on stderr, and the exit status says it: a listing with holes is not a
    # successful describe.
    errors = [op["error"] for op in description["operators"] if "error" in op]
    for error in errors:
        print(f"flinkstate: error: {printable(error)}", file=sys.stderr)
    return EXIT_UNREADABLE if errors else 0


def render_text(description: dict[str, Any]) -> str:
    lines = [f"savepoint {description['path']}",
             f"  metadata version {description['metadata_version']}, checkpoint {description['checkpoint_id']}"]
    for op in description["operators"]:
        names = ", ".join(f"{k} {op[k]}" for k in ("uid", "name") if op[k])
        lines.append(f"operator {op['id']}" + (f" ({names})" if names else ""))
        lines.append(f"  parallelism {op['parallelism']}, max parallelism {op['max_parallelism']}")
        if op["operator_states"]:
            lines.append(f"  operator state: {', '.join(op['operator_states'])}")
        for state in op.get("operator_state_details", []):
            what = state["type"] or f"type unknown ({state.get('error', 'no subtask registers it')})"
            lines.append(f"    {state['name']}: {state['mode']}, {what}")
        if op["coordinator_state_bytes"] is not None:
            lines.append(f"  coordinator state: {op['coordinator_state_bytes']} bytes")
        for state in op["keyed_states"]:
            lines.append(f"  keyed state {state['name']}: {state['kind']}")
            lines.append(f"    key {state['key_type']}, namespace {state['namespace_type']}")
            if state["user_key_type"]:
                lines.append(f"    user key {state['user_key_type']}")
            lines.append(f"    value {state['value_type']}")
            if state.get("kryo"):
                lines.append(f"    {state['kryo']}")
        if "error" in op:
            lines.append(f"  error: {op['error']}")
    return "\n".join(printable(line) for line in lines)


def add_kryo_verdicts(savepoint: Savepoint, description: dict[str, Any]) -> None:
    """Adds ``"kryo"`` (one line) to every keyed state in ``description`` whose value, element or user key
    serializer holds a Kryo serializer."""
    for op in description["operators"]:
        if not op["keyed_states"] or "error" in op:
            continue
        header = savepoint.keyed_header(op["id"], tolerant=True)
        states = {s.name: s for s in header.states} if header is not None else {}
        for state in op["keyed_states"]:
            meta = states.get(state["name"])
            if meta is not None and meta.kind != "TIMERS":
                verdict = kryo_verdict(savepoint, op["id"], meta)
                if verdict is not None:
                    state["kryo"] = verdict


def kryo_verdict(savepoint: Savepoint, operator_id: str, state: StateMetaInfo) -> str | None:
    """What happens to the state's Kryo records, from the values of its first key-group blocks (at most
    :data:`SAMPLE_BLOCKS` read, :data:`SAMPLE_VALUES` looked at); None when the state holds no Kryo data."""
    found = kryo_snapshots([state.value_serializer, state.user_key_serializer])
    if not found:
        return None
    snapshot: KryoSnapshot = found[0]
    values: list[Any] = []
    blocks = 0
    try:
        for _, stream in savepoint.keyed_streams(operator_id):
            if isinstance(stream, NativeRocksDBStream):  # reading needs the RocksDB instance rebuilt: not sampled
                return "Kryo: values not sampled (a native RocksDB snapshot: dump or check reads them)"
            present = [key_group for key_group, _, _ in stream.blocks[:SAMPLE_BLOCKS - blocks]]
            if not present:
                continue
            blocks += len(present)
            for _, entries in stream.iter_blocks(state.name, KeyGroupRange(present[0], present[-1])):
                for entry in entries:
                    _kryo_records(entry[2:], values)
            if len(values) >= SAMPLE_VALUES or blocks >= SAMPLE_BLOCKS:
                break
    except SavepointFormatError as exc:
        return f"Kryo: not decodable ({exc.what})"
    except StorageError as exc:
        return f"Kryo: not sampled ({exc})"
    sample = values[:SAMPLE_VALUES]
    where = f"in the first {len(sample)} Kryo records of {blocks} key-group block{'s' if blocks != 1 else ''}"
    return f"{snapshot.describe_values(sample)} {where}" if sample else f"Kryo: no values in the first {blocks} " \
        f"key-group blocks"


def _kryo_records(item: Any, out: list[Any]) -> None:
    """The Kryo records inside a decoded value (a POJO's fields, a list's elements, a map entry's parts)."""
    if isinstance(item, (KryoValue, OpaqueValue)):
        out.append(item)
    elif isinstance(item, dict):
        for value in item.values():
            _kryo_records(value, out)
    elif isinstance(item, (list, tuple)):
        for value in item:
            _kryo_records(value, out)
