"""Decoded values compared as Java compares them (:func:`canonical`), and shown in the verifier's messages."""

from __future__ import annotations

import dataclasses
import math
import struct
from decimal import Decimal
from typing import Any

from flinkstate.jsonify import to_json

_F64 = struct.Struct(">d")


def canonical(value: Any) -> Any:
    """A hashable form of a decoded value in which equal means equal to Java: floats by bits (NaN equals NaN,
    -0.0 differs from 0.0), BigDecimal by its text (scale counts), rows with their RowKind, records by field."""
    if value is None or isinstance(value, (bool, str, bytes)):
        return (type(value).__name__, value)
    if isinstance(value, int):
        return ("int", value)
    if isinstance(value, float):
        return ("float", b"NaN" if math.isnan(value) else _F64.pack(value))
    if isinstance(value, Decimal):
        return ("decimal", str(value))
    if isinstance(value, dict):
        return ("map", tuple(sorted((canonical(k), canonical(v)) for k, v in value.items())))
    if isinstance(value, (list, tuple)):
        return ("seq", getattr(value, "kind", 0) or 0, tuple(canonical(v) for v in value))
    if isinstance(value, (set, frozenset)):
        return ("set", tuple(sorted(canonical(v) for v in value)))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (type(value).__name__, tuple(canonical(getattr(value, f.name)) for f in dataclasses.fields(value)))
    return (type(value).__name__, repr(value))


def show(entry: Any) -> str:
    try:
        text = str(to_json(entry))
    except Exception:
        text = repr(entry)
    text = text.encode("unicode_escape").decode("ascii")
    return text if len(text) <= 200 else text[:197] + "..."


def uncanonical(item: Any) -> Any:
    """A readable form of a canonical value for messages."""
    if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str):
        tag, payload = item
        if tag == "float":
            return "NaN" if payload == b"NaN" else _F64.unpack(payload)[0]
        if tag == "map":
            return {str(uncanonical(k)): uncanonical(v) for k, v in payload}
        if tag == "set":
            return [uncanonical(v) for v in payload]
        if tag in ("decimal",):
            return payload
        if isinstance(payload, tuple):
            return [uncanonical(v) for v in payload]
        return payload
    if isinstance(item, tuple) and len(item) == 3 and item[0] == "seq":
        return [uncanonical(v) for v in item[2]]
    return item


__all__ = ["canonical", "show", "uncanonical"]
