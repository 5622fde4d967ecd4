"""One migration as a value: the inputs of ``flinkstate migrate`` (savepoint, manifests, output, options). The CLI
runs it in one process; the Spark job runs its units as Spark tasks, each rebuilding the same plan from the same
inputs (planning reads headers only), so both produce the same savepoint byte for byte."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from flinkstate.errors import FlinkStateError
from flinkstate.major_upgrade import output_metadata_version
from flinkstate.manifest import Manifest, load_manifest
from flinkstate.migration.code_policy import CodePolicy
from flinkstate.migration.manifest_targets import targets_from_manifest
from flinkstate.migration.plan import MigrationError, MigrationPlan, OperatorTarget, plan_migration
from flinkstate.migration.runner import MigrationReport, UnitRunner, migrate_savepoint, run_units_locally
from flinkstate.migration.verdict import blocking_finding, check, check_against_manifest
from flinkstate.savepoint import Savepoint
from flinkstate.storage.uri import is_within, location_parts, open_output, refuse_output_in_source, write_file

if TYPE_CHECKING:
    from flinkstate.migration.units import MapUnits


@dataclass(frozen=True)
class MigrationJob:
    savepoint: str
    #: The new version's manifest: a file, or one built in memory (a job jar's with its overlay:
    #: :func:`flinkstate.manifest_overlay.manifest_of_jar`).
    schema: str | Manifest
    output: str
    old_schema: str | None = None
    metadata_version: int | None = None
    compression: bool | None = None  # None: as the source
    report_dir: str | None = None
    #: Entries a ``dead-letter`` policy may skip before the migration fails (nothing is published then).
    max_dead_letters: int = 0
    #: Which migration functions may be imported. None: ``$FLINKSTATE_ALLOW_CODE`` when the job is built (resolved
    #: then, so that Spark tasks, which get the job pickled, follow the driver's policy, not their own environment).
    allow_code: CodePolicy | None = None
    #: The new job runs with allowNonRestoredState: an operator the manifest lacks is no refusal (it is copied).
    allow_non_restored_state: bool = False
    #: The migration's time (epoch milliseconds): the last access of values whose TTL is switched on, unless the
    #: manifest gives one. None: now, taken once when the job is built (Spark tasks get the driver's).
    now_ms: int | None = None
    #: The upgrade run this migration works for, as (its journal's URI, the orchestrator's run: dag_id, run_id):
    #: the journal must still be that run's, open, just before publishing, or nothing is published (a run the
    #: watchdog took over while the migration ran must not leave a savepoint that looks like its result).
    fence: tuple[str, dict[str, str]] | None = None
    #: The Flink version the new job runs on (``--target-flink``), when the manifest does not say it.
    target_flink: str | None = None

    def __post_init__(self) -> None:
        if self.allow_code is None:
            object.__setattr__(self, "allow_code", CodePolicy.resolve(None))
        if self.now_ms is None:
            object.__setattr__(self, "now_ms", int(time.time() * 1000))

    def manifests(self) -> tuple[Manifest, Manifest | None]:
        """The new and the old manifest, read once per job in a process: the gate, the plan and every unit work
        from the same reading (a small migration read them a dozen times: a third of its time). Not pickled: a
        Spark worker reads them itself, once."""
        loaded: tuple[Manifest, Manifest | None] | None = self.__dict__.get("_manifests")
        if loaded is None:
            new = (self.schema if isinstance(self.schema, Manifest) else load_manifest(self.schema)
                   ).with_target_flink(self.target_flink)
            loaded = (new, load_manifest(self.old_schema) if self.old_schema else None)
            object.__setattr__(self, "_manifests", loaded)
        return loaded

    def __getstate__(self) -> dict[str, object]:
        return {key: value for key, value in self.__dict__.items() if key != "_manifests"}

    def output_metadata_version(self, source: Savepoint) -> int | None:
        """``--metadata-version``, else the target's when Kryo data is carried from Flink 1.x to 2.x (None: the
        source's)."""
        manifest, _ = self.manifests()
        return self.metadata_version or output_metadata_version(source.metadata.version, manifest.flink_version)

    def targets(self, source: Savepoint) -> list[OperatorTarget]:
        manifest, old_manifest = self.manifests()
        return targets_from_manifest(source, manifest, old_manifest)

    def plan(self, source: Savepoint) -> MigrationPlan:
        """The plan every worker rebuilds: the same as :meth:`run` makes for the same inputs."""
        return plan_migration(source, self.targets(source), compressed=self.compression, code=self.allow_code,
                              now_ms=self.now_ms)

    def gate(self, source: Savepoint) -> None:
        """The check, before anything is written: ``migrate`` refuses what ``flinkstate check`` calls incompatible
        for the same inputs (its verdict is this job's plan, built by the same code), in one line naming the
        operator, the state and why."""
        manifest, old_manifest = self.manifests()
        report = check(source, manifest, previous=old_manifest,
                       allow_non_restored_state=self.allow_non_restored_state)
        blocked = blocking_finding(report)
        if blocked is None:
            return
        row, finding = blocked
        if finding is not None and finding.code == "MIGRATION_REFUSED":
            raise MigrationError(finding.message, row.operator, row.state)
        what = f"{finding.code}: {finding.message}" if finding is not None else row.verdict.name
        effect = "would misread the state" if finding is not None and finding.silent_misread \
            else "could not restore the migrated state"
        raise MigrationError(f"{source.location.uri}: operator {row.operator}"
                             f"{f', state {row.state}' if row.state else ''}: the new version {effect} "
                             f"({what}); flinkstate check says INCOMPATIBLE", row.operator, row.state)

    @property
    def report_path(self) -> str:
        """The report folder: ``--report``, or ``OUTPUT.report`` beside the output (a local path or an s3:// URI,
        kept as text because ``Path`` would fold ``s3://`` into ``s3:/``)."""
        return (self.report_dir or f"{self.output.rstrip('/')}.report").rstrip("/")

    def check_locations(self) -> None:
        """Refuses an output or report inside the source savepoint (the source is never written), or inside each
        other: one line, before anything is written."""
        for option, place in (("--output", self.output), ("--report", self.report_path)):
            refuse_output_in_source(place, self.savepoint, option)
        output, report = location_parts(self.output), location_parts(self.report_path)
        if is_within(report, output) or is_within(output, report):
            raise MigrationError(f"--report {self.report_path} and --output {self.output} must not contain each "
                                 f"other")
        if output[0] == "file":
            _check_local_folder(Path(*output[1:]).parent, f"--output {self.output}")
        if report[0] == "file":
            _check_local_folder(Path(*report[1:]), f"--report {self.report_path}")

    def run(self, run_units: UnitRunner = run_units_locally) -> MigrationReport:
        """Migrates, verifies (the new savepoint against the manifest), publishes, and writes the report."""
        self.check_locations()
        manifest, _ = self.manifests()
        source = Savepoint.open(self.savepoint)
        self.gate(source)
        report = migrate_savepoint(
            self.savepoint, self.targets(source), open_output(self.output),
            metadata_version=self.output_metadata_version(source), compressed=self.compression,
            extra_check=self._output_check(manifest), run_units=run_units,
            max_dead_letters=self.max_dead_letters, code=self.allow_code, now_ms=self.now_ms)
        self._write_report(report)
        return report


    def run_in_units(self, map_units: MapUnits | None = None, units: int | None = None) -> MigrationReport:
        """:meth:`run` with the work split by key-group ranges (:mod:`flinkstate.migration.units`): ``map_units``
        runs the units (default: one after the other here; the Spark job: as Spark tasks), about ``units`` of them
        (default: 3). The published savepoint is byte for byte what :meth:`run` publishes."""
        from flinkstate.migration.units import default_unit_count, map_locally, migrate_in_units

        self.check_locations()
        manifest, _ = self.manifests()
        source = Savepoint.open(self.savepoint)
        self.gate(source)
        report, _ = migrate_in_units(self, self.output, map_units or map_locally,
                                     units if units is not None else default_unit_count(1),
                                     metadata_version=self.output_metadata_version(source),
                                     max_dead_letters=self.max_dead_letters,
                                     extra_check=self._output_check(manifest))
        self._write_report(report)
        return report

    def _output_check(self, manifest: Manifest) -> Callable[[Savepoint], list[str]]:
        """The check of the staged output against the manifest: as is or reconfigured, or nothing is published."""
        def staged_check(staged: Savepoint) -> list[str]:
            problems = check_against_manifest(staged, manifest, self.allow_non_restored_state)
            if self.fence is not None:  # the last step before the publish
                from flinkstate.upgrades.journal import UpgradeJournal

                UpgradeJournal.held_by(self.fence[0], self.fence[1])
            return problems

        return staged_check

    def _write_report(self, report: MigrationReport) -> None:
        try:
            write_report(report, self.report_path)
        except (OSError, FlinkStateError) as exc:
            detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            raise MigrationError(f"the savepoint was published at {report.output}, but its report could not be "
                                 f"written to {self.report_path}: {detail}") from None


def _check_local_folder(folder: Path, label: str) -> None:
    """One line, before anything is written, when ``folder`` cannot become a directory we may write: it or an
    ancestor is a file, or the nearest existing ancestor is not writable. ``label`` names the option and value."""
    existing = folder
    while not existing.exists():
        if existing.is_symlink():
            raise MigrationError(f"{label}: {existing} is a dangling symbolic link")
        existing = existing.parent
    if not existing.is_dir():
        raise MigrationError(f"{label}: {existing} is a file, not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise MigrationError(f"{label}: {existing} is not writable (permission denied)")


def write_report(report: MigrationReport, directory: str) -> None:
    """``report.json`` (counts, verification, timings) and ``dead-letters.jsonl`` (one skipped entry per line) in
    ``directory``, a local folder or an s3:// prefix."""
    write_file(f"{directory}/report.json", (json.dumps(report.to_json(), indent=2) + "\n").encode())
    write_file(f"{directory}/dead-letters.jsonl", "".join(json.dumps(r) + "\n" for r in report.dead_letters).encode())
