"""Key-group blocks of the HashMap (heap) backend's own snapshot format, read and written.

``HeapSnapshotStrategy`` writes HashMap checkpoints, HashMap native savepoints, and every heap savepoint before
Flink 1.13's unified savepoint format (so the heap savepoints of Flink 1.3 to 1.12). The stream starts with the same
``KeyedBackendSerializationProxy`` header as a canonical savepoint (:mod:`flinkstate.format.keyed_header`); then,
for *every* key group of the range, empty or not, at the offset the handle records::

    i32 keyGroupId                                  (never compressed)
    per registered state, in header order (each one Snappy-framed stream of its own when the header says so):
        i16 stateId                                 (index into the header's state list)
        i32 n; n x element

An element of a key/value state is ``namespace, key, state`` (``CopyOnWriteStateMapSnapshot.writeState``) where the
state is serialized by the state's full serializer: ``ListSerializer`` (i32 n; n x element) for list state,
``MapSerializer`` (i32 n; n x (user key; bool isNull; [value])) for map state. An element of a priority-queue (timer)
state is the timer as ``TimerSerializer`` writes it (``HeapPriorityQueueStateSnapshot`` through
``KeyGroupPartitioner``). Flink's reader (``HeapRestoreOperation.readKeyGroupStateData``) reads them back with one
decompressing stream per key group, which is why concatenated Snappy frames decompress as one here too.

Nothing in an element carries its length, so a block can only be walked by decoding every element of every state in
it: a state whose values cannot be delimited (Kryo, an unknown serializer) makes the rest of its key groups
unreadable, and is refused in one line.

Entries come out in the model of the canonical format (:meth:`flinkstate.format.keyed_stream.KeyedStateStream
.iter_blocks`): ``(key, namespace, value)``, a map state one ``(key, namespace, user_key, value)`` per user key, a
timer ``(key, namespace, timestamp)``. :func:`encode_heap_block` is the mirror of :func:`walk_heap_block`: the
elements of a block written back give the same bytes uncompressed, and the same payload compressed (Flink's Java
Snappy library and cramjam cut frames differently, so compressed bytes are equal only after decompression).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import cramjam

from flinkstate.binary import I16, I32
from flinkstate.format.keyed_header import TIMERS, KeyedBackendHeader, StateMetaInfo
from flinkstate.format.snappy_frames import SnappyCorrupt, decompress_framed
from flinkstate.format_errors import SavepointFormatError, UnsupportedFormat
from flinkstate.limits import LimitExceeded

Decoder = Callable[[bytes, int], tuple[Any, int]]

#: What the refusals and the format name say.
HEAP_FORMAT = "the HashMap (heap) backend's native snapshot format"


@dataclass(frozen=True)
class HeapElement:
    """One element of a state in a heap block: where its bytes are in the (decompressed) block, and what they
    decode to. ``key_end`` splits the element into its "key" part (namespace and key; for a timer, all of it) and
    its "value" part (the state as serialized), which is what raw comparisons look at."""

    state_id: int
    start: int
    key_end: int
    end: int
    entries: tuple[tuple[Any, ...], ...]


@dataclass(frozen=True)
class HeapBlock:
    """One key group's block: the key group it names, its payload (decompressed), and per state in written order
    (state id, start of its section, its elements)."""

    key_group: int
    payload: bytes
    sections: tuple[tuple[int, int, tuple[HeapElement, ...]], ...]


class HeapStateCodec:
    """Walks the elements of one state's section. ``decode`` is False for states that are only stepped over."""

    def __init__(self, state: StateMetaInfo, key: Decoder) -> None:
        self.state = state
        self.name = state.name
        self.kind = state.kind
        self.key = key
        self.namespace: Decoder | None = None
        self.value: Decoder | None = None
        self.user_key: Decoder | None = None
        self.user_value: Decoder | None = None
        self.refusal: str | None = None
        try:
            self._build()
        except (NotImplementedError, SavepointFormatError) as exc:
            self.refusal = str(exc)

    def _build(self) -> None:
        state = self.state
        full = state.serializer("VALUE_SERIALIZER")
        if full is None:
            raise SavepointFormatError("no value serializer")
        if self.kind == TIMERS:
            self.value = full.decoder()
            return
        if state.backend_type != "KEY_VALUE":
            raise SavepointFormatError(f"backend state type {state.backend_type} in a heap snapshot")
        namespace = state.namespace_serializer
        if namespace is None:
            raise SavepointFormatError("no namespace serializer")
        self.namespace = namespace.decoder()
        # Kryo (or a POJO of Kryo fields) has no length, but its decodable records delimit themselves: their
        # decoders refuse an opaque record per value, in one line.
        if self.kind == "MAP":
            user_key, user_value = full.nested[0], full.nested[1]
            if _undelimited(user_key) or _undelimited(user_value):
                raise SavepointFormatError(f"map entries of {full.type_name()} carry no length")
            self.user_key, self.user_value = user_key.decoder(), user_value.decoder()
            return
        if _undelimited(full):
            raise SavepointFormatError(f"{full.type_name()} values carry no length")
        self.value = full.decoder()

    def walk(self, buf: bytes, pos: int, state_id: int) -> tuple[list[HeapElement], int]:
        """The section's elements from ``pos`` (just after its i16 state id) and the position after them."""
        if self.refusal is not None:
            raise UnsupportedFormat(f"state {self.name}: {self.refusal}: in {HEAP_FORMAT} its elements cannot be "
                                    f"delimited, so this state and the states after it in each key group are not "
                                    f"readable")
        count = I32.unpack_from(buf, pos)[0]
        if count < 0 or count > len(buf) - pos:
            raise SavepointFormatError(f"state {self.name}: implausible number of elements {count}", offset=pos)
        pos += 4
        elements: list[HeapElement] = []
        append = elements.append
        if self.kind == TIMERS:
            timer_dec = self.value
            assert timer_dec is not None
            for _ in range(count):
                start = pos
                timer, pos = timer_dec(buf, pos)
                append(HeapElement(state_id, start, pos, pos, ((timer.key, timer.namespace, timer.timestamp),)))
            return elements, pos
        ns_dec, key_dec = self.namespace, self.key
        assert ns_dec is not None
        for _ in range(count):
            start = pos
            namespace, pos = ns_dec(buf, pos)
            key, pos = key_dec(buf, pos)
            key_end = pos
            if self.kind == "MAP":
                entries, pos = self._map(buf, pos, key, namespace)
            else:
                assert self.value is not None
                value, pos = self.value(buf, pos)
                entries = ((key, namespace, value),)
            append(HeapElement(state_id, start, key_end, pos, entries))
        return elements, pos

    def _map(self, buf: bytes, pos: int, key: Any, namespace: Any) -> tuple[tuple[tuple[Any, ...], ...], int]:
        uk_dec, uv_dec = self.user_key, self.user_value
        assert uk_dec is not None and uv_dec is not None
        n = I32.unpack_from(buf, pos)[0]
        if n < 0 or n > len(buf) - pos:
            raise SavepointFormatError(f"state {self.name}: implausible map size {n}", offset=pos)
        pos += 4
        out = []
        for _ in range(n):
            user_key, pos = uk_dec(buf, pos)
            is_null = buf[pos]
            pos += 1
            value = None
            if is_null == 0:
                value, pos = uv_dec(buf, pos)
            elif is_null != 1:
                raise SavepointFormatError(f"state {self.name}: bad map null flag {is_null}", offset=pos - 1)
            out.append((key, namespace, user_key, value))
        return tuple(out), pos


def heap_codecs(header: KeyedBackendHeader) -> list[HeapStateCodec]:
    """One codec per state of the header, in state-id order."""
    if header.key_serializer is None:
        raise SavepointFormatError("keyed state header without a key serializer")
    key = header.key_serializer.decoder()
    return [HeapStateCodec(state, key) for state in header.states]


def block_payload(data: bytes, compressed: bool) -> tuple[int, bytes]:
    """``(key group id, payload)`` of a stored block: the i32 key group, then the states' sections (decompressed)."""
    if len(data) < 4:
        raise SavepointFormatError(f"heap key-group block of {len(data)} bytes has no key-group id", offset=0)
    key_group = I32.unpack_from(data, 0)[0]
    if not compressed:
        return key_group, data[4:]
    try:
        return key_group, decompress_framed(data[4:])
    except LimitExceeded as exc:  # placed as a corrupted stream is, at the frames' start
        raise LimitExceeded(exc.what, offset=4) from None
    except SnappyCorrupt as exc:
        raise SavepointFormatError(f"corrupted snappy stream ({exc})", offset=4) from None


def walk_heap_block(data: bytes, key_group: int, codecs: list[HeapStateCodec], compressed: bool,
                    wanted: int | None = None) -> HeapBlock:
    """Parses one stored block of ``key_group``. Flink writes every state's section, empty or not, so there are as
    many sections as states; with ``wanted`` the walk stops after that state's section (the states after it need
    not be decodable). Offsets in errors are in the payload when ``compressed``, in ``data`` otherwise."""
    written, payload = block_payload(data, compressed)
    if written != key_group:  # HeapRestoreOperation: "Unexpected key-group in restore."
        raise SavepointFormatError(f"block starts with key group {written}, expected {key_group}", offset=0)
    base = 0 if compressed else 4
    sections: list[tuple[int, int, tuple[HeapElement, ...]]] = []
    pos = 0
    seen: set[int] = set()
    try:
        for _ in range(len(codecs)):
            start = pos
            state_id = I16.unpack_from(payload, pos)[0]
            if not 0 <= state_id < len(codecs) or state_id in seen:
                raise SavepointFormatError(f"state id {state_id} in a heap block of {len(codecs)} states",
                                           offset=base + pos)
            seen.add(state_id)
            elements, pos = codecs[state_id].walk(payload, pos + 2, state_id)
            sections.append((state_id, start, tuple(elements)))
            if state_id == wanted:
                return HeapBlock(key_group, payload, tuple(sections))
    except SavepointFormatError as exc:  # placed in the stored block (a refusal stays a refusal)
        raise exc.located(None, base if exc.offset is not None else 0) from None
    except (struct.error, IndexError, ValueError, UnicodeDecodeError, KeyError) as exc:
        raise SavepointFormatError(f"undecodable element ({type(exc).__name__}: {exc})", offset=base + pos) from None
    if pos != len(payload):
        raise SavepointFormatError(f"{len(payload) - pos} bytes after the last state's section", offset=base + pos)
    return HeapBlock(key_group, payload, tuple(sections))


def encode_heap_block(block: HeapBlock, compressed: bool) -> bytes:
    """A block's stored bytes from its parsed sections (element bytes as read): the mirror of
    :func:`walk_heap_block`. Compressed blocks are one Snappy-framed stream per state section, as Flink writes."""
    out = bytearray(I32.pack(block.key_group))
    payload = block.payload
    for state_id, start, elements in block.sections:
        section = bytearray(I16.pack(state_id))
        section += I32.pack(len(elements))
        for element in elements:
            section += payload[element.start:element.end]
        if start + len(section) > len(payload) or payload[start:start + len(section)] != section:
            raise SavepointFormatError(f"state id {state_id}: section does not match its elements", offset=start)
        out += bytes(cramjam.snappy.compress(bytes(section))) if compressed else section
    return bytes(out)


__all__ = ["HEAP_FORMAT", "HeapBlock", "HeapElement", "HeapStateCodec", "block_payload", "encode_heap_block",
           "heap_codecs", "walk_heap_block"]


def _undelimited(snapshot: Any) -> bool:
    """A value of ``snapshot`` has no end of its own, so it cannot be read inside a heap block."""
    return bool(snapshot.needs_end and not getattr(snapshot, "delimits_records", False))
