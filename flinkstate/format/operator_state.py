"""The operator-state stream of one subtask (split and union list state, broadcast state), read and written.

An ``OperatorStreamStateHandle`` in ``_metadata`` (:mod:`flinkstate.format.handles`) names the stream and, per state,
its distribution mode and offsets. The stream (``DefaultOperatorStateBackendSnapshotStrategy``) is::

    OperatorBackendSerializationProxy:
        i32 version (5: Flink 1.7 to 1.12; 6: since, with a compression flag)
        [version 6] bool compressed
        i16 n; n x state meta info (list states)         (the keyed header's StateMetaInfoSnapshot layout)
        i16 n; n x state meta info (broadcast states)
    then the states' values, each at an offset the handle records:
        list state (SPLIT_DISTRIBUTE, UNION): one offset per element; the element as its VALUE_SERIALIZER writes it
        broadcast state: one offset; i32 size; size x (key as KEY_SERIALIZER, value as VALUE_SERIALIZER)

Compressed, everything after the proxy is one Snappy-framed stream that Flink flushes at every offset
(``CompressibleFSDataOutputStream.getPos``), so each element's frames decompress on their own once the stream
identifier is put in front (what Flink's reader does when it seeks). Nothing in an element carries its length: its
end is the next offset of the stream (or the stream's end), and a decoded element must end exactly there.

Flink 2.x reads proxy versions 5 and 6 only (``StateMetaInfoSnapshotReadersWriters``: "No longer supported version"
below meta info version 6): older ones are refused here too. When a state's serializer snapshot cannot be read (a
class this toolkit does not know, such as a connector's own), the elements are still given, as bytes, with the class
named.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from flinkstate.binary import I32, Reader, Writer
from flinkstate.format.handles import ByteStreamStateHandle, OperatorStateMeta, OperatorStreamStateHandle
from flinkstate.format.keyed_header import StateMetaInfo, read_state_meta_info, write_state_meta_info
from flinkstate.format.keyed_stream import StreamSource
from flinkstate.format.snappy_frames import SnappyCorrupt, decompress_framed
from flinkstate.format_errors import SavepointFormatError, UnknownSerializerSnapshot, UnsupportedFormat
from flinkstate.limits import LimitExceeded
from flinkstate.storage.locations import SavepointLocation

OPERATOR_PROXY_VERSIONS = (5, 6)
#: The Snappy framing format's stream identifier chunk, which Flink writes once after the proxy.
SNAPPY_STREAM_IDENTIFIER = b"\xff\x06\x00\x00sNaPpY"
#: ``SourceOperator``'s split state: ``SimpleVersionedSerialization`` of each split, by the source's own serializer.
SOURCE_SPLITS_STATE = "SourceReaderState"


@dataclass
class OperatorBackendHeader:
    """``OperatorBackendSerializationProxy``: list states and broadcast states with their serializer snapshots."""

    version: int
    compressed: bool
    list_states: list[StateMetaInfo] = field(default_factory=list)
    broadcast_states: list[StateMetaInfo] = field(default_factory=list)
    length: int = 0

    def state(self, name: str) -> StateMetaInfo | None:
        return next((s for s in [*self.list_states, *self.broadcast_states] if s.name == name), None)

    def write(self) -> bytes:
        """The proxy's bytes, as Flink writes them."""
        w = Writer()
        w.i32(self.version)
        if self.version >= 6:
            w.bool(self.compressed)
        for states in (self.list_states, self.broadcast_states):
            w.i16(len(states))
            for state in states:
                write_state_meta_info(w, state)
        return w.getvalue()


def read_operator_header(reader: Reader) -> OperatorBackendHeader:
    start = reader.pos
    version = reader.i32()
    if version not in OPERATOR_PROXY_VERSIONS:
        raise UnsupportedFormat(f"operator state proxy version {version} is not supported (5 and 6, Flink 1.7 to "
                                f"2.x; Flink 2.x refuses older ones too)", reader.path, reader.base + start)
    header = OperatorBackendHeader(version, reader.bool() if version >= 6 else False)
    for states in (header.list_states, header.broadcast_states):
        count_at = reader.pos
        count = reader.i16()
        if count < 0:
            raise reader.error(f"negative number of operator states {count}", count_at)
        for _ in range(count):
            states.append(read_state_meta_info(reader))
    header.length = reader.pos
    return header


@dataclass(frozen=True)
class OperatorStateElement:
    """One stored element: a list state's element, or a broadcast state's whole map (``value`` a list of
    ``(key, value)`` pairs in stored order). ``value`` is None and ``undecoded`` says why when it is given as
    ``raw`` bytes only."""

    state: str
    mode: str
    index: int
    offset: int
    raw: bytes = field(repr=False)
    value: Any = None
    undecoded: str | None = None


class OperatorStateStream:
    """One subtask's operator-state stream. ``context`` (e.g. ``operator src, subtask 0``) prefixes errors."""

    def __init__(self, location: SavepointLocation, handle: OperatorStreamStateHandle, context: str) -> None:
        if handle.delegate is None:
            raise SavepointFormatError(f"{context}: operator state handle without a stream")
        self.handle = handle
        self.context = context
        self.source = StreamSource(location, handle.delegate)
        self._header: OperatorBackendHeader | None = None

    def header(self) -> OperatorBackendHeader:
        if self._header is None:
            ends = [o for meta in self.handle.states.values() for o in meta.offsets]
            data = self.source.read(0, min(ends) if ends else self.source.size)
            try:
                self._header = read_operator_header(Reader(data, 0, self.source.path))
            except SavepointFormatError as exc:
                raise exc.located(self.source.path, 0, self.context) from None
        return self._header

    def compressed(self) -> bool:
        """The proxy's compression flag, read on its own (it precedes the serializer snapshots, so it is known even
        when a snapshot cannot be parsed)."""
        head = Reader(self.source.read(0, 5), 0, self.source.path)
        version = head.i32()
        if version not in OPERATOR_PROXY_VERSIONS:
            self.header()  # the one-line refusal
        return version >= 6 and head.bool()

    def _boundaries(self) -> list[int]:
        return sorted({o for meta in self.handle.states.values() for o in meta.offsets} | {self.source.size})

    def element_bytes(self, name: str) -> list[tuple[int, bytes]]:
        """``(offset, bytes)`` of every element of state ``name`` (decompressed when the stream is)."""
        meta = self.handle.states.get(name)
        if meta is None:
            return []
        compressed = self.compressed()
        bounds = self._boundaries()
        found = []
        for offset in meta.offsets:
            end = next(b for b in bounds if b > offset) if offset < self.source.size else offset
            if not 0 < offset < end <= self.source.size:
                raise SavepointFormatError(f"{self.context}, state {name}: element offset {offset} outside the "
                                           f"stream ({self.source.size} bytes)", self.source.path, offset)
            data = self.source.read(offset, end - offset)
            if compressed:
                try:
                    data = decompress_framed(SNAPPY_STREAM_IDENTIFIER + data)
                except LimitExceeded as exc:
                    raise LimitExceeded(f"{self.context}, state {name}: {exc.what}", self.source.path,
                                        offset) from None
                except SnappyCorrupt as exc:
                    raise SavepointFormatError(f"{self.context}, state {name}: corrupted snappy frames ({exc})",
                                               self.source.path, offset) from None
            found.append((offset, data))
        return found

    def elements(self, name: str) -> Iterator[OperatorStateElement]:
        """Every element of state ``name``, decoded where its serializer snapshot is known."""
        meta = self.handle.states.get(name)
        if meta is None:
            return
        undecoded: str | None = None
        state: StateMetaInfo | None = None
        try:
            state = self.header().state(name)
            if state is None:
                raise SavepointFormatError(f"{self.context}: state {name} is in the handle but not in the stream's "
                                           f"header", self.source.path, 0)
        except UnknownSerializerSnapshot as exc:
            # No length around a snapshot: the header stops there, the elements are still where the handle says.
            undecoded = f"serializer snapshot class {exc.class_name} is not known to flinkstate"
        for index, (offset, data) in enumerate(self.element_bytes(name)):
            if state is None:
                yield OperatorStateElement(name, meta.mode, index, offset, data, None, undecoded)
                continue
            try:
                value = decode_element(state, data, meta.mode)
            except UnsupportedFormat as exc:
                yield OperatorStateElement(name, meta.mode, index, offset, data, None, exc.what)
                continue
            except SavepointFormatError as exc:
                raise exc.located(self.source.path, offset, f"{self.context}, state {name}, element {index}") \
                    from None
            yield OperatorStateElement(name, meta.mode, index, offset, data, value)


def decode_element(state: StateMetaInfo, data: bytes, mode: str) -> Any:
    """One element's value: a list state's element, or a broadcast state's ``[(key, value), ...]``. It must end
    exactly where the next element starts. A value kind that cannot be delimited is refused (UnsupportedFormat)."""
    value_snapshot = state.serializer("VALUE_SERIALIZER")
    if value_snapshot is None:
        raise SavepointFormatError(f"state {state.name}: no value serializer")
    try:
        if mode != "BROADCAST":
            if value_snapshot.needs_end:  # the element's slice is all of it
                value, end = value_snapshot.tail_decoder()(data, 0)
            else:
                value, end = value_snapshot.decoder()(data, 0)
        else:
            key_snapshot = state.serializer("KEY_SERIALIZER")
            if key_snapshot is None:
                raise SavepointFormatError(f"broadcast state {state.name}: no key serializer")
            if any(s.needs_end and not getattr(s, "delimits_records", False) for s in (key_snapshot, value_snapshot)):
                raise UnsupportedFormat(f"{key_snapshot.type_name()} -> {value_snapshot.type_name()} entries carry "
                                        f"no length")
            key_dec, value_dec = key_snapshot.decoder(), value_snapshot.decoder()
            size = I32.unpack_from(data, 0)[0]
            if not 0 <= size <= len(data):
                raise SavepointFormatError(f"implausible broadcast state size {size}", offset=0)
            end, pairs = 4, []
            for _ in range(size):
                key, end = key_dec(data, end)
                item, end = value_dec(data, end)
                pairs.append((key, item))
            value = pairs
    except NotImplementedError as exc:
        raise UnsupportedFormat(str(exc)) from None
    except (struct.error, IndexError, ValueError, UnicodeDecodeError, KeyError) as exc:
        raise SavepointFormatError(f"undecodable element ({type(exc).__name__}: {exc})", offset=0) from None
    if end != len(data):
        raise SavepointFormatError(f"element decoded to {end - len(data):+d} bytes beyond its length", offset=end)
    return value


def source_split(raw: bytes) -> dict[str, Any] | None:
    """A source split as ``SourceOperator`` stores it (``SimpleVersionedSerialization``: i32 serializer version,
    i32 length, the split serializer's bytes), or None when the bytes are not that."""
    if len(raw) < 8:
        return None
    version, length = I32.unpack_from(raw, 0)[0], I32.unpack_from(raw, 4)[0]
    if length != len(raw) - 8:
        return None
    return {"split_serializer_version": version, "split_bytes": raw[8:]}


def write_operator_stream(header: OperatorBackendHeader, states: dict[str, tuple[str, list[bytes]]]
                          ) -> tuple[bytes, OperatorStreamStateHandle]:
    """An uncompressed stream (header, then each state's elements as given: ``name -> (mode, element bytes)``) and
    the handle offsets that locate them, inline (the caller may store the bytes in a file and swap the delegate)."""
    if header.compressed:
        raise SavepointFormatError("writing compressed operator state is not supported")
    out = bytearray(header.write())
    metas = {}
    for name, (mode, elements) in states.items():
        offsets = []
        for element in elements:
            offsets.append(len(out))
            out += element
        metas[name] = OperatorStateMeta(mode, tuple(offsets))
    data = bytes(out)
    return data, OperatorStreamStateHandle(metas, ByteStreamStateHandle(len(data), "operator-state", data))


__all__ = ["OPERATOR_PROXY_VERSIONS", "SNAPPY_STREAM_IDENTIFIER", "SOURCE_SPLITS_STATE", "OperatorBackendHeader",
           "OperatorStateElement", "OperatorStateStream", "decode_element", "read_operator_header", "source_split",
           "write_operator_stream"]
