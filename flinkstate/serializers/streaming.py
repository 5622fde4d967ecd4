"""The DataStream runtime's own composite serializers (all ``CompositeTypeSerializerSnapshot``s):

* ``StreamElementSerializer$StreamElementSerializerSnapshot`` (outer version 2; nested = [T]): what async I/O and
  the delta join keep in state. Record: a tag byte, then ``0`` record with timestamp (``i64``, then T), ``1`` record
  without, ``2`` watermark (``i64``), ``6`` internal watermark (``i32 subpartition; i64``), ``4`` watermark status
  (``i32``), ``3`` latency marker (``i64 markedTime; i64 lower; i64 upper; i32 subtask``), ``5`` record attributes
  (``bool backlog``). Python value: :class:`StreamElement`, e.g. ``{"record": v, "timestamp": 5}``,
  ``{"record": v}``, ``{"watermark": 7}``.
* ``CoGroupedStreams$UnionSerializerSnapshot`` (outer version 2; nested = [one, two]): a coGroup window's buffered
  elements. Record: ``byte tag`` (1: one, else two) then the value. Python value: ``{"one": v}`` / ``{"two": v}``.
* ``IntervalJoinOperator$BufferEntrySerializerSnapshot`` (outer version 2; nested = [T]). Record: ``bool
  hasBeenJoined`` then T. Python value: ``{"element": v, "joined": bool}``.
* ``TwoPhaseCommitSinkFunction$StateSerializerSnapshot`` (outer version 4: ``bool supportsNullTransaction``; version
  3 implies true, older false; nested = [transaction, context]). Record: the pending transaction (``bool present``
  when nulls are supported; handle; ``i64 startTime``), ``i32 n`` pending commits (handle; ``i64``), ``bool
  hasContext`` [context]. Python value: ``{"pending": {"handle", "start_time"} | None, "pending_commits": [...],
  "context": v | None}``. A changed null support is ``COMPATIBLE_AFTER_MIGRATION``.

Compatibility: the composite rule (the worst nested result), plus the two-phase commit state's outer rule.
"""

from __future__ import annotations

import struct
from typing import Any

from flinkstate.binary import I32, I64, Reader, Writer
from flinkstate.compatibility import AFTER_MIGRATION, Compatibility, Finding
from flinkstate.format_errors import SavepointFormatError, UnsupportedFormat
from flinkstate.serializers.base import Decoder, Encoder
from flinkstate.serializers.composite import CompositeSnapshot
from flinkstate.serializers.registry import register

STREAMING = "org.apache.flink.streaming."
_unpack_i32, _unpack_i64 = I32.unpack_from, I64.unpack_from
_LATENCY = struct.Struct(">qqqi")
REC_WITH_TIMESTAMP, REC_WITHOUT_TIMESTAMP, WATERMARK, LATENCY_MARKER, STREAM_STATUS, RECORD_ATTRIBUTES, \
    INTERNAL_WATERMARK = range(7)


class StreamElement(dict[str, Any]):
    """A decoded ``StreamElement`` (record, watermark, status, latency marker or record attributes) as a mapping."""


def _refuse(type_name: str, value: Any) -> UnsupportedFormat:
    return UnsupportedFormat(f"{type_name}: not a value of this type: {value!r:.80}")


@register
class StreamElementSnapshot(CompositeSnapshot):
    CLASS_NAMES = (STREAMING + "runtime.streamrecord.StreamElementSerializer$StreamElementSerializerSnapshot",)
    OUTER_VERSION = 2
    ARITY = 1

    def make_decoder(self) -> Decoder:
        element = self.nested[0].decoder()

        def decode(buf: bytes, off: int) -> tuple[StreamElement, int]:
            tag = buf[off]
            off += 1
            if tag == REC_WITH_TIMESTAMP:
                timestamp = _unpack_i64(buf, off)[0]
                value, off = element(buf, off + 8)
                return StreamElement(record=value, timestamp=timestamp), off
            if tag == REC_WITHOUT_TIMESTAMP:
                value, off = element(buf, off)
                return StreamElement(record=value), off
            if tag == WATERMARK:
                return StreamElement(watermark=_unpack_i64(buf, off)[0]), off + 8
            if tag == INTERNAL_WATERMARK:
                subpartition = _unpack_i32(buf, off)[0]
                return StreamElement(watermark=_unpack_i64(buf, off + 4)[0], subpartition=subpartition), off + 12
            if tag == STREAM_STATUS:
                return StreamElement(watermark_status=_unpack_i32(buf, off)[0]), off + 4
            if tag == LATENCY_MARKER:
                marked, lower, upper, subtask = _LATENCY.unpack_from(buf, off)
                return StreamElement(latency_marker={"marked_time": marked, "operator_id": [lower, upper],
                                                     "subtask": subtask}), off + _LATENCY.size
            if tag == RECORD_ATTRIBUTES:
                return StreamElement(record_attributes={"backlog": buf[off] != 0}), off + 1
            raise SavepointFormatError(f"corrupt stream element: tag {tag}", offset=off - 1)

        return decode

    def make_encoder(self) -> Encoder:
        element = self.nested[0].encoder()
        type_name = self.type_name()

        def encode(value: Any, out: bytearray) -> None:
            keys = set(value) if isinstance(value, dict) else set()
            if keys == {"record", "timestamp"}:
                out.append(REC_WITH_TIMESTAMP)
                out += I64.pack(value["timestamp"])
                element(value["record"], out)
            elif keys == {"record"}:
                out.append(REC_WITHOUT_TIMESTAMP)
                element(value["record"], out)
            elif keys == {"watermark"}:
                out.append(WATERMARK)
                out += I64.pack(value["watermark"])
            elif keys == {"watermark", "subpartition"}:
                out.append(INTERNAL_WATERMARK)
                out += I32.pack(value["subpartition"]) + I64.pack(value["watermark"])
            elif keys == {"watermark_status"}:
                out.append(STREAM_STATUS)
                out += I32.pack(value["watermark_status"])
            elif keys == {"latency_marker"}:
                marker = value["latency_marker"]
                out.append(LATENCY_MARKER)
                out += _LATENCY.pack(marker["marked_time"], *marker["operator_id"], marker["subtask"])
            elif keys == {"record_attributes"}:
                out.append(RECORD_ATTRIBUTES)
                out.append(1 if value["record_attributes"]["backlog"] else 0)
            else:
                raise _refuse(type_name, value)

        return encode

    def type_name(self) -> str:
        return f"StreamElement<{self.nested[0].type_name()}>"

    def nested_labels(self) -> list[str | None]:
        return ["record"]


@register
class UnionSnapshot(CompositeSnapshot):
    CLASS_NAMES = (STREAMING + "api.datastream.CoGroupedStreams$UnionSerializerSnapshot",)
    OUTER_VERSION = 2
    ARITY = 2

    def make_decoder(self) -> Decoder:
        one, two = (n.decoder() for n in self.nested)

        def decode(buf: bytes, off: int) -> tuple[dict[str, Any], int]:
            if buf[off] == 1:
                value, off = one(buf, off + 1)
                return {"one": value}, off
            value, off = two(buf, off + 1)  # UnionSerializer: any tag but 1 is the second input
            return {"two": value}, off

        return decode

    def make_encoder(self) -> Encoder:
        one, two = (n.encoder() for n in self.nested)
        type_name = self.type_name()

        def encode(value: Any, out: bytearray) -> None:
            if not isinstance(value, dict) or len(value) != 1 or next(iter(value)) not in ("one", "two"):
                raise _refuse(type_name, value)
            (side, inner), = value.items()
            out.append(1 if side == "one" else 2)
            (one if side == "one" else two)(inner, out)

        return encode

    def type_name(self) -> str:
        return f"TaggedUnion<{self.nested[0].type_name()}, {self.nested[1].type_name()}>"

    def nested_labels(self) -> list[str | None]:
        return ["one", "two"]


@register
class BufferEntrySnapshot(CompositeSnapshot):
    CLASS_NAMES = (STREAMING + "api.operators.co.IntervalJoinOperator$BufferEntrySerializerSnapshot",)
    OUTER_VERSION = 2
    ARITY = 1

    def make_decoder(self) -> Decoder:
        element = self.nested[0].decoder()

        def decode(buf: bytes, off: int) -> tuple[dict[str, Any], int]:
            joined = buf[off] != 0
            value, off = element(buf, off + 1)
            return {"element": value, "joined": joined}, off

        return decode

    def make_encoder(self) -> Encoder:
        element = self.nested[0].encoder()
        type_name = self.type_name()

        def encode(value: Any, out: bytearray) -> None:
            if not isinstance(value, dict) or set(value) != {"element", "joined"}:
                raise _refuse(type_name, value)
            out.append(1 if value["joined"] else 0)
            element(value["element"], out)

        return encode

    def type_name(self) -> str:
        return f"BufferEntry<{self.nested[0].type_name()}>"

    def nested_labels(self) -> list[str | None]:
        return ["element"]


#: TwoPhaseCommitSinkFunction.StateSerializerSnapshot: the outer version that made null pending transactions
#: possible, and the one that made it a flag.
FIRST_VERSION_SUPPORTING_NULL_TRANSACTIONS = 3
TWO_PHASE_COMMIT_VERSION = 4


@register
class TwoPhaseCommitStateSnapshot(CompositeSnapshot):
    CLASS_NAMES = (STREAMING + "api.functions.sink.TwoPhaseCommitSinkFunction$StateSerializerSnapshot",
                   STREAMING + "api.functions.sink.legacy.TwoPhaseCommitSinkFunction$StateSerializerSnapshot")
    OUTER_VERSION = TWO_PHASE_COMMIT_VERSION
    ARITY = 2

    def __init__(self, class_name: str, nested: list[Any], *, supports_null: bool = True, **kwargs: Any) -> None:
        super().__init__(class_name, nested, **kwargs)
        self.supports_null = supports_null

    @classmethod
    def read_outer(cls, reader: Reader, outer_version: int) -> dict[str, object]:
        if outer_version < FIRST_VERSION_SUPPORTING_NULL_TRANSACTIONS:
            return {"supports_null": False}
        if outer_version == FIRST_VERSION_SUPPORTING_NULL_TRANSACTIONS:
            return {"supports_null": True}
        return {"supports_null": reader.bool()}

    def write_outer(self, writer: Writer) -> None:
        if self.outer_version > FIRST_VERSION_SUPPORTING_NULL_TRANSACTIONS:
            writer.bool(self.supports_null)

    def make_decoder(self) -> Decoder:
        handle, context = (n.decoder() for n in self.nested)
        supports_null = self.supports_null

        def holder(buf: bytes, off: int) -> tuple[dict[str, Any], int]:
            value, off = handle(buf, off)
            return {"handle": value, "start_time": _unpack_i64(buf, off)[0]}, off + 8

        def decode(buf: bytes, off: int) -> tuple[dict[str, Any], int]:
            pending = None
            if not supports_null or buf[off]:
                pending, off = holder(buf, off + (1 if supports_null else 0))
            else:
                off += 1
            count, off = _unpack_i32(buf, off)[0], off + 4
            commits = []
            for _ in range(count):
                item, off = holder(buf, off)
                commits.append(item)
            ctx = None
            if buf[off]:
                ctx, off = context(buf, off + 1)
            else:
                off += 1
            return {"pending": pending, "pending_commits": commits, "context": ctx}, off

        return decode

    def make_encoder(self) -> Encoder:
        handle, context = (n.encoder() for n in self.nested)
        supports_null, type_name = self.supports_null, self.type_name()

        def holder(item: Any, out: bytearray) -> None:
            handle(item["handle"], out)
            out += I64.pack(item["start_time"])

        def encode(value: Any, out: bytearray) -> None:
            if not isinstance(value, dict) or set(value) != {"pending", "pending_commits", "context"}:
                raise _refuse(type_name, value)
            pending = value["pending"]
            if supports_null:
                out.append(0 if pending is None else 1)
            elif pending is None:
                raise UnsupportedFormat(f"{type_name}: this serializer cannot write a null pending transaction")
            if pending is not None:
                holder(pending, out)
            out += I32.pack(len(value["pending_commits"]))
            for item in value["pending_commits"]:
                holder(item, out)
            if value["context"] is None:
                out.append(0)
            else:
                out.append(1)
                context(value["context"], out)

        return encode

    def type_name(self) -> str:
        return f"TwoPhaseCommitState<{self.nested[0].type_name()}, {self.nested[1].type_name()}>"

    def nested_labels(self) -> list[str | None]:
        return ["transaction", "context"]

    def resolve_outer(self, old: TwoPhaseCommitStateSnapshot, path: str) -> Compatibility:
        if old.supports_null != self.supports_null:
            return Compatibility.of(Finding("NULL_TRANSACTION_SUPPORT_CHANGED", path, f"null pending transactions "
                                            f"{'now' if self.supports_null else 'no longer'} supported",
                                            AFTER_MIGRATION, old.type_name(), self.type_name()))
        return Compatibility.as_is()


__all__ = ["BufferEntrySnapshot", "StreamElement", "StreamElementSnapshot", "TwoPhaseCommitStateSnapshot",
           "UnionSnapshot"]
