"""From schema manifests to migration targets (the one input of the plan that ``check`` judges and ``migrate`` runs),
and the check of a migrated savepoint against the new manifest."""

from __future__ import annotations

from flinkstate.format.keyed_header import TIMERS
from flinkstate.major_upgrade import carries_kryo
from flinkstate.manifest import Manifest, OperatorSchema, StateSchema
from flinkstate.migration.plan import MigrationError, OperatorTarget, StateTarget
from flinkstate.migration.spec import parse_migration, parse_operator_migration
from flinkstate.migration.transforms import RowNames
from flinkstate.savepoint import Savepoint
from flinkstate.serializers.base import TypeSerializerSnapshot
from flinkstate.serializers.kryo import set_kryo_layouts, set_kryo_version
from flinkstate.serializers.kryo_data import KRYO5
from flinkstate.serializers.kryo_layout import KryoCarryLayouts
from flinkstate.serializers.row import RowSnapshot


def row_names(old: TypeSerializerSnapshot | None, new: TypeSerializerSnapshot | None, path: str = "",
              out: RowNames | None = None) -> RowNames:
    """Row field names by path, from the old and the new manifests' types (savepoints do not store them)."""
    out = {} if out is None else out
    if old is None or new is None:
        return out
    if isinstance(old, RowSnapshot) and isinstance(new, RowSnapshot):
        names = new.matched_names(old)  # None: by position (see RowSnapshot.matched_names)
        if names is not None:
            old_names, new_names = names
            out[path] = (old_names, new_names)
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


def carry_layouts(manifest: Manifest, old_manifest: Manifest | None) -> KryoCarryLayouts | None:
    """The user-class layouts a Flink 1.x -> 2.x migration carries Kryo records with: the old version's schema's
    (``--old-schema``: its jar on Flink 1.x) and the new one's; without the old, the new version's stand for them
    (``assumed``: the savepoint's classes are taken to be the same classes compiled against both Flinks)."""
    if not manifest.kryo_classes:
        return None
    old = old_manifest.kryo_classes if old_manifest is not None and old_manifest.kryo_classes else None
    return KryoCarryLayouts(old or manifest.kryo_classes, manifest.kryo_classes, old is None)


def targets_from_manifest(source: Savepoint, manifest: Manifest, old_manifest: Manifest | None = None
                          ) -> list[OperatorTarget]:
    """One target per manifest operator found in the savepoint (by ``renamed_from`` or its own uid/id). States the
    savepoint does not have are new: Flink creates them empty. A Flink 1.x savepoint for a 2.x manifest: the new
    version's Kryo serializers read with Kryo 5, so its Kryo data is carried (re-encoded) by the plan."""
    file = manifest.path or "<manifest>"
    carry = carries_kryo(source.metadata.version, manifest.flink_version)
    layouts = carry_layouts(manifest, old_manifest) if carry else None
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
        # A dropped operator state is Flink's to keep (flinkstate.operator_state_rules): no keyed state to drop.
        dropped = [n for n in op.dropped_states if n in existing or n not in source.operator_state_modes(source_op)]
        target = OperatorTarget(op.uid or op.operator_id, op.renamed_from, [], dropped, op.key,
                                parse_operator_migration(op.migration, f"operators.{label}.migration", file),
                                op.max_parallelism, carry_kryo=carry)
        for name, state in op.states.items():
            old_name = state.renamed_from or name
            if old_name not in existing:
                if state.renamed_from:
                    raise MigrationError(f"{file}: operators.{label}.states.{name}.renamed_from: the savepoint has "
                                         f"no state {old_name!r}")
                continue
            migration = parse_migration(state.migration, f"operators.{label}.states.{name}.migration", file)
            if carry:
                set_kryo_version([state.value, state.user_key], KRYO5)
                if layouts is not None:  # the plan gives them to the savepoint's serializers too (plan.py)
                    set_kryo_layouts([state.value, state.user_key], layouts)
            old_schema = _old_state(old_manifest, op, old_name)
            names = row_names(old_schema.value if old_schema else None, state.value)
            target.states.append(StateTarget(name, None if state.kind == TIMERS else state.value, state.user_key,
                                             state.key, migration, state.renamed_from, names))
        targets.append(target)
    if not targets and manifest.operators:
        raise MigrationError(f"{file}: no operator of the manifest ({', '.join(sorted(manifest.operators)[:5])}) is "
                             f"in the savepoint (by uid or operator id): is it the manifest of another job?")
    return targets
