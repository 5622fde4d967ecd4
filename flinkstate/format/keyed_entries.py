"""Entries of a keyed-state block, decoded: the composite key layout (key-group prefix, key, namespace,
ambiguity suffix, user key) and one decoder per state kind (value, list, map, timers), built from a state's meta
info. The block walk that finds the entries: :mod:`flinkstate.format.keyed_stream`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from flinkstate._speedups import fast_entry_decoder
from flinkstate.binary import varint_le_size
from flinkstate.format.keyed_header import TIMERS, StateMetaInfo
from flinkstate.format_errors import SavepointFormatError, UnsupportedFormat

if TYPE_CHECKING:
    from flinkstate.serializers.base import TypeSerializerSnapshot

# --------------------------------------------------------------------------------------------------------------------
# Entry decoding
# --------------------------------------------------------------------------------------------------------------------

#: (block bytes, key start, key end, value start, value end) -> entry tuple
EntryDecoder = Callable[[bytes, int, int, int, int], tuple[Any, ...]]


@dataclass(frozen=True)
class KeyLayout:
    """How to decode the key and namespace at the front of a composite key."""

    prefix_bytes: int
    key: Callable[[bytes, int], tuple[Any, int]]
    namespace: Callable[[bytes, int], tuple[Any, int]]
    ambiguous: bool
    #: The key's snapshot, when ``key`` is its decoder: lets the compiled fast path decode keys in C too.
    key_snapshot: TypeSerializerSnapshot | None = None

    def decoder(self) -> Callable[[bytes, int], tuple[Any, Any, int]]:
        """``(buf, key start) -> (key, namespace, offset after them)``."""
        prefix, key_dec, ns_dec = self.prefix_bytes, self.key, self.namespace
        if not self.ambiguous:
            def decode(buf: bytes, off: int) -> tuple[Any, Any, int]:
                key, o = key_dec(buf, off + prefix)
                namespace, o = ns_dec(buf, o)
                return key, namespace, o

            return decode

        def decode_ambiguous(buf: bytes, off: int) -> tuple[Any, Any, int]:
            # Both parts are variable-length, so each is followed by its length as varint-le: skip it.
            start = off + prefix
            key, o = key_dec(buf, start)
            o += varint_le_size(o - start)
            ns_start = o
            namespace, o = ns_dec(buf, o)
            return key, namespace, o + varint_le_size(o - ns_start)

        return decode_ambiguous


def _check_end(what: str, end: int, expected: int) -> None:
    if end != expected:
        raise SavepointFormatError(f"{what} decoded to {end - expected:+d} bytes beyond its length", offset=expected)


def make_entry_decoder(state: StateMetaInfo, layout: KeyLayout) -> EntryDecoder:
    """The per-entry decoder of one state; see :meth:`KeyedStateStream.iter_blocks` for the tuples. Compiled
    (:mod:`flinkstate._speedups`) unless the extension is not built or ``FLINKSTATE_PURE_PYTHON`` is set; the pure
    Python of :func:`reference_entry_decoder` is the reference, and reports every error."""
    reference = reference_entry_decoder(state, layout)
    return fast_entry_decoder(state, layout, reference) or reference


def reference_entry_decoder(state: StateMetaInfo, layout: KeyLayout) -> EntryDecoder:
    """The pure-Python entry decoder of one state."""
    kind = state.kind
    if kind == TIMERS:
        return _timer_entry_decoder(state, layout.prefix_bytes)
    key_ns = layout.decoder()
    value_snapshot = state.value_serializer
    if value_snapshot is None:
        raise SavepointFormatError(f"state {state.name} has no value serializer")
    value_dec: Callable[[bytes, int], tuple[Any, int]]
    if value_snapshot.needs_end:
        # The value carries no length of its own (Kryo, or a POJO ending in a Kryo field): a whole stored value (or
        # a MAP value) is decoded from its own slice, where an opaque Kryo record still passes through. List elements
        # of such a type are delimited only where the type delimits its decodable records (Kryo of JDK classes; an
        # opaque element is refused in one line naming its class).
        tail_dec = value_snapshot.tail_decoder()
        type_name = value_snapshot.type_name()

        def no_value_dec(buf: bytes, off: int) -> tuple[Any, int]:
            raise UnsupportedFormat(f"{type_name} values inside {kind} state cannot be decoded (they carry no "
                                    f"length)")

        delimits = kind == "LIST" and bool(getattr(value_snapshot, "delimits_records", False))
        value_dec = value_snapshot.decoder() if delimits else no_value_dec
        if kind not in ("LIST", "MAP"):
            def decode_whole(buf: bytes, ks: int, ke: int, vs: int, ve: int) -> tuple[Any, ...]:
                key, namespace, _ = key_ns(buf, ks)
                value, end = tail_dec(bytes(buf[vs:ve]), 0)
                _check_end("value", end + vs, ve)
                return key, namespace, value

            return decode_whole
        if kind == "MAP":
            user_key = state.user_key_serializer
            assert user_key is not None
            return _map_entry_decoder(key_ns, user_key.decoder(), lambda buf, off: tail_dec(bytes(buf[off:]), 0),
                                      whole_value=True)
    else:
        value_dec = value_snapshot.decoder()
    if kind == "LIST":
        return _list_entry_decoder(key_ns, value_dec)
    if kind == "MAP":
        user_key = state.user_key_serializer
        assert user_key is not None
        return _map_entry_decoder(key_ns, user_key.decoder(), value_dec)

    def decode_value(buf: bytes, ks: int, ke: int, vs: int, ve: int) -> tuple[Any, ...]:
        key, namespace, _ = key_ns(buf, ks)
        value, end = value_dec(buf, vs)
        if end != ve:
            _check_end("value", end, ve)
        return key, namespace, value

    return decode_value


def _list_entry_decoder(key_ns: Callable[[bytes, int], tuple[Any, Any, int]],
                        element: Callable[[bytes, int], tuple[Any, int]]) -> EntryDecoder:
    def decode(buf: bytes, ks: int, ke: int, vs: int, ve: int) -> tuple[Any, ...]:
        key, namespace, _ = key_ns(buf, ks)
        items = []
        o = vs
        while o < ve:
            item, o = element(buf, o)
            items.append(item)
            if o < ve:
                if buf[o] != 0x2C:  # ListDelimitedSerializer's ','
                    raise SavepointFormatError(f"list element not followed by ',' (0x{buf[o]:02x})", offset=o)
                o += 1
        _check_end("list value", o, ve)
        return key, namespace, items

    return decode


def _map_entry_decoder(key_ns: Callable[[bytes, int], tuple[Any, Any, int]],
                       user_key_dec: Callable[[bytes, int], tuple[Any, int]],
                       value_dec: Callable[[bytes, int], tuple[Any, int]], whole_value: bool = False) -> EntryDecoder:
    def decode(buf: bytes, ks: int, ke: int, vs: int, ve: int) -> tuple[Any, ...]:
        key, namespace, o = key_ns(buf, ks)
        user_key, o = user_key_dec(buf, o)
        _check_end("map user key", o, ke)
        if buf[vs]:  # isNull: older heap backends may still have written bytes after it; they are ignored
            return key, namespace, user_key, None
        if whole_value:  # a value without a length of its own: decoded from its slot alone
            value, end = value_dec(bytes(buf[vs + 1:ve]), 0)
            _check_end("map value", end + vs + 1, ve)
            return key, namespace, user_key, value
        value, end = value_dec(buf, vs + 1)
        _check_end("map value", end, ve)
        return key, namespace, user_key, value

    return decode


def _timer_entry_decoder(state: StateMetaInfo, prefix: int) -> EntryDecoder:
    timer_snapshot = state.value_serializer
    if timer_snapshot is None:
        raise SavepointFormatError(f"timer state {state.name} has no serializer")
    timer_dec = timer_snapshot.decoder()

    def decode(buf: bytes, ks: int, ke: int, vs: int, ve: int) -> tuple[Any, ...]:
        timer, o = timer_dec(buf, ks + prefix)
        _check_end("timer", o, ke)
        return timer.key, timer.namespace, timer.timestamp

    return decode


__all__ = ["EntryDecoder", "KeyLayout", "make_entry_decoder", "reference_entry_decoder"]
