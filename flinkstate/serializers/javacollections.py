"""The JDK's ``java.util`` collections as Java serialization writes them, read from ``javaobj-py3``'s parse of the
stream (its v1 API, with or without its ``DefaultObjectTransformer``), and the structural value of a parsed object
that mirrors Java's ``equals`` (:func:`fingerprint`).

javaobj keeps an object's fields as attributes and what its class's ``writeObject`` wrote after them in
``annotations``: block data (a plain ``str`` of the bytes; a Java String is a ``JavaString``) and objects, in order.
The forms read, as the JDK writes and reads them (``readObject`` / ``readResolve``):

==========================================================  ===========================================================
class                                                       serial form
==========================================================  ===========================================================
``java.util.CollSer`` (the proxy of ``List.of``,            field ``int tag`` (low 8 bits: 1 List, 2 Set, 3 Map whose
``Set.of``, ``Map.of``, ``List.copyOf``, ``Stream.toList``:  keys and values alternate, 4 List with nulls; the high 24
``ImmutableCollections``)                                   bits are ignored); ``i32 length``, that many objects. A
                                                            null in a List / Set / Map, a repeated Set element or Map
                                                            key, an odd Map length or another tag fail ``readResolve``
``ArrayList``                                               field ``size``; ``i32 capacity`` (ignored), ``size``
                                                            elements
``LinkedList``                                              ``i32 size``, the elements
``Arrays$ArrayList`` (``Arrays.asList``)                    field ``a``: the array
``Collections$EmptyList`` / ``EmptySet`` / ``EmptyMap``     nothing
``Collections$SingletonList`` / ``SingletonSet``            field ``element``
``Collections$SingletonMap``                                fields ``k``, ``v``
``Collections$UnmodifiableCollection`` / ``Set`` / ``Map``  field ``c`` (a Map: ``m``)
``Collections$UnmodifiableList``                            fields ``c`` and ``list``, the same list (an
(``UnmodifiableRandomAccessList`` writes itself as one)     ``UnmodifiableRandomAccessList`` is read the same way)
``HashMap`` / ``LinkedHashMap``                             ``i32 buckets, i32 size``, ``size`` key, value pairs
``TreeMap``                                                 field ``comparator``; ``i32 size``, the pairs
``HashSet`` / ``LinkedHashSet``                             ``i32 capacity, f32 loadFactor, i32 size``, the elements
``TreeSet``                                                 the comparator (an object), ``i32 size``, the elements
==========================================================  ===========================================================

A known class whose data does not have its form (a block of another length, a count that is not the number of
objects, a null where the JDK refuses one) is a ``ValueError`` naming the class: no JDK writes it, and Java would not
read it as the collection either.
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from javaobj.v1.beans import JavaArray

from flinkstate.limits import VALUE_NODES

LIST, SET, MAP, COLLECTION = "java.util.List", "java.util.Set", "java.util.Map", "java.util.Collection"
_UTIL = "java.util."
_COLLECTIONS = _UTIL + "Collections$"
#: ImmutableCollections.CollSer's tags (the low 8 bits of its ``tag`` field).
COLLSER_LIST, COLLSER_SET, COLLSER_MAP, COLLSER_LIST_NULLS = 1, 2, 3, 4
#: Bound on the nesting that :func:`fingerprint` follows (the parsed objects are bounded in bytes, not in depth).
MAX_FINGERPRINT_DEPTH = 64


@dataclass(frozen=True)
class JavaCollection:
    """A parsed ``java.util`` collection: its interface (:data:`LIST`, :data:`SET`, :data:`MAP` or, for an
    ``UnmodifiableCollection``, :data:`COLLECTION`) and its elements in stream order (a Map's as key, value pairs)."""

    kind: str
    items: tuple[Any, ...]


def java_class_name(obj: Any) -> str:
    desc = getattr(obj, "classdesc", None)
    return str(getattr(desc, "name", type(obj).__name__)) if desc is not None else type(obj).__name__


def java_fields(obj: Any) -> dict[str, Any]:
    """Every serialized field of a parsed object, superclasses first."""
    descs = []
    desc = getattr(obj, "classdesc", None)
    while desc is not None:
        descs.append(desc)
        desc = getattr(desc, "superclass", None)
    values: dict[str, Any] = {}
    for d in reversed(descs):
        for name in getattr(d, "fields_names", None) or []:
            values[str(name)] = getattr(obj, name, None)
    return values


def _block(name: str, data: Any, fmt: str) -> tuple[Any, ...]:
    """The primitives a ``writeObject`` wrote as block data (javaobj gives it as a str of the bytes)."""
    layout = struct.Struct(">" + fmt)
    if type(data) is not str or len(data) != layout.size:
        raise ValueError(f"{name} without its {layout.size}-byte block data")
    return layout.unpack(data.encode("latin-1"))


def _counted(name: str, annotations: list[Any], before: int, fmt: str, count_at: int, per_item: int = 1
             ) -> list[Any]:
    """The objects after a block of ``fmt`` (at ``annotations[before]``) whose value ``count_at`` is their count."""
    if len(annotations) <= before:
        raise ValueError(f"{name} without its block data")
    count = _block(name, annotations[before], fmt)[count_at]
    objects = annotations[before + 1:]
    if count < 0 or len(objects) != count * per_item:
        raise ValueError(f"{name} of size {count} with {len(objects)} objects")
    return objects


def _no_nulls(name: str, items: list[Any]) -> None:
    if any(item is None for item in items):
        raise ValueError(f"{name} holding a null (List.of, Set.of and Map.of refuse nulls)")


def _distinct(name: str, keys: list[Any], what: str) -> None:
    seen = {repr(fingerprint(key)) for key in keys}
    if len(seen) != len(keys):
        raise ValueError(f"{name} with a repeated {what}")


def _collser(obj: Any, annotations: list[Any]) -> JavaCollection:
    name = "java.util.CollSer"
    tag = java_fields(obj).get("tag")
    if not isinstance(tag, int):
        raise ValueError(f"{name} without its tag")
    items = _counted(name, annotations, 0, "i", 0)
    kind = tag & 0xFF  # CollSer.readResolve: the low 8 bits say the kind, the others are ignored
    if kind == COLLSER_LIST_NULLS:
        return JavaCollection(LIST, tuple(items))
    if kind not in (COLLSER_LIST, COLLSER_SET, COLLSER_MAP):
        raise ValueError(f"{name} with tag {tag:#x} (1 List, 2 Set, 3 Map, 4 List with nulls)")
    _no_nulls(name, items)
    if kind == COLLSER_LIST:
        return JavaCollection(LIST, tuple(items))
    if kind == COLLSER_SET:
        _distinct(name, items, "Set element")
        return JavaCollection(SET, tuple(items))
    if len(items) % 2:
        raise ValueError(f"{name} of a Map with an odd number ({len(items)}) of keys and values")
    _distinct(name, items[0::2], "Map key")
    return JavaCollection(MAP, tuple(zip(items[0::2], items[1::2], strict=True)))


def _pairs(objects: list[Any]) -> tuple[tuple[Any, Any], ...]:
    return tuple(zip(objects[0::2], objects[1::2], strict=True))


def _inner(name: str, inner: Any, kinds: tuple[str, ...]) -> tuple[Any, ...]:
    """The elements of the collection an unmodifiable view wraps, which must be one of ``kinds``."""
    found = java_collection(inner)
    if found is None or found.kind not in kinds:
        raise ValueError(f"{name} wrapping {java_class_name(inner) if inner is not None else 'null'}")
    return found.items


def java_collection(obj: Any) -> JavaCollection | None:
    """The collection a parsed object is, or None when it is none of the forms above (arrays included: an array is
    not a ``java.util`` collection). A known class that does not hold its form is a ``ValueError``."""
    if obj is None or isinstance(obj, (str, bytes, int, float, JavaArray)):
        return None
    name = java_class_name(obj)
    annotations = list(getattr(obj, "annotations", None) or [])
    # javaobj's DefaultObjectTransformer already made ArrayList, LinkedList, HashMap, TreeMap, HashSet... Python
    # containers (javaserial uses it); a class it does not know stays a JavaObject and is read below.
    if isinstance(obj, dict):
        return JavaCollection(MAP, tuple(obj.items()))
    if isinstance(obj, (set, frozenset)):
        return JavaCollection(SET, tuple(obj))
    if isinstance(obj, list):
        return JavaCollection(LIST, tuple(obj))
    if not name.startswith(_UTIL):
        return None
    short = name[len(_UTIL):]
    fields = java_fields(obj)
    if short == "CollSer":
        return _collser(obj, annotations)
    if short == "ArrayList":
        size = fields.get("size")
        if not isinstance(size, int) or not annotations:
            raise ValueError(f"{name} without its size or block data")
        _block(name, annotations[0], "i")  # the capacity, which ArrayList.readObject reads and ignores
        items = annotations[1:]
        if size < 0 or len(items) != size:
            raise ValueError(f"{name} of size {size} with {len(items)} objects")
        return JavaCollection(LIST, tuple(items))
    if short == "LinkedList":
        return JavaCollection(LIST, tuple(_counted(name, annotations, 0, "i", 0)))
    if short == "Arrays$ArrayList":
        array = fields.get("a")
        if not isinstance(array, JavaArray):
            raise ValueError(f"{name} without its array")
        return JavaCollection(LIST, tuple(array))
    if short in ("HashMap", "LinkedHashMap"):
        return JavaCollection(MAP, _pairs(_counted(name, annotations, 0, "ii", 1, per_item=2)))
    if short == "TreeMap":
        return JavaCollection(MAP, _pairs(_counted(name, annotations, 0, "i", 0, per_item=2)))
    if short in ("HashSet", "LinkedHashSet"):
        return JavaCollection(SET, tuple(_counted(name, annotations, 0, "ifi", 2)))
    if short == "TreeSet":  # the comparator is written first, as an object
        return JavaCollection(SET, tuple(_counted(name, annotations, 1, "i", 0)))
    return _collections_form(name, short.removeprefix("Collections$"), fields) if short.startswith(
        "Collections$") else None


def _collections_form(name: str, form: str, fields: dict[str, Any]) -> JavaCollection | None:
    """``java.util.Collections``' own classes: the empty, singleton and unmodifiable collections."""
    empty = {"EmptyList": LIST, "EmptySet": SET, "EmptyMap": MAP}
    if form in empty:
        return JavaCollection(empty[form], ())
    if form == "SingletonList":
        return JavaCollection(LIST, (fields.get("element"),))
    if form == "SingletonSet":
        return JavaCollection(SET, (fields.get("element"),))
    if form == "SingletonMap":
        return JavaCollection(MAP, ((fields.get("k"), fields.get("v")),))
    if form in ("UnmodifiableList", "UnmodifiableRandomAccessList"):
        inner = fields.get("list")
        if fields.get("c") is not inner:  # the JDK writes one list twice: the second is a back reference
            raise ValueError(f"{name} whose list and collection differ")
        return JavaCollection(LIST, _inner(name, inner, (LIST,)))
    if form == "UnmodifiableSet":
        return JavaCollection(SET, _inner(name, fields.get("c"), (SET,)))
    if form == "UnmodifiableCollection":
        return JavaCollection(COLLECTION, _inner(name, fields.get("c"), (LIST, SET, COLLECTION)))
    if form == "UnmodifiableMap":
        return JavaCollection(MAP, _inner(name, fields.get("m"), (MAP,)))
    return None


def java_list(obj: Any) -> list[Any]:
    """The elements of a parsed object where Java expects a ``java.util.List`` (any List form above); anything else
    is a ``ValueError``, as Java's deserialization refuses to assign it to a List field."""
    found = java_collection(obj)
    if found is None or found.kind != LIST:
        raise ValueError(f"expected a java.util.List, got {java_class_name(obj) if obj is not None else 'null'}")
    return list(found.items)


def fingerprint(obj: Any) -> Any:
    """A hashable structural value of a parsed Java object that mirrors its ``equals``: class and fields, a
    collection by its interface and elements (``List.of(a)`` equals ``new ArrayList<>(List.of(a))``: List, Set and
    Map equality do not depend on the implementation; Set and Map ones not on the order), an array by its elements.
    Java serialization's handles let one object appear many times from a few bytes: each object is walked once, and
    the nodes its fingerprint expands to (what a comparison or ``repr`` of it walks) are bounded by ``VALUE_NODES``,
    one budget for every fingerprint taken while one is open (:func:`shared_budget`), since a collection's check of
    its own keys fingerprints them again."""
    with shared_budget() as budget:
        return _fingerprint(obj, 0, budget)


class _Budget:
    """Nodes left to expand, and each object's fingerprint with the nodes it expands to (by ``id``: the parsed graph
    is alive while the budget is open)."""

    def __init__(self) -> None:
        self.left = VALUE_NODES.value()
        self.done: dict[int, tuple[Any, int]] = {}

    def charge(self, nodes: int) -> None:
        self.left -= nodes
        if self.left < 0:
            raise VALUE_NODES.exceeded("Java-serialized object expands to more nodes than allowed through shared "
                                       "references")


_budget: ContextVar[_Budget | None] = ContextVar("fingerprint_budget", default=None)


@contextlib.contextmanager
def shared_budget() -> Iterator[_Budget]:
    """The node budget of the fingerprints taken inside: the one already open, else a new one."""
    budget = _budget.get()
    if budget is not None:
        yield budget
        return
    budget = _Budget()
    token = _budget.set(budget)
    try:
        yield budget
    finally:
        _budget.reset(token)


def _fingerprint(obj: Any, depth: int, budget: _Budget) -> Any:
    if depth > MAX_FINGERPRINT_DEPTH:
        raise ValueError("object nested too deeply")
    if obj is None or isinstance(obj, (bool, int, float, str, bytes)):
        budget.charge(1)
        return obj
    done = budget.done.get(id(obj))
    if done is not None:
        budget.charge(done[1])
        return done[0]
    left = budget.left
    budget.charge(1)
    value = _fingerprint_of(obj, depth, budget)
    budget.done[id(obj)] = (value, left - budget.left)
    return value


def _fingerprint_of(obj: Any, depth: int, budget: _Budget) -> Any:
    collection = java_collection(obj)
    if collection is not None:
        if collection.kind == MAP:
            pairs = [(_fingerprint(k, depth + 1, budget), _fingerprint(v, depth + 1, budget))
                     for k, v in collection.items]
            return (MAP, tuple(sorted(pairs, key=repr)))
        items = [_fingerprint(x, depth + 1, budget) for x in collection.items]
        return (collection.kind, tuple(sorted(items, key=repr)) if collection.kind == SET else tuple(items))
    if isinstance(obj, (list, tuple)):  # an array
        return tuple(_fingerprint(x, depth + 1, budget) for x in obj)
    constant = getattr(obj, "constant", None)
    if constant is not None:  # a Java enum constant
        return (java_class_name(obj), str(constant))
    name = java_class_name(obj)
    if name == "java.lang.Class" or type(obj).__name__ == "JavaClass":
        return ("class", str(getattr(obj, "name", name)))
    fields = java_fields(obj)
    # TimestampType / LocalZonedTimestampType / ZonedTimestampType.equals ignore the kind (ROWTIME, PROCTIME)
    skip = {"kind"} if name.endswith("TimestampType") else set()
    # objects written by their own writeObject carry their content in the annotations
    extra = _fingerprint(list(getattr(obj, "annotations", None) or []), depth + 1, budget)
    return (name, tuple((k, _fingerprint(v, depth + 1, budget)) for k, v in fields.items() if k not in skip), extra)


__all__ = ["COLLECTION", "LIST", "MAP", "SET", "JavaCollection", "fingerprint", "java_class_name", "java_collection",
           "java_fields", "java_list", "shared_budget"]
