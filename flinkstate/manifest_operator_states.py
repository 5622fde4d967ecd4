"""Operator states in manifests: each operator's non-keyed states (``OperatorStateStore``'s split and union list
states, ``CheckpointedFunction``'s and a source's splits among them, and broadcast states), as ``schema`` of a
savepoint and ``schema --jar`` write them and :mod:`flinkstate.manifest` reads them back::

    operators:
      sequence-source:
        operator_states:
          SourceReaderState: {mode: SPLIT_DISTRIBUTE, value: byte[]}
      rules:
        operator_states:
          rules: {mode: BROADCAST, user_key: String, value: {pojo: sample.Rule, fields: {...}}}

``mode`` is Flink's distribution mode (``OperatorStateHandle.Mode``: SPLIT_DISTRIBUTE for ``getListState``, UNION for
``getUnionListState``, BROADCAST for ``getBroadcastState``); ``value`` is a list state's element type (its
``VALUE_SERIALIZER``), or a broadcast state's map value type, whose map key type is ``user_key`` (its
``KEY_SERIALIZER``), in the notation of :mod:`flinkstate.typenotation` as keyed states' types are. An operator without
``operator_states`` (a manifest written before they were recorded) leaves its operator states undescribed: ``check``
does not judge them (:mod:`flinkstate.operator_state_rules`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from flinkstate.errors import FlinkStateError, printable, shown
from flinkstate.format.handles import DISTRIBUTION_MODES
from flinkstate.format.keyed_header import OPERATOR_STATE_DISTRIBUTION_MODE, VALUE_SERIALIZER, StateMetaInfo
from flinkstate.format.metadata import OperatorState
from flinkstate.format.operator_state import OperatorBackendHeader
from flinkstate.savepoint import Savepoint
from flinkstate.serializers.base import TypeSerializerSnapshot
from flinkstate.snapshotnotation import to_notation
from flinkstate.typenotation import TypeNotationError

BROADCAST = "BROADCAST"
KEY_SERIALIZER = "KEY_SERIALIZER"
#: The check's kind of an operator state, by its distribution mode (the report's ``kind`` column).
OPERATOR_STATE_KINDS = {"SPLIT_DISTRIBUTE": "OPERATOR_LIST", "UNION": "UNION_LIST", BROADCAST: "BROADCAST"}
_STATE_KEYS = {"mode", "user_key", "value"}


@dataclass
class OperatorStateSchema:
    """One operator state as a job version registers it: its name, distribution mode and serializer snapshots."""

    name: str
    mode: str  # one of DISTRIBUTION_MODES
    value: TypeSerializerSnapshot  # a list state's element; a broadcast state's map value
    user_key: TypeSerializerSnapshot | None = None  # a broadcast state's map key

    @property
    def kind(self) -> str:
        return OPERATOR_STATE_KINDS[self.mode]

    @classmethod
    def of(cls, meta: StateMetaInfo) -> OperatorStateSchema:
        """The state as a header records it (the reader has checked that Flink's restore finds its mode and
        serializer snapshots: :func:`flinkstate.format.keyed_header.restore_problem`)."""
        mode = meta.option(OPERATOR_STATE_DISTRIBUTION_MODE)
        value = meta.serializer(VALUE_SERIALIZER)
        assert mode in DISTRIBUTION_MODES and value is not None
        return cls(meta.name, mode, value, meta.serializer(KEY_SERIALIZER) if mode == BROADCAST else None)

    def to_dict(self) -> dict[str, Any]:
        result: dict[str, Any] = {"mode": self.mode}
        if self.user_key is not None:
            result["user_key"] = to_notation(self.user_key)
        result["value"] = to_notation(self.value)
        return result


def operator_states_of(header: OperatorBackendHeader) -> dict[str, OperatorStateSchema]:
    """Every list and broadcast state of an operator-state header (a savepoint's, or the jar inspector's)."""
    return {meta.name: OperatorStateSchema.of(meta) for meta in [*header.list_states, *header.broadcast_states]}


def savepoint_operator_states(savepoint: Savepoint, op: OperatorState) -> dict[str, OperatorStateSchema] | None:
    """The operator states of ``op`` in ``savepoint`` (None: it has none). A type without a notation (which is what
    the manifest writes) is refused here in one line naming the state file, the operator and the state."""
    header = savepoint.operator_header(op)
    if header is None:
        return None
    states = operator_states_of(header)
    for name, state in states.items():
        try:
            state.to_dict()
        except TypeNotationError as exc:
            where = next(stream.source.path for _, stream in savepoint.operator_state_streams(op)
                         if stream.header().state(name) is not None)
            raise FlinkStateError(f"{where}: operator {printable(savepoint.label(op))}, operator state "
                                  f"{printable(name)}: {exc}") from None
    return states


class ManifestParser(Protocol):
    """What this module needs of the manifest's parser (:class:`flinkstate.manifest`'s), whose errors name the file
    and the path inside it."""

    def fail(self, path: str, message: str) -> Exception: ...

    def mapping(self, value: Any, path: str, allowed: set[str] | None = None) -> Mapping[str, Any]: ...

    def type(self, notation: Any, path: str) -> TypeSerializerSnapshot: ...


def parse_operator_states(parser: ManifestParser, value: Any, path: str) -> dict[str, OperatorStateSchema]:
    """An operator's ``operator_states`` mapping, validated (each error names the path and what is wrong)."""
    states: dict[str, OperatorStateSchema] = {}
    for name, body in parser.mapping(value, path).items():
        where = f"{path}.{name}"
        spec = parser.mapping(body, where, _STATE_KEYS)
        mode = spec.get("mode")
        if mode not in DISTRIBUTION_MODES:
            raise parser.fail(f"{where}.mode", f"expected one of {', '.join(DISTRIBUTION_MODES)}, got {shown(mode)}")
        user_key = None
        if mode == BROADCAST:
            user_key = parser.type(spec.get("user_key"), f"{where}.user_key")
        elif "user_key" in spec:
            raise parser.fail(f"{where}.user_key", f"only a BROADCAST state has a map key, not a {mode} list state")
        states[str(name)] = OperatorStateSchema(str(name), mode, parser.type(spec.get("value"), f"{where}.value"),
                                                user_key)
    return states


__all__ = ["OPERATOR_STATE_KINDS", "ManifestParser", "OperatorStateSchema", "operator_states_of",
           "parse_operator_states", "savepoint_operator_states"]
