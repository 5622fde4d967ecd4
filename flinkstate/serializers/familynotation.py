"""The type notation (see :mod:`flinkstate.typenotation`) of the Either, runtime list, TTL-aware, Value, Java
serialization, Scala and streaming-runtime families, both ways. :mod:`flinkstate.typenotation` calls into this
module (it stays below it):

* strings: ``Either<L, R>``, ``ArrayList<T>``, ``LinkedList<T>`` (with a null mask, as Flink writes it today),
  ``ListView<List<T>>``, ``MapView<Map<K, V>>``, ``TtlAware<T>`` (TTL on exactly when ``T`` is a ``TTL<...>``),
  ``JavaSerializable``, Scala's ``ScalaOption<T>``, ``ScalaEither<L, R>``, ``ScalaTry<T, THROWABLE>``, and the
  streaming runtime's ``StreamElement<T>``, ``TaggedUnion<A, B>``, ``BufferEntry<T>``, and CEP's ``NFAState``,
  ``DeweyNumber``, ``EventId``, ``NodeId``, ``SharedBufferEdge``, ``SharedBufferNode``, ``Lockable<T>`` (an NFA
  state without previous timestamps, Flink 1.x's: ``{nfa_state: {previous_timestamp: false}}``), ``Bitmap``,
  ``Variant``;
* mappings: ``{either: {left: L, right: R}}`` (with ``legacy_snapshot: true``: Flink 1.7's EitherSerializerSnapshot),
  ``{array_list: T}``, ``{linked_list: T, null_mask: BOOL}``, ``{list_view: T}``, ``{map_view: T}``,
  ``{ttl_aware: T, ttl_enabled: BOOL}``, ``{value: CLASS}``, ``{copyable_value: CLASS}`` (a Flink ``Value`` /
  ``CopyableValue`` class), ``{writable: CLASS}`` (Hadoop), ``{scala_case_class: CLASS, fields: [T, ...]}``,
  ``{scala_traversable: T, builder: SCALA_CODE}`` (the collection's builder code as Flink stored it),
  ``{scala_enum: CLASS, constants: {NAME: ID, ...}}`` (in stored order), the mapping forms of the Scala generics,
  ``{scala_option: T}``, ``{scala_either: {left: L, right: R}}``, ``{scala_try: T, throwable: T}``, and
  ``{two_phase_commit: {transaction: T, context: T}, null_transactions: BOOL, snapshot_class: CLASS}`` (the snapshot
  class Flink 2.x writes, ``...sink.legacy.TwoPhaseCommitSinkFunction$...``, when not 1.x's); the mapping forms of
  the streaming generics are ``{stream_element: T}``, ``{tagged_union: {one: A, two: B}}``, ``{buffer_entry: T}``,
  and CEP's ``{lockable: T}``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from flinkstate.serializers import registry
from flinkstate.serializers.base import TypeSerializerSnapshot
from flinkstate.serializers.bitmapvariant import BitmapSnapshot, VariantSnapshot
from flinkstate.serializers.cep import (
    DeweyNumberSnapshot,
    EventIdSnapshot,
    LockableSnapshot,
    NFAStateSnapshot,
    NodeIdSnapshot,
    SharedBufferEdgeSnapshot,
    SharedBufferNodeSnapshot,
)
from flinkstate.serializers.either import EitherSnapshot, LegacyEitherSnapshot
from flinkstate.serializers.javaserial import JavaSerializerSnapshot
from flinkstate.serializers.namespaces import EmptyPayloadSnapshot
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
from flinkstate.serializers.streaming import (
    BufferEntrySnapshot,
    StreamElementSnapshot,
    TwoPhaseCommitStateSnapshot,
    UnionSnapshot,
)
from flinkstate.serializers.ttl import TtlSnapshot
from flinkstate.serializers.ttlaware import TtlAwareSnapshot
from flinkstate.serializers.values import CopyableValueSnapshot, GenericTypeSnapshot, ValueSnapshot, WritableSnapshot

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
                 "ScalaOption": 1, "ScalaEither": 2, "ScalaTry": 2, "StreamElement": 1, "TaggedUnion": 2,
                 "BufferEntry": 1, "Lockable": 1}
#: String names without arguments.
PLAIN_NAMES = ("JavaSerializable", "NFAState", "DeweyNumber", "EventId", "NodeId", "SharedBufferEdge",
               "SharedBufferNode", "Bitmap", "Variant")
#: Mapping forms -> the keys allowed beside the form's own.
FORMS: dict[str, set[str]] = {
    "either": {"legacy_snapshot"}, "array_list": set(), "linked_list": {"null_mask"}, "list_view": set(),
    "map_view": set(), "ttl_aware": {"ttl_enabled"}, "value": set(), "copyable_value": set(), "writable": set(),
    "scala_case_class": {"fields"}, "scala_traversable": {"builder"}, "scala_enum": {"constants"},
    "scala_option": set(), "scala_either": set(), "scala_try": {"throwable"}, "stream_element": set(),
    "tagged_union": set(), "buffer_entry": set(), "nfa_state": set(), "lockable": set(),
    "two_phase_commit": {"null_transactions", "snapshot_class"}}
_ONE_NESTED: dict[str, type[ArrayListSnapshot | LinkedListSnapshot | ListViewSnapshot | MapViewSnapshot]] = {
    "ArrayList": ArrayListSnapshot, "LinkedList": LinkedListSnapshot, "ListView": ListViewSnapshot,
    "MapView": MapViewSnapshot}
_GENERIC_TYPES: dict[str, type[GenericTypeSnapshot]] = {
    "value": ValueSnapshot, "copyable_value": CopyableValueSnapshot, "writable": WritableSnapshot}
_FORM_OF = {"ArrayList": "array_list", "LinkedList": "linked_list", "ListView": "list_view", "MapView": "map_view"}
_BY_CLASS: dict[str, type[EitherSnapshot | ScalaOptionSnapshot | ScalaTrySnapshot | StreamElementSnapshot
                          | UnionSnapshot | BufferEntrySnapshot | LockableSnapshot]] = {
    "Either": EitherSnapshot, "ScalaEither": ScalaEitherSnapshot, "ScalaOption": ScalaOptionSnapshot,
    "ScalaTry": ScalaTrySnapshot, "StreamElement": StreamElementSnapshot, "TaggedUnion": UnionSnapshot,
    "BufferEntry": BufferEntrySnapshot, "Lockable": LockableSnapshot}
#: Mapping forms of the string generics whose arguments are structured: form -> (name, argument keys or None).
_GENERIC_FORMS: dict[str, tuple[str, tuple[str, ...] | None]] = {
    "scala_option": ("ScalaOption", None), "stream_element": ("StreamElement", None),
    "buffer_entry": ("BufferEntry", None), "lockable": ("Lockable", None),
    "tagged_union": ("TaggedUnion", ("one", "two")), "scala_either": ("ScalaEither", ("left", "right")),
    "either": ("Either", ("left", "right"))}


def named(name: str, args: list[TypeSerializerSnapshot]) -> TypeSerializerSnapshot | None:
    """The snapshot of a string notation ``name<args>`` of these families, None if the name is not theirs."""
    if name in PLAIN_NAMES:
        if args:
            raise NotationProblem(f"{name} takes no type arguments")
        return _plain(name)
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


_SIMPLE: dict[str, type[EmptyPayloadSnapshot]] = {
    "JavaSerializable": JavaSerializerSnapshot, "DeweyNumber": DeweyNumberSnapshot, "EventId": EventIdSnapshot,
    "Bitmap": BitmapSnapshot, "Variant": VariantSnapshot}


def _plain(name: str, previous_timestamp: bool = True) -> TypeSerializerSnapshot:
    """The snapshot of a type named without arguments (CEP's types nest fixed serializers)."""
    if name in _SIMPLE:
        return _SIMPLE[name]()
    if name == "NodeId":
        return NodeIdSnapshot(NodeIdSnapshot.CLASS_NAMES[0], [EventIdSnapshot()])
    if name == "SharedBufferEdge":
        return SharedBufferEdgeSnapshot(SharedBufferEdgeSnapshot.CLASS_NAMES[0], [_plain("NodeId"),
                                                                                  DeweyNumberSnapshot()])
    if name == "SharedBufferNode":
        return SharedBufferNodeSnapshot(SharedBufferNodeSnapshot.CLASS_NAMES[0], [_plain("SharedBufferEdge")])
    return NFAStateSnapshot(NFAStateSnapshot.CLASS_NAMES[0], [DeweyNumberSnapshot(), _plain("NodeId"),
                                                              EventIdSnapshot()], previous_timestamp=previous_timestamp)


def from_mapping(form: str, notation: Mapping[str, Any], nested: SnapshotOf) -> TypeSerializerSnapshot:
    """The snapshot of a mapping notation whose form (one of :data:`FORMS`) is ``form``."""
    spec = notation[form]
    if form in _GENERIC_FORMS:
        name, keys = _GENERIC_FORMS[form]
        generic = _BY_CLASS[name]
        if keys is None:
            return generic(generic.CLASS_NAMES[0], [nested(spec, form)])
        if not isinstance(spec, Mapping) or set(spec) != set(keys):
            raise NotationProblem(f"{form} needs exactly {{{keys[0]}: TYPE, {keys[1]}: TYPE}}", form)
        legacy = notation.get("legacy_snapshot", False)
        if not isinstance(legacy, bool):
            raise NotationProblem(f"must be true or false, got {legacy!r}", "legacy_snapshot")
        if legacy:
            generic = LegacyEitherSnapshot  # Flink 1.7's class, written back as version 2
            return generic(generic.CLASS_NAMES[0], [nested(spec[k], f"{form}.{k}") for k in keys], version=2,
                           outer_version=2)
        return generic(generic.CLASS_NAMES[0], [nested(spec[k], f"{form}.{k}") for k in keys])
    if form == "nfa_state":
        if not isinstance(spec, Mapping) or set(spec) != {"previous_timestamp"} or not isinstance(
                spec["previous_timestamp"], bool):
            raise NotationProblem("nfa_state needs {previous_timestamp: true or false}", form)
        return _plain("NFAState", spec["previous_timestamp"])
    if form == "two_phase_commit":
        if not isinstance(spec, Mapping) or set(spec) != {"transaction", "context"}:
            raise NotationProblem("two_phase_commit needs exactly {transaction: TYPE, context: TYPE}", form)
        supports_null = notation.get("null_transactions", True)
        if not isinstance(supports_null, bool):
            raise NotationProblem(f"must be true or false, got {supports_null!r}", "null_transactions")
        class_name = notation.get("snapshot_class", TwoPhaseCommitStateSnapshot.CLASS_NAMES[0])
        if class_name not in TwoPhaseCommitStateSnapshot.CLASS_NAMES:
            raise NotationProblem(f"must be one of {', '.join(TwoPhaseCommitStateSnapshot.CLASS_NAMES)}",
                                  "snapshot_class")
        return TwoPhaseCommitStateSnapshot(class_name, [
            nested(spec["transaction"], f"{form}.transaction"), nested(spec["context"], f"{form}.context")],
            supports_null=supports_null)
    if form.startswith("scala_"):
        return _scala_form(form, notation, nested)
    if form in _GENERIC_TYPES:
        if not isinstance(spec, str) or not spec:
            raise NotationProblem(f"{form} needs the Java class name, got {spec!r}", form)
        return _GENERIC_TYPES[form](spec)
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
    raise NotationProblem(f"unknown form {form}", form)


def _plain_notation(snapshot: TypeSerializerSnapshot) -> Notation | None:
    """A CEP type (or Java serialization) by its name, when its snapshot is exactly what the name builds."""
    name = snapshot.type_name()
    if name not in PLAIN_NAMES:
        return None
    if type(snapshot) in _SIMPLE.values():
        return name  # simple snapshots: any version names the same serializer
    written = registry.snapshot_bytes(snapshot)
    if written == registry.snapshot_bytes(_plain(name)):
        return name
    if isinstance(snapshot, NFAStateSnapshot) and written == registry.snapshot_bytes(_plain(name, False)):
        return {"nfa_state": {"previous_timestamp": False}}
    return None  # an older snapshot version: no notation


def _special_notation(snapshot: TypeSerializerSnapshot, recurse: NotationOf) -> Notation | None:
    plain = _plain_notation(snapshot)
    if plain is not None:
        return plain
    if isinstance(snapshot, LegacyEitherSnapshot):
        return {"either": {"left": recurse(snapshot.nested[0]), "right": recurse(snapshot.nested[1])},
                "legacy_snapshot": True}
    if isinstance(snapshot, ScalaEnumSnapshot):
        return {"scala_enum": snapshot.enum_class, "constants": dict(snapshot.constants)}
    if isinstance(snapshot, ScalaCaseClassSnapshot):
        return {"scala_case_class": snapshot.outer_text, "fields": [recurse(n) for n in snapshot.nested]}
    if isinstance(snapshot, TraversableSnapshot):
        return {"scala_traversable": recurse(snapshot.nested[0]), "builder": snapshot.outer_text}
    if isinstance(snapshot, TwoPhaseCommitStateSnapshot):
        result: dict[str, Any] = {"two_phase_commit": {"transaction": recurse(snapshot.nested[0]),
                                                       "context": recurse(snapshot.nested[1])}}
        if not snapshot.supports_null:
            result["null_transactions"] = False
        if snapshot.class_name != TwoPhaseCommitStateSnapshot.CLASS_NAMES[0]:
            result["snapshot_class"] = snapshot.class_name
        return result
    name = next((n for n, cls in _BY_CLASS.items() if type(snapshot) is cls), None)
    if name is None:
        return None
    args = [recurse(n) for n in snapshot.nested]
    if all(isinstance(a, str) for a in args):
        return f"{name}<{', '.join(args)}>"  # type: ignore[arg-type]
    if name == "ScalaTry":
        return {"scala_try": args[0], "throwable": args[1]}
    form, keys = next((f, k) for f, (n, k) in _GENERIC_FORMS.items() if n == name)
    return {form: args[0]} if keys is None else {form: dict(zip(keys, args, strict=True))}


def notation_of(snapshot: TypeSerializerSnapshot, recurse: NotationOf) -> Notation | None:
    """The notation of a snapshot of these families, None for any other snapshot."""
    scala = _special_notation(snapshot, recurse)
    if scala is not None:
        return scala
    if isinstance(snapshot, GenericTypeSnapshot):
        return {next(f for f, cls in _GENERIC_TYPES.items() if type(snapshot) is cls): snapshot.type_class}
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
