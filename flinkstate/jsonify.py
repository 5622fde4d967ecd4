"""Decoded state values → JSON-ready Python values, the encoding ``flinkstate dump`` promises:
POJO → object; Row and Tuple → array by position (a Row or RowData whose RowKind is not INSERT →
``{"row_kind": "-U", "fields": [...]}``, with Flink's short strings ``-U``, ``+U``, ``-D``, as ``Row.toString`` prints
them: an update or delete is a different record from an insert of the same fields); List/Set → array;
byte[] → base64 string; null → null;
BigDecimal → string (no precision loss); VoidNamespace → null; TimeWindow → {"start", "end"}; TTL values →
{"value", "last_access"}; Kryo values decoded (JDK classes) → {"type", "class", "value"}, Kryo (opaque) values →
{"type", "base64"}; Enum → constant name.

Dates and times (the exact models of :mod:`flinkstate.serializers.times`) → ISO-8601 strings with every stored digit:
Instant and java.sql.Timestamp in UTC with 9 fractional digits and ``Z`` (``2024-05-01T10:15:00.123456789Z``),
LocalDateTime ``2024-05-01T10:15:00.123456789``, LocalTime ``10:15:00.000000001``, LocalDate ``2024-05-01``,
java.util.Date / java.sql.Date / java.sql.Time in UTC with 3 fractional digits (``2024-05-01T10:15:00.123Z``);
years beyond 9999 or before 0 as Java writes them (``+10000-01-01``, ``-0001-01-01``).

Floating point: JSON has no NaN or infinities (``json.dumps`` would write the invalid tokens ``NaN``/``Infinity``),
so they become the strings ``"NaN"``, ``"Infinity"`` and ``"-Infinity"`` (Java's ``Double.toString``); every other
float stays a number, ``-0.0`` included. The output is therefore strict JSON (``json.dumps(..., allow_nan=False)``
accepts it).
"""

from __future__ import annotations

import base64
import datetime as dt
import math
from decimal import Decimal
from typing import Any

from flinkstate.serializers.kryo import OpaqueValue
from flinkstate.serializers.kryo_data import KryoValue, plain
from flinkstate.serializers.namespaces import TimeWindow
from flinkstate.serializers.row import KindedRow
from flinkstate.serializers.timer import Timer
from flinkstate.serializers.times import Temporal
from flinkstate.serializers.ttl import TtlValue

_NON_FINITE = {"inf": "Infinity", "-inf": "-Infinity", "nan": "NaN"}
#: RowKind's short strings (org.apache.flink.types.RowKind#shortString), by the byte value Flink stores.
ROW_KIND_SHORT = ("+I", "-U", "+U", "-D")


def to_json(value: Any) -> Any:
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else _NON_FINITE[repr(value)]
    if isinstance(value, Temporal):
        return str(value)
    if isinstance(value, dict):
        return {_key(k): to_json(v) for k, v in value.items()}
    if isinstance(value, TimeWindow):
        return {"start": value.start, "end": value.end}
    if isinstance(value, TtlValue):
        return {"value": to_json(value.value), "last_access": value.last_access}
    if isinstance(value, Timer):
        return {"timestamp": value.timestamp, "key": to_json(value.key), "namespace": to_json(value.namespace)}
    if isinstance(value, KindedRow) and value.kind:
        return {"row_kind": ROW_KIND_SHORT[value.kind], "fields": [to_json(v) for v in value]}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((to_json(v) for v in value), key=repr)
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, KryoValue):  # still marked as Kryo: "type" is the declared Kryo type, "class" the record's
        return {"type": value.type_name, "class": value.java_class, "value": to_json(plain(value.value))}
    if isinstance(value, OpaqueValue):
        return {"type": value.type_name, "base64": base64.b64encode(value.data).decode("ascii")}
    raise TypeError(f"no JSON encoding for {type(value).__name__}")


def _key(key: Any) -> str:
    """JSON object keys must be strings (map keys of other types are rendered as their JSON text)."""
    if isinstance(key, str):
        return key
    import json

    return json.dumps(to_json(key))
