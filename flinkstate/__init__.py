"""flinkstate: read, check and migrate Apache Flink savepoints from Python, and drive a local Flink.

Pure Python: this package imports neither Airflow nor Spark, so that both can build on it. Everything a program
needs is importable from here (the CLI, the Spark jobs and the Airflow plugin use nothing deeper)::

    import flinkstate

    sp = flinkstate.open_savepoint("/savepoints/savepoint-1a2b3c")       # a directory or s3://bucket/prefix
    for op in sp.operators:                                              # OperatorState: uid, id, parallelism
        for state in sp.keyed_states(op):                                # KeyedStateInfo: name, kind, types
            for key, namespace, *value in sp.iter_entries(op, state.name):
                ...
    manifest = flinkstate.manifest_from_savepoint(sp)                    # the schema manifest (YAML: .dump())
    report = flinkstate.check(sp, "new-version.yaml")                    # Report: .outcome, .render_markdown()
    result = flinkstate.MigrationJob(savepoint=..., schema="new-version.yaml", output="/savepoints/migrated").run()

Crash-safe upgrades of a running job (what the Airflow DAGs and ``flinkstate upgrade`` build on): the upgrade journal
(:class:`UpgradeJournal`, its :class:`Phase` and :class:`Outcome`), the :class:`DeploymentRegistry` (what runs, as
:class:`JobVersion`), and recovery of a run that died (:func:`recover`, :func:`restore_old`, :func:`sweep`).

A job's own serializer snapshot classes (Flink writes their bytes without a length, so an unknown one stops the
reader) are read by plugins: a package's entry point in the group ``flinkstate.serializers`` names a module that
subclasses :class:`TypeSerializerSnapshot` (reading the payload with a :class:`Reader`, writing it with a
:class:`Writer`, delegating records to built-in snapshots from :func:`type_snapshot`) and registers it with
:func:`register_serializer_snapshot`.

Every error is a :class:`FlinkStateError` with a one-line message naming the file, operator and state.
"""

from __future__ import annotations

__version__ = "0.1.0"

from flinkstate.audit import Audit, Exposure, audit_savepoint
from flinkstate.binary import Reader, Writer
from flinkstate.bounded_yaml import YAMLRefused, load_yaml
from flinkstate.compatibility import Compatibility, Finding, Verdict
from flinkstate.engine.flink_homes import flink_home_for_version
from flinkstate.engine.jar_schema import (
    DEFAULT_MAX_HEAP,
    DEFAULT_TIMEOUT_SECONDS,
    JarSchema,
    TrialRestore,
    UnregisteredState,
    inspect_jar,
    trial_restore,
    unregistered_states,
)
from flinkstate.engine.local import LocalFlinkCluster
from flinkstate.engine.rest import (
    FlinkJobFailed,
    FlinkRestClient,
    FlinkRestError,
    FlinkTimeout,
    FlinkUnreachable,
    SavepointFailed,
    client_for,
)
from flinkstate.errors import EnvironmentProblem, FlinkStateError, WriteError, os_error_line, printable
from flinkstate.format.metadata import SUPPORTED_VERSIONS, OperatorState
from flinkstate.format.operator_state import SOURCE_SPLITS_STATE, OperatorStateElement, source_split
from flinkstate.format_errors import SavepointFormatError, StateNotFound, UnsupportedFormat
from flinkstate.jsonify import to_json
from flinkstate.limits import LimitExceeded
from flinkstate.major_upgrade import flink_version_problem
from flinkstate.manifest import Manifest, ManifestError, load_manifest, manifest_from_savepoint, parse_manifest
from flinkstate.manifest_overlay import (
    OverlayContradiction,
    apply_overlay,
    manifest_of_jar,
    parse_overlay,
    schema_of_jar,
)
from flinkstate.migration.code_policy import (
    ALLOW_CODE_ENV,
    ALLOW_CODE_HELP,
    CodeNotAllowed,
    CodePolicy,
    add_allow_code_argument,
    load_function,
)
from flinkstate.migration.dry_run import DryRunUnit, run_dry_run, run_dry_run_unit
from flinkstate.migration.engine_choice import IN_PROCESS_MAX_BYTES, fits_one_process, savepoint_bytes
from flinkstate.migration.job import MigrationJob
from flinkstate.migration.plan import CodeRefused, MigrationError, MigrationPlan
from flinkstate.migration.rewrite import DryRunResult, SubtaskResult, migrate_subtask
from flinkstate.migration.runner import MigrationReport
from flinkstate.migration.trial import apply_trial
from flinkstate.migration.units import default_unit_count, migrate_in_units, split_units, verify_published
from flinkstate.migration.verdict import check
from flinkstate.migration.verify import VerificationError, verify_migration
from flinkstate.progress import showing as progress_shown
from flinkstate.progress import track
from flinkstate.report import Report, escape_markdown, slack_text, summary_lines
from flinkstate.report_html import ReportFormatError, render_html
from flinkstate.resolution import BACKENDS
from flinkstate.savepoint import KeyedStateInfo, Savepoint, open_savepoint
from flinkstate.serializers.base import TypeSerializerSnapshot
from flinkstate.serializers.registry import PLUGIN_GROUP
from flinkstate.serializers.registry import register as register_serializer_snapshot
from flinkstate.storage import settings as _settings
from flinkstate.storage.locations import HandleRefused, StorageError
from flinkstate.storage.outputs import SavepointOutput
from flinkstate.storage.settings import S3Options
from flinkstate.storage.uri import (
    copy_savepoint,
    exists,
    open_output,
    read_file,
    refuse_output_in_source,
    write_file,
)
from flinkstate.typenotation import to_snapshot as type_snapshot
from flinkstate.upgrades.handoff import HANDOFF_FILE, READY_FILE, RESULT_FILE, AppRef, HandoffAbandoned, HandoffRefused
from flinkstate.upgrades.history import (
    HistoryError,
    RunHistory,
    deployment_history,
    read_run_record,
    remove_savepoint,
    retention,
)
from flinkstate.upgrades.journal import (
    JobVersion,
    JournalConflict,
    Outcome,
    Phase,
    RunTakenOver,
    UpgradeError,
    UpgradeJournal,
    local_path,
    not_writable,
    write_with_retries,
)
from flinkstate.upgrades.names import NameRefused, safe_name
from flinkstate.upgrades.ownership import Liveness, RunProbe, describe_run, process_alive, process_start
from flinkstate.upgrades.recovery import (
    DEFAULT_GRACE,
    Recovery,
    describe_outcome,
    recover,
    restore_old,
    sweep,
    unrecorded,
    why_left_alone,
)
from flinkstate.upgrades.registry import ClusterRef, DeploymentRegistry
from flinkstate.upgrades.releases import (
    Release,
    ReleaseError,
    ReleaseJob,
    Window,
    load_release,
    parse_release,
    parse_window,
    running_job_id,
    upgrade_conf,
)


def configure(*, s3: S3Options | None = None, allow_external_handles: bool | None = None,
              progress: bool | None = None) -> None:
    """Process-wide settings (the CLI's global options set them once): how to reach S3 (``s3``), whether state
    handles may name files outside the savepoint directory (``allow_external_handles``, for legacy savepoints with
    absolute paths; off by default), and progress bars on stderr (``progress``: None follows the terminal). An
    argument left out (None) keeps its current value, except ``progress``, which is always set."""
    from flinkstate import progress as _progress

    if s3 is not None:
        _settings.s3_options = s3
    if allow_external_handles is not None:
        _settings.handle_policy = _settings.HandlePolicy(allow_external_handles)
    _progress.enabled = progress


__all__ = [
    "ALLOW_CODE_ENV",
    "ALLOW_CODE_HELP",
    "BACKENDS",
    "DEFAULT_GRACE",
    "DEFAULT_MAX_HEAP",
    "DEFAULT_TIMEOUT_SECONDS",
    "HANDOFF_FILE",
    "IN_PROCESS_MAX_BYTES",
    "PLUGIN_GROUP",
    "READY_FILE",
    "RESULT_FILE",
    "SOURCE_SPLITS_STATE",
    "SUPPORTED_VERSIONS",
    "AppRef",
    "Audit",
    "ClusterRef",
    "CodeNotAllowed",
    "CodePolicy",
    "CodeRefused",
    "Compatibility",
    "DeploymentRegistry",
    "DryRunResult",
    "DryRunUnit",
    "EnvironmentProblem",
    "Exposure",
    "Finding",
    "FlinkJobFailed",
    "FlinkRestClient",
    "FlinkRestError",
    "FlinkStateError",
    "FlinkTimeout",
    "FlinkUnreachable",
    "HandleRefused",
    "HandoffAbandoned",
    "HandoffRefused",
    "HistoryError",
    "JarSchema",
    "JobVersion",
    "JournalConflict",
    "KeyedStateInfo",
    "LimitExceeded",
    "Liveness",
    "LocalFlinkCluster",
    "Manifest",
    "ManifestError",
    "MigrationError",
    "MigrationJob",
    "MigrationPlan",
    "MigrationReport",
    "NameRefused",
    "OperatorState",
    "OperatorStateElement",
    "Outcome",
    "OverlayContradiction",
    "Phase",
    "Reader",
    "Recovery",
    "Release",
    "ReleaseError",
    "ReleaseJob",
    "Report",
    "ReportFormatError",
    "RunHistory",
    "RunProbe",
    "RunTakenOver",
    "S3Options",
    "Savepoint",
    "SavepointFailed",
    "SavepointFormatError",
    "SavepointOutput",
    "StateNotFound",
    "StorageError",
    "SubtaskResult",
    "TrialRestore",
    "TypeSerializerSnapshot",
    "UnregisteredState",
    "UnsupportedFormat",
    "UpgradeError",
    "UpgradeJournal",
    "Verdict",
    "VerificationError",
    "Window",
    "WriteError",
    "Writer",
    "YAMLRefused",
    "__version__",
    "add_allow_code_argument",
    "apply_overlay",
    "apply_trial",
    "audit_savepoint",
    "check",
    "client_for",
    "configure",
    "copy_savepoint",
    "default_unit_count",
    "deployment_history",
    "describe_outcome",
    "describe_run",
    "escape_markdown",
    "exists",
    "fits_one_process",
    "flink_home_for_version",
    "flink_version_problem",
    "inspect_jar",
    "load_function",
    "load_manifest",
    "load_release",
    "load_yaml",
    "local_path",
    "manifest_from_savepoint",
    "manifest_of_jar",
    "migrate_in_units",
    "migrate_subtask",
    "not_writable",
    "open_output",
    "open_savepoint",
    "os_error_line",
    "parse_manifest",
    "parse_overlay",
    "parse_release",
    "parse_window",
    "printable",
    "process_alive",
    "process_start",
    "progress_shown",
    "read_file",
    "read_run_record",
    "recover",
    "refuse_output_in_source",
    "register_serializer_snapshot",
    "remove_savepoint",
    "render_html",
    "restore_old",
    "retention",
    "run_dry_run",
    "run_dry_run_unit",
    "running_job_id",
    "safe_name",
    "savepoint_bytes",
    "schema_of_jar",
    "slack_text",
    "source_split",
    "split_units",
    "summary_lines",
    "sweep",
    "to_json",
    "track",
    "trial_restore",
    "type_snapshot",
    "unrecorded",
    "unregistered_states",
    "upgrade_conf",
    "verify_migration",
    "verify_published",
    "why_left_alone",
    "write_file",
    "write_with_retries",
]
