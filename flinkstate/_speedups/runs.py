"""The migration's per-entry work, compiled (``_cdecode``): a POJO's fields mapped, a block's entries of one state
migrated and written, and the verifier's expected entries and comparison, each entry handled in one step.

The pure Python stays the reference, as in the rest of :mod:`flinkstate._speedups`: each function takes the common
case and hands anything else back (None) to the caller's reference loop, which counts, dead-letters and reports
as it always did; a transform is never called from here except as the reference would call it. Working entry by
entry inside a block, without lists of a key group's decoded entries, keeps the work per entry that of a small key
group: at 10^7 entries a key group holds tens of thousands, and passes over lists that size left the CPU caches.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from flinkstate._speedups import (
    E_LIST,
    E_MAP,
    E_VALUE,
    canonical_equality,
    enabled,
    extension,
    is_compiled,
    state_encoding,
)

#: A state's kind as the compiled functions take it; TIMERS have no values to migrate.
_VALUE_KINDS = {"LIST": E_LIST, "MAP": E_MAP}


def _value_kind(kind: str) -> int | None:
    return None if kind == "TIMERS" else _VALUE_KINDS.get(kind, E_VALUE)


def fast_record_map(names: Sequence[str], sources: Sequence[str | None], parts: Sequence[Any],
                    constants: Sequence[Any], reference: Callable[[Any], Any]) -> Callable[[Any], Any] | None:
    """The compiled twin of a POJO's field mapping (``reference``, migration.transforms' ``pojo``): per new field,
    the old field it comes from (None: added, its constant) and that field's own transform (None: kept). It hands
    ``reference`` what it does not take (a value that is not a plain dict, a subclass value). None when off."""
    if not enabled():
        return None
    mapper: Callable[[Any], Any] = extension().RecordMap(tuple(names), tuple(sources), tuple(parts), tuple(constants),
                                                      reference)
    return mapper


def migrate_block(decoder: object, data: bytes, key_group: int, state_id: int, state_count: int, prefix_bytes: int,
                  kind: str, transform: Callable[[Any], Any] | None, drop: object,
                  value_encoder: Callable[[Any, bytearray], None]) -> bytearray | None:
    """The entries of state ``state_id`` in one block (``data`` as ``read_block`` returns it) migrated
    (``transform`` as migration.entry_codec.migrate_entry applies it) and written as
    :func:`~flinkstate.format.key_group_block.encode_block` writes them, without the state id and end mark, each
    key as stored: each entry decoded by ``decoder``, migrated and encoded in one compiled step, without a list of
    the key group's entries (the work per entry stays that of a small key group). The state's entries must be one
    run. None when off, the decoder is not compiled, or the run is the reference's: a transform raised or returned
    ``drop``, a list was emptied, the block does not walk or decode here (the caller then migrates it entry by
    entry, which counts, dead-letters and reports)."""
    value_kind = _value_kind(kind)
    if not enabled() or value_kind is None or not is_compiled(decoder) or type(data) is not bytes:
        return None
    run: bytearray | None = decoder.migrate_block(data, key_group, state_id, state_count, prefix_bytes, value_kind,
                                                  transform, drop, value_encoder)
    return run


def expected_run(entries: list[tuple[Any, ...]], kind: str, transform: Callable[[Any], Any] | None, drop: object
                 ) -> list[tuple[Any, ...]] | None:
    """migrate_entry of each of a run's decoded ``entries`` (keys kept), compiled: what the verifier expects. None
    when off or the run is the reference's (a transform raised or returned ``drop``, a list was emptied)."""
    value_kind = _value_kind(kind)
    if not enabled() or value_kind is None:
        return None
    expected: list[tuple[Any, ...]] | None = extension().expected_run(entries, value_kind, transform, drop)
    return expected




def expected_blocker(key: Any, state: Any, prefix_bytes: int
                     ) -> Callable[[object, bytes, int, int, int, Callable[[Any], Any] | None, object],
                                   list[tuple[Any, ...]] | None] | None:
    """The verifier's expected entries of one source block, compiled: ``expected(decoder, data, key_group,
    state_id, state_count, transform, drop)`` decodes each entry of state ``state_id`` (``state`` with the key
    serializer ``key``) with ``decoder`` (the state's own), checks that it re-encodes to exactly the bytes Flink
    wrote (as :func:`~flinkstate._speedups.reencode_checker`) and migrates it (as :func:`expected_run`), in one
    step. It returns None for a block whose every entry it does not take (the caller reruns the reference, which
    reports). None when the fast path is off or the state has no compiled encoding."""
    encoding = state_encoding(key, state)
    if encoding is None or None in encoding[2][:3]:
        return None
    _, ambiguous, encoders = encoding

    def expected(decoder: object, data: bytes, key_group: int, state_id: int, state_count: int,
                 transform: Callable[[Any], Any] | None, drop: object) -> list[tuple[Any, ...]] | None:
        if not is_compiled(decoder) or type(data) is not bytes:
            return None
        entries: list[tuple[Any, ...]] | None = decoder.expected_block(
            data, key_group, state_id, state_count, prefix_bytes, ambiguous, *encoders, transform, drop)
        return entries

    return expected


def block_comparer(canonical: Callable[[Any], Any]
                   ) -> Callable[[object, bytes, int, int, int, int, list[Any]], int | None] | None:
    """The verifier's comparison of a written block with the expected entries, compiled: ``compare(decoder, data,
    key_group, state_id, state_count, prefix_bytes, expected)`` decodes the block's entries of state ``state_id``
    one by one and is -1 when they are surely equal to ``expected`` pair by pair, and as many (as
    :func:`~flinkstate._speedups.fast_same_entries` judges lists), else the index of the first it cannot call equal;
    None when it cannot walk or decode the block. Either way but -1, the caller decodes the block with the reference
    and compares canonical forms, which decide. None when the fast path is off."""
    if not enabled():
        return None
    reference = canonical_equality(canonical)

    def compare(decoder: object, data: bytes, key_group: int, state_id: int, state_count: int, prefix_bytes: int,
                expected: list[Any]) -> int | None:
        if not is_compiled(decoder) or type(data) is not bytes:
            return None
        try:
            index: int = decoder.compare_block(data, key_group, state_id, state_count, prefix_bytes, expected,
                                               reference)
        except Exception:  # the reference decodes the block and reports what is wrong with it
            return None
        return index

    return compare


__all__ = ["block_comparer", "expected_blocker", "expected_run", "fast_record_map", "migrate_block"]
