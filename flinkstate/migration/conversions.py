"""Built-in conversions between simple types (``to-string``, ``to-int``, ``to-long``, ``to-double``, widening),
exactly as Java would convert the value; and the errors a transform raises. Structural transforms built on them:
:mod:`flinkstate.migration.transforms`.
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from flinkstate.errors import FlinkStateError
from flinkstate.serializers.base import TypeSerializerSnapshot
from flinkstate.serializers.primitives import SimpleSnapshot

Transform = Callable[[Any], Any]

_F32 = struct.Struct(">f")


class MigrationPlanError(FlinkStateError):
    """The declared migration cannot turn the old type into the new one."""


class ConversionError(ValueError):
    """One value could not be converted (the error policy decides what happens)."""


# --------------------------------------------------------------------------------------------------------------------
# Built-in conversions between simple types
# --------------------------------------------------------------------------------------------------------------------

_INTEGRAL_BITS = {"Byte": 8, "Short": 16, "Integer": 32, "Long": 64}
_FLOATING = ("Float", "Double")
#: Java's widening primitive conversions (JLS 5.1.2), by the reader's type names.
_WIDENING = {
    "Byte": {"Short", "Integer", "Long", "Float", "Double"},
    "Short": {"Integer", "Long", "Float", "Double"},
    "Character": {"Integer", "Long", "Float", "Double"},
    "Integer": {"Long", "Float", "Double"},
    "Long": {"Float", "Double"},
    "Float": {"Double"},
}
_JAVA_INTEGER = re.compile(r"[+-]?[0-9]+")
#: The types whose Java ``toString`` the built-in to-string reproduces exactly (Double/Float with Java's digit
#: rules, BigDecimal with the same scientific notation as Python's Decimal).
_JAVA_TO_STRING = {"Byte", "Short", "Integer", "Long", "Float", "Double", "Boolean", "Character", "String",
                   "BigInteger", "BigDecimal"}
PRIMITIVE_NAMES = {"Long": "long", "Integer": "int", "Short": "short", "Byte": "byte", "Float": "float",
                    "Double": "double", "Boolean": "boolean", "Character": "char"}


def java_double_to_string(value: float) -> str:
    """``Double.toString``: shortest round-trip digits, plain in [1e-3, 1e7), else ``d.dddE±n``."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return _java_decimal_text(repr(value), value)


def java_float_to_string(value: float) -> str:
    """``Float.toString``: the shortest decimal that reads back as the same 32-bit float."""
    if math.isnan(value) or math.isinf(value):
        return java_double_to_string(value)
    target = _F32.pack(value)
    for precision in range(1, 10):
        text = f"{value:.{precision}g}"
        if _F32.pack(float(text)) == target:
            return _java_decimal_text(text, value)
    return _java_decimal_text(repr(value), value)


def _java_decimal_text(shortest: str, value: float) -> str:
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    sign, digits, exponent = Decimal(shortest).normalize().as_tuple()
    text = "".join(map(str, digits))
    point = len(text) + int(exponent)  # position of the decimal point within the digits
    prefix = "-" if sign else ""
    if 1e-3 <= abs(value) < 1e7:
        if point <= 0:
            return f"{prefix}0.{'0' * -point}{text}"
        if point >= len(text):
            return f"{prefix}{text}{'0' * (point - len(text))}.0"
        return f"{prefix}{text[:point]}.{text[point:]}"
    mantissa = f"{text[0]}.{text[1:] or '0'}"
    return f"{prefix}{mantissa}E{point - 1}"


def _to_string(type_name: str) -> Transform:
    if type_name == "Double":
        return lambda v: None if v is None else java_double_to_string(v)
    if type_name == "Float":
        return lambda v: None if v is None else java_float_to_string(v)
    if type_name == "Boolean":
        return lambda v: None if v is None else ("true" if v else "false")
    return lambda v: None if v is None else str(v)


def _parse_integral(bits: int) -> Transform:
    low, high = -(1 << (bits - 1)), (1 << (bits - 1)) - 1

    def parse(value: Any) -> int | None:
        if value is None:
            return None
        if isinstance(value, str):
            if not _JAVA_INTEGER.fullmatch(value):
                raise ConversionError(f"not an integer: {value!r}")
            number = int(value)
        elif isinstance(value, float):
            if not value.is_integer():
                raise ConversionError(f"not an integer: {value!r}")
            number = int(value)
        else:
            number = int(value)
        if not low <= number <= high:
            raise ConversionError(f"{number} is out of range for a {bits}-bit integer")
        return number

    return parse


def _parse_floating(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, str):
        text = value.strip()  # Double.parseDouble trims whitespace, but knows no '_' separators
        try:
            if "_" in text:
                raise ValueError(text)
            return float(text)
        except ValueError:
            raise ConversionError(f"not a number: {value!r}") from None
    return float(value)


def _parse_boolean(value: Any) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    return str(value).lower() == "true"  # Boolean.parseBoolean


def _to_target(new: str, old: str) -> Transform:
    """String (or another simple type) to the new simple type ``new``."""
    if new in _INTEGRAL_BITS:
        return _parse_integral(_INTEGRAL_BITS[new])
    if new in _FLOATING:
        return _parse_floating
    if new == "Boolean":
        return _parse_boolean
    if new == "String":
        return _to_string(old)
    raise MigrationPlanError(f"cannot convert {old} to {new}")


def _widen(old: str, new: str) -> Transform:
    if old == new:
        return identity
    if new not in _WIDENING.get(old, ()):
        raise MigrationPlanError(f"{old} -> {new} is not a widening conversion")
    if old == "Character":
        return lambda v: None if v is None else (float(ord(v)) if new in _FLOATING else ord(v))
    if new in _FLOATING:
        return lambda v: None if v is None else float(v)
    return identity


_TARGETS = {"to-int": ("Integer", "Short", "Byte"), "to-long": ("Long",), "to-double": ("Double",),
            "to-float": ("Float",), "to-boolean": ("Boolean",),
            "to-number": ("Byte", "Short", "Integer", "Long", "Float", "Double")}


def conversion(name: str, old: TypeSerializerSnapshot, new: TypeSerializerSnapshot) -> Transform:
    """The built-in conversion ``name`` from ``old``'s type to ``new``'s (both simple types)."""
    if not isinstance(old, SimpleSnapshot) or not isinstance(new, SimpleSnapshot):
        raise MigrationPlanError(f"conversion {name} applies to simple types, not {old.type_name()} -> "
                                 f"{new.type_name()}")
    old_type, new_type = old.type_name(), new.type_name()
    if name == "widen":
        return _widen(old_type, new_type)
    if name == "to-string":
        if new_type != "String":
            raise MigrationPlanError(f"to-string needs a String target, the new type is {new_type}")
        if old_type not in _JAVA_TO_STRING:
            raise MigrationPlanError(f"to-string from {old_type} is not built in: this tool reproduces Java's "
                                     f"toString exactly only for {', '.join(sorted(_JAVA_TO_STRING))}; declare a "
                                     f"function")
        return _to_string(old_type)
    if new_type not in _TARGETS[name]:
        raise MigrationPlanError(f"{name} cannot produce {new_type}")
    return _to_target(new_type, old_type)


# --------------------------------------------------------------------------------------------------------------------
# Structural transforms
# --------------------------------------------------------------------------------------------------------------------


def identity(value: Any) -> Any:
    return value



def chain(first: Transform | None, second: Transform | None) -> Transform | None:
    """``second`` after ``first``; either may be None (no transform)."""
    if first is None:
        return second
    if second is None:
        return first
    return lambda value: second(first(value))


__all__ = ["ConversionError", "MigrationPlanError", "Transform", "chain", "conversion", "identity",
           "java_double_to_string", "java_float_to_string"]
