"""The codec of one state's entries in a migration: :func:`migrate_entry`, the one rule of a declared migration
that the engine writes and the verifier re-applies, and :class:`StateCodec`, decoding with the old snapshot's
serializers and encoding with the new one's (with the same snapshot on both sides, a state's own codec: the
verifier's round-trip check and the canonical encoders of native snapshots, :func:`identity_encoders`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flinkstate._speedups import fast_encoder
from flinkstate.binary import encode_varint_le
from flinkstate.format.keyed_entries import KeyLayout, make_entry_decoder
from flinkstate.format.keyed_header import TIMERS, KeyedBackendHeader, StateMetaInfo
from flinkstate.format.keyed_stream import KeyedStateStream
from flinkstate.format_errors import SavepointFormatError
from flinkstate.migration.native import EntryEncoder
from flinkstate.migration.plan import DROP, OperatorPlan, StateRewrite
from flinkstate.serializers.base import TypeSerializerSnapshot
from flinkstate.serializers.timer import Timer


def migrate_entry(rewrite: StateRewrite, entry: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """The declared migration of one entry tuple (the reader's shape, its key already rewritten if the key changes):
    the new entry, or None when a function dropped it. Raises what a transform raises. The engine writes what this
    returns, and the verifier compares the written entries with it."""
    if rewrite.kind == TIMERS:
        return entry
    if rewrite.kind == "MAP":
        key, ns, user_key, value = entry
        if rewrite.user_key_transform is not None:
            user_key = rewrite.user_key_transform(user_key)
        if rewrite.transform is not None and value is not None:
            value = rewrite.transform(value)
            if value is DROP:
                return None
        return key, ns, user_key, value
    key, ns, value = entry
    if rewrite.transform is not None:
        if rewrite.kind == "LIST":
            value = [v for v in map(rewrite.transform, value) if v is not DROP]
        else:
            value = rewrite.transform(value)
            if value is DROP:
                return None
    return key, ns, value


class StateCodec:
    """Decode (old) and encode (new) of one state's entries: the reader's entry decoder and its mirror. With a plan
    whose old and new headers are the same, it is the state's own codec (the verifier's round-trip check)."""

    def __init__(self, plan: OperatorPlan, rewrite: StateRewrite, prefix_bytes: int) -> None:
        assert plan.old_header is not None and plan.new_header is not None
        old_meta = plan.old_header.states[plan.rewrites.index(rewrite)]
        new_meta = plan.new_header.states[rewrite.new_id]
        self.rewrite = rewrite
        self.prefix_bytes = prefix_bytes
        self.decode = make_entry_decoder(old_meta, _layout(plan.old_header, old_meta, prefix_bytes))
        key_snap, ns_snap = plan.new_header.key_serializer, new_meta.namespace_serializer
        assert key_snap is not None and ns_snap is not None
        self.key_hash = key_snap.hash_code
        key_enc, ns_enc = _encoder(key_snap), _encoder(ns_snap)
        ambiguous = key_snap.fixed_length < 0 and ns_snap.fixed_length < 0

        def key_ns(key: Any, namespace: Any, out: bytearray) -> None:
            start = len(out)
            key_enc(key, out)
            if ambiguous:
                out += encode_varint_le(len(out) - start)
            start = len(out)
            ns_enc(namespace, out)
            if ambiguous:
                out += encode_varint_le(len(out) - start)

        self.key_ns = key_ns
        value = new_meta.value_serializer
        assert value is not None
        self.value_enc = _encoder(value)
        user_key = new_meta.user_key_serializer
        self.user_key_enc = _encoder(user_key) if user_key is not None else None

    def prefix(self, key_group: int) -> bytes:
        return key_group.to_bytes(self.prefix_bytes, "big")

    def encode_entry(self, entry: tuple[Any, ...], key_group: int, raw_key: bytes | None = None
                     ) -> tuple[bytes, bytes] | None:
        """The stored (key, value) bytes of an entry tuple (the reader's shape); ``raw_key`` keeps a key's bytes.
        None when nothing is stored (an empty list)."""
        kind = self.rewrite.kind
        if kind == TIMERS:
            key, ns, timestamp = entry
            out = bytearray(self.prefix(key_group))
            self.value_enc(Timer(timestamp, key, ns), out)  # the timer serializer encodes the whole key
            return bytes(out), b""
        value = entry[3] if kind == "MAP" else entry[2]
        value_bytes = self.encode_value(value)
        if value_bytes is None:
            return None
        if raw_key is not None:
            return raw_key, value_bytes
        out = bytearray(self.prefix(key_group))
        self.key_ns(entry[0], entry[1], out)
        if kind == "MAP":
            assert self.user_key_enc is not None
            self.user_key_enc(entry[2], out)
        return bytes(out), value_bytes

    def null_map_values(self) -> tuple[bytes, ...]:
        """The stored forms of a null MAP user value: the null flag alone (what flinkstate and RocksDB write), and the
        flag followed by the value serializer's own null, which readers skip (what the HashMap backend's canonical
        savepoints hold before FLINK-39909: Flink 1.20.3's and 2.3's do), where the serializer writes one."""
        after = bytearray()
        try:
            self.value_enc(None, after)
        except Exception:  # a serializer without a null (Flink itself failed on these: FLINK-39909's NPE)
            return (b"\x01",)
        return b"\x01", b"\x01" + bytes(after)

    def encode_value(self, value: Any) -> bytes | None:
        """The stored value bytes; None when nothing is stored (an empty list)."""
        out = bytearray()
        kind = self.rewrite.kind
        if kind == "LIST":
            if not value:
                return None
            enc = self.value_enc
            for i, item in enumerate(value):
                if i:
                    out.append(0x2C)
                enc(item, out)
        elif kind == "MAP":
            if value is None:
                out.append(1)
            else:
                out.append(0)
                self.value_enc(value, out)
        elif kind == TIMERS:
            return b""
        else:
            self.value_enc(value, out)
        return bytes(out)


def _encoder(snapshot: TypeSerializerSnapshot) -> Callable[[Any, bytearray], None]:
    """The record encoder of ``snapshot``: compiled when the fast path is built (same bytes; what it does not take
    goes to the reference), else the reference's own."""
    return fast_encoder(snapshot) or snapshot.encoder()


def _layout(header: KeyedBackendHeader, meta: StateMetaInfo, prefix_bytes: int) -> KeyLayout:
    key, namespace = header.key_serializer, meta.namespace_serializer
    assert key is not None and namespace is not None
    return KeyLayout(prefix_bytes, key.decoder(), namespace.decoder(),
                     key.fixed_length < 0 and namespace.fixed_length < 0, key_snapshot=key)


def identity_encoders(stream: KeyedStateStream, operator: Any) -> list[EntryEncoder | None]:
    """Per state id of the stream's header, the canonical encoder of its entries with its own serializers (None for
    a state without a codec): what writes a native stream's decoded entries canonically."""
    header = stream.header()
    identity = OperatorPlan(operator, operator.operator_id, operator.uid, header, header,
                            [StateRewrite(m.name, m.name, i, m.kind, None, None, False, True)
                             for i, m in enumerate(header.states)])
    encoders: list[EntryEncoder | None] = []
    for rewrite in identity.rewrites:
        assert rewrite is not None
        try:
            encoders.append(StateCodec(identity, rewrite, stream.prefix_bytes).encode_entry)
        except (NotImplementedError, SavepointFormatError):
            encoders.append(None)
    return encoders


__all__ = ["StateCodec", "identity_encoders", "migrate_entry"]
