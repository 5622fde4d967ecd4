"""``ValueSerializer$ValueSerializerSnapshot``, ``CopyableValueSerializer$CopyableValueSerializerSnapshot`` and
``WritableSerializer$WritableSerializerSnapshot`` (``GenericTypeSerializerSnapshot``, version 2: ``UTF typeClass``):
the serializers of Flink ``Value`` and ``CopyableValue`` types and of Hadoop ``Writable``s, whose record is whatever
the class's own ``write`` writes.

* Flink's own value types (``org.apache.flink.types.IntValue``, ``LongValue``, ``StringValue``, ...) write what their
  dedicated serializers write, and Hadoop's number writables (``IntWritable``, ``LongWritable``, ...) what the
  boxed types' serializers write: they are decoded with those codecs (int, str, ... as in
  :mod:`flinkstate.serializers.primitives`).
* Any other class writes bytes only its Java code knows, with no length: the record is passed through whole, as an
  :class:`~flinkstate.serializers.kryo.OpaqueValue` (``{"type", "base64"}`` in ``dump``), where the stream frames
  it (a whole stored value, a MAP state value, a POJO's last field), and refused anywhere else, like Kryo values.

Compatibility (``GenericTypeSerializerSnapshot.resolveSchemaCompatibility``): another serializer class, or another
type class, is incompatible; the same type class is compatible as is.
"""

from __future__ import annotations

from typing import Any, ClassVar

from flinkstate.binary import Reader, Writer
from flinkstate.compatibility import INCOMPATIBLE, Compatibility, Finding
from flinkstate.format_errors import UnsupportedFormat
from flinkstate.serializers.base import Decoder, Encoder, TypeSerializerSnapshot
from flinkstate.serializers.kryo import OpaqueValue, opaque_encoder
from flinkstate.serializers.primitives import BASE, SIMPLE_TYPES, SimpleSnapshot
from flinkstate.serializers.registry import register

GENERIC_TYPE_SNAPSHOT_VERSION = 2
RUNTIME = "org.apache.flink.api.java.typeutils.runtime."
TYPES = "org.apache.flink.types."
#: Flink's value classes with a dedicated serializer of the same record format (``XValueSerializer`` calls
#: ``value.write``), by class name.
FLINK_VALUE_TYPES = {f"{TYPES}{stem}Value": f"{BASE}{stem}ValueSerializer${stem}ValueSerializerSnapshot"
                     for stem in ("Boolean", "Byte", "Char", "Double", "Float", "Int", "Long", "Null", "Short",
                                  "String")}
#: Hadoop's writables whose ``write`` is one ``DataOutput`` call of a boxed type's format (``NullWritable``: none).
HADOOP_WRITABLES = {f"org.apache.hadoop.io.{stem}Writable": f"{BASE}{java}Serializer${java}SerializerSnapshot"
                    for stem, java in (("Int", "Int"), ("Long", "Long"), ("Short", "Short"), ("Byte", "Byte"),
                                       ("Float", "Float"), ("Double", "Double"), ("Boolean", "Boolean"))}
HADOOP_WRITABLES["org.apache.hadoop.io.NullWritable"] = f"{BASE}NullValueSerializer$NullValueSerializerSnapshot"


class GenericTypeSnapshot(TypeSerializerSnapshot):
    """A ``GenericTypeSerializerSnapshot``: the serializer is identified by its class and its type class."""

    NAME: ClassVar[str] = ""
    #: Type classes whose record is that of a simple serializer (by its snapshot class).
    KNOWN_TYPES: ClassVar[dict[str, str]] = FLINK_VALUE_TYPES

    def __init__(self, type_class: str, class_name: str | None = None,
                 version: int = GENERIC_TYPE_SNAPSHOT_VERSION) -> None:
        super().__init__(class_name or self.CLASS_NAMES[0], version)
        self.type_class = type_class
        known = self.KNOWN_TYPES.get(type_class)
        #: The codec of a Flink value type, None for a user class (passed through whole).
        self.known: SimpleSnapshot | None = SimpleSnapshot(known) if known in SIMPLE_TYPES else None

    @classmethod
    def read_payload(cls, class_name: str, version: int, reader: Reader) -> GenericTypeSnapshot:
        if version != GENERIC_TYPE_SNAPSHOT_VERSION:
            raise reader.error(f"{class_name}: unsupported snapshot version {version}")
        return cls(reader.utf(), class_name, version)

    def write_payload(self, writer: Writer) -> None:
        writer.utf(self.type_class)

    @property
    def fixed_length(self) -> int:
        return -1 if self.known is None else self.known.fixed_length

    @property
    def needs_end(self) -> bool:  # type: ignore[override]
        return self.known is None

    def make_decoder(self) -> Decoder:
        if self.known is not None:
            return self.known.decoder()
        raise UnsupportedFormat(f"{self.type_name()} cannot be decoded here: its record is written by the class's "
                                f"own write() and carries no length, so only a whole stored value (or a POJO's last "
                                f"field) can be passed through")

    def tail_decoder(self) -> Decoder:
        if self.known is not None:
            return self.known.decoder()
        type_name = self.type_name()

        def decode(buf: bytes, off: int) -> tuple[Any, int]:
            return OpaqueValue(type_name, bytes(buf[off:])), len(buf)

        return decode

    def make_encoder(self) -> Encoder:
        if self.known is not None:
            return self.known.encoder()
        return opaque_encoder(self.type_name())  # the class's write() is Java code: bytes read pass through

    def type_name(self) -> str:
        return f"{self.NAME}<{self.type_class}>"

    def hash_code(self, value: Any) -> int:
        if self.known is not None:
            return self.known.hash_code(value)
        return super().hash_code(value)

    def resolve_same_family(self, old: Any, path: str) -> Compatibility:
        if old.type_class != self.type_class:
            return Compatibility.of(Finding("VALUE_CLASS_CHANGED", path, f"value class changed from "
                                            f"{old.type_class} to {self.type_class}", INCOMPATIBLE, old.type_name(),
                                            self.type_name()))
        return Compatibility.as_is()


@register
class ValueSnapshot(GenericTypeSnapshot):
    CLASS_NAMES = (RUNTIME + "ValueSerializer$ValueSerializerSnapshot",)
    NAME = "Value"


@register
class CopyableValueSnapshot(GenericTypeSnapshot):
    CLASS_NAMES = (RUNTIME + "CopyableValueSerializer$CopyableValueSerializerSnapshot",)
    NAME = "CopyableValue"


@register
class WritableSnapshot(GenericTypeSnapshot):
    CLASS_NAMES = (RUNTIME + "WritableSerializer$WritableSerializerSnapshot",)
    NAME = "Writable"
    KNOWN_TYPES = HADOOP_WRITABLES


__all__ = ["FLINK_VALUE_TYPES", "GENERIC_TYPE_SNAPSHOT_VERSION", "HADOOP_WRITABLES", "CopyableValueSnapshot",
           "GenericTypeSnapshot", "ValueSnapshot", "WritableSnapshot"]
