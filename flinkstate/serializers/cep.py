"""Flink CEP's serializers (``org.apache.flink.cep.nfa``): the state of a pattern's NFA and its shared buffer, kept
by the CEP operator (DataStream CEP and SQL ``MATCH_RECOGNIZE``).

* ``DeweyNumber$DeweyNumberSerializer$DeweyNumberSerializerSnapshot`` (simple): ``i32 n; n x i32``. Python value:
  the number as Java prints it, ``"1.0.2"`` (``""`` when empty).
* ``EventId$EventIdSerializer$EventIdSerializerSnapshot`` (simple): ``i32 id; i64 timestamp``. Python value:
  ``{"id", "timestamp"}``.
* ``NodeId$NodeIdSerializer$NodeIdSerializerSnapshot`` (composite, outer version 1; nested = [EventId]):
  ``byte present`` [EventId; StringValue pageName]. Python value: None or ``{"event_id", "page"}``.
* ``SharedBufferEdge$SharedBufferEdgeSerializer$SharedBufferEdgeSerializerSnapshot`` (composite 1; nested = [NodeId,
  DeweyNumber]): the target node, then the version. Python value: ``{"target", "version"}``.
* ``SharedBufferNodeSerializerSnapshotV2`` (composite 1; nested = [SharedBufferEdge]): ``i32 n; n x (i32 refCount;
  edge)``. Python value: ``{"edges": [{"ref_count", "edge"}, ...]}``.
* ``LockableTypeSerializerSnapshot`` (composite 1; nested = [E]): ``i32 refCount`` then E. Python value:
  ``{"ref_count", "element"}``.
* ``NFAStateSerializerSnapshot`` (composite, outer version 2: ``bool supportsPreviousTimestamp``, version 1 none;
  nested = [DeweyNumber, NodeId, EventId]): the partial, then the completed matches, each ``i32 n`` computation
  states (``StringValue state; NodeId previousEntry; DeweyNumber version; i64 startTimestamp; [i64
  previousTimestamp]; byte hasStartEvent [EventId]``). Python value: ``{"partial_matches": [...],
  "completed_matches": [...]}`` in stored order, each ``{"state", "previous_entry", "version", "start_timestamp",
  ["previous_timestamp",] "start_event"}``. A changed previous-timestamp support is ``COMPATIBLE_AFTER_MIGRATION``.
"""

from __future__ import annotations

import struct
from typing import Any, ClassVar

from flinkstate.binary import I32, I64, Reader, Writer
from flinkstate.compatibility import AFTER_MIGRATION, Compatibility, Finding
from flinkstate.format_errors import SavepointFormatError, UnsupportedFormat
from flinkstate.serializers.base import Decoder, Encoder
from flinkstate.serializers.composite import CompositeSnapshot
from flinkstate.serializers.namespaces import EmptyPayloadSnapshot
from flinkstate.serializers.primitives import simple
from flinkstate.serializers.registry import register

NFA = "org.apache.flink.cep.nfa."
BUFFER = NFA + "sharedbuffer."
_unpack_i32, _unpack_i64 = I32.unpack_from, I64.unpack_from
_EVENT_ID = struct.Struct(">iq")
#: NFAStateSerializerSnapshot's outer version that added the previous timestamp (and its flag).
FIRST_VERSION_WITH_PREVIOUS_TIMESTAMP = 2


def _refuse(type_name: str, value: Any) -> UnsupportedFormat:
    return UnsupportedFormat(f"{type_name}: not a value of this type: {value!r:.80}")


@register
class DeweyNumberSnapshot(EmptyPayloadSnapshot):
    CLASS_NAMES = (NFA + "DeweyNumber$DeweyNumberSerializer$DeweyNumberSerializerSnapshot",)
    NAME = "DeweyNumber"
    LENGTH = -1

    def make_decoder(self) -> Decoder:
        def decode(buf: bytes, off: int) -> tuple[str, int]:
            n = _unpack_i32(buf, off)[0]
            if n < 0:
                raise SavepointFormatError(f"negative DeweyNumber length {n}", offset=off)
            digits = struct.unpack_from(f">{n}i", buf, off + 4)
            return ".".join(map(str, digits)), off + 4 + 4 * n

        return decode

    def make_encoder(self) -> Encoder:
        def encode(value: Any, out: bytearray) -> None:
            if not isinstance(value, str):
                raise _refuse(self.NAME, value)
            digits = [int(d) for d in value.split(".")] if value else []
            out += I32.pack(len(digits)) + struct.pack(f">{len(digits)}i", *digits)

        return encode


@register
class EventIdSnapshot(EmptyPayloadSnapshot):
    CLASS_NAMES = (BUFFER + "EventId$EventIdSerializer$EventIdSerializerSnapshot",)
    NAME = "EventId"
    LENGTH = _EVENT_ID.size

    def make_decoder(self) -> Decoder:
        def decode(buf: bytes, off: int) -> tuple[dict[str, int], int]:
            ident, timestamp = _EVENT_ID.unpack_from(buf, off)
            return {"id": ident, "timestamp": timestamp}, off + _EVENT_ID.size

        return decode

    def make_encoder(self) -> Encoder:
        def encode(value: Any, out: bytearray) -> None:
            if not isinstance(value, dict) or set(value) != {"id", "timestamp"}:
                raise _refuse(self.NAME, value)
            out += _EVENT_ID.pack(value["id"], value["timestamp"])

        return encode


class _Record(CompositeSnapshot):
    """A CEP composite, named without its nested serializers (CEP fixes them), but Lockable's element."""

    NAME: ClassVar[str] = ""

    def type_name(self) -> str:
        return self.NAME


@register
class NodeIdSnapshot(_Record):
    CLASS_NAMES = (BUFFER + "NodeId$NodeIdSerializer$NodeIdSerializerSnapshot",)
    ARITY = 1
    NAME = "NodeId"

    def make_decoder(self) -> Decoder:
        event_id, page = self.nested[0].decoder(), simple("String").decoder()

        def decode(buf: bytes, off: int) -> tuple[dict[str, Any] | None, int]:
            if buf[off] == 0:
                return None, off + 1
            ident, off = event_id(buf, off + 1)
            name, off = page(buf, off)
            return {"event_id": ident, "page": name}, off

        return decode

    def make_encoder(self) -> Encoder:
        event_id, page = self.nested[0].encoder(), simple("String").encoder()

        def encode(value: Any, out: bytearray) -> None:
            if value is None:
                out.append(0)
                return
            if not isinstance(value, dict) or set(value) != {"event_id", "page"}:
                raise _refuse(self.NAME, value)
            out.append(1)
            event_id(value["event_id"], out)
            page(value["page"], out)

        return encode

    def nested_labels(self) -> list[str | None]:
        return ["event_id"]


@register
class SharedBufferEdgeSnapshot(_Record):
    CLASS_NAMES = (BUFFER + "SharedBufferEdge$SharedBufferEdgeSerializer$SharedBufferEdgeSerializerSnapshot",)
    ARITY = 2
    NAME = "SharedBufferEdge"

    def make_decoder(self) -> Decoder:
        target, version = (n.decoder() for n in self.nested)

        def decode(buf: bytes, off: int) -> tuple[dict[str, Any], int]:
            node, off = target(buf, off)
            dewey, off = version(buf, off)
            return {"target": node, "version": dewey}, off

        return decode

    def make_encoder(self) -> Encoder:
        target, version = (n.encoder() for n in self.nested)

        def encode(value: Any, out: bytearray) -> None:
            if not isinstance(value, dict) or set(value) != {"target", "version"}:
                raise _refuse(self.NAME, value)
            target(value["target"], out)
            version(value["version"], out)

        return encode

    def nested_labels(self) -> list[str | None]:
        return ["target", "version"]


@register
class SharedBufferNodeSnapshot(_Record):
    CLASS_NAMES = (BUFFER + "SharedBufferNodeSerializerSnapshotV2",)
    ARITY = 1
    NAME = "SharedBufferNode"

    def make_decoder(self) -> Decoder:
        edge = self.nested[0].decoder()

        def decode(buf: bytes, off: int) -> tuple[dict[str, Any], int]:
            n = _unpack_i32(buf, off)[0]
            off += 4
            edges = []
            for _ in range(n):
                ref_count = _unpack_i32(buf, off)[0]
                item, off = edge(buf, off + 4)
                edges.append({"ref_count": ref_count, "edge": item})
            return {"edges": edges}, off

        return decode

    def make_encoder(self) -> Encoder:
        edge = self.nested[0].encoder()

        def encode(value: Any, out: bytearray) -> None:
            if not isinstance(value, dict) or set(value) != {"edges"}:
                raise _refuse(self.NAME, value)
            out += I32.pack(len(value["edges"]))
            for item in value["edges"]:
                out += I32.pack(item["ref_count"])
                edge(item["edge"], out)

        return encode

    def nested_labels(self) -> list[str | None]:
        return ["edge"]


@register
class LockableSnapshot(_Record):
    CLASS_NAMES = (BUFFER + "LockableTypeSerializerSnapshot",)
    ARITY = 1
    NAME = "Lockable"

    def type_name(self) -> str:
        return f"Lockable<{self.nested[0].type_name()}>"

    def make_decoder(self) -> Decoder:
        element = self.nested[0].decoder()

        def decode(buf: bytes, off: int) -> tuple[dict[str, Any], int]:
            ref_count = _unpack_i32(buf, off)[0]
            value, off = element(buf, off + 4)
            return {"ref_count": ref_count, "element": value}, off

        return decode

    def make_encoder(self) -> Encoder:
        element = self.nested[0].encoder()

        def encode(value: Any, out: bytearray) -> None:
            if not isinstance(value, dict) or set(value) != {"ref_count", "element"}:
                raise _refuse(self.type_name(), value)
            out += I32.pack(value["ref_count"])
            element(value["element"], out)

        return encode

    def nested_labels(self) -> list[str | None]:
        return ["element"]


_STATE_KEYS = ("state", "previous_entry", "version", "start_timestamp", "previous_timestamp", "start_event")


@register
class NFAStateSnapshot(CompositeSnapshot):
    CLASS_NAMES = (NFA + "NFAStateSerializerSnapshot",)
    OUTER_VERSION = 2
    ARITY = 3

    def __init__(self, class_name: str, nested: list[Any], *, previous_timestamp: bool = True,
                 **kwargs: Any) -> None:
        super().__init__(class_name, nested, **kwargs)
        self.previous_timestamp = previous_timestamp

    @classmethod
    def read_outer(cls, reader: Reader, outer_version: int) -> dict[str, object]:
        if outer_version < FIRST_VERSION_WITH_PREVIOUS_TIMESTAMP:
            return {"previous_timestamp": False}
        return {"previous_timestamp": reader.bool()}

    def write_outer(self, writer: Writer) -> None:
        if self.outer_version >= FIRST_VERSION_WITH_PREVIOUS_TIMESTAMP:
            writer.bool(self.previous_timestamp)

    def make_decoder(self) -> Decoder:
        version, node_id, event_id = (n.decoder() for n in self.nested)
        name = simple("String").decoder()
        with_previous = self.previous_timestamp

        def states(buf: bytes, off: int) -> tuple[list[dict[str, Any]], int]:
            n = _unpack_i32(buf, off)[0]
            off += 4
            result = []
            for _ in range(n):
                state, off = name(buf, off)
                previous, off = node_id(buf, off)
                dewey, off = version(buf, off)
                entry = {"state": state, "previous_entry": previous, "version": dewey,
                         "start_timestamp": _unpack_i64(buf, off)[0]}
                off += 8
                if with_previous:
                    entry["previous_timestamp"] = _unpack_i64(buf, off)[0]
                    off += 8
                start = None
                if buf[off] == 1:
                    start, off = event_id(buf, off + 1)
                else:
                    off += 1
                entry["start_event"] = start
                result.append(entry)
            return result, off

        def decode(buf: bytes, off: int) -> tuple[dict[str, Any], int]:
            partial, off = states(buf, off)
            completed, off = states(buf, off)
            return {"partial_matches": partial, "completed_matches": completed}, off

        return decode

    def make_encoder(self) -> Encoder:
        version, node_id, event_id = (n.encoder() for n in self.nested)
        name = simple("String").encoder()
        with_previous, type_name = self.previous_timestamp, self.type_name()
        keys = set(_STATE_KEYS) if with_previous else set(_STATE_KEYS) - {"previous_timestamp"}

        def states(items: Any, out: bytearray) -> None:
            out += I32.pack(len(items))
            for entry in items:
                if not isinstance(entry, dict) or set(entry) != keys:
                    raise _refuse(type_name, entry)
                name(entry["state"], out)
                node_id(entry["previous_entry"], out)
                version(entry["version"], out)
                out += I64.pack(entry["start_timestamp"])
                if with_previous:
                    out += I64.pack(entry["previous_timestamp"])
                if entry["start_event"] is None:
                    out.append(0)
                else:
                    out.append(1)
                    event_id(entry["start_event"], out)

        def encode(value: Any, out: bytearray) -> None:
            if not isinstance(value, dict) or set(value) != {"partial_matches", "completed_matches"}:
                raise _refuse(type_name, value)
            states(value["partial_matches"], out)
            states(value["completed_matches"], out)

        return encode

    def type_name(self) -> str:
        return "NFAState"

    def nested_labels(self) -> list[str | None]:
        return ["version", "node_id", "event_id"]

    def resolve_outer(self, old: NFAStateSnapshot, path: str) -> Compatibility:
        if old.previous_timestamp != self.previous_timestamp:
            return Compatibility.of(Finding("NFA_PREVIOUS_TIMESTAMP_CHANGED", path, "the computation states "
                                            f"{'gain' if self.previous_timestamp else 'lose'} their previous "
                                            "timestamp", AFTER_MIGRATION, old.type_name(), self.type_name()))
        return Compatibility.as_is()


__all__ = ["DeweyNumberSnapshot", "EventIdSnapshot", "LockableSnapshot", "NFAStateSnapshot", "NodeIdSnapshot",
           "SharedBufferEdgeSnapshot", "SharedBufferNodeSnapshot"]
