"""``JavaSerializer$JavaSerializerSnapshot`` (flink-runtime; ``SimpleTypeSerializerSnapshot``, version 3, empty
payload): values written with Java serialization (``InstantiationUtil.serializeObject``: a fresh
``ObjectOutputStream`` per record, ``aced0005`` then one object).

Record: one Java serialization stream. It is self-delimiting, so it is parsed (with ``javaobj-py3``) to find its
end. Python value: :class:`JavaObjectValue`, a JSON-ready view ``{"class": name, "value": view}`` (``dump`` shows it
as is) that keeps the record's exact bytes. The view is bounded (:data:`MAX_VIEW_NODES` nodes, :data:`MAX_VIEW_DEPTH`
levels; beyond, ``"<truncated>"``): boxed numbers, strings and enums become their values, arrays and the JDK's
collections (every form :mod:`flinkstate.serializers.javacollections` reads, ``List.of`` included) lists and objects,
other objects ``{"@class": name, field: view, ...}``.

Encoding writes the original bytes back: Java serialization is the class's Java code, so a value cannot be
rewritten, and a migration that would change one is refused in one line.

Compatibility: ``SimpleTypeSerializerSnapshot``'s (same class: compatible as is).
"""

from __future__ import annotations

import base64
import io
import logging
from typing import Any

from javaobj.v1.beans import JavaArray, JavaClass, JavaEnum, JavaObject
from javaobj.v1.transformers import DefaultObjectTransformer
from javaobj.v1.unmarshaller import JavaObjectUnmarshaller

from flinkstate.format_errors import SavepointFormatError, UnsupportedFormat
from flinkstate.serializers.base import Decoder, Encoder
from flinkstate.serializers.javacollections import (
    MAP,
    java_class_name,
    java_collection,
    java_fields,
    shared_budget,
)
from flinkstate.serializers.namespaces import EmptyPayloadSnapshot
from flinkstate.serializers.registry import register

# javaobj logs every class it cannot transform at ERROR level; this module reports problems itself.
logging.getLogger("javaobj").setLevel(logging.CRITICAL)

JAVA_MAGIC = b"\xac\xed\x00\x05"
MAX_VIEW_NODES = 10_000
MAX_VIEW_DEPTH = 32
TRUNCATED = "<truncated>"
_BOXED = {f"java.lang.{name}" for name in ("Integer", "Long", "Short", "Byte", "Double", "Float", "Boolean",
                                           "Character")}


class JavaObjectValue(dict[str, Any]):
    """A Java-serialized record: ``{"class": ..., "value": ...}`` (a bounded view) and its exact bytes."""

    __slots__ = ("_seen", "data")

    def __init__(self, view: dict[str, Any], data: bytes) -> None:
        super().__init__(view)
        self.data = data
        self._seen = repr(view)

    @property
    def unchanged(self) -> bool:
        """Whether the view is still the one decoded from :attr:`data` (only then can the bytes be written)."""
        return repr(dict(self)) == self._seen


class _View:
    """Builds the JSON-ready view of a parsed object graph, bounded in nodes and depth, cycles cut."""

    def __init__(self) -> None:
        self.nodes = 0
        self.path: set[int] = set()

    def of(self, obj: Any, depth: int = 0) -> Any:
        self.nodes += 1
        if self.nodes > MAX_VIEW_NODES or depth > MAX_VIEW_DEPTH:
            return TRUNCATED
        if obj is None or isinstance(obj, (bool, int, float, str)):
            return str(obj) if isinstance(obj, str) else obj
        if isinstance(obj, (bytes, bytearray)):
            return base64.b64encode(bytes(obj)).decode("ascii")
        if isinstance(obj, JavaEnum):
            return str(obj.constant)
        if isinstance(obj, JavaClass):
            return {"@class": "java.lang.Class", "name": obj.name}
        if id(obj) in self.path:
            return {"@ref": java_class_name(obj)}  # a back reference to an enclosing object: cut the cycle
        self.path.add(id(obj))
        try:
            return self._composite(obj, depth + 1)
        finally:
            self.path.discard(id(obj))

    def _composite(self, obj: Any, depth: int) -> Any:
        try:  # HashMap, ArrayList, List.of, Collections.unmodifiableList... (javacollections' forms)
            collection = java_collection(obj)
        except ValueError:
            collection = None  # not the JDK's form: shown field by field below (the bytes pass through anyway)
        if collection is not None and collection.kind == MAP:
            pairs = [(self.of(k, depth), self.of(v, depth)) for k, v in collection.items]
            if all(k is None or isinstance(k, (str, int, float, bool)) for k, _ in pairs):
                return {("null" if k is None else str(k)): v for k, v in pairs}
            return [{"key": k, "value": v} for k, v in pairs]
        if collection is not None or isinstance(obj, JavaArray):
            return [self.of(item, depth) for item in (collection.items if collection is not None else obj)]
        name = java_class_name(obj)
        if isinstance(obj, JavaObject) and name in _BOXED:
            return self.of(getattr(obj, "value", None), depth)
        if isinstance(obj, DefaultObjectTransformer.JavaPrimitiveClass):
            return self.of(obj.value, depth)
        view: dict[str, Any] = {"@class": name}
        for field, value in java_fields(obj).items():
            view[field] = self.of(value, depth)
        return view


def read_java_value(buf: bytes, off: int, type_name: str) -> tuple[JavaObjectValue, int]:
    """One Java serialization stream at ``off``: its view and bytes, and the offset just past it."""
    if bytes(buf[off:off + 4]) != JAVA_MAGIC:
        raise SavepointFormatError(f"{type_name}: not a Java serialization stream (magic "
                                   f"{bytes(buf[off:off + 4]).hex()})", offset=off)
    stream = io.BytesIO(buf)  # shares the buffer: no copy of a whole key-group block per record
    stream.seek(off)
    try:
        # javaobj's v1 API is untyped; readObject reads exactly one object and leaves the stream just past it.
        unmarshaller = JavaObjectUnmarshaller(stream)  # type: ignore[no-untyped-call]
        unmarshaller.add_transformer(DefaultObjectTransformer())  # type: ignore[no-untyped-call]
        parsed = unmarshaller.readObject(ignore_remaining_data=True)  # type: ignore[no-untyped-call]
    except RecursionError:
        raise SavepointFormatError(f"{type_name}: Java-serialized object nested too deeply", offset=off) from None
    except Exception as exc:  # javaobj raises plain IOError/ValueError/KeyError/struct.error on bad input
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise SavepointFormatError(f"{type_name}: malformed Java-serialized object ({type(exc).__name__}: "
                                   f"{first:.120})", offset=off) from None
    end = stream.tell()
    with shared_budget():  # the view's collections check their keys by fingerprint: one node budget for them all
        view = {"class": java_class_name(parsed) if isinstance(parsed, JavaObject) else _python_class(parsed),
                "value": _View().of(parsed)}
    return JavaObjectValue(view, bytes(buf[off:end])), end


def _python_class(obj: Any) -> str:
    if isinstance(obj, str):
        return "java.lang.String"
    return "null" if obj is None else type(obj).__name__


@register
class JavaSerializerSnapshot(EmptyPayloadSnapshot):
    CLASS_NAMES = ("org.apache.flink.runtime.state.JavaSerializer$JavaSerializerSnapshot",)
    NAME = "JavaSerializable"
    LENGTH = -1

    def make_decoder(self) -> Decoder:
        type_name = self.type_name()

        def decode(buf: bytes, off: int) -> tuple[Any, int]:
            return read_java_value(buf, off, type_name)

        return decode

    def make_encoder(self) -> Encoder:
        type_name = self.type_name()

        def encode(value: Any, out: bytearray) -> None:
            if not isinstance(value, JavaObjectValue) or not value.unchanged:
                what = "a changed value" if isinstance(value, JavaObjectValue) else type(value).__name__
                raise UnsupportedFormat(f"{type_name}: Java-serialized values pass through byte for byte, so a "
                                        f"migration cannot change them (got {what})")
            out += value.data

        return encode


__all__ = ["JAVA_MAGIC", "MAX_VIEW_DEPTH", "MAX_VIEW_NODES", "TRUNCATED", "JavaObjectValue", "JavaSerializerSnapshot",
           "read_java_value"]
