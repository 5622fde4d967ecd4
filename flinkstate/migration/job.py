"""One migration as a value: the inputs of ``flinkstate migrate`` (savepoint, manifests, output, options). The CLI
runs it in one process; the Spark job runs its units as Spark tasks, each rebuilding the same plan from the same
inputs (planning reads headers only), so both produce the same savepoint byte for byte."""

from __future__ import annotations

import json
from dataclasses import dataclass

from flinkstate.manifest import Manifest, load_manifest
from flinkstate.migration.engine import (
    MigrationPlan,
    MigrationReport,
    OperatorTarget,
    UnitRunner,
    migrate_savepoint,
    plan_migration,
    run_units_locally,
)
from flinkstate.migration.manifest_targets import check_against_manifest, targets_from_manifest
from flinkstate.savepoint import Savepoint
from flinkstate.storage import write_file
from flinkstate.writer import open_output


@dataclass(frozen=True)
class MigrationJob:
    savepoint: str
    schema: str
    output: str
    old_schema: str | None = None
    metadata_version: int | None = None
    compression: bool | None = None  # None: as the source
    report_dir: str | None = None
    #: Entries a ``dead-letter`` policy may skip before the migration fails (nothing is published then).
    max_dead_letters: int = 0

    def manifests(self) -> tuple[Manifest, Manifest | None]:
        return load_manifest(self.schema), load_manifest(self.old_schema) if self.old_schema else None

    def targets(self, source: Savepoint) -> list[OperatorTarget]:
        manifest, old_manifest = self.manifests()
        return targets_from_manifest(source, manifest, old_manifest)

    def plan(self, source: Savepoint) -> MigrationPlan:
        """The plan every worker rebuilds: the same as :meth:`run` makes for the same inputs."""
        return plan_migration(source, self.targets(source), compressed=self.compression)

    @property
    def report_path(self) -> str:
        """The report folder: ``--report``, or ``OUTPUT.report`` beside the output (a local path or an s3:// URI,
        kept as text because ``Path`` would fold ``s3://`` into ``s3:/``)."""
        return (self.report_dir or f"{self.output.rstrip('/')}.report").rstrip("/")

    def run(self, run_units: UnitRunner = run_units_locally) -> MigrationReport:
        """Migrates, verifies (the new savepoint against the manifest), publishes, and writes the report."""
        manifest, _ = self.manifests()
        report = migrate_savepoint(
            self.savepoint, self.targets(Savepoint.open(self.savepoint)), open_output(self.output),
            metadata_version=self.metadata_version, compressed=self.compression,
            extra_check=lambda staged: check_against_manifest(staged, manifest), run_units=run_units,
            max_dead_letters=self.max_dead_letters)
        write_report(report, self.report_path)
        return report


def write_report(report: MigrationReport, directory: str) -> None:
    """``report.json`` (counts, verification, timings) and ``dead-letters.jsonl`` (one skipped entry per line) in
    ``directory``, a local folder or an s3:// prefix."""
    write_file(f"{directory}/report.json", (json.dumps(report.to_json(), indent=2) + "\n").encode())
    write_file(f"{directory}/dead-letters.jsonl", "".join(json.dumps(r) + "\n" for r in report.dead_letters).encode())
