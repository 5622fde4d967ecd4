"""The changelog's data changes applied to one state's entries of one key group, as Flink's
``ChangelogBackendLogApplier`` and ``*StateChangeApplier`` classes do (the log itself:
:mod:`flinkstate.format.changelog`).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from flinkstate.binary import I32
from flinkstate.format.keyed_header import TIMERS, VALUE_SERIALIZER, KeyedBackendHeader, StateMetaInfo
from flinkstate.format_errors import SavepointFormatError, UnsupportedFormat

# StateChangeOperation codes
CLEAR, SET, SET_INTERNAL, ADD, MERGE_NS, ADD_ELEMENT, ADD_OR_UPDATE_ELEMENT, REMOVE_ELEMENT, METADATA = range(9)
OPERATIONS = ("CLEAR", "SET", "SET_INTERNAL", "ADD", "MERGE_NS", "ADD_ELEMENT", "ADD_OR_UPDATE_ELEMENT",
              "REMOVE_ELEMENT", "METADATA")
DECODE_ERRORS = (struct.error, IndexError, ValueError, UnicodeDecodeError, KeyError, OverflowError)

Decoder = Callable[[bytes, int], tuple[Any, int]]
#: The operations each key/value state's applier takes (Value/List/Map/Reducing/AggregatingStateChangeApplier).
_KV_OPERATIONS: dict[str, tuple[int, ...]] = {
    "VALUE": (CLEAR, SET),
    "REDUCING": (CLEAR, SET, SET_INTERNAL, MERGE_NS),
    "AGGREGATING": (CLEAR, SET, SET_INTERNAL, MERGE_NS),
    "LIST": (CLEAR, SET, SET_INTERNAL, ADD, ADD_ELEMENT, MERGE_NS),
    "MAP": (CLEAR, ADD, ADD_ELEMENT, ADD_OR_UPDATE_ELEMENT, REMOVE_ELEMENT),
}


def _freeze(value: Any) -> Any:
    """A hashable stand-in of a decoded key, namespace, user key or timer (equal values, equal stand-ins)."""
    try:
        hash(value)
        return value
    except TypeError:
        pass
    if isinstance(value, (list, tuple)):
        return ("L", tuple(_freeze(v) for v in value))
    if isinstance(value, dict):
        return ("D", tuple(sorted(((_freeze(k), _freeze(v)) for k, v in value.items()), key=repr)))
    if isinstance(value, (set, frozenset)):
        return ("S", frozenset(_freeze(v) for v in value))
    return ("R", repr(value))


class Applier:
    """One state's entries in one key group, with the log's changes applied as Flink's appliers do."""

    def __init__(self, state: StateMetaInfo, header: KeyedBackendHeader, context: str) -> None:
        self.state = state
        self.kind = state.kind
        self.context = context
        self.items: dict[Any, list[Any]] = {}
        full = state.serializer(VALUE_SERIALIZER)
        if full is None:
            raise SavepointFormatError(f"{context}: no value serializer")
        self.full = full
        self.key_snapshot = header.key_serializer
        if self.kind == TIMERS:
            self.timer: Decoder = full.decoder()
            return
        namespace = state.namespace_serializer
        if namespace is None:
            raise SavepointFormatError(f"{context}: no namespace serializer")
        self.namespace_snapshot = namespace
        self.namespace: Decoder = namespace.decoder()
        self.key: Decoder | None = header.key_serializer.decoder() if header.key_serializer is not None else None
        if self.kind == "MAP":
            user_key, user_value = full.nested[0], full.nested[1]
            self.user_key: Decoder = user_key.decoder()
            self.user_value: Decoder = user_value.decoder()
        elif self.kind == "LIST":
            self.element: Decoder = full.nested[0].decoder()
            self.list: Decoder = full.decoder()

    def reset(self) -> None:
        self.items = {}

    def load(self, entries: list[tuple[Any, ...]]) -> None:
        """The materialized entries of the key group."""
        for entry in entries:
            if self.kind == TIMERS:
                self.items[_freeze(entry)] = list(entry)
            elif self.kind == "MAP":
                key, namespace, user_key, value = entry
                slot = self.items.setdefault(_freeze((key, namespace)), [key, namespace, {}])
                slot[2][_freeze(user_key)] = (user_key, value)
            else:
                key, namespace, value = entry
                self.items[_freeze((key, namespace))] = [key, namespace, list(value) if self.kind == "LIST" else value]

    def entries(self) -> list[tuple[Any, ...]]:
        out: list[tuple[Any, ...]] = []
        for key, namespace, value in self.items.values():
            if self.kind == "MAP":
                out.extend((key, namespace, user_key, user_value) for user_key, user_value in value.values())
            elif self.kind == "LIST":
                if value:
                    out.append((key, namespace, value))
            else:
                out.append((key, namespace, value))
        return out

    # -- one change --------------------------------------------------------------------------------------------------

    def apply(self, data: bytes, where: str, key_group: int, number: int) -> None:
        op = data[0]
        name = OPERATIONS[op] if op < len(OPERATIONS) else str(op)
        try:
            if self.kind == TIMERS:
                self._apply_timers(op, data)
            else:
                self._apply_kv(op, data)
        except SavepointFormatError as exc:
            raise SavepointFormatError(f"{self.context}, key group {key_group}, change {number} ({name}): "
                                       f"{exc.what}", where) from None
        except DECODE_ERRORS as exc:
            raise SavepointFormatError(f"{self.context}, key group {key_group}, change {number} ({name}): "
                                       f"undecodable ({type(exc).__name__}: {exc})", where) from None

    def _apply_timers(self, op: int, data: bytes) -> None:
        # PriorityQueueStateChangeApplier: no scope, the timers only
        pos = 3
        if op == ADD_ELEMENT:
            count = I32.unpack_from(data, pos)[0]
            if count < 0 or count > len(data):
                raise SavepointFormatError(f"implausible number of timers {count}")
            pos += 4
            for _ in range(count):
                timer, pos = self.timer(data, pos)
                self.items[_freeze((timer.key, timer.namespace, timer.timestamp))] = \
                    [timer.key, timer.namespace, timer.timestamp]
        elif op == REMOVE_ELEMENT:
            timer, pos = self.timer(data, pos)
            self.items.pop(_freeze((timer.key, timer.namespace, timer.timestamp)), None)
        else:
            raise SavepointFormatError(f"operation {OPERATIONS[op] if op < 9 else op} on a timer state")
        _end(pos, len(data), "timer change")

    def _scope(self, data: bytes, op: int) -> tuple[Any, Any, int]:
        """Key and namespace after the op code and state id, and the position after them."""
        if self.key is not None:
            key, pos = self.key(data, 3)
            namespace, pos = self.namespace(data, pos)
            return key, namespace, pos
        # No key serializer anywhere in the checkpoint: the key is the bytes before a fixed-length namespace (and,
        # when the change carries one, a fixed-length value).
        ns_len = self.namespace_snapshot.fixed_length
        value_len = 0 if op == CLEAR else self._fixed_value_length(op)
        if ns_len < 0 or value_len < 0:
            raise UnsupportedFormat("the key serializer is recorded nowhere in this changelog checkpoint (no "
                                    "materialized part, no timer state) and the namespace or value has no fixed "
                                    "length, so keys cannot be delimited")
        # The namespace's stored bytes may differ from its declared length (VoidNamespace writes one byte and says
        # 0): the shortest tail that decodes as a namespace ending just before the value is taken.
        value_at = len(data) - value_len
        for end in range(value_at, 3, -1):
            try:
                namespace, pos = self.namespace(data, end)
            except DECODE_ERRORS:
                continue
            if pos == value_at:
                return bytes(data[3:end]), namespace, pos
        raise SavepointFormatError("no namespace before the value: the key cannot be delimited")

    def _fixed_value_length(self, op: int) -> int:
        if self.kind in ("VALUE", "REDUCING", "AGGREGATING") and op in (SET, SET_INTERNAL):
            return int(self.full.fixed_length)
        return -1

    def _value(self, data: bytes, pos: int) -> Any:
        """A whole value at ``pos`` that ends the change (a Kryo value without a length is read from its slice)."""
        if self.full.needs_end:
            value, end = self.full.tail_decoder()(bytes(data[pos:]), 0)
            end += pos
        else:
            value, end = self.full.decoder()(data, pos)
        _end(end, len(data), "value")
        return value

    def _apply_kv(self, op: int, data: bytes) -> None:
        if op not in _KV_OPERATIONS.get(self.kind, ()):  # the *StateChangeApplier: IllegalArgumentException
            raise SavepointFormatError(f"operation {OPERATIONS[op] if op < 9 else op} on a {self.kind} state")
        key, namespace, pos = self._scope(data, op)
        slot_key = _freeze((key, namespace))
        kind = self.kind
        if op == CLEAR:
            _end(pos, len(data), "clear")
            self.items.pop(slot_key, None)
        elif op == MERGE_NS and kind in ("LIST", "REDUCING", "AGGREGATING"):
            self._merge(data, pos, key)
        elif kind == "MAP":
            self._apply_map(op, data, pos, key, namespace, slot_key)
        elif kind == "LIST":
            if op in (SET, SET_INTERNAL, ADD):
                values, end = self.list(data, pos)
                _end(end, len(data), "list value")
                slot = self.items.get(slot_key)
                if op == ADD and slot is not None:
                    slot[2].extend(values)
                else:
                    self.items[slot_key] = [key, namespace, list(values)]
            elif op == ADD_ELEMENT:
                element, end = self.element(data, pos)
                _end(end, len(data), "list element")
                self.items.setdefault(slot_key, [key, namespace, []])[2].append(element)
            else:
                raise SavepointFormatError(f"operation {OPERATIONS[op]} on a list state")
        elif (op == SET or (op == SET_INTERNAL and kind in ("REDUCING", "AGGREGATING"))) and \
                kind in ("VALUE", "REDUCING", "AGGREGATING"):
            self.items[slot_key] = [key, namespace, self._value(data, pos)]
        else:
            raise SavepointFormatError(f"operation {OPERATIONS[op] if op < 9 else op} on a {kind} state")

    def _apply_map(self, op: int, data: bytes, pos: int, key: Any, namespace: Any, slot_key: Any) -> None:
        slot = self.items.setdefault(slot_key, [key, namespace, {}])
        if op == ADD:  # putAll(MapSerializer.deserialize): i32 n, n x (user key, bool isNull, [value])
            count = I32.unpack_from(data, pos)[0]
            if count < 0 or count > len(data):
                raise SavepointFormatError(f"implausible map size {count}")
            pos += 4
            for _ in range(count):
                user_key, pos = self.user_key(data, pos)
                is_null = data[pos]
                pos += 1
                value = None
                if is_null == 0:
                    value, pos = self.user_value(data, pos)
                elif is_null != 1:
                    raise SavepointFormatError(f"bad map null flag {is_null}")
                slot[2][_freeze(user_key)] = (user_key, value)
        elif op in (ADD_ELEMENT, ADD_OR_UPDATE_ELEMENT):
            user_key, pos = self.user_key(data, pos)
            value, pos = self.user_value(data, pos)
            slot[2][_freeze(user_key)] = (user_key, value)
        elif op == REMOVE_ELEMENT:
            user_key, pos = self.user_key(data, pos)
            slot[2].pop(_freeze(user_key), None)
        else:
            raise SavepointFormatError(f"operation {OPERATIONS[op] if op < 9 else op} on a map state")
        _end(pos, len(data), "map change")
        if not slot[2]:
            self.items.pop(slot_key, None)

    def _merge(self, data: bytes, pos: int, key: Any) -> None:
        """``mergeNamespaces`` (AbstractHeapMergingState): the sources' values are removed and merged into the
        target's. Lists concatenate; a reducing or aggregating state needs the job's function as soon as two values
        meet, which flinkstate does not run."""
        target, pos = self.namespace(data, pos)
        count = I32.unpack_from(data, pos)[0]
        if count < 0 or count > len(data):
            raise SavepointFormatError(f"implausible number of merged namespaces {count}")
        pos += 4
        sources = []
        for _ in range(count):
            source, pos = self.namespace(data, pos)
            sources.append(source)
        _end(pos, len(data), "merge")
        merged: Any = None
        for source in sources:
            slot = self.items.pop(_freeze((key, source)), None)
            if slot is not None:
                merged = slot[2] if merged is None else self._combine(merged, slot[2])
        if merged is None:
            return
        target_key = _freeze((key, target))
        current = self.items.get(target_key)
        self.items[target_key] = [key, target, merged if current is None else self._combine(current[2], merged)]

    def _combine(self, a: Any, b: Any) -> Any:
        if self.kind == "LIST":
            return [*a, *b]
        raise UnsupportedFormat(f"merging two windows' values of a {self.kind} state needs the job's function, "
                                f"which flinkstate does not run")


def _end(end: int, expected: int, what: str) -> None:
    if end != expected:
        raise SavepointFormatError(f"{what} decoded to {end - expected:+d} bytes beyond the change")


__all__ = ["DECODE_ERRORS", "OPERATIONS", "Applier"]
