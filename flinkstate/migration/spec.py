"""The ``migration:`` block of a state in a schema manifest, parsed and validated::

    migration:
      fields:                              # POJO / Row / Avro record fields of the value; "a.b" reaches nested ones
        count: {convert: to-string}        # a built-in conversion (see CONVERSIONS)
        label: {default: "n/a"}            # an added field's value (null when no default is given)
        title: {from: name}                # field rename (may be combined with convert)
      value: {convert: widen}              # a conversion of the whole value (e.g. ValueState<Integer> -> <Long>)
      user_key: {convert: to-string}       # MapState user keys
      function: mypkg.fixes:upgrade        # module:function, old value -> new value, after the rules above
      ttl_last_access: 1700000000000       # TTL switched on: the values' last access (default: the migration's time)
      on_error: dead-letter                # or fail (the default)

The operator's key is converted once for the whole operator, by the operator's own ``migration:`` block, which takes
``key`` and ``on_error`` only::

    operators:
      stats:
        key: Long
        migration: {key: {convert: to-long}}   # entries move to the key group Flink hashes the new key to

Errors are one line naming the manifest file and the path of the offending item.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from flinkstate.errors import FlinkStateError

#: Built-in conversions (implemented in :mod:`flinkstate.migration.transforms`).
CONVERSIONS = ("widen", "to-string", "to-number", "to-int", "to-long", "to-double", "to-float", "to-boolean")
ON_ERROR = ("fail", "dead-letter")
_FIELD_KEYS = {"convert", "default", "from"}
_TOP_KEYS = {"fields", "value", "user_key", "function", "ttl_last_access", "on_error"}
_OPERATOR_KEYS = {"key", "on_error"}


class MigrationSpecError(FlinkStateError):
    """A ``migration:`` block is invalid. The message names the file and the path."""


@dataclass(frozen=True)
class FieldRule:
    """What to do for one field of the new value."""

    convert: str | None = None
    default: Any = None
    has_default: bool = False
    source: str | None = None  # the old field's name ("from")


@dataclass(frozen=True)
class StateMigration:
    fields: dict[str, FieldRule] = field(default_factory=dict)
    value: str | None = None  # conversion of the whole stored value
    user_key: str | None = None
    key: str | None = None
    function: str | None = None  # "module:function"
    on_error: str = "fail"
    #: TTL switched on: the last-access time (epoch milliseconds) the values get; None: the migration's time.
    ttl_last_access: int | None = None

    @property
    def dead_letter(self) -> bool:
        return self.on_error == "dead-letter"


NO_MIGRATION = StateMigration()


def parse_migration(raw: Any, where: str = "migration", source: str = "<manifest>") -> StateMigration:
    """Validates one raw ``migration:`` mapping. ``where`` is its path in the manifest (for messages), ``source``
    the file name."""

    fail = _failer(source)
    if raw is None:
        return NO_MIGRATION
    if not isinstance(raw, dict):
        raise fail(where, f"must be a mapping, got {type(raw).__name__}")
    if "key" in raw:
        raise fail(f"{where}.key", "the key is converted once for the whole operator: move it to the operator's "
                                   "migration block (operators.<uid>.migration.key)")
    unknown = sorted(set(map(str, raw)) - _TOP_KEYS)
    if unknown:
        raise fail(f"{where}.{unknown[0]}", f"unknown key (expected one of: {', '.join(sorted(_TOP_KEYS))})")
    fields: dict[str, FieldRule] = {}
    raw_fields = raw.get("fields") or {}
    if not isinstance(raw_fields, dict):
        raise fail(f"{where}.fields", "must be a mapping of field name to rule")
    for name, rule in raw_fields.items():
        path = f"{where}.fields.{name}"
        if not isinstance(name, str) or not name or any(not part for part in name.split(".")):
            raise fail(path, "field names must be non-empty strings (dots separate nested fields)")
        fields[name] = _field_rule(rule, path, fail)
    on_error = _on_error(raw, where, fail)
    function = raw.get("function")
    if function is not None:
        if not isinstance(function, str) or function.count(":") != 1 or not all(function.split(":")):
            raise fail(f"{where}.function", f"must be 'module:function', got {function!r}")
    last_access = raw.get("ttl_last_access")
    if last_access is not None and (type(last_access) is not int or not -(1 << 63) <= last_access < 1 << 63):
        raise fail(f"{where}.ttl_last_access", f"must be epoch milliseconds (a Java long), got {last_access!r}")
    return StateMigration(fields, _convert_of(raw.get("value"), f"{where}.value", fail),
                          _convert_of(raw.get("user_key"), f"{where}.user_key", fail), None, function, on_error,
                          last_access)


def parse_operator_migration(raw: Any, where: str = "migration", source: str = "<manifest>") -> StateMigration:
    """An operator's ``migration:`` block: the key conversion (``key: {convert: NAME}``) and its ``on_error``."""

    fail = _failer(source)
    if raw is None:
        return NO_MIGRATION
    if not isinstance(raw, dict):
        raise fail(where, f"must be a mapping, got {type(raw).__name__}")
    unknown = sorted(set(map(str, raw)) - _OPERATOR_KEYS)
    if unknown:
        raise fail(f"{where}.{unknown[0]}", f"unknown key (an operator's migration takes "
                                            f"{', '.join(sorted(_OPERATOR_KEYS))}; value migrations belong to its "
                                            f"states)")
    return StateMigration(key=_convert_of(raw.get("key"), f"{where}.key", fail), on_error=_on_error(raw, where, fail))


def _failer(source: str) -> Callable[[str, str], MigrationSpecError]:
    """The error of one manifest file: ``file: path: what``."""
    return lambda path, what: MigrationSpecError(f"{source}: {path}: {what}")


def _on_error(raw: dict[str, Any], where: str, fail: Callable[[str, str], MigrationSpecError]) -> str:
    on_error = raw.get("on_error", "fail")
    if on_error not in ON_ERROR:
        raise fail(f"{where}.on_error", f"must be one of {', '.join(ON_ERROR)}, got {on_error!r}")
    return str(on_error)


def _convert_name(value: Any, path: str, fail: Any) -> str:
    if value not in CONVERSIONS:
        raise fail(path, f"unknown conversion {value!r} (built-ins: {', '.join(CONVERSIONS)})")
    return str(value)


def _convert_of(raw: Any, path: str, fail: Any) -> str | None:
    if raw is None:
        return None
    if not isinstance(raw, dict) or set(raw) != {"convert"}:
        raise fail(path, "must be {convert: NAME}")
    return _convert_name(raw["convert"], f"{path}.convert", fail)


def _field_rule(rule: Any, path: str, fail: Any) -> FieldRule:
    if rule is None:
        return FieldRule()
    if not isinstance(rule, dict):
        raise fail(path, "must be a mapping with convert, default and/or from")
    unknown = sorted(set(map(str, rule)) - _FIELD_KEYS)
    if unknown:
        raise fail(f"{path}.{unknown[0]}", "unknown key (expected convert, default or from)")
    convert = _convert_name(rule["convert"], f"{path}.convert", fail) if "convert" in rule else None
    source = rule.get("from")
    if source is not None and (not isinstance(source, str) or not source):
        raise fail(f"{path}.from", "must be the old field's name")
    if "default" in rule and source is not None:
        raise fail(path, "'default' is for added fields and 'from' for renamed ones: give one of them")
    return FieldRule(convert, rule.get("default"), "default" in rule, source)
