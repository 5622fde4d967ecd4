"""``flinkstate describe SAVEPOINT [--json]``: metadata version, checkpoint id, operators and their keyed states
with kinds and types. A keyed state whose values hold Kryo data also says whether its Kryo records decode or pass
through byte for byte, from a bounded sample (the first key-group blocks): what a user wants to know before a
migration, at a cost that does not grow with the state."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from flinkstate import Savepoint, kryo_report, printable
from flinkstate.cli.verbose import phase, savepoint_opened

#: Some operator's state could not be read (the listing is printed all the same).
EXIT_UNREADABLE = 1


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
    # Operator by operator: each is described, its Kryo states sampled, and printed before the next one, so memory
    # stays that of one operator's description however many the _metadata lists (a million took 3.6 GB at once).
    errors = []
    with phase(f"read each operator's keyed-state header, sample Kryo states (at most {kryo_report.SAMPLE_BLOCKS} "
               f"key-group blocks each)"):
        head = savepoint.describe_head()
        if args.json:  # the same text as json.dumps(savepoint.describe(), indent=2), written piece by piece
            sys.stdout.write(json.dumps(head, indent=2)[:-2] + ',\n  "operators": [')
        else:
            sys.stdout.write(render_head(head))
        separator = "\n"
        for op in savepoint.describe_operators():
            kryo_report.add_operator_kryo_verdicts(savepoint, op)
            if args.json:
                sys.stdout.write(separator + "    " + json.dumps(op, indent=2).replace("\n", "\n    "))
                separator = ",\n"
            else:
                sys.stdout.write("\n" + render_operator(op))  # every line escaped: names come from the file
            if "error" in op:
                errors.append(op["error"])
        if args.json:
            sys.stdout.write("]\n}\n" if separator == "\n" else "\n  ]\n}\n")
        else:
            sys.stdout.write("\n")
    # What could not be read is also said on stderr, and the exit status says it: a listing with holes is not a
    # successful describe.
    for error in errors:
        print(f"flinkstate: error: {printable(error)}", file=sys.stderr)
    return EXIT_UNREADABLE if errors else 0


def render_text(description: dict[str, Any]) -> str:
    """The text ``describe`` prints for a whole description."""
    return "\n".join([render_head(description), *map(render_operator, description["operators"])])


def render_head(head: dict[str, Any]) -> str:
    lines = [f"savepoint {head['path']}",
             f"  metadata version {head['metadata_version']}, checkpoint {head['checkpoint_id']}"]
    return "\n".join(printable(line) for line in lines)


def render_operator(op: dict[str, Any]) -> str:
    lines: list[str] = []
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

