"""``flinkstate audit``: a savepoint's exposure, before an upgrade is planned (issue 27).

What a team wants to know before it moves a job, above all from Flink 1.x to 2.x:

* every state and field whose bytes Kryo wrote (whole values, POJO fields, list elements, map keys and values,
  nested): Kryo's format depends on the class layout, and Flink 1.x (Kryo 2.24) and 2.x (Kryo 5.6) read different
  bytes. In a 1.x savepoint each is one that a 2.x job misreads or fails on (the ``across_majors`` findings of the
  check, with the check's codes; ``java.util`` List/Map/Set ones get 2.x's collection serializers);
* every state and field written by Java serialization (``JavaSerializer``): its bytes change with the class;
* every operator without a uid of its own: its id is generated from the job graph's shape, so a change of the graph
  orphans its state. Metadata version 5 (Flink 2.x) records each operator's uid; for older savepoints ``--jar`` tells
  (the job's operators, as the inspector builds them), else it is unknown and said so.

Only serializer snapshots are read (the ``_metadata`` and each state's header): no entry is decoded, so the cost
does not grow with the state.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

from flinkstate.errors import printable
from flinkstate.format.keyed_header import StateMetaInfo
from flinkstate.format.metadata import OperatorState, has_state
from flinkstate.major_upgrade import across_majors, gone_in_target, kryo_paths, savepoint_flink_major
from flinkstate.savepoint import Savepoint
from flinkstate.serializers.base import TypeSerializerSnapshot
from flinkstate.serializers.javaserial import JavaSerializerSnapshot
from flinkstate.serializers.kryo import reachable_snapshots

#: Kryo data in a Flink 2.x savepoint (a class change can break it; across a Kryo version, the check's codes).
KRYO_CODE = "KRYO_SERIALIZED"
JAVA_CODE = "JAVA_SERIALIZED"
GENERATED_UID_CODE = "GENERATED_OPERATOR_ID"
UNKNOWN_UID_CODE = "OPERATOR_UID_UNKNOWN"



@dataclass(frozen=True)
class Exposure:
    """One thing the savepoint holds that an upgrade can break: ``state`` None is about the operator itself."""

    operator: str
    state: str | None
    code: str
    path: str
    type_class: str | None
    text: str
    breaks_on_flink2: bool = False


@dataclass
class Audit:
    savepoint: str
    metadata_version: int
    flink_major: int
    operators: int
    states: int
    exposures: list[Exposure]

    @property
    def counts(self) -> dict[str, int]:
        return dict(Counter(e.code for e in self.exposures))

    def to_json(self) -> dict[str, Any]:
        return {"savepoint": self.savepoint, "metadata_version": self.metadata_version,
                "flink_major": self.flink_major, "operators": self.operators, "states": self.states,
                "counts": self.counts, "exposures": [asdict(e) for e in self.exposures]}

    def render_text(self) -> str:
        lines = [f"savepoint {self.savepoint}",
                 f"  written by Flink {self.flink_major}.x (metadata version {self.metadata_version}); "
                 f"{self.operators} operators, {self.states} states"]
        if self.flink_major == 1:
            broken = sorted({(e.operator, e.state) for e in self.exposures if e.breaks_on_flink2},
                            key=lambda pair: (pair[0], pair[1] or ""))
            lines.append(f"  Flink 1.x -> 2.x: {len(broken)} state(s) a Flink 2.x job would misread or fail on"
                         + (": " + ", ".join(f"{op}/{state}" for op, state in broken) if broken else ""))
        operator = None
        for exposure in self.exposures:
            if exposure.operator != operator:
                operator = exposure.operator
                lines.append(f"operator {operator}")
            where = f"state {exposure.state}, {exposure.path}" if exposure.state else "the operator"
            lines.append(f"  {exposure.code}: {where}: {exposure.text}")
        if not self.exposures:
            lines.append("nothing found: no Kryo or Java serialization, every operator has a uid")
        return "\n".join(printable(line) for line in lines) + "\n"


def audit_savepoint(savepoint: Savepoint, job_uids: dict[str, str | None] | None = None) -> Audit:
    """The savepoint's exposures, operator by operator. ``job_uids``: operator id -> uid (None: none) of the job that
    wrote it (``--jar``), for savepoints whose metadata does not record uids."""
    version = savepoint.metadata.version
    major = savepoint_flink_major(version)
    exposures: list[Exposure] = []
    states = 0
    for op in savepoint.operators:
        label = op.uid or (f"{op.name} ({op.operator_id})" if op.name else op.operator_id)
        if has_state(op):  # an operator without state has nothing to lose to a new id
            exposures.extend(_operator_id(op, label, version, job_uids))
        header = savepoint.keyed_header(op)
        if header is not None:
            for meta in header.states:
                states += 1
                parts = [("key", header.key_serializer), ("namespace", meta.namespace_serializer),
                         ("user_key", meta.user_key_serializer), ("value", meta.value_serializer)]
                exposures.extend(_state(label, meta.name, major, parts))
        for _, stream in savepoint.operator_state_streams(op)[:1]:  # every subtask writes the same headers
            for meta in (*stream.header().list_states, *stream.header().broadcast_states):
                states += 1
                exposures.extend(_state(label, meta.name, major, _operator_state_parts(meta)))
    return Audit(savepoint.location.uri, version, major, len(savepoint.operators), states, exposures)


def _operator_state_parts(meta: StateMetaInfo) -> list[tuple[str, TypeSerializerSnapshot | None]]:
    return [(key.lower().removesuffix("_serializer"), snapshot) for key, snapshot in meta.serializers]


def _state(operator: str, state: str, major: int,
           parts: Iterable[tuple[str, TypeSerializerSnapshot | None]]) -> Iterator[Exposure]:
    parts = list(parts)
    if major == 1:  # the check's own findings for a 2.x job restoring it: Kryo serializers, snapshot classes gone
        for finding in [*across_majors(1, 2, parts), *gone_in_target(2, parts)]:
            yield Exposure(operator, state, finding.code, finding.path, finding.old_type,
                           finding.message.removeprefix(f"{finding.path}: "), breaks_on_flink2=True)
    else:
        for part, snapshot in parts:
            if snapshot is None:
                continue
            for path, kryo in kryo_paths(snapshot, part):
                yield Exposure(operator, state, KRYO_CODE, path, kryo.type_class,
                               f"Kryo data ({kryo.type_class}): its bytes follow the class's fields; a change of the "
                               f"class can make them unreadable (Flink's snapshot check cannot see it)")
    for part, snapshot in parts:
        for java in _java_serializers(snapshot):
            yield Exposure(operator, state, JAVA_CODE, part, java.class_name,
                           "Java serialization: its bytes change with the class (serialVersionUID, fields); "
                           "Flink's snapshot check cannot see it")


def _java_serializers(snapshot: TypeSerializerSnapshot | None) -> list[JavaSerializerSnapshot]:
    return [s for s in reachable_snapshots([snapshot]) if isinstance(s, JavaSerializerSnapshot)]


def _operator_id(op: OperatorState, label: str, metadata_version: int,
                 job_uids: dict[str, str | None] | None) -> Iterator[Exposure]:
    if job_uids is not None and op.operator_id in job_uids:
        uid = job_uids[op.operator_id]
    elif metadata_version >= 5:
        uid = op.uid
    else:
        yield Exposure(label, None, UNKNOWN_UID_CODE, "", None,
                       "whether it has a uid is not recorded before metadata version 5 (Flink 2.x): give the "
                       "job's --jar to tell")
        return
    if uid is None:
        yield Exposure(label, None, GENERATED_UID_CODE, "", None,
                       "no uid: Flink generated its id from the job graph's shape; a change of the graph before it "
                       "gives it another id and orphans its state (set .uid(...) on it; the id to keep: "
                       f"{op.operator_id}, e.g. with setUidHash)")


__all__ = ["GENERATED_UID_CODE", "JAVA_CODE", "KRYO_CODE", "UNKNOWN_UID_CODE", "Audit", "Exposure", "audit_savepoint"]
