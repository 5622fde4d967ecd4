"""State migration: the ``migration:`` spec, value transforms, the planner and the per-stream migrator."""

from flinkstate.migration.engine import (
    DROP,
    MigrationError,
    MigrationPlan,
    MigrationReport,
    OperatorTarget,
    StateTarget,
    SubtaskResult,
    assemble_metadata,
    migrate_savepoint,
    migrate_subtask,
    plan_migration,
    plan_value_migration,
    verify_output,
)
from flinkstate.migration.spec import FieldRule, MigrationSpecError, StateMigration, parse_migration
from flinkstate.migration.transforms import ConversionError, MigrationPlanError, build_transform

__all__ = [
    "DROP", "ConversionError", "FieldRule", "MigrationError", "MigrationPlan", "MigrationPlanError",
    "MigrationReport", "MigrationSpecError", "OperatorTarget", "StateMigration", "StateTarget", "SubtaskResult",
    "assemble_metadata", "build_transform", "migrate_savepoint", "migrate_subtask", "parse_migration",
    "plan_migration", "plan_value_migration", "verify_output",
]
