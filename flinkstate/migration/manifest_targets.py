"""From schema manifests to migration targets, the planner the compatibility check calls, and the check of a
migrated savepoint against the new manifest."""

from __future__ import annotations

from flinkstate.format.keyed_header import TIMERS, StateMetaInfo
from flinkstate.manifest import Manifest, OperatorSchema, StateSchema
from flinkstate.migration.plan import MigrationError, OperatorTarget, StateTarget, plan_value_migration
from flinkstate.migration.spec import parse_migration
from flinkstate.migration.transforms import RowNames
from flinkstate.savepoint import Savepoint
from flinkstate.serializers.base import TypeSerializerSnapshot
from flinkstate.serializers.registry import snapshot_bytes
from flinkstate.serializers.row import RowSnapshot


def row_names(old: TypeSerializerSnapshot | None, new: TypeSerializerSnapshot | None, path: str = "",
              out: RowNames | None = None) -> RowNames:
    """Row field names by path, from the old and the new manifests' types (savepoints do not store them)."""
    out = {} if out is None else out
    if old is None or new is None:
        return out
    if isinstance(old, RowSnapshot) and isinstance(new, RowSnapshot):
        old_names, new_names = getattr(old, "field_names", None), getattr(new, "field_names", None)
        if old_names and new_names:
            out[path] = (list(old_names), list(new_names))
            old_by_name = dict(zip(old_names, old.nested, strict=True))
            for name, nested in zip(new_names, new.nested, strict=True):
                row_names(old_by_name.get(name), nested, f"{path}.{name}" if path else name, out)
        return out
    old_fields = {f.name: f.snapshot for f in getattr(old, "fields", [])}
    for f in getattr(new, "fields", []):  # POJO fields
        row_names(old_fields.get(f.name), f.snapshot, f"{path}.{f.name}" if path else f.name, out)
    if not hasattr(new, "fields") and len(old.nested) == len(new.nested):
        for i, (o, n) in enumerate(zip(old.nested, new.nested, strict=True)):
            row_names(o, n, f"{path}.[{i}]" if path else f"[{i}]", out)
    return out


def _old_state(old_manifest: Manifest | None, op: OperatorSchema, old_name: str) -> StateSchema | None:
    if old_manifest is None:
        return None
    old_op = old_manifest.operators.get(op.renamed_from or op.label) or old_manifest.find(op.operator_id)
    return old_op.states.get(old_name) if old_op is not None else None


def targets_from_manifest(source: Savepoint, manifest: Manifest, old_manifest: Manifest | None = None
                          ) -> list[OperatorTarget]:
    """One target per manifest operator found in the savepoint (by ``renamed_from`` or its own uid/id). States the
    savepoint does not have are new: Flink creates them empty."""
    file = manifest.path or "<manifest>"
    targets = []
    for label, op in manifest.operators.items():
        try:
            source_op = source.operator(op.renamed_from or op.uid or op.operator_id)
        except Exception:
            if op.renamed_from:
                raise MigrationError(f"{file}: operators.{label}.renamed_from: the savepoint has no operator "
                                     f"{op.renamed_from!r}") from None
            continue
        header = source.keyed_header(source_op)
        existing = {s.name for s in header.states} if header is not None else set()
        target = OperatorTarget(op.uid or op.operator_id, op.renamed_from, [], list(op.dropped_states))
        for name, state in op.states.items():
            old_name = state.renamed_from or name
            if old_name not in existing:
                if state.renamed_from:
                    raise MigrationError(f"{file}: operators.{label}.states.{name}.renamed_from: the savepoint has "
                                         f"no state {old_name!r}")
                continue
            migration = parse_migration(state.migration, f"operators.{label}.states.{name}.migration", file)
            old_schema = _old_state(old_manifest, op, old_name)
            names = row_names(old_schema.value if old_schema else None, state.value)
            target.states.append(StateTarget(name, None if state.kind == TIMERS else state.value, state.user_key,
                                             state.key, migration, state.renamed_from, names))
        targets.append(target)
    if not targets and manifest.operators:
        raise MigrationError(f"{file}: no operator of the manifest ({', '.join(sorted(manifest.operators)[:5])}) is "
                             f"in the savepoint (by uid or operator id): is it the manifest of another job?")
    return targets


def plan_state_migration(old_state_info: StateMetaInfo, new_state_schema: StateSchema) -> tuple[bool, str]:
    """The planner the compatibility check calls for a state Flink cannot restore as it is: whether the state's
    ``migration:`` block (with the built-in rules) turns the savepoint's values into the new type, and why."""
    if new_state_schema.kind == TIMERS:
        return True, "timers are rewritten with the operator's key"
    old_value = old_state_info.value_serializer
    if old_value is None or new_state_schema.value is None:
        return False, "the state has no value serializer"
    try:
        migration = parse_migration(new_state_schema.migration, f"states.{new_state_schema.name}.migration")
    except Exception as exc:
        return False, str(exc)
    return plan_value_migration(old_value, new_state_schema.value, migration)


def check_against_manifest(staged: Savepoint, manifest: Manifest) -> list[str]:
    """Every keyed state of the migrated savepoint that the manifest declares carries exactly the serializer
    snapshots the new job registers (what makes Flink restore it as-is). Raises MigrationError otherwise, naming
    the staged state file and the first byte where the snapshots differ (two snapshots can differ in bytes Flink
    ignores, an outer snapshot version say, and still print alike)."""
    checked = []
    for label, op in manifest.operators.items():
        try:
            written = staged.operator(op.operator_id)
        except Exception:
            continue
        header = staged.keyed_header(written)
        if header is None:
            continue
        where = staged.keyed_streams(written)[0][1].source.path
        if op.key is not None and header.key_serializer is not None and \
                snapshot_bytes(op.key) != snapshot_bytes(header.key_serializer):
            raise MigrationError(f"{where}: check: operator {label}: the written key serializer "
                                 f"{_difference(snapshot_bytes(header.key_serializer), snapshot_bytes(op.key))}"
                                 f" ({header.key_serializer.type_name()}, the manifest's {op.key.type_name()})")
        for meta in header.states:
            schema = op.states.get(meta.name)
            if schema is None:
                continue
            want = snapshot_bytes(schema.state_serializer())
            got = meta.serializer("VALUE_SERIALIZER")
            if got is None or snapshot_bytes(got) != want:
                difference = _difference(snapshot_bytes(got), want) if got is not None else "is missing"
                raise MigrationError(f"{where}: check: operator {label}, state {meta.name}: the written snapshot "
                                     f"{difference} ({got.type_name() if got else '?'}, the manifest's "
                                     f"{schema.state_serializer().type_name()}): not COMPATIBLE_AS_IS")
            checked.append(f"{label}/{meta.name}: COMPATIBLE_AS_IS (snapshot identical to the manifest's)")
    return checked


def _difference(got: bytes, want: bytes) -> str:
    """Where two snapshots' bytes first differ, in words."""
    at = next((i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b), min(len(got), len(want)))
    return f"differs from the manifest's at byte {at} of {len(got)} (the manifest's has {len(want)})"
