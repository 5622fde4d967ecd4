"""The keyed states of Flink's savepoint corpus (tests/corpus/savepoints) in canonical blocks, with each state's own
codec: what the compiled fast path's tests walk, block by block, against the pure-Python reference."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from flinkstate.format.keyed_header import TIMERS, StateMetaInfo
from flinkstate.migration.entry_codec import StateCodec
from flinkstate.migration.plan import OperatorPlan, StateRewrite
from flinkstate.savepoint import Savepoint

SAVEPOINTS = Path(__file__).parents[1] / "corpus" / "savepoints"
SAVEPOINT_DIRS = (SAVEPOINTS / "dirs.txt").read_text(encoding="utf-8").split()


def canonical_streams(path: Path) -> list[Any]:
    """The keyed-state streams of a savepoint that are in canonical blocks (none for one this tool refuses)."""
    try:
        sp = Savepoint.open(path)
        streams = [stream for op in sp.operators for _, stream in sp.keyed_streams(op)]
        return [s for s in streams if s.header() and s.canonical_blocks]
    except Exception:
        return []  # a savepoint this tool refuses: nothing to walk (test_speedups covers its errors)


def state_codecs(path: Path) -> Iterator[tuple[Any, int, StateMetaInfo, StateCodec]]:
    """``(stream, state id, state, codec)`` per keyed state (not timers) of a savepoint's canonical streams, the
    codec the state's own (old and new serializers alike: the verifier's round trip); states this tool cannot encode
    are left out (the verifier refuses them with the reference's error)."""
    for stream in canonical_streams(path):
        header = stream.header()
        if header.key_serializer is None:
            continue
        identity = OperatorPlan(None, "", None, header, header,  # type: ignore[arg-type]
                                [StateRewrite(m.name, m.name, i, m.kind, None, None, False, True)
                                 for i, m in enumerate(header.states)])
        for state_id, state in enumerate(header.states):
            if state.kind == TIMERS:
                continue
            try:
                codec = StateCodec(identity, identity.rewrites[state_id], stream.prefix_bytes)  # type: ignore[arg-type]
            except Exception:
                continue
            yield stream, state_id, state, codec
