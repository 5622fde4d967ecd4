"""The type notation (see :mod:`flinkstate.typenotation`) of the Either, runtime list, TTL-aware, Value and Java
serialization families, both ways. :mod:`flinkstate.typenotation` calls into this module (it stays below it):

* strings: ``Either<L, R>``, ``ArrayList<T>``, ``LinkedList<T>`` (with a null mask, as Flink writes it today),
  ``ListView<List<T>>``, ``MapView<Map<K, V>>``, ``TtlAware<T>`` (TTL on exactly when ``T`` is a ``TTL<...>``),
  ``JavaSerializable``, and Scala's ``ScalaOption<T>``, ``ScalaEither<L, R>``, ``ScalaTry<T, THROWABLE>``;
* mappings: ``{either: {left: L, right: R}}``, ``{array_list: T}``, ``{linked_list: T, null_mask: BOOL}``,
  ``{list_view: T}``, ``{map_view: T}``, ``{ttl_aware: T, ttl_enabled: BOOL}``, ``{value: CLASS}`` and
  ``{copyable_value: CLASS}`` (a Flink ``Value`` / ``CopyableValue`` class), ``{scala_case_class: CLASS,
  fields: [T, ...]}``, ``{scala_traversable: T, builder: SCALA_CODE}`` (the collection's builder code as Flink
  stored it), ``{scala_enum: CLASS, constants: {NAME: ID, ...}}`` (in stored order) and the mapping forms of the
  Scala generics, ``{scala_option: T}``, ``{scala_either: {left: L, right: R}}``, ``{scala_try: T, throwable: T}``.
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
from flinkstate.serializers.scala import (
    ScalaCaseClassSnapshot,
    ScalaEitherSnapshot,
    ScalaEnumSnapshot,
    ScalaOptionSnapshot,
    ScalaTrySnapshot,
    TraversableSnapshot,
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
GENERIC_ARITY = {"Either": 2, "ArrayList": 1, "LinkedList": 1, "ListView": 1, "MapView": 1, "TtlAware": 1,
                 "ScalaOption": 1, "ScalaEither": 2, "ScalaTry": 2}
#: String names without arguments.
PLAIN_NAMES = ("JavaSerializable",)
#: Mapping forms -> the keys allowed beside the form's own.
FORMS: dict[str, set[str]] = {"either": set(), "array_list": set(), "linked_list": {"null_mask"},
                              "list_view": set(), "map_view": set(), "ttl_aware": {"ttl_enabled"}, "value": set(),
                              "copyable_value": set(), "scala_case_class": {"fields"},
                              "scala_traversable": {"builder"}, "scala_enum": {"constants"}, "scala_option": set(),
                              "scala_either": set(), "scala_try": {"throwable"}}
_ONE_NESTED: dict[str, type[ArrayListSnapshot | LinkedListSnapshot | ListViewSnapshot | MapViewSnapshot]] = {
    "ArrayList": ArrayListSnapshot, "LinkedList": LinkedListSnapshot, "ListView": ListViewSnapshot,
    "MapView": MapViewSnapshot}
_FORM_OF = {"ArrayList": "array_list", "LinkedList": "linked_list", "ListView": "list_view", "MapView": "map_view"}
_BY_CLASS: dict[str, type[EitherSnapshot | ScalaOptionSnapshot | ScalaTrySnapshot]] = {
    "Either": EitherSnapshot, "ScalaEither": ScalaEitherSnapshot, "ScalaOption": ScalaOptionSnapshot,
    "ScalaTry": ScalaTrySnapshot}


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
    if name in _BY_CLASS:
        generic = _BY_CLASS[name]
        return generic(generic.CLASS_NAMES[0], args)
    if name == "TtlAware":
        if isinstance(args[0], TtlAwareSnapshot):
            raise NotationProblem("TtlAware cannot wrap another TtlAware")
        return TtlAwareSnapshot(args[0])
    cls = _ONE_NESTED[name]
    return cls(cls.CLASS_NAMES[0], args)


def from_mapping(form: str, notation: Mapping[str, Any], nested: SnapshotOf) -> TypeSerializerSnapshot:
    """The snapshot of a mapping notation whose form (one of :data:`FORMS`) is ``form``."""
    spec = notation[form]
    if form in ("either", "scala_either"):
        if not isinstance(spec, Mapping) or set(spec) != {"left", "right"}:
            raise NotationProblem(f"{form} needs exactly {{left: TYPE, right: TYPE}}", form)
        either = EitherSnapshot if form == "either" else ScalaEitherSnapshot
        return either(either.CLASS_NAMES[0], [nested(spec["left"], f"{form}.left"),
                                              nested(spec["right"], f"{form}.right")])
    if form.startswith("scala_"):
        return _scala_form(form, notation, nested)
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


def _text(notation: Mapping[str, Any], key: str) -> str:
    value = notation.get(key)
    if not isinstance(value, str) or not value:
        raise NotationProblem(f"{key} needs a name, got {value!r}", key)
    return value


def _scala_form(form: str, notation: Mapping[str, Any], nested: SnapshotOf) -> TypeSerializerSnapshot:
    spec = notation[form]
    if form == "scala_enum":
        constants = notation.get("constants")
        if not isinstance(constants, Mapping) or not all(isinstance(i, int) for i in constants.values()):
            raise NotationProblem("must map each constant's name to its id", "constants")
        return ScalaEnumSnapshot(_text(notation, form), [(str(name), ident) for name, ident in constants.items()])
    if form == "scala_case_class":
        fields = notation.get("fields")
        if not isinstance(fields, list):
            raise NotationProblem("scala_case_class needs 'fields', the list of field types", "fields")
        return ScalaCaseClassSnapshot(ScalaCaseClassSnapshot.CLASS_NAMES[0], [
            nested(t, f"fields.{i}") for i, t in enumerate(fields)], outer_text=_text(notation, form))
    if form == "scala_traversable":
        return TraversableSnapshot(TraversableSnapshot.CLASS_NAMES[0], [nested(spec, form)],
                                   outer_text=_text(notation, "builder"))
    if form == "scala_try":
        return ScalaTrySnapshot(ScalaTrySnapshot.CLASS_NAMES[0], [nested(spec, form),
                                                                  nested(notation.get("throwable"), "throwable")])
    return ScalaOptionSnapshot(ScalaOptionSnapshot.CLASS_NAMES[0], [nested(spec, form)])


def _scala_notation(snapshot: TypeSerializerSnapshot, recurse: NotationOf) -> Notation | None:
    if isinstance(snapshot, ScalaEnumSnapshot):
        return {"scala_enum": snapshot.enum_class, "constants": dict(snapshot.constants)}
    if isinstance(snapshot, ScalaCaseClassSnapshot):
        return {"scala_case_class": snapshot.outer_text, "fields": [recurse(n) for n in snapshot.nested]}
    if isinstance(snapshot, TraversableSnapshot):
        return {"scala_traversable": recurse(snapshot.nested[0]), "builder": snapshot.outer_text}
    name = next((n for n, cls in _BY_CLASS.items() if type(snapshot) is cls), None)
    if name is None:
        return None
    args = [recurse(n) for n in snapshot.nested]
    if all(isinstance(a, str) for a in args):
        return f"{name}<{', '.join(args)}>"  # type: ignore[arg-type]
    if name == "ScalaTry":
        return {"scala_try": args[0], "throwable": args[1]}
    if name == "ScalaOption":
        return {"scala_option": args[0]}
    return {"either" if name == "Either" else "scala_either": {"left": args[0], "right": args[1]}}


def notation_of(snapshot: TypeSerializerSnapshot, recurse: NotationOf) -> Notation | None:
    """The notation of a snapshot of these families, None for any other snapshot."""
    scala = _scala_notation(snapshot, recurse)
    if scala is not None:
        return scala
    if isinstance(snapshot, JavaSerializerSnapshot):
        return "JavaSerializable"
    if isinstance(snapshot, GenericTypeSnapshot):
        return {"value" if isinstance(snapshot, ValueSnapshot) else "copyable_value": snapshot.type_class}
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
