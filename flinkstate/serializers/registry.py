"""Java snapshot class name → snapshot reader, and the versioned-snapshot envelope
(``TypeSerializerSnapshotSerializationUtil`` / ``TypeSerializerSnapshot.writeVersionedSnapshot``)::

    top level:  i32 proxyVersion (2) ; UTF className ; i32 version ; payload
    nested:                            UTF className ; i32 version ; payload

The payload carries no length, so an unknown class stops parsing: :class:`UnknownSerializerSnapshot`. A job's own
snapshot classes are read by plugins: installed packages that name, in the entry-point group
``flinkstate.serializers``, a module registering readers with :func:`register` (or one
:class:`TypeSerializerSnapshot` subclass). They are code a user installed, as pytest's plugins are, never anything a
savepoint or manifest names.
"""

from __future__ import annotations

import importlib
from contextvars import ContextVar
from importlib.metadata import entry_points

from flinkstate.binary import Reader, Writer
from flinkstate.errors import EnvironmentProblem
from flinkstate.format_errors import UnknownSerializerSnapshot, UnsupportedFormat
from flinkstate.limits import SNAPSHOT_DEPTH
from flinkstate.serializers.base import TypeSerializerSnapshot

#: The envelope version Flink has written since 1.7; version 1 (Java-serialized serializers) is unreadable since 1.17.
SNAPSHOT_PROXY_VERSION = 2

#: Legacy ``TypeSerializerConfigSnapshot`` adapter version (1.15/1.16 only).
LEGACY_ADAPTER_VERSION = 0x7A53C4F0

#: How Flink 1.7 and earlier named their serializer configuration snapshots (ParameterlessTypeSerializerConfig,
#: CollectionSerializerConfigSnapshot, PojoSerializerConfigSnapshot, ...): refused by what they are.
LEGACY_CONFIG_SUFFIXES = ("SerializerConfig", "ConfigSnapshot")

_FAMILY_MODULES = (
    "primitives", "composite", "collections", "tuple", "row", "nullable", "pojo", "enum", "avro", "kryo",
    "timer", "ttl", "namespaces", "rowdata", "either", "runtimelists", "ttlaware", "values", "javaserial", "scala",
    "streaming", "cep", "bitmapvariant", "sorted",
)

#: The entry-point group of serializer snapshot plugins.
PLUGIN_GROUP = "flinkstate.serializers"

_REGISTRY: dict[str, type[TypeSerializerSnapshot]] = {}
_PLUGIN_CLASS_NAMES: set[str] = set()  # the Java class names plugins registered
_loaded: list[bool] = []  # whether every family module has been imported (they register on import)


def register(cls: type[TypeSerializerSnapshot]) -> type[TypeSerializerSnapshot]:
    """Class decorator: makes ``cls`` the reader of each Java class name in ``cls.CLASS_NAMES``."""
    for name in cls.CLASS_NAMES:
        _REGISTRY[name] = cls
    return cls


def _load_families() -> None:
    # Not "if not _REGISTRY": importing one family directly registers it before the others are loaded.
    if not _loaded:
        for module in _FAMILY_MODULES:
            importlib.import_module(f"flinkstate.serializers.{module}")
        _loaded.append(True)  # before the plugins: a plugin's own lookups must not load them again
        _load_plugins()


def _load_plugins() -> None:
    """Imports every installed serializer plugin (after the built-in families, so that a plugin may read a class
    flinkstate already reads, e.g. to fix it, only by registering it itself)."""
    for point in sorted(entry_points(group=PLUGIN_GROUP), key=lambda p: p.name):
        before = dict(_REGISTRY)
        try:
            loaded = point.load()
        except Exception as exc:  # any failure of someone else's code: one line naming the plugin
            raise EnvironmentProblem(f"serializer plugin {point.name} ({point.value}, entry point group "
                                     f"{PLUGIN_GROUP}) failed to load: {type(exc).__name__}: {exc}") from None
        if isinstance(loaded, type) and issubclass(loaded, TypeSerializerSnapshot):
            register(loaded)
        _PLUGIN_CLASS_NAMES.update(name for name, cls in _REGISTRY.items() if before.get(name) is not cls)


def from_plugin(class_name: str) -> bool:
    """Whether a plugin, not a built-in family, reads this snapshot class."""
    _load_families()
    return class_name in _PLUGIN_CLASS_NAMES


def lookup(class_name: str) -> type[TypeSerializerSnapshot] | None:
    _load_families()
    return _REGISTRY.get(class_name)


def known_class_names() -> list[str]:
    _load_families()
    return sorted(_REGISTRY)


#: How many snapshots enclose the one being read (nested snapshots are read through this function, whatever reader
#: their family uses): hostile bytes may nest them without end, and everything built on a snapshot recurses too.
_depth: ContextVar[int] = ContextVar("snapshot_depth", default=0)


def read_snapshot(reader: Reader, top_level: bool = False) -> TypeSerializerSnapshot:
    """Reads one (top-level or nested) versioned snapshot, nested at most ``SNAPSHOT_DEPTH`` levels deep."""
    depth = _depth.get()
    if depth >= SNAPSHOT_DEPTH.value():
        raise SNAPSHOT_DEPTH.exceeded("serializer snapshot nested too deeply", reader.path,
                                      reader.base + reader.pos)
    token = _depth.set(depth + 1)
    try:
        return _read_snapshot(reader, top_level)
    except RecursionError:  # the bound raised beyond what Python's stack holds
        if depth:
            raise
        raise SNAPSHOT_DEPTH.exceeded("serializer snapshot nested deeper than Python's stack allows", reader.path,
                                      reader.base + reader.pos) from None
    finally:
        _depth.reset(token)


def _read_snapshot(reader: Reader, top_level: bool) -> TypeSerializerSnapshot:
    if top_level:
        start = reader.pos
        proxy_version = reader.i32()
        if proxy_version != SNAPSHOT_PROXY_VERSION:
            raise UnsupportedFormat(f"serializer snapshot proxy version {proxy_version} is not supported "
                                    f"(only {SNAPSHOT_PROXY_VERSION})", reader.path, reader.base + start)
    start = reader.pos
    class_name = reader.utf()
    version = reader.i32()
    cls = lookup(class_name)
    if cls is None and class_name.endswith(LEGACY_CONFIG_SUFFIXES):
        raise UnsupportedFormat(f"{class_name} is a TypeSerializerConfigSnapshot of Flink 1.7 or earlier (before "
                                f"Flink 1.8's TypeSerializerSnapshot), which Flink 1.17 and later cannot restore "
                                f"either: restore it with Flink 1.8 to 1.16 and take a new savepoint",
                                reader.path, reader.base + start)
    if cls is None:
        raise UnknownSerializerSnapshot(class_name, reader.path, reader.base + start)
    if version == LEGACY_ADAPTER_VERSION:
        raise UnsupportedFormat(f"legacy TypeSerializerConfigSnapshot {class_name} (written by Flink <= 1.16) is not "
                                f"supported", reader.path, reader.base + start)
    return cls.read_payload(class_name, version, reader)


def write_snapshot(writer: Writer, snapshot: TypeSerializerSnapshot, top_level: bool = False) -> None:
    if top_level:
        writer.i32(SNAPSHOT_PROXY_VERSION)
    writer.utf(snapshot.class_name)
    writer.i32(snapshot.version)
    snapshot.write_payload(writer)


def snapshot_bytes(snapshot: TypeSerializerSnapshot, top_level: bool = False) -> bytes:
    writer = Writer()
    write_snapshot(writer, snapshot, top_level)
    return writer.getvalue()
