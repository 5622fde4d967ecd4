"""The verifier's source entries of an operator whose keyed state is in a native format (native RocksDB files, the
HashMap backend's own blocks, a changelog checkpoint's materialized state with its log applied), read with the
native readers, not through the canonical blocks the migration made of them (:mod:`flinkstate.migration.native`),
so that a fault in that conversion shows as a difference.

As for canonical sources (``verify_entries._exact_source_entries``), every source entry must re-encode to exactly
the bytes Flink wrote before it is compared: a RocksDB entry to its key and value bytes; a heap element
(``namespace, key, state``, the state serialized whole) to its bytes in the block. A codec that loses anything (a
nanosecond, a NaN payload) is caught here, not hidden behind two equally shortened values.

The RocksDB reader is the migration's own reader, so a blind spot of it (entries it never returns, such as merge
operands it could not resolve) would be the verifier's too. Its every (key, value) is therefore checked against an
independent walk of the snapshot's SST files (:mod:`flinkstate.format.sst_walk`, pure Python, no RocksDB), in key
order: a key either side lacks, or a value that differs, refuses the migration.
Memory: one key group's entries, and one data block per SST file of the state's column family.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator
from typing import Any

from flinkstate.binary import I32, KeyGroupRange
from flinkstate.errors import FlinkStateError
from flinkstate.format.changelog import ChangelogStream
from flinkstate.format.keyed_header import TIMERS, KeyedBackendHeader, StateMetaInfo
from flinkstate.format.keyed_stream import KeyedStateStream
from flinkstate.format.metadata import OperatorState
from flinkstate.format.rocksdb_native import NativeRocksDBStream, iter_raw
from flinkstate.format.sst_walk import SstTable, column_family_tables, resolved_entries
from flinkstate.migration.canonical import show
from flinkstate.migration.plan import OperatorPlan, StateRewrite
from flinkstate.migration.rewrite import StateCodec
from flinkstate.migration.verify_errors import VerificationError
from flinkstate.savepoint import Savepoint
from flinkstate.serializers.timer import Timer

Encoder = Callable[[Any, bytearray], None]


class NativeVerificationError(FlinkStateError):
    """A native source entry does not re-encode to its bytes (raised on as the verifier's ``VerificationError``)."""


def native_source(source: Savepoint, op: OperatorState) -> bool:
    """Whether any subtask of the operator holds keyed state in a native format (read from the source itself)."""
    for _, stream in source.keyed_streams(op):
        if isinstance(stream, (NativeRocksDBStream, ChangelogStream)):
            return True
        stream.header()
        if stream.heap_format:
            return True
    return False


def _identity_codec(op: OperatorState, header: KeyedBackendHeader, state_id: int, prefix_bytes: int) -> StateCodec:
    identity = OperatorPlan(op, op.operator_id, op.uid, header, header,
                            [StateRewrite(m.name, m.name, i, m.kind, None, None, False, True)
                             for i, m in enumerate(header.states)])
    rewrite = identity.rewrites[state_id]
    assert rewrite is not None
    return StateCodec(identity, rewrite, prefix_bytes)


def native_source_entries(source: Savepoint, op: OperatorState, op_plan: OperatorPlan, rewrite: StateRewrite,
                          where: str, key_groups: KeyGroupRange | None = None
                          ) -> Iterator[tuple[int, list[tuple[Any, ...]]]]:
    """``(key group, entries)`` of one state of the source, decoded by each stream's own reader and checked to
    re-encode exactly, in key-group order (subtask ranges are disjoint and in order); within ``key_groups``."""
    if source.unrecorded_key(op):  # the key type the plan took from the new version (plan._assume_target_key)
        assert op_plan.old_header is not None and op_plan.old_header.key_serializer is not None
        source.assume_key_serializer(op, op_plan.old_header.key_serializer)
    for _, stream in source.keyed_streams(op):
        if key_groups is not None and not len(stream.key_group_range.intersection(key_groups)):
            continue
        header = stream.header()
        state_id = header.state_index(rewrite.old_name)
        if state_id is None:
            continue  # this subtask never registered the state
        try:
            if isinstance(stream, NativeRocksDBStream):
                yield from _rocksdb_entries(stream, op, header, state_id, key_groups)
            elif isinstance(stream, ChangelogStream):
                # No stored form of the state to re-encode to: the reader applies the log's changes, each consumed
                # to its last byte, and checks keys read with an assumed key type against their key groups.
                yield from stream.iter_blocks(rewrite.old_name, key_groups)
            elif stream.heap_format:
                yield from _heap_entries(stream, header, state_id, key_groups)
            else:  # the State Processor API mixes canonical streams with heap ones
                yield from _canonical_entries(stream, op, header, state_id, key_groups)
        except NativeVerificationError as exc:
            raise VerificationError(f"{where}, {exc}") from None


def _rocksdb_entries(stream: NativeRocksDBStream, op: OperatorState, header: KeyedBackendHeader, state_id: int,
                     key_groups: KeyGroupRange | None) -> Iterator[tuple[int, list[tuple[Any, ...]]]]:
    codec = _identity_codec(op, header, state_id, stream.prefix_bytes)
    name = header.states[state_id].name
    walked = _walked_entries(stream, name, key_groups)
    current, entries = -1, list[tuple[Any, ...]]()
    for kg, key, value in iter_raw(stream, name, key_groups):
        _same_as_walked(kg, key, value, walked)
        if kg != current:
            if entries:
                yield current, entries
            current, entries = kg, []
        data = key + value
        entries.append(_codec_exact(codec, data, (0, len(key), len(key), len(data)), (key, value), kg, header,
                                    state_id))
    missed = next(walked, None)
    if missed is not None:
        raise _reader_missed(missed)
    if entries:
        yield current, entries


#: A native stream's SST files by column family, opened once per stream (the verifier reads a stream per state).
_TABLES: weakref.WeakKeyDictionary[NativeRocksDBStream, dict[str, list[SstTable]]] = weakref.WeakKeyDictionary()


def _walked_entries(stream: NativeRocksDBStream, state_name: str, key_groups: KeyGroupRange | None
                    ) -> Iterator[tuple[int, bytes, bytes, str]]:
    """``(key group, key, value, SST file)`` of one state inside the stream's key-group range (and ``key_groups``),
    in key order, as the walk of the SST files resolves them."""
    wanted = stream.key_group_range if key_groups is None else stream.key_group_range.intersection(key_groups)
    if not len(wanted):
        return
    if stream not in _TABLES:
        _TABLES[stream] = column_family_tables(stream.sst_files())
    prefix = stream.prefix_bytes
    for key, value, file in resolved_entries(_TABLES[stream].get(state_name, []), wanted.start.to_bytes(prefix, "big")):
        key_group = int.from_bytes(key[:prefix], "big")
        if key_group > wanted.end:
            return
        yield key_group, key, value, file


def _same_as_walked(kg: int, key: bytes, value: bytes, walked: Iterator[tuple[int, bytes, bytes, str]]) -> None:
    """The reader's next entry is the walk's next one; else the first difference, in one line."""
    want = next(walked, None)
    if want is not None and want[1] < key:
        raise _reader_missed(want)
    if want is None or want[1] > key:
        raise NativeVerificationError(f"key group {kg}: the RocksDB reader returned key {_shown(key)}, which the "
                                      f"snapshot's SST files do not hold (an independent walk of them)")
    if want[2] != value:
        raise NativeVerificationError(f"key group {kg}: key {_shown(key)}: the RocksDB reader's value ({len(value)} "
                                      f"bytes) is not the one the SST file {want[3]} resolves to ({len(want[2])} "
                                      f"bytes; an independent walk of the files)")


def _reader_missed(walked: tuple[int, bytes, bytes, str]) -> NativeVerificationError:
    kg, key, _, file = walked
    return NativeVerificationError(f"key group {kg}: the RocksDB reader did not return key {_shown(key)}, which the "
                                   f"SST file {file} holds (an independent walk of the snapshot's files): entries "
                                   f"would be lost")


def _shown(key: bytes) -> str:
    return "0x" + key[:24].hex() + ("..." if len(key) > 24 else "")


def _canonical_entries(stream: KeyedStateStream, op: OperatorState, header: KeyedBackendHeader, state_id: int,
                       key_groups: KeyGroupRange | None) -> Iterator[tuple[int, list[tuple[Any, ...]]]]:
    codec = _identity_codec(op, header, state_id, stream.prefix_bytes)
    for kg, start, end in stream.blocks:
        if key_groups is not None and kg not in key_groups:
            continue
        data = stream.read_block(kg, start, end)
        entries = []
        for sid, ks, ke, vs, ve in stream.raw_entries(data, kg, start):
            if sid == state_id:
                stored = (bytes((data[ks] & 0x7F,)) + data[ks + 1:ke], data[vs:ve])
                entries.append(_codec_exact(codec, data, (ks, ke, vs, ve), stored, kg, header, state_id))
        if entries:
            yield kg, entries


def _heap_entries(stream: KeyedStateStream, header: KeyedBackendHeader, state_id: int,
                  key_groups: KeyGroupRange | None) -> Iterator[tuple[int, list[tuple[Any, ...]]]]:
    state = header.states[state_id]
    encode_element = _heap_element_encoder(state, header)
    for block in stream.heap_blocks(state.name, key_groups):
        entries: list[tuple[Any, ...]] = []
        for sid, _, elements in block.sections:
            if sid != state_id:
                continue
            for element in elements:
                try:
                    same = encode_element(element.entries) == block.payload[element.start:element.end]
                except FlinkStateError:
                    raise
                except Exception as exc:
                    raise _failed(block.key_group, exc) from None
                if not same:
                    raise _not_exact(block.key_group, element.entries[0], header, state_id)
                entries += element.entries
        if entries:
            yield block.key_group, entries


def _heap_element_encoder(state: StateMetaInfo, header: KeyedBackendHeader
                          ) -> Callable[[tuple[tuple[Any, ...], ...]], bytes]:
    """The bytes ``HeapSnapshotStrategy`` writes for one element, from its decoded entries (one entry; a map state
    one per user key, in the element's order): namespace, key, then the state by its full serializer (a list state's
    ``ListSerializer``, a map state's ``MapSerializer``); a timer by its ``TimerSerializer``."""
    kind, full = state.kind, state.serializer("VALUE_SERIALIZER")
    if full is None or header.key_serializer is None or state.namespace_serializer is None:
        raise NativeVerificationError(f"state {state.name}: no key, namespace or value serializer")
    if kind == TIMERS:
        timer = full.encoder()

        def encode_timer(entries: tuple[tuple[Any, ...], ...]) -> bytes:
            (key, namespace, timestamp), = entries
            out = bytearray()
            timer(Timer(timestamp, key, namespace), out)
            return bytes(out)

        return encode_timer
    key_enc: Encoder = header.key_serializer.encoder()
    ns_enc: Encoder = state.namespace_serializer.encoder()
    if kind == "MAP":
        user_key_enc, user_value_enc = full.nested[0].encoder(), full.nested[1].encoder()
    else:
        value_enc = full.encoder()

    def encode(entries: tuple[tuple[Any, ...], ...]) -> bytes:
        out = bytearray()
        ns_enc(entries[0][1], out)
        key_enc(entries[0][0], out)
        if kind != "MAP":
            value_enc(entries[0][2], out)
            return bytes(out)
        out += I32.pack(len(entries))
        for _, _, user_key, user_value in entries:
            user_key_enc(user_key, out)
            if user_value is None:
                out.append(1)
            else:
                out.append(0)
                user_value_enc(user_value, out)
        return bytes(out)

    return encode


def _codec_exact(codec: StateCodec, data: bytes, span: tuple[int, int, int, int], stored: tuple[bytes, bytes],
                 kg: int, header: KeyedBackendHeader, state_id: int) -> tuple[Any, ...]:
    """One stored (key, value) decoded, and checked to encode back to ``stored``."""
    try:
        entry = codec.decode(data, *span)
        same = codec.encode_entry(entry, kg) == stored
    except FlinkStateError:
        raise
    except Exception as exc:
        raise _failed(kg, exc) from None
    if not same:
        raise _not_exact(kg, entry, header, state_id)
    return entry


def _failed(kg: int, exc: Exception) -> NativeVerificationError:
    return NativeVerificationError(f"key group {kg}: a source entry cannot be decoded and re-encoded "
                                   f"({type(exc).__name__}: {exc})")


def _not_exact(kg: int, entry: tuple[Any, ...], header: KeyedBackendHeader, state_id: int) -> NativeVerificationError:
    state = header.states[state_id]
    type_name = state.value_serializer.type_name() if state.value_serializer is not None else state.kind
    return NativeVerificationError(f"key group {kg}: the source entry {show(entry)} does not re-encode to the bytes "
                                   f"Flink wrote: this tool's codec for {type_name} would change it, so the state "
                                   f"cannot be migrated exactly")


__all__ = ["NativeVerificationError", "native_source", "native_source_entries"]
