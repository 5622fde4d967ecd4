"""The Scala API's serializers (``flink-table-api-scala``, package ``org.apache.flink.table.api.typeutils``):

* ``ScalaOptionSerializerSnapshot`` (composite, outer version 2; nested = [element]). Record: ``bool isSome``
  then the element. Python value: None for ``None``, :class:`ScalaSome` (``{"some": v}``) for ``Some(v)``, so that
  ``Some(null)`` stays apart from ``None``.
* ``ScalaEitherSerializerSnapshot`` (outer version 1; nested = [left, right]): the record of Java's Either
  (``bool isLeft`` then the side). Python value: :class:`~flinkstate.serializers.either.Either`.
* ``ScalaTrySerializerSnapshot`` (outer version 2; nested = [element, throwable]). Record: ``bool isSuccess`` then
  the element or the throwable (usually Kryo, so a Try is read as a whole stored value). Python value:
  :class:`ScalaTry` (``{"success": v}`` or ``{"failure": t}``).
* ``ScalaCaseClassSerializerSnapshot`` (outer version 2: ``UTF class``; nested = the fields): the fields back to
  back. Python value: a tuple. Another class is incompatible (``resolveOuterSchemaCompatibility``).
* ``TraversableSerializerSnapshot`` (outer version 2: ``UTF cbfCode``, the Scala source of the collection's
  builder; nested = [element]). Record: ``i32 n``; n x (``bool nonNull``; element). Python value: a list (a Scala
  Map's elements are its (key, value) tuples). Another builder code is incompatible.
* ``ScalaEnumSerializerSnapshot`` (version 3: ``UTF enumClass; i32 n; n x (UTF name; i32 id)``). Record: ``i32 id``.
  Python value: the constant's name. Compatibility: another class is incompatible, and so is an old constant whose
  position in the new list (Scala's ``List(index)``, with the old id as index) holds another name or nothing.
"""

from __future__ import annotations

from typing import Any

from flinkstate.binary import I32, Reader, Writer
from flinkstate.compatibility import INCOMPATIBLE, Compatibility, Finding
from flinkstate.format_errors import SavepointFormatError, UnsupportedFormat
from flinkstate.serializers.base import Decoder, Encoder, TypeSerializerSnapshot
from flinkstate.serializers.composite import CompositeSnapshot
from flinkstate.serializers.either import EitherSnapshot
from flinkstate.serializers.registry import register
from flinkstate.serializers.tuple import fields_decoder, fields_encoder

SCALA = "org.apache.flink.table.api.typeutils."
_unpack_i32 = I32.unpack_from


class _OneKey(dict[str, Any]):
    """A Scala sum type's value as a one-key mapping (also its JSON)."""

    KEYS: tuple[str, str] = ("", "")

    @property
    def value(self) -> Any:
        return next(iter(self.values()))

    @classmethod
    def side(cls, value: Any, type_name: str) -> tuple[bool, Any]:
        """(first key?, inner value) of a mapping with one of :attr:`KEYS`."""
        if isinstance(value, dict) and len(value) == 1 and next(iter(value)) in cls.KEYS:
            (key, inner), = value.items()
            return key == cls.KEYS[0], inner
        raise UnsupportedFormat(f"{type_name}: a value is {{\"{cls.KEYS[0]}\": value}} or {{\"{cls.KEYS[1]}\": "
                                f"value}}, not {value!r:.80}")


class ScalaSome(_OneKey):
    """``Some(v)``: ``{"some": v}``."""

    KEYS = ("some", "some")


class ScalaTry(_OneKey):
    """``Success(v)`` or ``Failure(t)``: ``{"success": v}`` or ``{"failure": t}``."""

    KEYS = ("success", "failure")


class _TwoWay(CompositeSnapshot):
    """A record that is a boolean then one of two nested serializers' records (Try)."""

    NAME = ""
    VALUE: type[_OneKey] = _OneKey

    @property
    def needs_end(self) -> bool:  # type: ignore[override]
        return any(n.needs_end for n in self.nested)

    def tail_decoder(self) -> Decoder:
        return self._two_way(tail=True)

    def make_decoder(self) -> Decoder:
        return self._two_way(tail=False)

    def _two_way(self, tail: bool) -> Decoder:
        first, second = (n.tail_decoder() if tail else n.decoder() for n in self.nested)
        keys, wrap = self.VALUE.KEYS, self.VALUE

        def decode(buf: bytes, off: int) -> tuple[Any, int]:
            if buf[off]:
                value, off = first(buf, off + 1)
                return wrap({keys[0]: value}), off
            value, off = second(buf, off + 1)
            return wrap({keys[1]: value}), off

        return decode

    def make_encoder(self) -> Encoder:
        first, second = (n.encoder() for n in self.nested)
        type_name, side = self.type_name(), self.VALUE.side

        def encode(value: Any, out: bytearray) -> None:
            is_first, inner = side(value, type_name)
            out.append(1 if is_first else 0)
            (first if is_first else second)(inner, out)

        return encode

    def type_name(self) -> str:
        return f"{self.NAME}<{', '.join(n.type_name() for n in self.nested)}>"

    def nested_labels(self) -> list[str | None]:
        return list(self.VALUE.KEYS)


@register
class ScalaTrySnapshot(_TwoWay):
    CLASS_NAMES = (SCALA + "ScalaTrySerializerSnapshot",)
    OUTER_VERSION = 2
    ARITY = 2
    NAME = "ScalaTry"
    VALUE = ScalaTry


@register
class ScalaEitherSnapshot(EitherSnapshot):
    CLASS_NAMES = (SCALA + "ScalaEitherSerializerSnapshot",)

    def type_name(self) -> str:
        return "Scala" + super().type_name()


@register
class ScalaOptionSnapshot(CompositeSnapshot):
    CLASS_NAMES = (SCALA + "ScalaOptionSerializerSnapshot",)
    OUTER_VERSION = 2
    ARITY = 1

    def make_decoder(self) -> Decoder:
        element = self.nested[0].decoder()

        def decode(buf: bytes, off: int) -> tuple[Any, int]:
            if not buf[off]:
                return None, off + 1
            value, off = element(buf, off + 1)
            return ScalaSome({"some": value}), off

        return decode

    def make_encoder(self) -> Encoder:
        element = self.nested[0].encoder()
        type_name = self.type_name()

        def encode(value: Any, out: bytearray) -> None:
            if value is None:
                out.append(0)
                return
            out.append(1)
            element(ScalaSome.side(value, type_name)[1], out)

        return encode

    def type_name(self) -> str:
        return f"ScalaOption<{self.nested[0].type_name()}>"

    def nested_labels(self) -> list[str | None]:
        return ["some"]


class _NamedComposite(CompositeSnapshot):
    """A composite whose outer payload is one UTF string that must stay the same (``resolveOuterSchema...``)."""

    OUTER_VERSION = 2
    WHAT = ""

    def __init__(self, class_name: str, nested: list[Any], *, outer_text: str = "", **kwargs: Any) -> None:
        super().__init__(class_name, nested, **kwargs)
        self.outer_text = outer_text

    @classmethod
    def read_outer(cls, reader: Reader, outer_version: int) -> dict[str, object]:
        return {"outer_text": reader.utf()}

    def write_outer(self, writer: Writer) -> None:
        writer.utf(self.outer_text)

    def resolve_outer(self, old: Any, path: str) -> Compatibility:
        if old.outer_text != self.outer_text:
            return Compatibility.of(Finding(f"SCALA_{self.WHAT.upper().replace(' ', '_')}_CHANGED", path,
                                            f"{self.WHAT} changed from {old.outer_text} to {self.outer_text}",
                                            INCOMPATIBLE, old.type_name(), self.type_name()))
        return Compatibility.as_is()


@register
class ScalaCaseClassSnapshot(_NamedComposite):
    CLASS_NAMES = (SCALA + "ScalaCaseClassSerializerSnapshot",)
    WHAT = "case class"

    def make_decoder(self) -> Decoder:
        return fields_decoder(tuple(n.decoder() for n in self.nested))

    def make_encoder(self) -> Encoder:
        return fields_encoder(tuple(n.encoder() for n in self.nested))

    def type_name(self) -> str:
        return f"{self.outer_text}({', '.join(n.type_name() for n in self.nested)})"

    def nested_labels(self) -> list[str | None]:
        return [f"_{i + 1}" for i in range(len(self.nested))]


@register
class TraversableSnapshot(_NamedComposite):
    CLASS_NAMES = (SCALA + "TraversableSerializerSnapshot",)
    ARITY = 1
    WHAT = "collection builder"

    def make_decoder(self) -> Decoder:
        element = self.nested[0].decoder()

        def decode(buf: bytes, off: int) -> tuple[list[Any], int]:
            n = _unpack_i32(buf, off)[0]
            off += 4
            items: list[Any] = []
            for _ in range(n):
                if buf[off]:
                    item, off = element(buf, off + 1)
                    items.append(item)
                else:
                    items.append(None)
                    off += 1
            return items, off

        return decode

    def make_encoder(self) -> Encoder:
        element = self.nested[0].encoder()

        def encode(value: Any, out: bytearray) -> None:
            items = list(value)
            out += I32.pack(len(items))
            for item in items:
                if item is None:
                    out.append(0)
                else:
                    out.append(1)
                    element(item, out)

        return encode

    def type_name(self) -> str:
        return f"ScalaTraversable<{self.nested[0].type_name()}>"

    def nested_labels(self) -> list[str | None]:
        return ["element"]


@register
class ScalaEnumSnapshot(TypeSerializerSnapshot):
    CLASS_NAMES = (SCALA + "ScalaEnumSerializerSnapshot",)
    VERSION = 3

    def __init__(self, enum_class: str, constants: list[tuple[str, int]], class_name: str | None = None,
                 version: int = VERSION) -> None:
        super().__init__(class_name or self.CLASS_NAMES[0], version)
        self.enum_class = enum_class
        self.constants = list(constants)

    @classmethod
    def read_payload(cls, class_name: str, version: int, reader: Reader) -> ScalaEnumSnapshot:
        if version != cls.VERSION:
            raise reader.error(f"{class_name}: unsupported snapshot version {version}")
        enum_class = reader.utf()
        count = reader.i32()
        if count < 0:
            raise reader.error(f"{class_name}: negative constant count {count}")
        return cls(enum_class, [(reader.utf(), reader.i32()) for _ in range(count)], class_name, version)

    def write_payload(self, writer: Writer) -> None:
        writer.utf(self.enum_class)
        writer.i32(len(self.constants))
        for name, ident in self.constants:
            writer.utf(name)
            writer.i32(ident)

    @property
    def fixed_length(self) -> int:
        return 4

    def make_decoder(self) -> Decoder:
        names = {ident: name for name, ident in self.constants}
        enum_class = self.enum_class

        def decode(buf: bytes, off: int) -> tuple[str, int]:
            ident = _unpack_i32(buf, off)[0]
            if ident not in names:
                raise SavepointFormatError(f"{enum_class} has no value with id {ident}", offset=off)
            return names[ident], off + 4

        return decode

    def make_encoder(self) -> Encoder:
        ids = {name: ident for name, ident in self.constants}
        enum_class = self.enum_class

        def encode(value: Any, out: bytearray) -> None:
            if value not in ids:
                raise UnsupportedFormat(f"{enum_class} has no value {value!r:.80}")
            out += I32.pack(ids[value])

        return encode

    def type_name(self) -> str:
        return f"ScalaEnum<{self.enum_class}>"

    def resolve_same_family(self, old: Any, path: str) -> Compatibility:
        def incompatible(message: str) -> Compatibility:
            return Compatibility.of(Finding("SCALA_ENUM_CHANGED", path, message, INCOMPATIBLE, old.type_name(),
                                            self.type_name()))

        if old.enum_class != self.enum_class:
            return incompatible(f"enumeration changed from {old.enum_class} to {self.enum_class}")
        for name, index in old.constants:
            # Scala's enumConstants(index): the old id used as a position in the new list of constants.
            if not 0 <= index < len(self.constants) or self.constants[index][0] != name:
                return incompatible(f"value {name} (id {index}) is not at that position any more")
        return Compatibility.as_is()


__all__ = ["SCALA", "ScalaCaseClassSnapshot", "ScalaEitherSnapshot", "ScalaEnumSnapshot", "ScalaOptionSnapshot",
           "ScalaSome", "ScalaTry", "ScalaTrySnapshot", "TraversableSnapshot"]
