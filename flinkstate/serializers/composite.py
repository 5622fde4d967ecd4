"""``CompositeTypeSerializerSnapshot`` (snapshot version 3) and ``NestedSerializersSnapshotDelegate``::

    i32 0x000DE704 (911108, magic)   i32 outerVersion   outer payload (family specific)
    i32 0x001457FD (1333245, nested magic)   i32 1   i32 n   n x nested VersionedSnapshot

Snapshot versions 1 and 2 (legacy, pre-1.8) have no magic; the snapshot version is the outer version.
Subclasses implement the outer payload and the codec built from the nested snapshots' codecs.
"""

from __future__ import annotations

from typing import Any, ClassVar

from flinkstate.binary import Reader, Writer
from flinkstate.compatibility import INCOMPATIBLE, Compatibility, Finding, join, relabel_type_change
from flinkstate.format_errors import SavepointFormatError
from flinkstate.serializers.base import TypeSerializerSnapshot
from flinkstate.serializers.registry import read_snapshot, write_snapshot

COMPOSITE_MAGIC = 911108
NESTED_MAGIC = 1333245
NESTED_VERSION = 1
COMPOSITE_VERSION = 3
HIGHEST_LEGACY_VERSION = 2


def read_nested_snapshots(reader: Reader) -> list[TypeSerializerSnapshot]:
    """``NestedSerializersSnapshotDelegate.readNestedSerializerSnapshots``."""
    start = reader.pos
    magic = reader.i32()
    if magic != NESTED_MAGIC:
        raise reader.error(f"bad nested serializer snapshots magic 0x{magic & 0xFFFFFFFF:08x} "
                           f"(expected 0x{NESTED_MAGIC:08x})", start)
    version = reader.i32()
    if version != NESTED_VERSION:
        raise reader.error(f"unsupported nested serializer snapshots version {version}", start + 4)
    count = reader.i32()
    if count < 0:
        raise reader.error(f"negative nested serializer count {count}", start + 8)
    return [read_snapshot(reader) for _ in range(count)]


def write_nested_snapshots(writer: Writer, nested: list[TypeSerializerSnapshot]) -> None:
    writer.i32(NESTED_MAGIC)
    writer.i32(NESTED_VERSION)
    writer.i32(len(nested))
    for snapshot in nested:
        write_snapshot(writer, snapshot)


class CompositeSnapshot(TypeSerializerSnapshot):
    """Base of every composite snapshot. ``OUTER_VERSION`` is what Flink currently writes."""

    OUTER_VERSION: ClassVar[int] = 1
    ARITY: ClassVar[int | None] = None  # expected number of nested snapshots, when fixed
    #: Finding code for a nested serializer of another type (e.g. ``TUPLE_FIELD_TYPE_CHANGED``).
    NESTED_TYPE_CHANGED: ClassVar[str] = "TYPE_CHANGED"

    def __init__(self, class_name: str, nested: list[TypeSerializerSnapshot], *, version: int = COMPOSITE_VERSION,
                 outer_version: int | None = None) -> None:
        super().__init__(class_name, version)
        self._nested = list(nested)
        self.outer_version = self.OUTER_VERSION if outer_version is None else outer_version

    @property
    def nested(self) -> list[TypeSerializerSnapshot]:
        return self._nested

    @classmethod
    def read_payload(cls, class_name: str, version: int, reader: Reader) -> CompositeSnapshot:
        if version > HIGHEST_LEGACY_VERSION:
            start = reader.pos
            magic = reader.i32()
            if magic != COMPOSITE_MAGIC:
                raise reader.error(f"{class_name}: bad composite snapshot magic 0x{magic & 0xFFFFFFFF:08x} "
                                   f"(expected 0x{COMPOSITE_MAGIC:08x})", start)
            outer_version = reader.i32()
        else:
            outer_version = version
        outer = cls.read_outer(reader, outer_version)
        start = reader.pos
        nested = read_nested_snapshots(reader)
        if cls.ARITY is not None and len(nested) != cls.ARITY:
            raise SavepointFormatError(f"{class_name} has {len(nested)} nested serializers, expected {cls.ARITY}",
                                       reader.path, reader.base + start)
        snapshot = cls.build(class_name, nested, outer)
        snapshot.version = version
        snapshot.outer_version = outer_version
        return snapshot

    @classmethod
    def read_outer(cls, reader: Reader, outer_version: int) -> dict[str, object]:
        """The family-specific outer payload as keyword arguments for :meth:`build`; none by default."""
        return {}

    @classmethod
    def build(cls, class_name: str, nested: list[TypeSerializerSnapshot], outer: dict[str, object]
              ) -> CompositeSnapshot:
        return cls(class_name, nested, **outer)  # type: ignore[arg-type]

    def write_outer(self, writer: Writer) -> None:
        """Mirror of :meth:`read_outer`."""

    def write_payload(self, writer: Writer) -> None:
        if self.version > HIGHEST_LEGACY_VERSION:
            writer.i32(COMPOSITE_MAGIC)
            writer.i32(self.outer_version)
        self.write_outer(writer)
        write_nested_snapshots(writer, self._nested)

    # -- compatibility (CompositeTypeSerializerSnapshot.resolveSchemaCompatibility) ---------------------------------

    def nested_labels(self) -> list[str | None]:
        """Path segment of each nested serializer in findings; None keeps the parent's path (wrappers)."""
        return [str(i) for i in range(len(self._nested))]

    def resolve_same_family(self, old: Any, path: str) -> Compatibility:
        if len(old.nested) != len(self._nested):
            return self.resolve_arity_change(old, path)
        result = self.resolve_outer(old, path)
        if result.verdict is INCOMPATIBLE:
            return result
        # CompositeTypeSerializerUtil: the worst nested result decides (reconfigured nested serializers make the
        # outer one reconfigured).
        for label, new, previous in zip(self.nested_labels(), self._nested, old.nested, strict=True):
            nested_path = path if label is None else join(path, label)
            nested = new.resolve_compatibility(previous, nested_path)
            result.merge(relabel_type_change(nested, nested_path, self.NESTED_TYPE_CHANGED))
        return result

    def resolve_outer(self, old: Any, path: str) -> Compatibility:
        """``resolveOuterSchemaCompatibility``: the family's own configuration; as is by default."""
        return Compatibility.as_is()

    def resolve_arity_change(self, old: Any, path: str) -> Compatibility:
        return Compatibility.of(Finding("ARITY_CHANGED", path, f"{len(old.nested)} nested serializers became "
                                        f"{len(self._nested)}", INCOMPATIBLE, old.type_name(), self.type_name()))

