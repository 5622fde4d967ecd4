"""Schema compatibility results, mirroring Flink's ``TypeSerializerSchemaCompatibility``.

Every serializer family implements its own rule as ``TypeSerializerSnapshot.resolve_compatibility(old, path)`` on
the NEW snapshot (Flink 1.19+: ``newSnapshot.resolveSchemaCompatibility(oldSnapshot)``), in its own module under
``flinkstate/serializers/``. This module holds what they share: the verdicts (ordered by severity), the findings
that say why, and the combination rule of composite types (``CompositeTypeSerializerUtil``'s intermediate result:
the worst part wins).

State- and operator-level rules (keys, namespaces, state kinds, operators) are in :mod:`flinkstate.resolution`.
This module imports nothing else from flinkstate, so that the serializer families can import it.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol


class NamedType(Protocol):
    """What a rule needs of a serializer snapshot to name a type change (``TypeSerializerSnapshot`` is one): a
    protocol, so that this module stays below the serializer families instead of importing them back."""

    def type_name(self) -> str: ...


class Verdict(enum.IntEnum):
    """Flink's four answers, ordered so that ``max`` is the worst."""

    COMPATIBLE_AS_IS = 0
    COMPATIBLE_WITH_RECONFIGURED_SERIALIZER = 1
    COMPATIBLE_AFTER_MIGRATION = 2
    INCOMPATIBLE = 3

    @property
    def restorable(self) -> bool:
        """Whether Flink restores (possibly migrating) rather than failing."""
        return self is not Verdict.INCOMPATIBLE


AS_IS = Verdict.COMPATIBLE_AS_IS
RECONFIGURED = Verdict.COMPATIBLE_WITH_RECONFIGURED_SERIALIZER
AFTER_MIGRATION = Verdict.COMPATIBLE_AFTER_MIGRATION
INCOMPATIBLE = Verdict.INCOMPATIBLE


@dataclass(frozen=True)
class Finding:
    """One reason for a verdict.

    ``verdict`` is what Flink answers for this change. ``silent_misread`` marks a change Flink accepts (usually as
    is) although the restored values would be wrong; the tool then treats the state as incompatible. ``migratable``
    says whether the change can be carried out: by Flink itself (after-migration value changes), or by this tool's
    migration engine for a declared migration (None: a migration is declared but was not evaluated).
    """

    code: str
    path: str
    message: str
    verdict: Verdict
    old_type: str | None = None
    new_type: str | None = None
    operator: str | None = None
    state: str | None = None
    silent_misread: bool = False
    migratable: bool | None = False

    @property
    def effective_verdict(self) -> Verdict:
        """The verdict a safe upgrade must act on: a silent misread is as bad as an incompatibility."""
        return INCOMPATIBLE if self.silent_misread else self.verdict

    def at(self, **changes: Any) -> Finding:
        return replace(self, **changes)

    def to_json(self) -> dict[str, Any]:
        return {"code": self.code, "operator": self.operator, "state": self.state, "path": self.path,
                "old_type": self.old_type, "new_type": self.new_type, "verdict": self.verdict.name,
                "silent_misread": self.silent_misread, "migratable": self.migratable, "message": self.message}


@dataclass
class Compatibility:
    """The result of resolving one new snapshot against one old snapshot: Flink's verdict and the findings."""

    verdict: Verdict = AS_IS
    findings: list[Finding] = field(default_factory=list)

    @classmethod
    def as_is(cls) -> Compatibility:
        return cls(AS_IS, [])

    @classmethod
    def of(cls, finding: Finding) -> Compatibility:
        return cls(finding.verdict, [finding])

    def add(self, finding: Finding) -> Compatibility:
        """Records a finding; the verdict becomes the worse of the two (a silent misread does not change Flink's
        verdict)."""
        self.findings.append(finding)
        self.verdict = max(self.verdict, finding.verdict)
        return self

    def merge(self, other: Compatibility) -> Compatibility:
        self.findings.extend(other.findings)
        self.verdict = max(self.verdict, other.verdict)
        return self

    @property
    def effective_verdict(self) -> Verdict:
        return max([self.verdict, *(f.effective_verdict for f in self.findings)])


def worst(results: Iterable[Compatibility]) -> Compatibility:
    """``CompositeTypeSerializerUtil.constructIntermediateCompatibilityResult``: any incompatible part makes the
    whole incompatible, else any migration makes it need migration, else any reconfiguration makes it
    reconfigured, else as is."""
    total = Compatibility.as_is()
    for result in results:
        total.merge(result)
    return total


def join(path: str, part: str) -> str:
    return f"{path}.{part}" if path else part


def relabel_type_change(result: Compatibility, path: str, code: str) -> Compatibility:
    """Names a plain type change found exactly at ``path`` after its container (``POJO_FIELD_TYPE_CHANGED``...)."""
    if code != "TYPE_CHANGED":
        result.findings = [f.at(code=code) if f.code == "TYPE_CHANGED" and f.path == path else f
                           for f in result.findings]
    return result


def type_changed(new: NamedType, old: NamedType, path: str,
                 code: str = "TYPE_CHANGED") -> Compatibility:
    """The common first check of every family: an old snapshot of another serializer is incompatible."""
    return Compatibility.of(Finding(code, path, f"type changed from {old.type_name()} to {new.type_name()}",
                                    INCOMPATIBLE, old.type_name(), new.type_name()))


__all__ = ["AFTER_MIGRATION", "AS_IS", "INCOMPATIBLE", "RECONFIGURED", "Compatibility", "Finding", "NamedType",
           "Verdict", "join", "relabel_type_change", "type_changed", "worst"]
