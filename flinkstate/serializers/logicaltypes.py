"""Flink's ``LogicalType`` (flink-table-common ``org.apache.flink.table.types.logical``) as the RowData snapshots
store it: Java serialization (``InstantiationUtil.serializeObject``), one whole ``ObjectOutputStream`` per type,
with no length in front.

The bytes are parsed with ``javaobj-py3`` (a maintained pure-Python reader of the Java serialization stream; it
builds plain Python objects and runs no code), bounded in size, and kept exactly as read, so a snapshot is written
back byte for byte. What the codecs need is taken from the parsed object: the type root, nullability, length,
precision, scale, the children of ARRAY / MULTISET / MAP / ROW / STRUCTURED_TYPE / DISTINCT_TYPE, field names, and
the class of a RAW type. A ROW's fields and a STRUCTURED_TYPE's attributes are a ``java.util.List`` in any of the
JDK's serial forms (Flink 2.x builds the attributes with ``List.copyOf``: ``java.util.CollSer``), read by
:mod:`flinkstate.serializers.javacollections`, which also gives the structural identity (``fingerprint``: Java's
``equals``, a List equal to any List of the same elements).
"""

from __future__ import annotations

import io
import logging
from dataclasses import dataclass
from typing import Any

from javaobj.v1.unmarshaller import JavaObjectUnmarshaller

from flinkstate.binary import Reader
from flinkstate.serializers.javacollections import fingerprint as fingerprint
from flinkstate.serializers.javacollections import java_class_name as java_class_name
from flinkstate.serializers.javacollections import java_fields as java_fields
from flinkstate.serializers.javacollections import java_list

#: Bound on one Java-serialized LogicalType: Flink's are a few hundred bytes (a wide ROW a few KiB); a larger
#: object is refused rather than parsed.
MAX_TYPE_BYTES = 1 << 20

_PACKAGE = "org.apache.flink.table.types.logical."
_JAVA_MAGIC = b"\xac\xed\x00\x05"

# javaobj logs every unknown class it meets at ERROR level; the snapshot reader reports problems itself.
logging.getLogger("javaobj").setLevel(logging.CRITICAL)


@dataclass(frozen=True)
class LogicalType:
    """The parts of a Java ``LogicalType`` the RowData codecs and notation use. ``identity`` mirrors the Java
    ``equals`` (every field of the object, minus what ``equals`` ignores: a timestamp's ``kind``)."""

    root: str  # LogicalTypeRoot constant, e.g. VARCHAR, TIMESTAMP_WITHOUT_TIME_ZONE
    nullable: bool
    length: int | None = None
    precision: int | None = None
    scale: int | None = None
    kind: str | None = None  # TimestampKind: REGULAR, ROWTIME, PROCTIME
    children: tuple[LogicalType, ...] = ()
    names: tuple[str, ...] = ()  # ROW field names, STRUCTURED_TYPE attribute names
    java_class: str = ""  # RAW: the value class; STRUCTURED_TYPE: the implementation class
    identity: Any = None

    def notation(self) -> str:
        """Flink SQL's own type syntax, e.g. ``ROW<`id` BIGINT NOT NULL, `name` STRING>``."""
        return _notation(self)


def _notation(t: LogicalType) -> str:
    root, suffix = t.root, "" if t.nullable else " NOT NULL"
    if root == "VARCHAR" and t.length == 2147483647:
        text = "STRING"
    elif root == "VARBINARY" and t.length == 2147483647:
        text = "BYTES"
    elif root in ("CHAR", "VARCHAR", "BINARY", "VARBINARY"):
        text = f"{root}({t.length})"
    elif root == "DECIMAL":
        text = f"DECIMAL({t.precision}, {t.scale})"
    elif root == "TIME_WITHOUT_TIME_ZONE":
        text = f"TIME({t.precision})"
    elif root == "TIMESTAMP_WITHOUT_TIME_ZONE":
        text = f"TIMESTAMP({t.precision})"
    elif root == "TIMESTAMP_WITH_LOCAL_TIME_ZONE":
        text = f"TIMESTAMP_LTZ({t.precision})"
    elif root == "TIMESTAMP_WITH_TIME_ZONE":
        text = f"TIMESTAMP({t.precision}) WITH TIME ZONE"
    elif root == "INTEGER":
        text = "INT"
    elif root in ("ARRAY", "MULTISET"):
        text = f"{root}<{t.children[0].notation()}>"
    elif root == "MAP":
        text = f"MAP<{t.children[0].notation()}, {t.children[1].notation()}>"
    elif root in ("ROW", "STRUCTURED_TYPE"):
        fields = ", ".join(f"`{n}` {c.notation()}" for n, c in zip(t.names, t.children, strict=True))
        text = f"ROW<{fields}>" if root == "ROW" else f"STRUCTURED<'{t.java_class}', {fields}>"
    elif root == "RAW":
        text = f"RAW('{t.java_class}', '...')"
    elif root == "DISTINCT_TYPE":
        text = t.children[0].notation()
    elif root == "INTERVAL_YEAR_MONTH":
        text = "INTERVAL YEAR TO MONTH"
    elif root == "INTERVAL_DAY_TIME":
        text = "INTERVAL DAY TO SECOND"
    else:
        text = root
    if t.kind in ("ROWTIME", "PROCTIME"):
        text += f" *{t.kind}*"
    return text + suffix


# --------------------------------------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------------------------------------


def read_java_object(reader: Reader, what: str) -> tuple[Any, bytes]:
    """One Java-serialized object at the reader's position: (parsed object, its exact bytes). The reader moves past
    it. A malformed or oversized stream is a format error naming ``what`` and the offset."""
    start = reader.pos
    window = reader.buf[start:start + MAX_TYPE_BYTES]
    if window[:4] != _JAVA_MAGIC:
        raise reader.error(f"{what}: not a Java serialization stream (magic {bytes(window[:4]).hex()})", start)
    stream = io.BytesIO(window)
    try:
        # javaobj's v1 API is untyped; readObject reads exactly one object and leaves the stream just past it
        unmarshaller = JavaObjectUnmarshaller(stream)  # type: ignore[no-untyped-call]
        parsed = unmarshaller.readObject(ignore_remaining_data=True)  # type: ignore[no-untyped-call]
    except RecursionError:
        raise reader.error(f"{what}: Java-serialized object nested too deeply", start) from None
    except Exception as exc:  # javaobj raises plain IOError/ValueError/KeyError/struct.error on bad input
        if len(window) == MAX_TYPE_BYTES:
            raise reader.error(f"{what}: Java-serialized object larger than {MAX_TYPE_BYTES} bytes or malformed "
                               f"({type(exc).__name__})", start) from None
        raise reader.error(f"{what}: malformed Java-serialized object ({type(exc).__name__}: "
                           f"{str(exc).splitlines()[0] if str(exc) else ''})", start) from None
    end = start + stream.tell()
    reader.pos = end
    return parsed, bytes(reader.buf[start:end])


def read_logical_type(reader: Reader, what: str) -> tuple[LogicalType, bytes]:
    """A Java-serialized LogicalType: (model, exact bytes)."""
    start = reader.pos
    parsed, raw = read_java_object(reader, what)
    try:
        return to_logical_type(parsed), raw
    except (ValueError, TypeError, AttributeError) as exc:
        raise reader.error(f"{what}: not a LogicalType ({exc})", start) from None


def to_logical_type(obj: Any) -> LogicalType:
    name = java_class_name(obj)
    if not name.startswith(_PACKAGE):
        raise ValueError(f"class {name}")
    f = java_fields(obj)
    root_obj = f.get("typeRoot")
    root = str(getattr(root_obj, "constant", root_obj))
    nullable = bool(f.get("isNullable"))
    children: tuple[LogicalType, ...] = ()
    names: tuple[str, ...] = ()
    java_class = ""
    if root in ("ARRAY", "MULTISET"):
        children = (to_logical_type(f["elementType"]),)
    elif root == "MAP":
        children = (to_logical_type(f["keyType"]), to_logical_type(f["valueType"]))
    elif root in ("ROW", "STRUCTURED_TYPE"):
        members = [java_fields(m) for m in java_list(f["fields" if root == "ROW" else "attributes"])]
        children = tuple(to_logical_type(m["type"]) for m in members)
        names = tuple(str(m["name"]) for m in members)
        if root == "STRUCTURED_TYPE":
            impl = f.get("implementationClass")
            java_class = str(getattr(impl, "name", "")) if impl is not None else ""
    elif root == "DISTINCT_TYPE":
        children = (to_logical_type(f["sourceType"]),)
    elif root == "RAW":
        java_class = str(getattr(f.get("clazz"), "name", ""))
    kind = f.get("kind")
    return LogicalType(
        root=root, nullable=nullable,
        length=f.get("length") if isinstance(f.get("length"), int) else None,
        precision=f.get("precision") if isinstance(f.get("precision"), int) else None,
        scale=f.get("scale") if isinstance(f.get("scale"), int) else None,
        kind=str(getattr(kind, "constant", kind)) if kind is not None else None,
        children=children, names=names, java_class=java_class, identity=fingerprint(obj))
