"""The new version's manifest from its job jar, completed by an overlay: what ``check --jar`` and ``migrate --jar``
judge and run, and what the upgrade DAG checks and migrates with (:func:`schema_of_jar`).

The jar says what Flink will see (:mod:`flinkstate.engine.jar_schema`): the operators, each key type, every state
its operators register when they open, each serializer snapshot. It cannot say what a person decides: how values
convert (``migration:`` blocks: conversions, defaults, functions, the key's conversion), what a state or operator was
called before (``renamed_from``), which old states go (``dropped_states``), the names of Row fields (savepoints and
snapshots store none), ``max_parallelism``. An **overlay** is a manifest file (same format, loader and limits) that
declares those, and may leave every type, kind and key out::

    manifest_version: 1
    operators:
      stats:
        states:
          stats:
            migration: {fields: {label: {default: migrated}}}

What an overlay does declare besides must be what the jar registers: an operator the jar has no state for, a state
it does not register, a state it drops that the jar registers, a kind, a key or a type (compared as the serializer
snapshot bytes Flink writes; Row field names are the overlay's to give) that differs, is an error before anything
runs, one line naming the overlay's path, the operator, the state, the field and both sides. A hand-written
manifest of the version is therefore a valid overlay when, and only when, it describes the jar. What the overlay
leaves out is the jar's, as ``flinkstate schema --jar`` writes it, and the result is parsed and validated by the
manifest's own parser, so ``check`` and ``migrate`` accept and refuse the same overlays.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from flinkstate.engine.jar_schema import JarSchema, inspect_jar
from flinkstate.errors import printable
from flinkstate.identity import OperatorRef
from flinkstate.major_upgrade import flink_major, flink_version_problem
from flinkstate.manifest import (
    Manifest,
    ManifestError,
    OperatorSchema,
    StateSchema,
    manifest_document,
    manifest_from_document,
    parse_type,
    read_manifest_text,
)
from flinkstate.serializers.base import TypeSerializerSnapshot
from flinkstate.serializers.namespaces import VoidNamespaceSnapshot
from flinkstate.serializers.registry import snapshot_bytes
from flinkstate.snapshotnotation import to_notation
from flinkstate.typenotation import TypeNotationError

_HEX_ID = re.compile(r"^[0-9a-fA-F]{32}$")
#: The type attributes of a state, in the order a contradiction is looked for.
_STATE_TYPES = ("namespace", "user_key", "value")


class OverlayContradiction(ManifestError):
    """The overlay declares something the jar contradicts: ``overlay: path: contradicts the jar JAR: ...``."""


def manifest_of_jar(schema: JarSchema, overlay: str | os.PathLike[str] | None = None) -> Manifest:
    """The new version's manifest: the jar's (``schema.manifest()``), completed by ``overlay`` when given."""
    manifest = schema.manifest()
    return manifest if overlay is None else apply_overlay(manifest, overlay)


def schema_of_jar(jar: str | os.PathLike[str], overlay: str | os.PathLike[str] | None = None, *,
                  entry_class: str | None = None, program_args: Sequence[str] = (), parallelism: int = 1,
                  flink_home: str | os.PathLike[str] | None = None) -> Manifest:
    """A job version's manifest from its jar as ``flink run JAR ARGS`` builds it (:func:`inspect_jar`: its ``main()``
    and operators' ``open()`` in a JVM of its own, on ``flink_home``'s classes, default the default distribution;
    cached by the jar's hash), completed by ``overlay`` when given: what the upgrade DAG's ``preflight_checks`` and
    the Spark jobs' ``--jar`` judge."""
    schema = inspect_jar(jar, entry_class=entry_class, program_args=program_args, parallelism=parallelism,
                         flink_home=flink_home)
    return manifest_of_jar(schema, overlay)


def apply_overlay(jar: Manifest, overlay: str | os.PathLike[str]) -> Manifest:
    """``jar`` (a jar's manifest) completed by the overlay file ``overlay``; its path is the overlay's, whose
    declarations (renames, migrations) later errors name."""
    file = os.fspath(overlay)
    return parse_overlay(jar, read_manifest_text(file), file)


def parse_overlay(jar: Manifest, text: str, file: str = "<overlay>") -> Manifest:
    """:func:`apply_overlay` of an overlay's text."""
    document = _Completion(jar, file).document(manifest_document(text, file))
    manifest = manifest_from_document(document, file)
    manifest.path = file
    manifest.jar = jar.jar or jar.path
    manifest.overlay = file
    if manifest.kryo_classes is None:  # the jar's Kryo layouts, unless the overlay declares its own
        manifest.kryo_classes = jar.kryo_classes
    return manifest


class _Completion:
    """The overlay's YAML document with everything it leaves out taken from the jar's manifest, each declaration
    compared with the jar's. A part of the document that is not of the manifest's shape is left as it is, for the
    manifest's parser to name."""

    def __init__(self, jar: Manifest, file: str) -> None:
        self.jar = jar
        self.file = file
        self.jar_name = jar.jar or jar.path or "<jar>"

    def contradiction(self, path: str, message: str) -> OverlayContradiction:
        return OverlayContradiction(self.file, path, f"contradicts the jar {self.jar_name}: {message}")

    def document(self, data: Any) -> Any:
        if not isinstance(data, Mapping) or not isinstance(data.get("operators") or {}, Mapping):
            return data
        completed = dict(data)
        operators: dict[Any, Any] = {}
        declared: set[str] = set()
        for label, body in (data.get("operators") or {}).items():
            jar_op = self.jar_operator(str(label), body)
            if jar_op is None:
                operators[label] = body
                continue
            declared.add(jar_op.operator_id)
            operators[label] = self.operator(str(label), body, jar_op)
        for label, jar_op in self.jar.operators.items():
            if jar_op.operator_id not in declared:
                operators[label] = jar_op.to_dict()
        completed["operators"] = operators
        if "job" not in completed and self.jar.job:
            completed["job"] = self.jar.job
        given = data.get("flink_version")
        if self.jar.flink_version is not None:
            if isinstance(given, str) and flink_version_problem(given) is None and \
                    flink_major(given) != flink_major(self.jar.flink_version):
                raise self.contradiction("flink_version", f"the overlay says Flink {printable(given)}, the jar is "
                                                          f"built for Flink {self.jar.flink_version}")
            completed.setdefault("flink_version", self.jar.flink_version)
        return completed

    def jar_operator(self, label: str, body: Any) -> OperatorSchema | None:
        """The jar's operator the overlay's ``label`` names (by ``id:``, or the uid's hash, as the manifest does);
        None when the entry is malformed (the parser says how)."""
        given = body.get("id") if isinstance(body, Mapping) else None
        if given is not None:
            if not isinstance(given, str) or not _HEX_ID.match(given):
                return None
            operator_id = given.lower()
        else:
            operator_id = OperatorRef.parse(label).operator_id
        found = self.jar.find(operator_id)
        if found is None:
            known = ", ".join(printable(name) for name in self.jar.operators) or "none"
            how = f"id {operator_id}" if given is not None else f"uid {printable(label)} (id {operator_id})"
            raise self.contradiction(f"operators.{label}", f"operator {printable(label)}: the overlay declares it, "
                                                            f"but the jar has no operator with state of {how} (its "
                                                            f"operators with state: {known})")
        return found

    def operator(self, label: str, body: Any, jar_op: OperatorSchema) -> Any:
        if body is not None and not isinstance(body, Mapping):
            return body
        spec = dict(body or {})
        path = f"operators.{label}"
        where = f"operator {printable(label)}"
        if "key" in spec:
            if jar_op.key is None:
                raise self.contradiction(f"{path}.key", f"{where}, key: the overlay says {_show(spec['key'])}, the "
                                                        f"jar's operator has no keyed state")
            self.same_type(spec["key"], jar_op.key, f"{path}.key", f"{where}, key")
        elif jar_op.key is not None:
            spec["key"] = to_notation(jar_op.key)
        self.operator_states(spec, path, where, jar_op)
        dropped = spec.get("dropped_states")
        for name in dropped if isinstance(dropped, list) else []:
            if isinstance(name, str) and name in jar_op.states:
                raise self.contradiction(f"{path}.dropped_states", f"{where}, state {printable(name)}: the overlay "
                                                                   f"drops it, but the jar registers it "
                                                                   f"({jar_op.states[name].kind})")
        states = spec.get("states")
        if states is not None and not isinstance(states, Mapping):
            return spec
        completed: dict[Any, Any] = {}
        for name, state in (states or {}).items():
            jar_state = jar_op.states.get(str(name))
            if jar_state is None:
                raise self.contradiction(f"{path}.states.{name}", self.unregistered(where, str(name), jar_op,
                                                                                    states or {}))
            completed[name] = self.state(f"{path}.states.{name}", f"{where}, state {printable(str(name))}", state,
                                         jar_state)
        for name, jar_state in jar_op.states.items():
            if name not in completed:
                completed[name] = jar_state.to_dict()
        spec["states"] = completed
        return spec

    def operator_states(self, spec: dict[Any, Any], path: str, where: str, jar_op: OperatorSchema) -> None:
        """The overlay's operator states (flinkstate.manifest_operator_states) are the jar's, mode and types; those
        it leaves out are completed from the jar."""
        declared = spec.get("operator_states")
        if declared is not None and not isinstance(declared, Mapping):
            return  # the parser names it
        registered = jar_op.operator_states or {}
        completed: dict[Any, Any] = {}
        for name, body in (declared or {}).items():
            at, what = f"{path}.operator_states.{name}", f"{where}, operator state {printable(str(name))}"
            jar_state = registered.get(str(name))
            if jar_state is None:
                raise self.contradiction(at, f"{what}: the overlay declares it, but the jar does not register it when "
                                             f"the operator initializes (it registers: "
                                             f"{', '.join(printable(n) for n in sorted(registered)) or 'none'})")
            if not isinstance(body, Mapping):
                completed[name] = body
                continue
            if "mode" in body and body["mode"] != jar_state.mode:
                raise self.contradiction(f"{at}.mode", f"{what}, mode: the overlay says {_show(str(body['mode']))}, "
                                                       f"the jar registers {jar_state.mode}")
            for attribute in ("user_key", "value"):
                jar_type: TypeSerializerSnapshot | None = getattr(jar_state, attribute)
                if attribute in body and jar_type is not None:
                    self.same_type(body[attribute], jar_type, f"{at}.{attribute}", f"{what}, {attribute}")
            completed[name] = {**jar_state.to_dict(), **body}
        for name, jar_state in registered.items():
            completed.setdefault(name, jar_state.to_dict())
        if completed:
            spec["operator_states"] = completed

    def unregistered(self, where: str, name: str, jar_op: OperatorSchema, declared: Mapping[Any, Any]) -> str:
        """The contradiction of a state the overlay declares and the jar does not register."""
        registered = ", ".join(printable(n) for n in sorted(jar_op.states)) or "none"
        message = (f"{where}, state {printable(name)}: the overlay declares it, but the jar does not register it when "
                   f"the operator opens (it registers: {registered})")
        new_names = [n for n in jar_op.states if n not in declared]
        if new_names:  # the likeliest story: the jar renamed it
            message += (f"; if the jar renamed it, declare the new name with renamed_from: {printable(name)} "
                        f"(e.g. {printable(new_names[0])})")
        return message

    def state(self, path: str, where: str, body: Any, jar_state: StateSchema) -> Any:
        if body is not None and not isinstance(body, Mapping):
            return body
        spec = dict(body or {})
        if "kind" in spec:
            if spec["kind"] != jar_state.kind:
                raise self.contradiction(f"{path}.kind", f"{where}, kind: the overlay says {_show(spec['kind'])}, "
                                                         f"the jar registers {jar_state.kind}")
        else:
            spec["kind"] = jar_state.kind
        if "key" in spec:
            self.same_type(spec["key"], jar_state.key, f"{path}.key", f"{where}, key")
        for attribute in _STATE_TYPES:
            jar_type: TypeSerializerSnapshot | None = getattr(jar_state, attribute)
            if attribute in spec:
                if jar_type is not None:  # else the kind has no such type: the parser refuses it
                    self.same_type(spec[attribute], jar_type, f"{path}.{attribute}", f"{where}, {attribute}")
            elif jar_type is not None and not isinstance(jar_type, VoidNamespaceSnapshot):
                spec[attribute] = to_notation(jar_type)
        return spec

    def same_type(self, notation: Any, jar_type: TypeSerializerSnapshot, path: str, where: str) -> None:
        """The overlay's type at ``path`` is the jar's: the same serializer snapshot bytes (Row field names, which
        are not written, may differ)."""
        declared = parse_type(notation, self.file, path)
        if snapshot_bytes(declared) == snapshot_bytes(jar_type):
            return
        overlay_side, jar_side = _notation(declared), _notation(jar_type)
        found = _difference(overlay_side, jar_side, [])
        if found is None:
            raise self.contradiction(path, f"{where}: the overlay's {_show(overlay_side)} is another serializer "
                                           f"snapshot than the jar's (the same notation, other bytes: copy the type "
                                           f"from 'flinkstate schema --jar')")
        fields, overlay_part, jar_part = found
        at = f", field {'.'.join(fields)}" if fields else ""
        overlay_says = "does not have it" if overlay_part is _MISSING else \
            f"has it ({_show(overlay_part)})" if jar_part is _MISSING else f"says {_show(overlay_part)}"
        jar_says = "does not" if jar_part is _MISSING else f"registers {_show(jar_part)}"
        raise self.contradiction(path, f"{where}{at}: the overlay {overlay_says}, the jar {jar_says}")


_MISSING = object()


def _notation(snapshot: TypeSerializerSnapshot) -> Any:
    try:
        return to_notation(snapshot)
    except TypeNotationError:
        return snapshot.type_name()


def _difference(overlay: Any, jar: Any, fields: list[str]) -> tuple[list[str], Any, Any] | None:
    """The first place where two notations differ: (the field path, the overlay's part, the jar's part; _MISSING
    where one side lacks it). POJO fields are matched by name, Row fields by position (their names are the
    overlay's), everything else as it is."""
    if isinstance(overlay, Mapping) and isinstance(jar, Mapping):
        if isinstance(overlay.get("row"), Mapping) and isinstance(jar.get("row"), Mapping):
            found = _row_difference(overlay["row"], jar["row"], fields)
            if found is not None:
                return found
        elif isinstance(overlay.get("fields"), Mapping) and isinstance(jar.get("fields"), Mapping):
            for name in sorted(set(overlay["fields"]) | set(jar["fields"])):
                found = _difference(overlay["fields"].get(name, _MISSING), jar["fields"].get(name, _MISSING),
                                     [*fields, str(name)])
                if found is not None:
                    return found
        for key in [k for k in (*overlay, *(k for k in jar if k not in overlay)) if k not in ("row", "fields")]:
            if overlay.get(key, _MISSING) != jar.get(key, _MISSING):
                return _difference(overlay.get(key, _MISSING), jar.get(key, _MISSING), fields) or \
                    (fields, overlay.get(key, _MISSING), jar.get(key, _MISSING))
        return None
    if isinstance(overlay, list) and isinstance(jar, list) and len(overlay) == len(jar):
        for index, (o, j) in enumerate(zip(overlay, jar, strict=True)):
            found = _difference(o, j, [*fields, f"[{index}]"] if fields else [f"[{index}]"])
            if found is not None:
                return found
        return None
    return None if overlay == jar else (fields, overlay, jar)


def _row_difference(overlay: Mapping[Any, Any], jar: Mapping[Any, Any], fields: list[str]
                    ) -> tuple[list[str], Any, Any] | None:
    overlay_fields, jar_fields = list(overlay.items()), list(jar.items())
    for index in range(max(len(overlay_fields), len(jar_fields))):
        name = str(overlay_fields[index][0] if index < len(overlay_fields) else jar_fields[index][0])
        found = _difference(overlay_fields[index][1] if index < len(overlay_fields) else _MISSING,
                            jar_fields[index][1] if index < len(jar_fields) else _MISSING, [*fields, name])
        if found is not None:
            return found
    return None


def _show(notation: Any) -> str:
    """A notation on one line, bounded."""
    text = notation if isinstance(notation, str) else \
        yaml.safe_dump(notation, default_flow_style=True, width=1 << 16, sort_keys=False).strip()
    text = printable(text)
    return text if len(text) <= 100 else text[:97] + "..."


__all__ = ["OverlayContradiction", "apply_overlay", "manifest_of_jar", "parse_overlay"]
