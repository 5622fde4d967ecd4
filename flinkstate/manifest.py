"""State schema manifests: one YAML file per job version declaring every operator's keyed states and their types.

    manifest_version: 1
    job: keyed-stats                      # optional, for people
    flink_version: "2.3"                  # optional: the Flink the job runs on (quoted); without it, the savepoint's
                                          #   major (see flinkstate.major_upgrade: 1.x -> 2.x upgrades)
    jar: /jobs/keyed-stats-2.jar          # optional: the job jar these are the states of (see Manifest.jar), and
    overlay: /jobs/keyed-stats-2.yaml     #   the overlay that completed its schema (as the upgrade DAG writes them)
    operators:
      stats:                              # operator uid (or any label plus `id: <32 hex>`, or the 32-hex id)
        max_parallelism: 128              # optional; when set, the savepoint's must be equal
        key: String                       # the keyed backend's key type (one per operator)
        renamed_from: old-uid             # optional: the uid this operator had in the savepoint
        window: "window:Tumbling..."      # optional: its window, as schema --jar writes it (flinkstate.windows)
        dropped_states: [old-state]       # optional: savepoint states this version no longer has
        states:
          stats:
            kind: VALUE                   # VALUE | LIST | MAP | REDUCING | AGGREGATING | TIMERS
            namespace: VoidNamespace      # optional (default VoidNamespace)
            value: {pojo: sample.Stats, fields: {count: Long, key: String, total: Long}}
          buckets: {kind: MAP, user_key: String, value: {row: {id: Integer, label: String, ratio: Double}}}
          renamed: {kind: VALUE, value: Long, renamed_from: old-name, migration: {...}}
      sequence-source:                    # an operator without keyed state: listed so that it is kept, and its
        operator_states: {SourceReaderState: {mode: SPLIT_DISTRIBUTE, value: byte[]}}  # (manifest_operator_states)
    kryo_classes: [{class: a.Point, fields: [...]}]  # optional: Kryo's user-class layouts (serializers.kryo_layout)

Types are in the notation of :mod:`flinkstate.typenotation`. For LIST state ``value`` is the element type, for MAP
``user_key`` and ``value`` are the map's key and value types. ``migration`` blocks are kept as they are, for the
migration engine (:mod:`flinkstate.migration`) to interpret. Every validation error names the file, the path
inside it and what is wrong.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlparse

import yaml

from flinkstate.binary import operator_id_from_uid
from flinkstate.bounded_yaml import MAX_YAML_BYTES, MAX_YAML_NESTING, YAMLRefused, load_yaml
from flinkstate.errors import FlinkStateError, printable, shown
from flinkstate.format.keyed_header import TIMERS, KeyedBackendHeader
from flinkstate.format.metadata import OperatorState, has_state
from flinkstate.identity import OperatorRef
from flinkstate.major_upgrade import flink_version_problem, target_flink_version
from flinkstate.manifest_operator_states import OperatorStateSchema, parse_operator_states, savepoint_operator_states
from flinkstate.savepoint import Savepoint
from flinkstate.serializers.base import TypeSerializerSnapshot
from flinkstate.serializers.collections import ListSnapshot, MapSnapshot
from flinkstate.serializers.kryo_layout import KryoLayouts, layouts_from_json, layouts_to_json
from flinkstate.serializers.namespaces import VoidNamespaceSnapshot
from flinkstate.serializers.registry import snapshot_bytes
from flinkstate.serializers.timer import TimerSnapshot
from flinkstate.snapshotnotation import to_notation
from flinkstate.storage.uri import read_file
from flinkstate.typenotation import TypeNotationError, to_snapshot

MANIFEST_VERSION = 1
KINDS = ("VALUE", "LIST", "MAP", "REDUCING", "AGGREGATING", TIMERS)
_HEX_ID = re.compile(r"^[0-9a-f]{32}$")
_STATE_KEYS = {"kind", "key", "namespace", "value", "user_key", "migration", "renamed_from"}
_OPERATOR_KEYS = {"id", "max_parallelism", "key", "states", "renamed_from", "dropped_states", "migration", "window",
                  "operator_states"}


class ManifestError(FlinkStateError):
    """A malformed manifest: ``file: path.inside: what is wrong``."""

    def __init__(self, file: str, path: str, message: str) -> None:
        self.file = file
        self.path = path
        self.message = message
        super().__init__(": ".join(part for part in (file, path, message) if part))


@dataclass
class StateSchema:
    """One keyed state as the new job version registers it."""

    name: str
    kind: str
    key: TypeSerializerSnapshot
    namespace: TypeSerializerSnapshot
    value: TypeSerializerSnapshot | None  # element type for LIST; None for TIMERS
    user_key: TypeSerializerSnapshot | None = None
    migration: Mapping[str, Any] | None = None
    renamed_from: str | None = None

    def state_serializer(self) -> TypeSerializerSnapshot:
        """The ``VALUE_SERIALIZER`` snapshot Flink writes in the state's meta info (keyed state V1): the list
        serializer for LIST, the map serializer for MAP, the timer serializer for TIMERS."""
        if self.kind == TIMERS:
            return TimerSnapshot(TimerSnapshot.CLASS_NAMES[0], [self.key, self.namespace])
        assert self.value is not None
        if self.kind == "LIST":
            return ListSnapshot(ListSnapshot.CLASS_NAMES[0], [self.value])
        if self.kind == "MAP":
            assert self.user_key is not None
            return MapSnapshot(MapSnapshot.CLASS_NAMES[0], [self.user_key, self.value])
        return self.value

    def to_dict(self) -> dict[str, Any]:
        result: dict[str, Any] = {"kind": self.kind}
        if not isinstance(self.namespace, VoidNamespaceSnapshot):
            result["namespace"] = to_notation(self.namespace)
        if self.user_key is not None:
            result["user_key"] = to_notation(self.user_key)
        if self.value is not None:
            result["value"] = to_notation(self.value)
        if self.renamed_from is not None:
            result["renamed_from"] = self.renamed_from
        if self.migration is not None:
            result["migration"] = dict(self.migration)
        return result


@dataclass
class OperatorSchema:
    label: str  # the key in the manifest: the uid, or a name for an operator known by id
    operator_id: str
    uid: str | None
    key: TypeSerializerSnapshot | None = None
    states: dict[str, StateSchema] = field(default_factory=dict)
    max_parallelism: int | None = None
    renamed_from: str | None = None
    dropped_states: list[str] = field(default_factory=list)
    #: The operator's own ``migration:`` block: its key conversion (``key``, ``on_error``).
    migration: Mapping[str, Any] | None = None
    #: The window it assigns records to, as the jar inspector writes it (:mod:`flinkstate.windows`); None: unknown.
    window: str | None = None
    operator_states: dict[str, OperatorStateSchema] | None = None  # by name; None: not described (older manifests)

    def to_dict(self) -> dict[str, Any]:
        result: dict[str, Any] = {}
        if self.uid is None or operator_id_from_uid(self.label) != self.operator_id:
            result["id"] = self.operator_id
        if self.max_parallelism is not None:
            result["max_parallelism"] = self.max_parallelism
        if self.renamed_from is not None:
            result["renamed_from"] = self.renamed_from
        if self.key is not None:
            result["key"] = to_notation(self.key)
        if self.migration is not None:
            result["migration"] = dict(self.migration)
        if self.dropped_states:
            result["dropped_states"] = list(self.dropped_states)
        if self.window is not None:
            result["window"] = self.window
        if self.states:
            result["states"] = {name: state.to_dict() for name, state in self.states.items()}
        if self.operator_states:
            result["operator_states"] = {name: state.to_dict() for name, state in self.operator_states.items()}
        return result


@dataclass
class Manifest:
    operators: dict[str, OperatorSchema]
    job: str | None = None
    path: str | None = None
    #: The job jar whose operators registered these states (:mod:`flinkstate.engine.jar_schema`), when the manifest
    #: is a jar's: a keyed state of the savepoint that it lacks is one the jar does not register when the operator
    #: opens, which ``check`` reports as such instead of a state the manifest merely leaves out.
    jar: str | None = None
    #: With ``jar``: the overlay that completed the jar's schema (:mod:`flinkstate.manifest_overlay`), if any.
    overlay: str | None = None
    #: The Flink version the job runs on ("2.3", "1.20.3"; a jar's schema has its Flink's). None: the savepoint's
    #: major, so a savepoint of Flink 1.x is not judged for Flink 2.x (:mod:`flinkstate.major_upgrade`).
    flink_version: str | None = None
    kryo_classes: KryoLayouts | None = None  # the user classes' layouts as its Flink's Kryo writes them (issue 27)

    def find(self, operator_id: str) -> OperatorSchema | None:
        return next((op for op in self.operators.values() if op.operator_id == operator_id), None)

    def origin(self) -> str | None:
        """Where it comes from, for reports and logs: its file, or the job jar (with the overlay that completed it)."""
        if self.jar is None:
            return self.path
        return f"{self.jar} with the overlay {self.overlay}" if self.overlay else self.jar

    def with_target_flink(self, version: str | None) -> Manifest:
        """This manifest for a job on Flink ``version`` (``--target-flink``: :func:`target_flink_version`)."""
        return replace(self, flink_version=target_flink_version(self.flink_version, version, self.origin()))

    def to_dict(self, *, sources: bool = False) -> dict[str, Any]:
        """The manifest's YAML document; ``sources``: with the jar and the overlay it was made of (top-level ``jar``
        and ``overlay``), so that the file read back judges as the jar's (a savepoint state it lacks is one the jar
        does not register) and names where its types came from."""
        result: dict[str, Any] = {"manifest_version": MANIFEST_VERSION}
        if self.job:
            result["job"] = self.job
        if self.flink_version is not None:
            result["flink_version"] = self.flink_version
        if sources and self.jar is not None:
            result["jar"] = self.jar
            if self.overlay:
                result["overlay"] = self.overlay
        result["operators"] = {label: op.to_dict() for label, op in self.operators.items()}
        if self.kryo_classes:
            result["kryo_classes"] = layouts_to_json(self.kryo_classes)
        return result

    def dump(self, *, sources: bool = False) -> str:
        return yaml.safe_dump(self.to_dict(sources=sources), sort_keys=False, width=120, allow_unicode=True)


# -- describing a savepoint ------------------------------------------------------------------------------------------


def manifest_from_savepoint(savepoint: Savepoint, job: str | None = None,
                            keys: Mapping[str, TypeSerializerSnapshot] | None = None) -> Manifest:
    """The manifest describing ``savepoint`` (``flinkstate schema``): every operator that holds state, and every
    keyed state with its types. Row field names are not stored in savepoints: they come out as f0, f1, ...
    ``keys`` (by operator uid or id) gives the key type of an operator whose snapshot does not record it (a changelog
    checkpoint never materialized, without timers); a recorded one must equal it."""
    # by operator id: a uid names the operator its hash does, as in the manifest (flinkstate.identity)
    by_id = {OperatorRef.parse(name).operator_id: (name, key) for name, key in (keys or {}).items()}
    unknown = [name for operator_id, (name, _) in by_id.items()
               if operator_id not in {op.operator_id for op in savepoint.operators}]
    if unknown:
        raise FlinkStateError(f"{savepoint.location.uri}: a key type is given for "
                              f"{printable(', '.join(sorted(unknown)))}, which the savepoint has no operator of")
    operators: dict[str, OperatorSchema] = {}
    for op in savepoint.operators:
        given = by_id[op.operator_id][1] if op.operator_id in by_id else None
        if not has_state(op) and given is None:  # given: refused below, as for an operator without keyed state
            continue
        label = op.uid or op.operator_id
        schema = OperatorSchema(label, op.operator_id, op.uid, operator_states=savepoint_operator_states(savepoint, op))
        if given is not None and savepoint.unrecorded_key(op):
            savepoint.assume_key_serializer(op, given)
        header = savepoint.keyed_header(op)
        if header is None and given is not None:
            raise FlinkStateError(f"{savepoint.location.uri}: {savepoint.label(op)}: a key type is given for it, "
                                  f"but it holds no keyed state")
        if header is not None:
            if header.key_serializer is None and header.states:
                raise FlinkStateError(f"{savepoint.location.uri}: {savepoint.label(op)}: the key serializer is "
                                      f"recorded nowhere in this snapshot (a changelog checkpoint never materialized, "
                                      f"without timers): give the job's key type (--key {printable(label)}=TYPE)")
            if given is not None and header.key_serializer is not None and \
                    snapshot_bytes(given) != snapshot_bytes(header.key_serializer):
                raise FlinkStateError(f"{savepoint.location.uri}: {savepoint.label(op)}: the key type given, "
                                      f"{to_notation(given)}, is not the recorded {header.key_serializer.type_name()}")
            add_keyed_states(schema, header)
            _check_notations(savepoint, op, schema)
        operators[label] = schema
    return Manifest(operators, job, savepoint.location.uri)


def _check_notations(savepoint: Savepoint, op: OperatorState, schema: OperatorSchema) -> None:
    """Every type of the operator's keyed states has a notation, which is what the manifest writes. A snapshot that
    has none (a tuple class that is no Flink tuple, a corrupted class name say) is refused here, naming the state
    file whose header holds it (the first subtask's that lists the state: the union took it from there), instead of
    later, while the YAML is written, naming nothing."""
    streams = [stream for _, stream in savepoint.keyed_streams(op)]
    try:
        if schema.key is not None:
            to_notation(schema.key)
    except TypeNotationError as exc:
        raise FlinkStateError(f"{streams[0].source.path}: operator {schema.label}: key serializer: {exc}") from None
    for name, state in schema.states.items():
        try:
            state.to_dict()
        except TypeNotationError as exc:
            where = next(s.source.path for s in streams if s.header().state_index(name) is not None)
            raise FlinkStateError(f"{where}: operator {schema.label}, state {name}: {exc}") from None


def add_keyed_states(schema: OperatorSchema, header: KeyedBackendHeader) -> None:
    """Sets the operator's key type and keyed states from its keyed backend's header (a savepoint's, or one taken of
    the operator opened from a jar: :mod:`flinkstate.engine.jar_schema`)."""
    schema.key = header.key_serializer
    for meta in header.states:
        assert header.key_serializer is not None
        value = None if meta.kind == TIMERS else meta.value_serializer
        schema.states[meta.name] = StateSchema(meta.name, meta.kind, header.key_serializer, meta.namespace_serializer
                                               or VoidNamespaceSnapshot(), value, meta.user_key_serializer)


# -- loading ----------------------------------------------------------------------------------------------------------


#: Bounds on a manifest, which comes from elsewhere: a job's manifest is a few KiB (the bounded loader's).
MAX_MANIFEST_BYTES, MAX_NESTING = MAX_YAML_BYTES, MAX_YAML_NESTING


def read_manifest_text(path: str | os.PathLike[str]) -> str:
    """The text of a manifest file (or an overlay: :mod:`flinkstate.manifest_overlay`), within the bounds."""
    file = os.fspath(path)
    if urlparse(file).scheme in ("s3", "s3a"):  # e.g. the schema the upgrade DAG resolved into its run folder
        try:
            data = read_file(file)
        except FlinkStateError as exc:  # the storage's one line names the object
            raise ManifestError("", "", str(exc)) from None
    else:
        try:
            with open(file, "rb") as handle:
                data = handle.read(MAX_MANIFEST_BYTES + 1)
        except OSError as exc:
            raise ManifestError(file, "", f"cannot read: {exc.strerror or exc}") from None
    if len(data) > MAX_MANIFEST_BYTES:
        raise ManifestError(file, "", f"larger than {MAX_MANIFEST_BYTES // (1024 * 1024)} MiB (a manifest is a few "
                                      f"KiB); refusing to parse it")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ManifestError(file, f"byte {exc.start}", "not UTF-8 text") from None


def load_manifest(path: str | os.PathLike[str]) -> Manifest:
    file = os.fspath(path)
    manifest = parse_manifest(read_manifest_text(file), file)
    manifest.path = file
    return manifest


def parse_manifest(text: str, file: str = "<manifest>") -> Manifest:
    return manifest_from_document(manifest_document(text, file), file)


def manifest_document(text: str, file: str = "<manifest>") -> Any:
    """The YAML document of a manifest, read by the one bounded loader (not validated yet)."""
    try:
        return load_yaml(text, file, max_bytes=MAX_MANIFEST_BYTES, max_nesting=MAX_NESTING)
    except YAMLRefused as exc:
        where = f"line {exc.line}, column {exc.column}" if exc.line is not None else ""
        raise ManifestError(file, where, exc.problem) from None


def manifest_from_document(data: Any, file: str = "<manifest>") -> Manifest:
    """A manifest's YAML document validated into a :class:`Manifest` (every error names ``file`` and the path)."""
    return _Parser(file).manifest(data)


def parse_type(notation: Any, file: str, path: str) -> TypeSerializerSnapshot:
    """One type of a manifest, by its notation; an error names ``file`` and ``path`` inside it."""
    return _Parser(file).type(notation, path)


class _Parser:
    def __init__(self, file: str) -> None:
        self.file = file

    def fail(self, path: str, message: str) -> ManifestError:
        return ManifestError(self.file, path, message)

    def mapping(self, value: Any, path: str, allowed: set[str] | None = None) -> Mapping[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise self.fail(path, f"expected a mapping, got {shown(value)}")
        if allowed is not None:
            unknown = [str(k) for k in value if k not in allowed]
            if unknown:
                raise self.fail(f"{path}.{unknown[0]}" if path else unknown[0],
                                f"unknown key (expected one of {', '.join(sorted(allowed))})")
        return value

    def text(self, value: Any, path: str) -> str:
        if not isinstance(value, str) or not value:
            raise self.fail(path, f"expected a non-empty string, got {shown(value)}")
        return value

    def type(self, notation: Any, path: str) -> TypeSerializerSnapshot:
        if notation is None:
            raise self.fail(path, "missing type")
        try:
            return to_snapshot(notation)
        except TypeNotationError as exc:
            raise self.fail(f"{path}.{exc.path}" if exc.path else path, exc.message) from None

    def manifest(self, data: Any) -> Manifest:
        top = self.mapping(data, "", {"manifest_version", "job", "flink_version", "jar", "overlay", "operators",
                                           "kryo_classes"})
        if "manifest_version" not in top:
            raise self.fail("manifest_version", "missing (this format is version 1)")
        if top["manifest_version"] != MANIFEST_VERSION:
            raise self.fail("manifest_version", f"unsupported version {shown(top['manifest_version'])} "
                                                f"(expected {MANIFEST_VERSION})")
        job = top.get("job")
        if job is not None and not isinstance(job, str):
            raise self.fail("job", f"expected a string, got {shown(job)}")
        flink_version = top.get("flink_version")
        if flink_version is not None and (problem := flink_version_problem(flink_version)) is not None:
            raise self.fail("flink_version", problem)
        jar = self.text(top["jar"], "jar") if top.get("jar") is not None else None
        overlay = self.text(top["overlay"], "overlay") if top.get("overlay") is not None else None
        if overlay is not None and jar is None:
            raise self.fail("overlay", "an overlay completes a jar's schema: give the jar too (jar: ...)")
        operators: dict[str, OperatorSchema] = {}
        seen_ids: dict[str, str] = {}
        for label, body in self.mapping(top.get("operators"), "operators").items():
            op = self.operator(str(label), body, f"operators.{label}")
            if op.operator_id in seen_ids:
                raise self.fail(f"operators.{label}", f"same operator as operators.{seen_ids[op.operator_id]}")
            seen_ids[op.operator_id] = op.label
            operators[op.label] = op
        kryo = None if top.get("kryo_classes") is None else layouts_from_json(top["kryo_classes"], self.file)
        return Manifest(operators, job, jar=jar, overlay=overlay, flink_version=flink_version, kryo_classes=kryo)

    def operator(self, label: str, body: Any, path: str) -> OperatorSchema:
        spec = self.mapping(body, path, _OPERATOR_KEYS)
        if "id" in spec:
            if isinstance(spec["id"], int):
                raise self.fail(f"{path}.id", "quote the operator id (YAML reads an all-digit id as a number)")
            operator_id = self.text(spec["id"], f"{path}.id").lower()
            if not _HEX_ID.match(operator_id):
                raise self.fail(f"{path}.id", "expected 32 hex digits (an operator id)")
            uid = None
        else:
            ref = OperatorRef.parse(label)
            operator_id, uid = ref.operator_id, ref.uid
        max_parallelism = spec.get("max_parallelism")
        if max_parallelism is not None and (not isinstance(max_parallelism, int) or isinstance(max_parallelism, bool)
                                            or not 1 <= max_parallelism <= 32768):
            raise self.fail(f"{path}.max_parallelism", f"expected an integer from 1 to 32768, got "
                                                       f"{shown(max_parallelism)}")
        renamed_from = spec.get("renamed_from")
        if renamed_from is not None:
            renamed_from = self.text(renamed_from, f"{path}.renamed_from")
        dropped = spec.get("dropped_states") or []
        if not isinstance(dropped, list) or not all(isinstance(d, str) and d for d in dropped):
            raise self.fail(f"{path}.dropped_states", "expected a list of state names")
        op_key = self.type(spec["key"], f"{path}.key") if "key" in spec else None
        migration = spec.get("migration")
        if migration is not None:
            # Validated here, so that check and migrate accept and refuse the same manifests.
            from flinkstate.migration.spec import MigrationSpecError, parse_operator_migration

            try:
                parse_operator_migration(migration, f"{path}.migration", self.file)
            except MigrationSpecError as exc:
                raise ManifestError("", "", str(exc)) from None
        window = self.text(spec["window"], f"{path}.window") if spec.get("window") is not None else None
        op = OperatorSchema(label, operator_id, uid, op_key, {}, max_parallelism, renamed_from, list(dropped),
                            migration, window)
        if "operator_states" in spec:
            op.operator_states = parse_operator_states(self, spec["operator_states"], f"{path}.operator_states")
        for name, state in self.mapping(spec.get("states"), f"{path}.states").items():
            op.states[str(name)] = self.state(op, str(name), state, f"{path}.states.{name}")
        for name in dropped:
            if name in op.states:
                raise self.fail(f"{path}.dropped_states", f"{name!r} is both dropped and declared in states")
        if op.states and op.key is None:
            raise self.fail(f"{path}.key", "missing: the key type of the operator's keyed state")
        return op

    def state(self, op: OperatorSchema, name: str, body: Any, path: str) -> StateSchema:
        spec = self.mapping(body, path, _STATE_KEYS)
        kind = spec.get("kind")
        if kind not in KINDS:
            raise self.fail(f"{path}.kind", f"expected one of {', '.join(KINDS)}, got {shown(kind)}")
        if "key" in spec:
            key = self.type(spec["key"], f"{path}.key")
            if op.key is None:
                op.key = key
            elif to_notation(key) != to_notation(op.key):
                raise self.fail(f"{path}.key", f"{to_notation(key)} differs from the operator's key type "
                                               f"{to_notation(op.key)} (an operator has one key type)")
        if op.key is None:
            raise self.fail(f"{path}.key", "missing: declare the key type on the operator or the state")
        namespace = self.type(spec["namespace"], f"{path}.namespace") if "namespace" in spec \
            else VoidNamespaceSnapshot()
        if kind == TIMERS:
            if "value" in spec or "user_key" in spec:
                raise self.fail(path, "TIMERS state has no value or user_key, only key and namespace")
            value, user_key = None, None
        else:
            value = self.type(spec.get("value"), f"{path}.value")
            user_key = None
            if kind == "MAP":
                user_key = self.type(spec.get("user_key"), f"{path}.user_key")
            elif "user_key" in spec:
                raise self.fail(f"{path}.user_key", f"only MAP state has a user key, not {kind}")
        migration = spec.get("migration")
        if migration is not None and not isinstance(migration, Mapping):
            raise self.fail(f"{path}.migration", f"expected a mapping, got {shown(migration)}")
        if migration is not None:
            # Validated here, so that check and migrate accept and refuse the same manifests.
            from flinkstate.migration.spec import MigrationSpecError, parse_migration

            try:
                parse_migration(dict(migration), f"{path}.migration", self.file)
            except MigrationSpecError as exc:
                raise ManifestError("", "", str(exc)) from None
        renamed_from = spec.get("renamed_from")
        if renamed_from is not None:
            renamed_from = self.text(renamed_from, f"{path}.renamed_from")
        return StateSchema(name, kind, op.key, namespace, value, user_key, migration, renamed_from)


__all__ = ["KINDS", "MANIFEST_VERSION", "Manifest", "ManifestError", "OperatorSchema", "StateSchema",
           "load_manifest", "manifest_document", "manifest_from_document", "manifest_from_savepoint",
           "parse_manifest", "parse_type", "read_manifest_text"]
