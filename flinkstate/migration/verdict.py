"""``check``: what the new version of a job will do with a savepoint, as the plan ``migrate`` runs.

    report = check("/savepoints/savepoint-1", "examples/sample-job/manifests/v2.yaml")
    report.outcome        # "restore" | "migrate" | "incompatible"
    report.exit_code      # 0 | 3 | 4

**One verdict.** Each row carries Flink's own verdict on the savepoint as it is (:mod:`flinkstate.resolution`), and
the verdict of the upgrade, which is the plan ``flinkstate migrate`` would run, built by the same code
(:func:`targets_from_manifest`, :func:`plan_operators`; no migration function is imported). The savepoint that plan
would write (:class:`PlannedOutput`) is checked against the same manifest by the same rules, and each row is set
from both:

* the plan refuses the operator or state -> INCOMPATIBLE, with ``migrate``'s own refusal (``MIGRATION_REFUSED``);
* the planned output would not restore as is or reconfigured (a namespace Flink cannot change, a silent misread the
  plan leaves in place, ...) -> INCOMPATIBLE: ``migrate`` refuses it too, before writing;
* the plan rewrites the state (values, keys, names, drops) -> COMPATIBLE_AFTER_MIGRATION (exit 3);
* otherwise the state keeps its bytes and its snapshot, and the verdict is the planned output's (as is, or
  reconfigured: Flink adapts its serializer to the old snapshot, exactly).

``migrate`` runs this check first and refuses what it calls incompatible (:meth:`MigrationJob.gate`), and checks
what it wrote with it again (``migrated=True``) before publishing.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from flinkstate.compatibility import AFTER_MIGRATION, INCOMPATIBLE, RECONFIGURED, Finding
from flinkstate.format.keyed_header import KeyedBackendHeader
from flinkstate.format.metadata import OperatorState
from flinkstate.format.operator_state import OperatorBackendHeader
from flinkstate.manifest import Manifest, load_manifest
from flinkstate.migration.manifest_targets import targets_from_manifest
from flinkstate.migration.plan import MigrationError, OperatorPlan, StateRewrite, plan_operators
from flinkstate.operator_state_rules import OPERATOR_KINDS
from flinkstate.report import Report, StateRow
from flinkstate.resolution import SavepointView, flink_rows
from flinkstate.savepoint import Savepoint
from flinkstate.serializers.base import TypeSerializerSnapshot
from flinkstate.windows import flag_window_changes

#: Checks a view of a savepoint against the manifest with Flink's rules (the check's own checker, renames done).
OutputChecker = Callable[[Any], list[StateRow]]


class PlannedOutput:
    """The savepoint a plan would write, as the checker reads savepoints: each planned operator under its new id and
    uid with the plan's new keyed-state header; every other operator as the source has it."""

    def __init__(self, source: SavepointView, plans: dict[str, OperatorPlan], kryo_carried: bool = False) -> None:
        self.view = source
        self.source = source.savepoint
        self.plans = plans
        self.kryo_carried = kryo_carried
        self._operators: list[OperatorState] = []
        self._source_of: dict[str, OperatorState] = {}
        for op in self.source.operators:
            plan = plans.get(op.operator_id)
            out = op if plan is None else replace(op, operator_id=plan.new_operator_id, uid=plan.new_uid)
            self._operators.append(out)
            self._source_of[out.operator_id] = op

    @property
    def operators(self) -> list[OperatorState]:
        return self._operators

    @property
    def flink_major(self) -> int:
        """The plan writes the source's ``_metadata`` version (``migrate`` refuses another for Kryo data), or, when it
        carries Kryo data from Flink 1.x to 2.x, the 2.x version its target reads."""
        return 2 if self.kryo_carried else self.view.flink_major

    def keyed_header(self, op: OperatorState) -> KeyedBackendHeader | None:
        source = self._source_of[op.operator_id]
        plan = self.plans.get(source.operator_id)
        if plan is not None and plan.new_header is not None:
            return plan.new_header
        return self.source.keyed_header(source)

    def operator_header(self, op: OperatorState) -> OperatorBackendHeader | None:
        return self.source.operator_header(self._source_of[op.operator_id])  # copied as is (assemble.py)

    def unrecorded_key_finding(self, op: OperatorState, key: TypeSerializerSnapshot) -> Finding | None:
        # The output's keys are the source's bytes, read with the new key type when the source records none: the
        # source's finding on them holds for the output too (migrate refuses keys that do not read as that type).
        return self.view.unrecorded_key_finding(self._source_of[op.operator_id], key)


def check(savepoint: Savepoint | str | os.PathLike[str], manifest: Manifest | str | os.PathLike[str], *,
          previous: Manifest | str | os.PathLike[str] | None = None, backend: str | None = None,
          allow_non_restored_state: bool = False, migrated: bool = False, target_flink: str | None = None) -> Report:
    """Resolves every state of ``manifest`` against ``savepoint`` and judges the migration that would make it
    restorable (see the module docstring).

    ``previous`` is the manifest of the version that wrote the savepoint, when known: it supplies what the savepoint
    does not store (Row field names), so that fields swapped by name are caught. ``backend`` ("hashmap" or
    "rocksdb") narrows backend-specific rules; by default the worse of the two applies. ``migrated``: the savepoint
    is a migration's output for this manifest (its renames are done, nothing is planned): the check ``migrate``
    runs on what it wrote, and the upgrade's re-check. ``target_flink``: the Flink version the new job runs on, when
    the manifest does not say it (or to confirm it: another major is an error).
    """
    sp = savepoint if isinstance(savepoint, Savepoint) else Savepoint.open(savepoint)
    new = (manifest if isinstance(manifest, Manifest) else load_manifest(manifest)).with_target_flink(target_flink)
    old_manifest = previous if isinstance(previous, Manifest) or previous is None else load_manifest(previous)
    report = Report(sp.location.uri, new.origin(), backend=backend, allow_non_restored_state=allow_non_restored_state,
                    jar=new.jar, overlay=new.overlay)
    view = SavepointView(sp)
    report.rows = flink_rows(view, new, previous=old_manifest, backend=backend,
                             allow_non_restored_state=allow_non_restored_state, renames=not migrated)
    if not migrated:
        judge_plan(report, view, new, old_manifest, lambda view: flink_rows(
            view, new, backend=backend, allow_non_restored_state=allow_non_restored_state, renames=False))
    flag_window_changes(report.rows, new, old_manifest)  # the savepoint does not record windows: the two versions do
    return report


def judge_plan(report: Report, view: SavepointView, manifest: Manifest, previous: Manifest | None,
               check_output: OutputChecker) -> None:
    """Sets every row's verdict, findings and ``migration`` from the plan (see the module docstring)."""
    source = view.savepoint
    # by uid and by operator id: a plan names an operator of a savepoint that records no uid (Flink 1.x) by its id
    labels = {key: label for label, op in manifest.operators.items()
              for key in (op.operator_id, op.uid or op.operator_id)}
    try:
        targets = targets_from_manifest(source, manifest, previous)
    except MigrationError as exc:
        _refuse_rows(report.rows, exc, labels)
        return
    plans, errors = plan_operators(source, targets, load_code=False, now_ms=0)
    refused: dict[str, list[MigrationError]] = {}
    for error in errors:
        refused.setdefault(labels.get(error.operator or "", error.operator or ""), []).append(error)
    planned = {_label(labels, plan): plan for plan in plans.values()}
    carried = any(target.carry_kryo for target in targets)
    # keyed rows only: an operator state may have a keyed state's name (operator-state rows are judged apart)
    output_rows = {(row.operator, row.state): row for row in check_output(PlannedOutput(view, plans, carried))
                   if row.kind not in OPERATOR_KINDS and row.old_kind not in OPERATOR_KINDS}
    for row in report.rows:
        if row.operator in refused:
            _refused_row(row, refused[row.operator])
            continue
        if row.kind in OPERATOR_KINDS or row.old_kind in OPERATOR_KINDS:
            _operator_state_row(row, planned.get(row.operator), source.location.uri)
            continue
        output = output_rows.get((row.operator, row.state))
        plan = planned.get(row.operator)
        rewritten = _rewritten(plan, row)
        if output is not None and output.verdict > RECONFIGURED:
            _output_not_restorable(row, output)
            continue
        row.verdict = AFTER_MIGRATION if rewritten else (output.verdict if output is not None else row.verdict)
        if row.verdict > RECONFIGURED and not rewritten:
            row.findings = [f.at(migratable=False) if f.effective_verdict >= AFTER_MIGRATION else f
                            for f in row.findings]
            continue
        row.findings = [f.at(migratable=True) if f.effective_verdict >= AFTER_MIGRATION else f for f in row.findings]
        row.migration = _describe(plan, row, rewritten)


def _label(labels: dict[str, str], plan: OperatorPlan) -> str:
    return labels.get(plan.new_uid or plan.new_operator_id, labels.get(plan.new_operator_id,
                                                                       plan.new_uid or plan.new_operator_id))


def _rewrite_of(plan: OperatorPlan, row: StateRow) -> tuple[bool, StateRewrite | None]:
    """(found, rewrite) of the row's state in the plan: the rewrite whose new name (or, for a dropped state, old
    name) is the row's."""
    assert plan.old_header is not None
    for index, rewrite in enumerate(plan.rewrites):
        if rewrite is None:
            if plan.old_header.states[index].name == row.state:
                return True, None
        elif rewrite.new_name == row.state:
            return True, rewrite
    return False, None


def _rewritten(plan: OperatorPlan | None, row: StateRow) -> bool:
    """Whether the plan changes the row's state: its values, user keys, keys or name, or drops it, or moves the
    operator to another id."""
    if plan is None:
        return False
    if plan.new_operator_id != plan.source.operator_id or plan.key_transform is not None:
        return True
    if plan.old_header is None or row.state is None:
        return False
    found, rewrite = _rewrite_of(plan, row)
    if not found:
        return False
    return rewrite is None or rewrite.transform is not None or rewrite.user_key_transform is not None \
        or rewrite.new_name != rewrite.old_name


def _describe(plan: OperatorPlan | None, row: StateRow, rewritten: bool) -> str | None:
    """What the migration does with the row's state, in words (the report's ``migration`` column)."""
    flink = row.flink_verdict is AFTER_MIGRATION
    if plan is None or not rewritten:
        if row.verdict is RECONFIGURED:
            return "none: the bytes are kept, Flink reconfigures its serializer on restore"
        return None
    parts = []
    if plan.new_operator_id != plan.source.operator_id:
        parts.append(f"operator moved from {plan.source.uid or plan.source.operator_id}")
    if plan.key_transform is not None:
        parts.append("keys converted (entries move to the key groups Flink hashes them to)")
    if row.state is not None and plan.old_header is not None:
        _, rewrite = _rewrite_of(plan, row)
        if rewrite is None and row.status == "dropped":
            parts.append("dropped")
        elif rewrite is not None:
            if rewrite.new_name != rewrite.old_name:
                parts.append(f"renamed from {rewrite.old_name}")
            if rewrite.transform is not None:
                parts.append("values rewritten by flinkstate" + (" (Flink would also migrate them on restore)"
                                                                  if flink else ""))
            if rewrite.user_key_transform is not None:
                parts.append("user keys converted")
            if rewrite.dead_letter:
                parts.append("failing entries dead-lettered")
    return "; ".join(parts) or None


def _operator_state_row(row: StateRow, plan: OperatorPlan | None, savepoint: str) -> None:
    """An operator state (:mod:`flinkstate.operator_state_rules`): the plan copies it as it is, with its operator
    (also to the operator's new id), so its verdict is Flink's on the savepoint's bytes: what Flink migrates on
    restore it migrates from the copy; what Flink refuses, or misreads, the plan refuses, in ``migrate``'s one
    line."""
    moved = plan is not None and plan.new_operator_id != plan.source.operator_id
    # The operator's rename (on its first row) is the plan's to carry out: it moves the operator, state and all.
    reason = next((f for f in row.findings if f.effective_verdict >= AFTER_MIGRATION and not
                   (moved and f.code == "OPERATOR_RENAMED")), None)
    if reason is None:
        if moved and plan is not None:
            row.verdict = AFTER_MIGRATION
            row.migration = f"copied as is with the operator, moved from {plan.source.uid or plan.source.operator_id}"
        else:
            row.verdict = max([row.flink_verdict, *(f.effective_verdict for f in row.findings)])
        return
    worst = max(f.effective_verdict for f in row.findings if f.effective_verdict >= AFTER_MIGRATION)
    if worst is AFTER_MIGRATION and row.flink_verdict is AFTER_MIGRATION:
        # Flink deserializes every element with the restored serializer and writes the next snapshot with the new
        # one: it migrates the state itself, from the copy the plan makes (ground truth: test_operator_state_flink).
        row.verdict = AFTER_MIGRATION
        row.migration = "flink (on restore; migrate copies it as it is)"
        return
    why = "Flink does not restore it as it is" if reason.silent_misread else "Flink fails the restore"
    row.findings = [f.at(migratable=False) if f.effective_verdict >= AFTER_MIGRATION else f for f in row.findings]
    row.findings.append(Finding("MIGRATION_REFUSED", "", f"{savepoint}: operator {row.operator}, operator state "
                                f"{row.state} ({row.old_kind}): {reason.code}: {reason.message}; {why}, and migrate "
                                f"copies operator state as it is", INCOMPATIBLE, operator=row.operator,
                                state=row.state, migratable=False))
    row.verdict = INCOMPATIBLE
    row.migration = "refused: migrate copies operator state as it is"


def _refused_row(row: StateRow, errors: list[MigrationError]) -> None:
    """The operator cannot be planned: the error about this state (or about the whole operator) goes on its row; the
    operator's other rows cannot be migrated either."""
    own = [e for e in errors if e.state is None or e.state == row.state]
    for error in own:
        row.findings.append(Finding("MIGRATION_REFUSED", "", str(error), INCOMPATIBLE, operator=row.operator,
                                    state=row.state, migratable=False))
    row.findings = [f.at(migratable=False) if f.effective_verdict >= AFTER_MIGRATION and f.code !=
                    "MIGRATION_REFUSED" else f for f in row.findings]
    row.verdict = INCOMPATIBLE if own or row.verdict >= AFTER_MIGRATION else row.verdict
    row.migration = "refused: " + "; ".join(str(e) for e in own) if own else \
        "not planned: the operator's migration is refused"


def _refuse_rows(rows: list[StateRow], error: MigrationError, labels: dict[str, str]) -> None:
    """The manifest itself cannot be planned against the savepoint (a rename from an operator or state it lacks):
    the error goes on the rows it names, or on the first row."""
    label = labels.get(error.operator or "", error.operator)
    named = [row for row in rows if row.operator == label] or rows[:1]
    for row in named:
        _refused_row(row, [error])


def _output_not_restorable(row: StateRow, output: StateRow) -> None:
    """After the planned migration the new version would still not restore the state as is: what it would find
    becomes this row's, and migrate refuses the same way."""
    known = {(f.code, f.path) for f in row.findings}
    for finding in output.findings:
        if finding.effective_verdict <= RECONFIGURED:
            continue
        if (finding.code, finding.path) in known:
            continue
        row.findings.append(finding.at(message=f"after the migration: {finding.message}", migratable=False))
    row.findings = [f.at(migratable=False) if f.effective_verdict >= AFTER_MIGRATION else f for f in row.findings]
    row.verdict = INCOMPATIBLE
    row.migration = "none possible: the migrated savepoint would still not restore"


def check_against_manifest(staged: Savepoint, manifest: Manifest, allow_non_restored_state: bool = False
                           ) -> list[str]:
    """The migrated savepoint checked against the manifest by the same check as the source (``check`` with
    ``migrated=True``): every state must restore as is or reconfigured, with no silent misread. Raises
    MigrationError naming the staged state file, the operator, the state and the finding otherwise; returns one line
    per state checked."""
    report = check(staged, manifest, allow_non_restored_state=allow_non_restored_state, migrated=True)
    for row in report.rows:
        if row.verdict <= RECONFIGURED or _flink_migrates_operator_state(row):
            continue
        finding = next((f for f in row.findings if f.effective_verdict > RECONFIGURED), None)
        what = f"{finding.code}: {finding.message}" if finding is not None else row.verdict.name
        where = _state_file(staged, row.operator)
        raise MigrationError(f"{where}check: operator {row.operator}{f', state {row.state}' if row.state else ''}: "
                             f"the new version would not restore the written state as is ({what})")
    return [f"{row.operator}/{row.state}: {row.verdict.name}" for row in report.rows if row.state is not None]


def _flink_migrates_operator_state(row: StateRow) -> bool:
    """An operator state copied as it is that Flink migrates on restore, from the copy as from the source."""
    return row.kind in OPERATOR_KINDS and row.verdict is AFTER_MIGRATION and row.flink_verdict is AFTER_MIGRATION \
        and not any(f.silent_misread for f in row.findings)


def _state_file(staged: Savepoint, operator: str) -> str:
    try:
        streams = staged.keyed_streams(operator)
    except Exception:
        return f"{staged.location.uri}: "
    return f"{streams[0][1].source.path}: " if streams else f"{staged.location.uri}: "


def blocking_finding(report: Report) -> tuple[StateRow, Finding | None] | None:
    """The first row the check calls incompatible, and the finding that says why (``migrate``'s refusal). A row the
    plan refuses goes first: the operator's other rows are incompatible only because of it."""
    for row in report.rows:
        refused = next((f for f in row.findings if f.code == "MIGRATION_REFUSED"), None)
        if row.verdict is INCOMPATIBLE and refused is not None:
            return row, refused
    for row in report.rows:
        if row.verdict is INCOMPATIBLE:
            finding = next((f for f in row.findings if f.code == "MIGRATION_REFUSED"), None) or \
                next((f for f in row.findings if f.effective_verdict is INCOMPATIBLE), None)
            return row, finding
    return None


__all__ = ["PlannedOutput", "blocking_finding", "check", "check_against_manifest", "judge_plan"]
