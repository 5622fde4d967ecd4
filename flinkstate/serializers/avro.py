"""``AvroSerializerSnapshot`` (flink-avro) and a datum codec for Flink's own Avro encoder.

Snapshot payload: version 3 ``SV runtimeTypeClassName; SV schemaJson``; version 2 the same as ``UTF``; version 1
only ``UTF schemaJson``. The schema is parsed with fastavro (parsing only).

Records are written by Avro's datum writers into Flink's ``DataOutputEncoder``, *not* Avro's binary encoder:
int/long/float/double and enum/union indexes are fixed-width big-endian; string and bytes are ``i32 len`` + bytes;
arrays and maps are blocks of ``LEB128 count`` items ended by a 0 count; null writes nothing.
Python values: records → dict, enums → symbol, fixed/bytes → bytes, arrays → list, maps → dict.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import fastavro

from flinkstate.binary import F32, F64, I32, I64, Reader, Writer, decode_leb128, encode_leb128
from flinkstate.compatibility import AFTER_MIGRATION, INCOMPATIBLE, Compatibility, Finding
from flinkstate.format_errors import SavepointFormatError
from flinkstate.serializers.base import Decoder, Encoder, TypeSerializerSnapshot
from flinkstate.serializers.primitives import struct_codec
from flinkstate.serializers.registry import register

GENERIC_RECORD = "org.apache.avro.generic.GenericRecord"


def _decode_len_prefixed(buf: bytes, off: int) -> tuple[bytes, int]:
    n = I32.unpack_from(buf, off)[0]
    return bytes(buf[off + 4:off + 4 + n]), off + 4 + n


def _encode_len_prefixed(value: bytes, out: bytearray) -> None:
    out += I32.pack(len(value)) + value


def _decode_string(buf: bytes, off: int) -> tuple[str, int]:
    raw, off = _decode_len_prefixed(buf, off)
    return raw.decode("utf-8"), off


def _encode_string(value: str, out: bytearray) -> None:
    # Avro's Utf8.getBytesFor is String.getBytes(UTF_8), which writes each lone surrogate as '?'; so does "replace".
    _encode_len_prefixed(value.encode("utf-8", "replace"), out)


def _decode_null(buf: bytes, off: int) -> tuple[None, int]:
    return None, off


def _encode_null(value: Any, out: bytearray) -> None:
    pass


def _decode_boolean(buf: bytes, off: int) -> tuple[bool, int]:
    return buf[off] != 0, off + 1


def _encode_boolean(value: bool, out: bytearray) -> None:
    out.append(1 if value else 0)


_PRIMITIVES: dict[str, tuple[Decoder, Encoder]] = {
    "null": (_decode_null, _encode_null),
    "boolean": (_decode_boolean, _encode_boolean),
    "int": struct_codec(I32),
    "long": struct_codec(I64),
    "float": struct_codec(F32),
    "double": struct_codec(F64),
    "bytes": (_decode_len_prefixed, _encode_len_prefixed),
    "string": (_decode_string, _encode_string),
}


class AvroCodecBuilder:
    """Compiles a parsed Avro schema into Flink-encoder decoders/encoders; named types are resolved lazily so
    recursive schemas work."""

    def __init__(self, schema: Any) -> None:
        self.schema = schema
        self.named: dict[str, Any] = {}
        self._collect(schema)

    def _collect(self, schema: Any) -> None:
        if isinstance(schema, list):
            for branch in schema:
                self._collect(branch)
        elif isinstance(schema, dict):
            if "name" in schema and schema.get("type") in ("record", "error", "enum", "fixed"):
                self.named[schema["name"]] = schema
            for field in schema.get("fields", ()):
                self._collect(field["type"])
            for key in ("items", "values"):
                if key in schema:
                    self._collect(schema[key])

    def decoder(self, schema: Any) -> Decoder:
        if isinstance(schema, str):
            if schema in _PRIMITIVES:
                return _PRIMITIVES[schema][0]
            return self._lazy(lambda: self.decoder(self.named[schema]))
        if isinstance(schema, list):
            return self._union_decoder(schema)
        kind = schema["type"]
        if kind in _PRIMITIVES:
            return _PRIMITIVES[kind][0]
        decoder: Decoder = getattr(self, f"_{kind}_decoder")(schema)
        return decoder

    @staticmethod
    def _lazy(make: Callable[[], Decoder]) -> Decoder:
        cache: list[Decoder] = []

        def decode(buf: bytes, off: int) -> tuple[Any, int]:
            if not cache:
                cache.append(make())
            return cache[0](buf, off)

        return decode

    def _union_decoder(self, branches: list[Any]) -> Decoder:
        decoders = [self.decoder(b) for b in branches]

        def decode(buf: bytes, off: int) -> tuple[Any, int]:
            index: int = I32.unpack_from(buf, off)[0]
            if not 0 <= index < len(decoders):
                raise SavepointFormatError(f"Avro union index {index} out of range", offset=off)
            return decoders[index](buf, off + 4)

        return decode

    def _record_decoder(self, schema: dict[str, Any]) -> Decoder:
        fields = [(f["name"], self.decoder(f["type"])) for f in schema["fields"]]

        def decode(buf: bytes, off: int) -> tuple[dict[str, Any], int]:
            record = {}
            for name, dec in fields:
                record[name], off = dec(buf, off)
            return record, off

        return decode

    _error_decoder = _record_decoder

    def _enum_decoder(self, schema: dict[str, Any]) -> Decoder:
        symbols = schema["symbols"]

        def decode(buf: bytes, off: int) -> tuple[str, int]:
            return symbols[I32.unpack_from(buf, off)[0]], off + 4

        return decode

    def _fixed_decoder(self, schema: dict[str, Any]) -> Decoder:
        size = schema["size"]

        def decode(buf: bytes, off: int) -> tuple[bytes, int]:
            return bytes(buf[off:off + size]), off + size

        return decode

    def _blocks(self, item: Decoder) -> Decoder:
        def decode(buf: bytes, off: int) -> tuple[list[Any], int]:
            items = []
            count, off = decode_leb128(buf, off)
            while count:
                for _ in range(count):
                    value, off = item(buf, off)
                    items.append(value)
                count, off = decode_leb128(buf, off)
            return items, off

        return decode

    def _array_decoder(self, schema: dict[str, Any]) -> Decoder:
        return self._blocks(self.decoder(schema["items"]))

    def _map_decoder(self, schema: dict[str, Any]) -> Decoder:
        value = self.decoder(schema["values"])

        def entry(buf: bytes, off: int) -> tuple[tuple[str, Any], int]:
            key, off = _decode_string(buf, off)
            item, off = value(buf, off)
            return (key, item), off

        blocks = self._blocks(entry)

        def decode(buf: bytes, off: int) -> tuple[dict[str, Any], int]:
            pairs, off = blocks(buf, off)
            return dict(pairs), off

        return decode

    # -- encoding (records as dicts) ---------------------------------------------------------------------------------

    def encoder(self, schema: Any) -> Encoder:
        if isinstance(schema, str):
            if schema in _PRIMITIVES:
                return _PRIMITIVES[schema][1]
            cache: list[Encoder] = []  # named reference: resolved at first use so recursive schemas terminate

            def encode_named(value: Any, out: bytearray) -> None:
                if not cache:
                    cache.append(self.encoder(self.named[schema]))
                cache[0](value, out)

            return encode_named
        if isinstance(schema, list):
            return self._union_encoder(schema)
        kind = schema["type"]
        if kind in _PRIMITIVES:
            return _PRIMITIVES[kind][1]
        if kind in ("record", "error"):
            fields = [(f["name"], self.encoder(f["type"])) for f in schema["fields"]]

            def encode_record(value: dict[str, Any], out: bytearray) -> None:
                for name, enc in fields:
                    enc(value.get(name), out)

            return encode_record
        if kind == "enum":
            index = {s: i for i, s in enumerate(schema["symbols"])}
            return lambda value, out: out.extend(I32.pack(index[value]))
        if kind == "fixed":
            return lambda value, out: out.extend(value)
        item = self.encoder(schema["items"]) if kind == "array" else self._map_entry_encoder(schema)

        def encode_blocks(value: Any, out: bytearray) -> None:
            items = list(value.items()) if kind == "map" else list(value)
            if items:
                out += encode_leb128(len(items))
                for element in items:
                    item(element, out)
            out.append(0)

        return encode_blocks

    def _map_entry_encoder(self, schema: dict[str, Any]) -> Encoder:
        value = self.encoder(schema["values"])

        def encode(entry: tuple[str, Any], out: bytearray) -> None:
            _encode_string(entry[0], out)
            value(entry[1], out)

        return encode

    def _union_encoder(self, branches: list[Any]) -> Encoder:
        encoders = [self.encoder(b) for b in branches]
        matchers = [self._matcher(b) for b in branches]
        described = ", ".join(b if isinstance(b, str) else str(b.get("name", b.get("type"))) for b in branches)

        def encode(value: Any, out: bytearray) -> None:
            # The first branch whose type the Python value has (fastavro's rule): the decoded value of any branch
            # finds its own branch again, unless two branches share a Python type (e.g. int and long).
            for index, matches in enumerate(matchers):
                if matches(value):
                    out += I32.pack(index)
                    encoders[index](value, out)
                    return
            raise ValueError(f"no branch of the Avro union [{described}] takes a {type(value).__name__}")

        return encode

    def _matcher(self, schema: Any) -> Callable[[Any], bool]:
        """Whether a Python value belongs to the Avro type ``schema`` (for union branch selection)."""
        if isinstance(schema, str) and schema not in _PRIMITIVES:
            schema = self.named[schema]
        kind = schema if isinstance(schema, str) else schema["type"]
        if isinstance(kind, (dict, list)):  # {"type": {...}} wrapping
            return self._matcher(kind)
        if kind in ("record", "error"):
            names = frozenset(f["name"] for f in schema["fields"])
            return lambda v: isinstance(v, dict) and v.keys() == names
        if kind == "enum":
            symbols = frozenset(schema["symbols"])
            return lambda v: isinstance(v, str) and v in symbols
        if kind == "fixed":
            size = schema["size"]
            return lambda v: isinstance(v, (bytes, bytearray)) and len(v) == size
        return _PRIMITIVE_MATCHERS.get(kind) or _KIND_MATCHERS[kind]


_PRIMITIVE_MATCHERS: dict[str, Callable[[Any], bool]] = {
    "null": lambda v: v is None,
    "boolean": lambda v: type(v) is bool,
    "int": lambda v: type(v) is int and -(1 << 31) <= v < (1 << 31),
    "long": lambda v: type(v) is int and -(1 << 63) <= v < (1 << 63),
    "float": lambda v: type(v) is float,
    "double": lambda v: type(v) is float,
    "bytes": lambda v: isinstance(v, (bytes, bytearray)),
    "string": lambda v: isinstance(v, str),
}
_KIND_MATCHERS: dict[str, Callable[[Any], bool]] = {
    "array": lambda v: isinstance(v, (list, tuple)),
    "map": lambda v: isinstance(v, dict),
}


@register
class AvroSnapshot(TypeSerializerSnapshot):
    CLASS_NAMES = ("org.apache.flink.formats.avro.typeutils.AvroSerializerSnapshot",)

    def __init__(self, class_name: str, version: int, runtime_type: str | None, schema_json: str) -> None:
        super().__init__(class_name, version)
        self.runtime_type = runtime_type
        self.schema_json = schema_json
        self.schema = fastavro.parse_schema(json.loads(schema_json), _write_hint=False, _force=True)

    @classmethod
    def read_payload(cls, class_name: str, version: int, reader: Reader) -> AvroSnapshot:
        if version == 1:
            return cls(class_name, version, None, reader.utf())
        if version == 2:
            return cls(class_name, version, reader.utf(), reader.utf())
        if version == 3:
            runtime_type, schema = reader.sv(), reader.sv()
            return cls(class_name, version, runtime_type, schema or "")
        raise reader.error(f"{class_name}: unsupported snapshot version {version}")

    def write_payload(self, writer: Writer) -> None:
        if self.version == 1:
            writer.utf(self.schema_json)
        elif self.version == 2:
            writer.utf(self.runtime_type or GENERIC_RECORD)
            writer.utf(self.schema_json)
        else:
            writer.sv(self.runtime_type or GENERIC_RECORD)
            writer.sv(self.schema_json)

    def make_decoder(self) -> Decoder:
        return AvroCodecBuilder(self.schema).decoder(self.schema)

    def make_encoder(self) -> Encoder:
        return AvroCodecBuilder(self.schema).encoder(self.schema)

    def type_name(self) -> str:
        name = self.schema.get("name") if isinstance(self.schema, dict) else None
        return f"Avro {name or self.runtime_type or 'datum'}"

    def resolve_same_family(self, old: Any, path: str) -> Compatibility:
        # AvroSerializerSnapshot: equal schemas are as is; otherwise Avro's reader/writer rule (new = reader,
        # old = writer) decides between "after migration" and "incompatible". The runtime class is not compared.
        if self.schema == old.schema:
            return Compatibility.as_is()
        problem = avro_read_problem(self.schema, old.schema, _named_types(self.schema), _named_types(old.schema))
        if problem is None:
            return Compatibility.of(Finding("AVRO_SCHEMA_EVOLVED", path, "the Avro schema evolved compatibly; "
                                            "Flink migrates the values", AFTER_MIGRATION, old.type_name(),
                                            self.type_name()))
        return Compatibility.of(Finding("AVRO_SCHEMA_INCOMPATIBLE", path, f"the new Avro schema cannot read the old "
                                        f"data: {problem}", INCOMPATIBLE, old.type_name(), self.type_name()))


# -- Avro SchemaCompatibility.checkReaderWriterCompatibility -----------------------------------------------------------

_PROMOTIONS = {"int": {"long", "float", "double"}, "long": {"float", "double"}, "float": {"double"},
               "string": {"bytes"}, "bytes": {"string"}}


def _named_types(schema: Any) -> dict[str, Any]:
    return AvroCodecBuilder(schema).named


def _kind(schema: Any, named: dict[str, Any]) -> tuple[str, Any]:
    if isinstance(schema, list):
        return "union", schema
    if isinstance(schema, str):
        return (schema, schema) if schema in _PRIMITIVES else _kind(named[schema], named)
    if isinstance(schema["type"], (dict, list)):  # {"type": {...}}: a wrapped type
        return _kind(schema["type"], named)
    return schema["type"], schema


def avro_read_problem(reader: Any, writer: Any, reader_named: dict[str, Any], writer_named: dict[str, Any],
                      seen: set[tuple[str, str]] | None = None) -> str | None:
    """None if data written with ``writer`` can be read with ``reader`` (Avro's schema resolution), else why not."""
    seen = set() if seen is None else seen
    r_kind, r = _kind(reader, reader_named)
    w_kind, w = _kind(writer, writer_named)
    if w_kind == "union":
        for branch in w:
            problem = avro_read_problem(reader, branch, reader_named, writer_named, seen)
            if problem is not None:
                return problem
        return None
    if r_kind == "union":
        if any(avro_read_problem(b, writer, reader_named, writer_named, seen) is None for b in r):
            return None
        return f"no branch of the reader union reads {w_kind}"
    if r_kind != w_kind:
        return None if r_kind in _PROMOTIONS.get(w_kind, ()) else f"{w_kind} cannot be read as {r_kind}"
    if r_kind in ("record", "error", "enum", "fixed"):
        if _short(r["name"]) != _short(w["name"]) and _short(w["name"]) not in map(_short, r.get("aliases", ())):
            return f"named type {w['name']} cannot be read as {r['name']}"
    if r_kind in ("record", "error"):
        pair = (r["name"], w["name"])
        if pair in seen:  # recursive types: assume compatible while the check is in progress
            return None
        seen.add(pair)
        writer_fields = {f["name"]: f for f in w["fields"]}
        for field in r["fields"]:
            source = writer_fields.get(field["name"]) or next(
                (writer_fields[a] for a in field.get("aliases", ()) if a in writer_fields), None)
            if source is None:
                if "default" not in field:
                    return f"reader field {field['name']} has no default and is missing in the old data"
                continue
            problem = avro_read_problem(field["type"], source["type"], reader_named, writer_named, seen)
            if problem is not None:
                return f"field {field['name']}: {problem}"
        return None
    if r_kind == "enum":
        missing = [s for s in w["symbols"] if s not in r["symbols"]]
        if missing and "default" not in r:
            return f"enum symbols {', '.join(missing)} are unknown to the reader"
        return None
    if r_kind == "fixed":
        return None if r["size"] == w["size"] else f"fixed size {w['size']} became {r['size']}"
    if r_kind == "array":
        return avro_read_problem(r["items"], w["items"], reader_named, writer_named, seen)
    if r_kind == "map":
        return avro_read_problem(r["values"], w["values"], reader_named, writer_named, seen)
    return None


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]
