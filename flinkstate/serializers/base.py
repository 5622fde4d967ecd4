"""The snapshot abstraction every serializer family implements, mirroring Flink's ``TypeSerializerSnapshot``: a
snapshot is the parsed written form of a serializer *and* the factory of its record codec.

Codecs are plain closures built once per snapshot so that hot loops make no attribute lookups:

* decoder: ``(buffer, offset) -> (value, new_offset)``
* encoder: ``(value, out: bytearray) -> None`` (appends)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from flinkstate.binary import Reader, Writer
from flinkstate.compatibility import INCOMPATIBLE, Compatibility, Finding, type_changed
from flinkstate.format_errors import UnsupportedKeyType

Decoder = Callable[[bytes, int], tuple[Any, int]]
Encoder = Callable[[Any, bytearray], None]

#: ``getLength()`` of a variable-length serializer.
VARIABLE_LENGTH = -1


class TypeSerializerSnapshot:
    """Base class. Subclasses set ``CLASS_NAMES`` (the Java snapshot classes they read) and implement
    :meth:`read_payload`, :meth:`write_payload`, :meth:`decoder`, :meth:`type_name`."""

    CLASS_NAMES: ClassVar[tuple[str, ...]] = ()

    def __init__(self, class_name: str, version: int) -> None:
        self.class_name = class_name
        self.version = version
        self._decoder: Decoder | None = None
        self._encoder: Encoder | None = None

    # -- parsing and writing the snapshot ----------------------------------------------------------------------------

    @classmethod
    def read_payload(cls, class_name: str, version: int, reader: Reader) -> TypeSerializerSnapshot:
        raise NotImplementedError

    def write_payload(self, writer: Writer) -> None:
        raise NotImplementedError

    # -- the record codec ---------------------------------------------------------------------------------------------

    @property
    def fixed_length(self) -> int:
        """The serializer's ``getLength()``: byte length of every record, or -1 if variable."""
        return VARIABLE_LENGTH

    def decoder(self) -> Decoder:
        """The cached record decoder."""
        if self._decoder is None:
            self._decoder = self.make_decoder()
        return self._decoder

    def encoder(self) -> Encoder:
        """The cached record encoder."""
        if self._encoder is None:
            self._encoder = self.make_encoder()
        return self._encoder

    def make_decoder(self) -> Decoder:
        raise NotImplementedError(f"no decoder for {self.class_name}")

    #: Whether a record can only be decoded when its end is known (it ends with bytes that carry no length, e.g. a
    #: Kryo value): then only a whole stored value (or a MAP state value) can be decoded, with :meth:`tail_decoder`.
    needs_end: ClassVar[bool] = False

    def tail_decoder(self) -> Decoder:
        """A decoder for a record that extends to the end of the buffer it is given (a whole stored value)."""
        return self.decoder()

    def make_encoder(self) -> Encoder:
        raise NotImplementedError(f"no encoder for {self.class_name}")

    def decode(self, data: bytes) -> Any:
        """Decodes one whole record (convenience for tests and tools)."""
        return self.decoder()(data, 0)[0]

    def encode(self, value: Any) -> bytes:
        out = bytearray()
        self.encoder()(value, out)
        return bytes(out)

    # -- description -------------------------------------------------------------------------------------------------

    def type_name(self) -> str:
        """A readable type notation, e.g. ``Long``, ``Tuple2<Long, String>``."""
        return self.class_name.rsplit(".", 1)[-1]

    def hash_code(self, value: Any) -> int:
        """Java ``hashCode`` of a decoded value, needed to assign keys to key groups."""
        raise UnsupportedKeyType(f"cannot compute Java hashCode for keys of type {self.type_name()}")

    @property
    def nested(self) -> list[TypeSerializerSnapshot]:
        """Nested snapshots (composite types); empty for leaves."""
        return []

    # -- compatibility -----------------------------------------------------------------------------------------------

    def resolve_compatibility(self, old: TypeSerializerSnapshot, path: str = "") -> Compatibility:
        """Flink's ``newSnapshot.resolveSchemaCompatibility(oldSnapshot)``, with findings located at ``path``
        (e.g. ``value.count``). Every Flink rule starts with "an old snapshot of another class is incompatible";
        the family rule proper is :meth:`resolve_same_family`."""
        if type(old) is not type(self) or old.class_name != self.class_name:
            return type_changed(self, old, path)
        return self.resolve_same_family(old, path)

    def resolve_same_family(self, old: Any, path: str) -> Compatibility:
        """The family rule for an old snapshot of the same class. Leaves whose class identifies the serializer
        (``SimpleTypeSerializerSnapshot``, namespaces) are compatible as is."""
        return Compatibility.as_is()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.type_name()}>"


class UnknownSnapshot(TypeSerializerSnapshot):
    """Placeholder for a snapshot class the registry does not know, when its bytes were length-framed (POJO fields)
    and could therefore be skipped. Its state stays describable but cannot be decoded."""

    def __init__(self, class_name: str, version: int, raw: bytes) -> None:
        super().__init__(class_name, version)
        self.raw = raw

    def write_payload(self, writer: Writer) -> None:
        writer.bytes(self.raw)

    def make_decoder(self) -> Decoder:
        from flinkstate.format_errors import UnknownSerializerSnapshot

        raise UnknownSerializerSnapshot(self.class_name)

    def type_name(self) -> str:
        return f"?{self.class_name}"

    def resolve_same_family(self, old: Any, path: str) -> Compatibility:
        # Without the family's rule only identical bytes can be judged: Flink's snapshots are deterministic.
        if old.version == self.version and old.raw == self.raw:
            return Compatibility.as_is()
        return Compatibility.of(Finding("UNKNOWN_SERIALIZER", path, f"cannot judge changes of {self.class_name}, "
                                        f"whose rule this tool does not know", INCOMPATIBLE,
                                        old.type_name(), self.type_name()))
