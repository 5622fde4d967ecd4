"""Corrupting a migrated savepoint in place, to show that a verification can fail."""

from __future__ import annotations

from pathlib import Path

from flinkstate.format.keyed_stream import KeyedStateStream
from flinkstate.savepoint import Savepoint


def flip_a_value_byte(out: Path, operator: str) -> tuple[str, int]:
    """Flips the last byte of the first non-empty value of a non-timer state in the first keyed stream of
    ``operator`` of the canonical savepoint at ``out``, in place: the stream still parses, only a value changed.
    Returns the state's name and the key group."""
    _, stream = Savepoint.open(out).keyed_streams(operator)[0]
    assert isinstance(stream, KeyedStateStream) and not stream.header().compressed
    header = stream.header()
    key_group, start, end = stream.blocks[0]
    data = stream.read_block(key_group, start, end)
    sid, _, _, _, ve = next(e for e in stream.raw_entries(data, key_group, start)
                            if header.states[e[0]].kind != "TIMERS" and e[4] > e[3])
    assert stream.source.name is not None
    file = out / stream.source.name
    stored = bytearray(file.read_bytes())
    stored[start + ve - 1] ^= 0x01
    file.write_bytes(bytes(stored))
    return header.states[sid].name, key_group
