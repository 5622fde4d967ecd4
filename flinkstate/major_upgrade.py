"""Upgrades across Flink's major versions (1.x -> 2.x): which Flink a savepoint was written by, which Flink a
manifest describes, and the states whose bytes the other major's serializers would misread or refuse.

Flink 1.x writes Kryo data with Kryo 2.24, Flink 2.x reads it with Kryo 5.6 (FLINK-3154), and the Kryo serializer
snapshots of both are byte-identical: Flink's snapshot check says "as is", then Flink 2.x misreads every value
silently or loops restarting. ``java.util`` List/Map/Set values that 1.x serializes with Kryo get Flink's own
collection serializers in 2.x (FLINK-34123, FLINK-35068, FLINK-35555). Each Kryo serializer in a state's tree is one
finding (a silent misread: INCOMPATIBLE as the savepoint is); ``migrate`` carries the Kryo records of Flink 1.x
across, re-encoded for Kryo 5 (:mod:`flinkstate.migration.kryo_major`), so the check's verdict is the plan's:
COMPATIBLE_AFTER_MIGRATION where it carries them, INCOMPATIBLE with the plan's refusal where it cannot (a Kryo key, a
Kryo'd collection that 2.x serializes with its own serializers, a user class's record at migration time).

* **The savepoint's Flink** is told by its ``_metadata`` version: up to 4 Flink 1.x, from 5 Flink 2.x (the same rule
  that picks the Kryo reader: :func:`flinkstate.serializers.kryo.kryo_version_for_metadata`).
* **The target Flink** is the manifest's ``flink_version`` (a jar's schema has its Flink's; ``--target-flink``
  gives or confirms it). A manifest without one describes a job of the savepoint's own major: nothing here applies.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping

from flinkstate.compatibility import AS_IS, INCOMPATIBLE, Finding, join
from flinkstate.errors import FlinkStateError
from flinkstate.serializers.base import TypeSerializerSnapshot
from flinkstate.serializers.kryo import (
    LAST_FLINK1_METADATA_VERSION,
    KryoSnapshot,
    kryo_snapshots,
    reachable_snapshots,
)
from flinkstate.serializers.pojo import PojoSnapshot

#: The Flink majors whose savepoints flinkstate reads.
FLINK_MAJORS = (1, 2)
#: "2.3", "1.20.3", "2.3.0-SNAPSHOT": major.minor, then anything Flink's release names add.
_FLINK_VERSION = re.compile(r"^(\d+)\.(\d+)(\.\d+)?([-.][0-9A-Za-z.-]+)?$")
#: The ``java.util`` interfaces Flink 2.x serializes with its own List/Map/Set serializers instead of Kryo.
FLINK2_COLLECTIONS = ("java.util.List", "java.util.Map", "java.util.Set")

KRYO_CODE = "KRYO_ACROSS_FLINK_MAJOR"
COLLECTION_CODE = "KRYO_COLLECTION_ACROSS_FLINK_MAJOR"


def flink_version_problem(version: object) -> str | None:
    """What is wrong with ``version`` as a Flink version (one phrase), or None when it is one flinkstate knows."""
    if isinstance(version, float):  # YAML reads an unquoted 1.20 as the number 1.2
        return f"quote the Flink version (YAML reads it as the number {version})"
    if not isinstance(version, str):
        return f"expected a Flink version such as \"2.3\" or \"1.20.3\", got {type(version).__name__}"
    match = _FLINK_VERSION.match(version)
    if match is None:
        return f"expected a Flink version such as \"2.3\" or \"1.20.3\", got {version[:40]!r}"
    if int(match.group(1)) not in FLINK_MAJORS:
        return f"Flink {version[:40]}: flinkstate knows Flink 1.x and 2.x"
    return None


def flink_major(version: str) -> int:
    """The major of a valid Flink version (see :func:`flink_version_problem`)."""
    return int(version.split(".", 1)[0])


def target_flink_version(declared: str | None, given: str | None, origin: str | None) -> str | None:
    """The Flink a schema's job runs on: ``declared`` (the schema's ``flink_version``, from ``origin``), else
    ``given`` (``--target-flink``). ``given`` of another major than ``declared`` is an error: a schema is one
    Flink's job (a jar's is its Flink's)."""
    if given is None:
        return declared
    problem = flink_version_problem(given)
    if problem is not None:
        raise FlinkStateError(f"--target-flink: {problem}")
    if declared is not None and flink_major(declared) != flink_major(given):
        raise FlinkStateError(f"{origin or '<manifest>'}: flink_version: Flink {declared}, but --target-flink says "
                              f"{given}: a schema describes one Flink's job")
    return declared or given


def savepoint_flink_major(metadata_version: int) -> int:
    """The major of the Flink that writes ``_metadata`` of this version."""
    return 1 if metadata_version <= LAST_FLINK1_METADATA_VERSION else 2


def carries_kryo(source_metadata_version: int, target_flink: str | None) -> bool:
    """Whether a migration of a savepoint of this ``_metadata`` version for a job on ``target_flink`` re-encodes
    its Kryo data: Flink 1.x (Kryo 2.24) to 2.x (Kryo 5.6)."""
    return savepoint_flink_major(source_metadata_version) == 1 and target_flink is not None \
        and flink_major(target_flink) == 2


def output_metadata_version(source_metadata_version: int, target_flink: str | None) -> int | None:
    """The ``_metadata`` version such a migration writes, the one its target writes (so that Flink and flinkstate
    read its Kryo data with Kryo 5): 5 for Flink 2.0, 6 from 2.1; None when it carries no Kryo data (the source's)."""
    if target_flink is None or not carries_kryo(source_metadata_version, target_flink):
        return None
    return 5 if target_flink.split(".")[:2] == ["2", "0"] else 6


def kryo_paths(snapshot: TypeSerializerSnapshot, path: str) -> Iterator[tuple[str, KryoSnapshot]]:
    """Every Kryo serializer in ``snapshot``'s tree with its path (``value.payload``, ``value.element``): POJO fields
    by name, composites by their labels; any other family's nested Kryo serializers at the family's own path (so that
    none is missed, even in a family that does not label its parts)."""
    if isinstance(snapshot, KryoSnapshot):
        yield path, snapshot
        return
    if isinstance(snapshot, PojoSnapshot):
        for field in snapshot.fields:
            if field.snapshot is not None:
                yield from kryo_paths(field.snapshot, join(path, field.name))
        for entry in (*snapshot.registered_subclasses, *snapshot.nonregistered_subclasses):
            if isinstance(entry.value, TypeSerializerSnapshot):
                yield from kryo_paths(entry.value, join(path, f"<{entry.name}>"))
        return
    labels = getattr(snapshot, "nested_labels", None)
    if labels is not None:
        for label, nested in zip(labels(), snapshot.nested, strict=True):
            yield from kryo_paths(nested, join(path, label) if label else path)
        return
    for found in kryo_snapshots([snapshot]):
        yield path, found


def layouts_origin(new: Mapping[str, object] | None, old: Mapping[str, object] | None) -> str | None:
    """Where a migration's user-class layouts come from (:func:`flinkstate.migration.manifest_targets.
    carry_layouts`), as a finding says it; None: no layouts (a user class's records are refused)."""
    if not new:
        return None
    if old:
        return "user classes carried with the old version's and the new version's kryo_classes"
    return ("user classes carried with the new version's kryo_classes for both sides: the old version's are not "
            "given (--old-schema), so the savepoint's classes are assumed to be the same classes compiled against "
            "both Flinks")


def across_majors(source_major: int, target_major: int,
                  parts: list[tuple[str, TypeSerializerSnapshot | None]], layouts: str | None = None
                  ) -> list[Finding]:
    """The findings on a state's serializers (``parts``: path and the snapshot the savepoint records) when a job of
    Flink ``target_major`` restores a savepoint of Flink ``source_major``: one per Kryo serializer in their trees.
    Flink's snapshot check passes them (the Kryo snapshots of both majors are the same bytes), so each is a silent
    misread for the verdict; whether ``migrate`` carries it is the plan's to say (:mod:`flinkstate.migration.verdict`).
    """
    if source_major == target_major:
        return []
    source, target = _flink(source_major), _flink(target_major)
    findings = []
    for part, snapshot in parts:
        if snapshot is None:
            continue
        for path, kryo in kryo_paths(snapshot, part):
            if source_major == 1 and kryo.type_class in FLINK2_COLLECTIONS:
                findings.append(Finding(
                    COLLECTION_CODE, path, f"{path}: a {kryo.type_class} serialized by Kryo in {source}; Flink 2.x "
                    f"serializes {kryo.type_class.removeprefix('java.util.')} values with its own collection "
                    f"serializers (FLINK-34123, FLINK-35068, FLINK-35555) and Kryo 5.6 cannot read Kryo 2.24 bytes; "
                    f"migrate converts them to the 2.x job's {kryo.type_class.removeprefix('java.util.')} "
                    f"serializer (a schema that keeps them Kryo is refused)", AS_IS, kryo.type_class,
                    silent_misread=True, migratable=False))
            else:
                findings.append(Finding(
                    KRYO_CODE, path, f"{path}: Kryo data ({kryo.type_class}) written by {source}; {target} reads it "
                    f"with the other Kryo, which misreads it silently or fails the restore (FLINK-3154)"
                    f"{'; migrate re-encodes its records for Kryo 5.6' if source_major == 1 else ''}"
                    f"{f' ({layouts})' if layouts and source_major == 1 else ''}", AS_IS,
                    kryo.type_class, silent_misread=True, migratable=False))
    return findings


#: Serializer snapshot classes of Flink 1.x that Flink 2.x no longer has: the snapshot classes of Flink 1.20.3's
#: distribution (lib/) that 2.3's lacks (their class files compared), less test and shaded ones. The Scala API's
#: serializers (flink-scala: removed in 2.0; 2.x's table module has its own ScalaCaseClassSerializerSnapshot under
#: another name), snapshots deprecated since 1.x (EitherSerializerSnapshot, GenericArraySerializerConfigSnapshot,
#: CEP's pre-1.5 NFA and SharedBuffer ones) and TwoPhaseCommitSinkFunction's, which 2.x moved to a ``legacy``
#: package. Flink 2.x restores a state by loading its snapshot's class: one of these fails the restore
#: (ClassNotFoundException, a restart loop) unless the job's own jar ships it.
GONE_IN_FLINK2 = frozenset({
    "org.apache.flink.api.common.typeutils.base.GenericArraySerializerConfigSnapshot",
    "org.apache.flink.api.java.typeutils.runtime.EitherSerializerSnapshot",
    "org.apache.flink.api.scala.typeutils.NothingSerializerSnapshot",
    "org.apache.flink.api.scala.typeutils.ScalaCaseClassSerializerSnapshot",
    "org.apache.flink.api.scala.typeutils.ScalaEitherSerializerSnapshot",
    "org.apache.flink.api.scala.typeutils.ScalaEnumSerializerSnapshot",
    "org.apache.flink.api.scala.typeutils.ScalaOptionSerializerSnapshot",
    "org.apache.flink.api.scala.typeutils.ScalaTrySerializerSnapshot",
    "org.apache.flink.api.scala.typeutils.TraversableSerializerSnapshot",
    "org.apache.flink.api.scala.typeutils.Tuple2CaseClassSerializerSnapshot",
    "org.apache.flink.api.scala.typeutils.UnitSerializer$UnitSerializerSnapshot",
    "org.apache.flink.cep.nfa.NFA$MigratedNFASerializerSnapshot",
    "org.apache.flink.cep.nfa.SharedBuffer$SharedBufferSerializerSnapshot",
    "org.apache.flink.cep.nfa.sharedbuffer.SharedBufferNode$SharedBufferNodeSerializer$SharedBufferNodeSerializerSnapshot",
    "org.apache.flink.streaming.api.functions.sink.TwoPhaseCommitSinkFunction$StateSerializerSnapshot",
})
GONE_CODE = "SNAPSHOT_CLASS_NOT_IN_FLINK_2"


def gone_in_target(target_major: int, parts: list[tuple[str, TypeSerializerSnapshot | None]]) -> list[Finding]:
    """One finding per serializer snapshot in ``parts``' trees whose class Flink 2.x no longer has
    (:data:`GONE_IN_FLINK2`), for a job of Flink ``target_major`` 2: Flink fails the restore (INCOMPATIBLE as the
    savepoint is). A plan that writes the state with the new version's serializers leaves none in its output."""
    if target_major < 2:
        return []
    findings = []
    for part, snapshot in parts:
        for nested in reachable_snapshots([snapshot]):
            if nested.class_name in GONE_IN_FLINK2:
                findings.append(Finding(
                    GONE_CODE, part, f"{part}: serializer snapshot class {nested.class_name} is not in Flink 2.x "
                    f"(it was in Flink 1.x): Flink 2.x cannot load it and fails the restore, unless the job's jar "
                    f"ships the class", INCOMPATIBLE, nested.class_name, migratable=False))
    return findings


def _flink(major: int) -> str:
    return "Flink 1.x (Kryo 2.24)" if major == 1 else "Flink 2.x (Kryo 5.6)"


__all__ = ["COLLECTION_CODE", "FLINK2_COLLECTIONS", "FLINK_MAJORS", "GONE_CODE", "GONE_IN_FLINK2", "KRYO_CODE",
           "across_majors", "carries_kryo", "flink_major", "flink_version_problem", "gone_in_target", "kryo_paths",
           "layouts_origin", "output_metadata_version", "savepoint_flink_major", "target_flink_version"]
