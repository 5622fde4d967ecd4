"""The type notation (see :mod:`flinkstate.typenotation`) of the Either, runtime list, TTL-aware, Value and Java
serialization families, both ways. :mod:`flinkstate.typenotation` calls into this module (it stays below it):

* strings: ``Either<L, R>``, ``ArrayList<T>``, ``LinkedList<T>`` (with a null mask, as Flink writes it today),
  ``ListView<List<T>>``, ``MapView<Map<K, V>>``, ``TtlAware<T>`` (TTL on exactly when ``T`` is a ``TTL<...>``),
  ``JavaSerializable``;
* mappings: ``{either: {left: L, right: R}}``, ``{array_list: T}``, ``{linked_list: T, null_mask: BOOL}``,
  ``{list_view: T}``, ``{map_view: T}``, ``{ttl_aware: T, ttl_enabled: BOOL}``, ``{value: CLASS}`` and
  ``{copyable_value: CLASS}`` (a Flink ``Value`` / ``CopyableValue`` class).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from flinkstate.serializers.base import TypeSerializerSnapshot
from flinkstate.serializers.either import EitherSnapshot
from flinkstate.serializers.javaserial import JavaSerializerSnapshot
from flinkstate.serializers.runtimelists import (
    LINKED_LIST_VERSION,
    ArrayListSnapshot,
    LinkedListSnapshot,
    ListViewSnapshot,
    MapViewSnapshot,
)
from flinkstate.serializers.ttl import TtlSnapshot
from flinkstate.serializers.ttlaware import TtlAwareSnapshot
from flinkstate.serializers.values import CopyableValueSnapshot, GenericTypeSnapshot, ValueSnapshot

Notation = str | dict[str, Any]
NotationOf = Callable[[TypeSerializerSnapshot], Notation]
SnapshotOf = Callable[[Any, str], TypeSerializerSnapshot]


class NotationProblem(Exception):
    """A notation of these families that names no type: ``message`` at ``path`` inside the notation."""

    def __init__(self, message: str, path: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.path = path


#: String generics: name -> number of type arguments.
GENERIC_ARITY = {"Either": 2, "ArrayList": 1, "LinkedList": 1, "ListView": 1, "MapView": 1, "TtlAware": 1}
#: String names without arguments.
PLAIN_NAMES = ("JavaSerializable",)
#: Mapping forms -> the keys allowed beside the form's own.
FORMS: dict[str, set[str]] = {"either": set(), "array_list": set(), "linked_list": {"null_mask"},
                              "list_view": set(), "map_view": set(), "ttl_aware": {"ttl_enabled"}, "value": set(),
                              "copyable_value": set()}
_ONE_NESTED: dict[str, type[ArrayListSnapshot | LinkedListSnapshot | ListViewSnapshot | MapViewSnapshot]] = {
    "ArrayList": ArrayListSnapshot, "LinkedList": LinkedListSnapshot, "ListView": ListViewSnapshot,
    "MapView": MapViewSnapshot}
_FORM_OF = {"ArrayList": "array_list", "LinkedList": "linked_list", "ListView": "list_view", "MapView": "map_view"}


def named(name: str, args: list[TypeSerializerSnapshot]) -> TypeSerializerSnapshot | None:
    """The snapshot of a string notation ``name<args>`` of these families, None if the name is not theirs."""
    if name in PLAIN_NAMES:
        if args:
            raise NotationProblem(f"{name} takes no type arguments")
        return JavaSerializerSnapshot()
    if name not in GENERIC_ARITY:
        return None
    if len(args) != GENERIC_ARITY[name]:
        raise NotationProblem(f"{name} needs {GENERIC_ARITY[name]} type argument(s), got {len(args)}")
    if name == "Either":
        return EitherSnapshot(EitherSnapshot.CLASS_NAMES[0], args)
    if name == "TtlAware":
        if isinstance(args[0], TtlAwareSnapshot):
            raise NotationProblem("TtlAware cannot wrap another TtlAware")
        return TtlAwareSnapshot(args[0])
    cls = _ONE_NESTED[name]
    return cls(cls.CLASS_NAMES[0], args)


def from_mapping(form: str, notation: Mapping[str, Any], nested: SnapshotOf) -> TypeSerializerSnapshot:
    """The snapshot of a mapping notation whose form (one of :data:`FORMS`) is ``form``."""
    spec = notation[form]
    if form == "either":
        if not isinstance(spec, Mapping) or set(spec) != {"left", "right"}:
            raise NotationProblem("either needs exactly {left: TYPE, right: TYPE}", form)
        return EitherSnapshot(EitherSnapshot.CLASS_NAMES[0], [nested(spec["left"], "either.left"),
                                                              nested(spec["right"], "either.right")])
    if form in ("value", "copyable_value"):
        if not isinstance(spec, str) or not spec:
            raise NotationProblem(f"{form} needs the Java class name, got {spec!r}", form)
        return (ValueSnapshot if form == "value" else CopyableValueSnapshot)(spec)
    inner = nested(spec, form)
    if form == "ttl_aware":
        enabled = notation.get("ttl_enabled", isinstance(inner, TtlSnapshot))
        if not isinstance(enabled, bool) or (enabled and not isinstance(inner, TtlSnapshot)):
            raise NotationProblem(f"must be true (only for a TTL<...> type) or false, got {enabled!r}",
                                  "ttl_enabled")
        if isinstance(inner, TtlAwareSnapshot):
            raise NotationProblem("ttl_aware cannot wrap another TtlAware", form)
        return TtlAwareSnapshot(inner, enabled)
    if form == "linked_list":
        mask = notation.get("null_mask", True)
        if not isinstance(mask, bool):
            raise NotationProblem(f"must be true or false, got {mask!r}", "null_mask")
        return LinkedListSnapshot(LinkedListSnapshot.CLASS_NAMES[0], [inner], has_null_mask=mask)
    name = next(n for n, f in _FORM_OF.items() if f == form)
    cls = _ONE_NESTED[name]
    return cls(cls.CLASS_NAMES[0], [inner])


def notation_of(snapshot: TypeSerializerSnapshot, recurse: NotationOf) -> Notation | None:
    """The notation of a snapshot of these families, None for any other snapshot."""
    if isinstance(snapshot, JavaSerializerSnapshot):
        return "JavaSerializable"
    if isinstance(snapshot, GenericTypeSnapshot):
        return {"value" if isinstance(snapshot, ValueSnapshot) else "copyable_value": snapshot.type_class}
    if isinstance(snapshot, EitherSnapshot):
        left, right = (recurse(n) for n in snapshot.nested)
        if isinstance(left, str) and isinstance(right, str):
            return f"Either<{left}, {right}>"
        return {"either": {"left": left, "right": right}}
    if isinstance(snapshot, TtlAwareSnapshot):
        inner = recurse(snapshot.inner)
        if snapshot.ttl_enabled != isinstance(snapshot.inner, TtlSnapshot):
            return {"ttl_aware": inner, "ttl_enabled": snapshot.ttl_enabled}
        return f"TtlAware<{inner}>" if isinstance(inner, str) else {"ttl_aware": inner}
    name = next((n for n, cls in _ONE_NESTED.items() if type(snapshot) is cls), None)
    if name is None:
        return None
    element = recurse(snapshot.nested[0])
    if isinstance(snapshot, LinkedListSnapshot) and not (snapshot.has_null_mask
                                                         and snapshot.outer_version == LINKED_LIST_VERSION):
        return {"linked_list": element, "null_mask": snapshot.has_null_mask}
    return f"{name}<{element}>" if isinstance(element, str) else {_FORM_OF[name]: element}


__all__ = ["FORMS", "GENERIC_ARITY", "PLAIN_NAMES", "NotationProblem", "from_mapping", "named", "notation_of"]
