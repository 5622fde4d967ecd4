"""The layouts of user classes as a Kryo instance serializes them (issue 27): what Kryo's FieldSerializer writes for a
class (its fields in Kryo's order, which fields Kryo treats as of a known class, the generics it passes on) and an
enum's constants. The bytes of a FieldSerializer record carry none of this, so a Kryo 2.24 record (Flink 1.x) of a
user class can be re-encoded for Kryo 5.6 (Flink 2.x) only with both layouts (:mod:`flinkstate.serializers.
kryo_fields`).

Kryo reports them itself: the jar inspector's ``KryoLayouts`` asks the job's Flink KryoSerializer's Kryo for each
class's serializer and reads its cached fields (``schema --jar`` writes them as the manifest's ``kryo_classes:``, one
entry per class; a person may declare them there too, in the same notation, docs/manifest.md). Kryo 2.24 and 5.6 may
differ in order, inclusion and generics (Kryo 2.24 passes one level of type arguments, Kryo 5 the whole tree): each
Kryo's own layout is what reads or writes its bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flinkstate.errors import FlinkStateError

#: The Kryo serializers of user classes whose data flinkstate reads and writes.
FIELD_SERIALIZER = "com.esotericsoftware.kryo.serializers.FieldSerializer"
ENUM_SERIALIZER = "com.esotericsoftware.kryo.serializers.DefaultSerializers$EnumSerializer"
PRIMITIVE_TYPES = frozenset({"int", "long", "float", "double", "boolean", "byte", "char", "short"})


class KryoLayoutError(FlinkStateError):
    """A layout that is not one (a missing key, a wrong type): one line naming the class and what is wrong."""


@dataclass(frozen=True)
class KryoGeneric:
    """A type argument Kryo passes to a field's serializer: its class (None when Kryo cannot name one), whether
    Kryo treats that class as final (then a collection writes its elements without class ids), and its own type
    arguments (Kryo 5 only: None in Kryo 2.24, which passes one level)."""

    java_class: str | None
    final: bool
    generics: tuple[KryoGeneric, ...] | None


@dataclass(frozen=True)
class KryoField:
    """One field of a FieldSerializer, as Kryo caches it."""

    name: str
    type: str
    value_class: str | None  # the class Kryo takes as known (no class id written); None: class and object
    can_be_null: bool
    var_int: bool  # int and long fields written as variable-length numbers
    generics: tuple[KryoGeneric, ...] | None


@dataclass(frozen=True)
class KryoClassLayout:
    """A user class as one Kryo serializes it: FieldSerializer ``fields`` or an enum's ``constants``; ``final``, the
    class's modifier (None when not given), decides whether an array of it writes its elements' classes. A generic
    class's layout is its fields unbound (a T field: class and object), which is how Kryo writes them wherever T is
    not bound to a final class (:mod:`flinkstate.serializers.kryo_fields` refuses the rest)."""

    java_class: str
    serializer: str
    type_parameters: int
    fields: tuple[KryoField, ...] | None
    constants: tuple[str, ...] | None
    final: bool | None = None

    def carried_as(self) -> str | None:
        """Why flinkstate cannot read or write this class's records (one phrase), or None."""
        if self.constants is not None:
            return None
        if self.fields is None or self.serializer != FIELD_SERIALIZER:
            return f"serialized by {self.serializer}, not Kryo's FieldSerializer"
        return None


#: class name -> its layout, for one Kryo version.
KryoLayouts = dict[str, KryoClassLayout]


@dataclass(frozen=True)
class KryoCarryLayouts:
    """The layouts a Flink 1.x -> 2.x migration reads a state's Kryo 2.24 records with (``old``: the old version's
    classes) and writes them with (``new``); ``assumed``: the old version's were not given, so the new version's
    stand for them (the same classes compiled against both Flinks), which the reports say."""

    old: KryoLayouts
    new: KryoLayouts
    assumed: bool


def _expect(item: Any, key: str, kinds: type | tuple[type, ...], where: str) -> Any:
    if not isinstance(item, dict) or key not in item:
        raise KryoLayoutError(f"{where}: '{key}' missing")
    value = item[key]
    if not isinstance(value, kinds):
        raise KryoLayoutError(f"{where}: '{key}' must be {getattr(kinds, '__name__', kinds)}, got "
                              f"{type(value).__name__}")
    return value


def _generics(value: Any, where: str) -> tuple[KryoGeneric, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise KryoLayoutError(f"{where}: 'generics' must be a list or null")
    return tuple(KryoGeneric(_expect(g, "class", (str, type(None)), where), _expect(g, "final", bool, where),
                             _generics(g.get("generics"), where)) for g in value)


def layouts_from_json(data: Any, origin: str) -> KryoLayouts:
    """The layouts of ``data`` (the inspector's JSON list, or a manifest's ``kryo_classes:``), checked; ``origin``
    names where they come from in a :class:`KryoLayoutError`."""
    if not isinstance(data, list):
        raise KryoLayoutError(f"{origin}: kryo_classes must be a list of classes")
    layouts: KryoLayouts = {}
    for item in data:
        name = _expect(item, "class", str, f"{origin}: kryo_classes")
        where = f"{origin}: kryo_classes: {name}"
        fields = item.get("fields")
        constants = item.get("constants")
        if fields is not None and not isinstance(fields, list):
            raise KryoLayoutError(f"{where}: 'fields' must be a list")
        if constants is not None and not (isinstance(constants, list) and all(isinstance(c, str) for c in constants)):
            raise KryoLayoutError(f"{where}: 'constants' must be a list of names")
        parsed = None if fields is None else tuple(
            KryoField(_expect(f, "name", str, where), _expect(f, "type", str, where),
                      _expect(f, "value_class", (str, type(None)), where), _expect(f, "can_be_null", bool, where),
                      _expect(f, "var_int", bool, where), _generics(f.get("generics"), where)) for f in fields)
        final = item.get("final")
        if final is not None and not isinstance(final, bool):
            raise KryoLayoutError(f"{where}: 'final' must be true or false")
        default = ENUM_SERIALIZER if constants is not None else FIELD_SERIALIZER
        layouts[name] = KryoClassLayout(name, item.get("serializer", default), item.get("type_parameters", 0),
                                        parsed, None if constants is None else tuple(constants), final)
    return layouts


def _generics_json(generics: tuple[KryoGeneric, ...] | None) -> list[dict[str, Any]] | None:
    if generics is None:
        return None
    return [{"class": g.java_class, "final": g.final, "generics": _generics_json(g.generics)} for g in generics]


def layouts_to_json(layouts: KryoLayouts) -> list[dict[str, Any]]:
    """``layouts`` in the notation :func:`layouts_from_json` reads (a manifest's ``kryo_classes:``)."""
    out: list[dict[str, Any]] = []
    for layout in layouts.values():
        item: dict[str, Any] = {"class": layout.java_class, "serializer": layout.serializer}
        if layout.type_parameters:
            item["type_parameters"] = layout.type_parameters
        if layout.final is not None:
            item["final"] = layout.final
        if layout.constants is not None:
            item["constants"] = list(layout.constants)
        if layout.fields is not None:
            item["fields"] = [{"name": f.name, "type": f.type, "value_class": f.value_class,
                               "can_be_null": f.can_be_null, "var_int": f.var_int,
                               "generics": _generics_json(f.generics)} for f in layout.fields]
        out.append(item)
    return out


__all__ = ["ENUM_SERIALIZER", "FIELD_SERIALIZER", "PRIMITIVE_TYPES", "KryoCarryLayouts", "KryoClassLayout", "KryoField",
           "KryoGeneric", "KryoLayoutError", "KryoLayouts", "layouts_from_json", "layouts_to_json"]
