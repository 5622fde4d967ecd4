"""A canonical key-group block's entries (``FullSnapshotAsyncWriter``), walked without decoding and written::

    u16 kvStateId
    repeat: i32 keyLen; key; i32 valueLen; value
            if key[0] & 0x80 (set on the last entry of a state's run): u16 next kvStateId, 0xFFFF = end of block

:func:`iter_raw_entries` walks one (uncompressed) block, :func:`encode_block` writes one; the compiled walk
(``flinkstate._speedups``) is used where built, this walk reports what it refuses.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from flinkstate._speedups import raw_entries_compiled
from flinkstate.binary import I32, U16
from flinkstate.format.keyed_header import END_OF_KEY_GROUP_MARK, FIRST_BIT_IN_BYTE_MASK
from flinkstate.format_errors import SavepointFormatError


def iter_raw_entries(data: bytes, state_count: int | None = None) -> Iterator[tuple[int, int, int, int, int]]:
    """``(state id, key start, key end, value start, value end)`` of every entry of an uncompressed key-group block,
    without decoding anything (copying, counting and byte-level comparison). Lengths are checked here, and state ids
    against ``state_count`` (the header's number of states) when given."""
    compiled = raw_entries_compiled(data, state_count)
    if compiled is not None:  # else the walk below reports what the compiled one refused
        yield from compiled
        return
    unpack_i32, unpack_u16 = I32.unpack_from, U16.unpack_from
    size = len(data)
    if size < 2:
        raise SavepointFormatError("empty key-group block", offset=0)
    state_id = unpack_u16(data, 0)[0]
    pos = 2
    check_state_id(state_id, state_count, 0)
    while pos + 4 <= size:
        key_len = unpack_i32(data, pos)[0]
        ks = pos + 4
        ke = ks + key_len
        if key_len <= 0 or ke + 4 > size:
            raise SavepointFormatError(f"bad key length {key_len}", offset=pos)
        value_len = unpack_i32(data, ke)[0]
        vs = ke + 4
        pos = vs + value_len
        if value_len < 0 or pos > size:
            raise SavepointFormatError(f"bad value length {value_len}", offset=ke)
        yield state_id, ks, ke, vs, pos
        if data[ks] & FIRST_BIT_IN_BYTE_MASK:
            if pos + 2 > size:
                raise SavepointFormatError("missing state id after the last entry of a run", offset=pos)
            state_id = unpack_u16(data, pos)[0]
            pos += 2
            if state_id == END_OF_KEY_GROUP_MARK:
                if pos != size:
                    raise SavepointFormatError(f"{size - pos} bytes after the end-of-key-group mark", offset=pos)
                return
            check_state_id(state_id, state_count, pos - 2)
    raise SavepointFormatError("block ends without an end-of-key-group mark", offset=pos)


def check_state_id(state_id: int, state_count: int | None, offset: int) -> None:
    """A block's state ids index the header's state list: one past it is corruption, not an unknown state."""
    if state_count is not None and state_id >= state_count:
        raise SavepointFormatError(f"state id {state_id} in a key-group block, but the header lists {state_count} "
                                   f"states", offset=offset)


def raw_key(data: bytes, ks: int, ke: int) -> bytes:
    """An entry's key bytes without the "last entry of its state's run" flag, which depends on the neighbours."""
    first = data[ks]
    if first & FIRST_BIT_IN_BYTE_MASK:
        return bytes((first & 0x7F,)) + data[ks + 1:ke]
    return data[ks:ke]


def encode_block(runs: Iterable[tuple[int, list[tuple[bytes, bytes]]]]) -> bytes:
    """One key group's block, uncompressed: per (state id, entries) run, the entries back to back with the
    META-DATA-FOLLOWS flag on the last key and the next state id (0xFFFF after the last run) after it.
    Keys are composite keys whose first byte has the flag bit clear."""
    out = bytearray()
    pack_i32, pack_u16 = I32.pack, U16.pack
    for state_id, entries in runs:
        if not entries:
            continue
        out += pack_u16(state_id)  # the block's first state id, or the one announced after a run's flagged entry
        last = len(entries) - 1
        for i, (key, value) in enumerate(entries):
            out += pack_i32(len(key))
            if i == last:
                out.append(key[0] | FIRST_BIT_IN_BYTE_MASK)
                out += key[1:]
            else:
                out += key
            out += pack_i32(len(value))
            out += value
    if out:
        out += pack_u16(END_OF_KEY_GROUP_MARK)
    return bytes(out)


__all__ = ["check_state_id", "encode_block", "iter_raw_entries", "raw_key"]
