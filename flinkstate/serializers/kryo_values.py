"""The values :mod:`flinkstate.serializers.kryo_data` decodes Kryo records into, its errors, and the registration
ids a Flink KryoSerializer gives the JDK classes (Kryo 2.24 in Flink 1.x, Kryo 5.6 in Flink 2.x)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flinkstate.format_errors import SavepointFormatError

KRYO2, KRYO5 = 2, 5
#: The first id of Flink's own registrations (``FlinkChillPackageRegistrar.getNextRegistrationId``).
FIRST_FLINK_REGISTRATION = 85
#: Nesting bound: a corrupted record must not recurse without end.
MAX_DEPTH = 64

PRIMITIVE_IDS = ("int", "java.lang.String", "float", "boolean", "byte", "char", "short", "long", "double")
CHILL_IDS = ("java.util.Arrays$ArrayList", "java.util.BitSet", "java.util.PriorityQueue", "java.util.regex.Pattern",
              "java.sql.Date", "java.sql.Time", "java.sql.Timestamp", "java.net.URI", "java.net.InetSocketAddress",
              "java.util.UUID", "java.util.Locale", "java.text.SimpleDateFormat")

COLLECTIONS = frozenset({"java.util.ArrayList", "java.util.LinkedList", "java.util.HashSet", "java.util.LinkedHashSet",
                          "java.util.ArrayDeque", "java.util.TreeSet"})
MAPS = frozenset({"java.util.HashMap", "java.util.LinkedHashMap", "java.util.TreeMap"})
#: JDK enums whose constants are known (EnumSerializer stores only the ordinal); a user's enum cannot be told from a
#: user class by its name, so it stays opaque.
JDK_ENUMS: dict[str, tuple[str, ...]] = {
    "java.util.concurrent.TimeUnit": ("NANOSECONDS", "MICROSECONDS", "MILLISECONDS", "SECONDS", "MINUTES", "HOURS",
                                      "DAYS"),
    "java.time.DayOfWeek": ("MONDAY", "TUESDAY", "WEDNESDAY", "THURSDAY", "FRIDAY", "SATURDAY", "SUNDAY"),
    "java.time.Month": ("JANUARY", "FEBRUARY", "MARCH", "APRIL", "MAY", "JUNE", "JULY", "AUGUST", "SEPTEMBER",
                        "OCTOBER", "NOVEMBER", "DECEMBER"),
    "java.math.RoundingMode": ("UP", "DOWN", "CEILING", "FLOOR", "HALF_UP", "HALF_DOWN", "HALF_EVEN", "UNNECESSARY"),
}


class KryoOpaque(Exception):
    """The record holds a class this module cannot decode: it is passed through whole."""

    def __init__(self, class_name: str, why: str = "no built-in serializer decoded here") -> None:
        # The name comes from the data: escaped, so a corrupted one cannot break the one-line message.
        shown = class_name if class_name.isprintable() else class_name.encode("unicode_escape").decode("ascii")
        super().__init__(f"{shown}: {why}")
        self.class_name = class_name


class KryoCorrupt(SavepointFormatError):
    """The bytes are not a Kryo record of the version tried (truncated, an impossible value)."""


@dataclass(frozen=True)
class KryoEnum:
    """An enum constant: Kryo stores its ordinal only; ``name`` is known for JDK enums."""

    enum_class: str
    ordinal: int
    name: str | None


@dataclass(frozen=True)
class KryoMap:
    """A map's entries in the stored order (keys may be any value, so not a dict)."""

    map_class: str
    entries: tuple[tuple[Any, Any], ...]


@dataclass(frozen=True)
class KryoDuration:
    seconds: int
    nanos: int


@dataclass(frozen=True)
class KryoText:
    """A value Java renders as text (UUID, Currency, Locale, Charset): its class and that text."""

    java_class: str
    text: str


@dataclass(frozen=True)
class KryoValue:
    """A decoded Kryo record: the declared Kryo type, the record's class, the value, and the original bytes (written
    back unchanged, so a migration stays byte exact)."""

    type_name: str
    java_class: str
    value: Any
    data: bytes
    kryo_version: int


def registration_table(version: int, registrations: list[tuple[str, bool]]) -> dict[int, tuple[str, bool]]:
    """Registration id -> (class name, uses its default serializer) for a Flink KryoSerializer whose snapshot lists
    ``registrations`` (class name, registered without a serializer of its own) in order."""
    table: dict[int, tuple[str, bool]] = {i: (name, True) for i, name in enumerate(PRIMITIVE_IDS)}
    if version == KRYO2:
        table[9] = ("void", True)
    for i, name in enumerate(CHILL_IDS):
        table[73 + i] = (name, True)
    for i, (name, default) in enumerate(registrations):
        table[FIRST_FLINK_REGISTRATION + i] = (name, default)
    return table


def plain(value: Any) -> Any:
    """A decoded Kryo value as plain Python for ``dump`` (the rest, Decimal, dates, bytes, goes through
    :func:`flinkstate.jsonify.to_json`): a map is an object when its keys are strings, else a list of [key, value]
    pairs; an enum is its constant's name (or {"enum", "ordinal"} when the name is not known); UUID, Currency,
    Locale and Charset are their text; a Duration is {"seconds", "nanos"}."""
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, KryoMap):
        if all(isinstance(k, str) for k, _ in value.entries):
            return {k: plain(v) for k, v in value.entries}
        return [[plain(k), plain(v)] for k, v in value.entries]
    if isinstance(value, KryoEnum):
        return value.name if value.name is not None else {"enum": value.enum_class, "ordinal": value.ordinal}
    if isinstance(value, KryoText):
        return value.text
    if isinstance(value, KryoDuration):
        return {"seconds": value.seconds, "nanos": value.nanos}
    return value
