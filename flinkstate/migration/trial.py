"""``check --trial``: Flink's own verdict beside the tool's, and a disagreement between them as a finding.

The trial restore (:func:`flinkstate.engine.jar_schema.trial_restore`) restores the savepoint into the new
version's operators with Flink's own classes, before anything is stopped. Each row of the check's report gets
Flink's answer for its state (:attr:`StateRow.trial`), and the two are compared in the sense that matters for the
stop: does Flink restore the savepoint as it is (as is, reconfigured, or migrating the values itself), or fail?
The tool predicted that answer (the row's ``flink_verdict``); when Flink answers otherwise, the check judged a
schema that is not the one Flink sees, or a rule of the tool is wrong: either way the check's verdict cannot be
trusted, so the row gets the finding ``TRIAL_DISAGREES`` and is INCOMPATIBLE (the check fails, exit 4).

Rows are compared where both answered for the same state: a state kept, not declared, not registered or dropped,
and an operator the job no longer has. The timer queues (rows of kind TIMERS) are compared as the states are: Flink
answers for them where the operator's timer service creates them (it refuses an incompatible timer serializer).
So are the operator states (list, union list and broadcast rows), by their answers apart from the keyed ones'.
A renamed or added state is shown, not compared (Flink restores the savepoint as it is, before any rename). A
failure of the operator's keyed restore (its key serializer, values that no longer read) fails every state of it:
the tool agrees when it calls at least one of them incompatible.
"""

from __future__ import annotations

from flinkstate.compatibility import INCOMPATIBLE, Finding
from flinkstate.engine.jar_schema import TrialOperator, TrialRestore, TrialState
from flinkstate.operator_state_rules import OPERATOR_KINDS
from flinkstate.report import Report, StateRow

#: The row statuses (:class:`StateRow`) whose state Flink restores under the same name: compared with Flink's answer.
COMPARED_STATUSES = ("kept", "not-declared", "not-registered", "dropped", "operator-removed")

_OUTCOME_TEXT = {"AS_IS": "as is", "RECONFIGURED": "reconfigured", "AFTER_MIGRATION": "migrated by Flink",
                 "NEW": "new (starts empty)", "NOT_REGISTERED": "restored, not registered by the operator"}


def apply_trial(report: Report, trial: TrialRestore, *, allow_non_restored_state: bool = False) -> int:
    """Sets each row's Flink answer from ``trial``, adds ``TRIAL_DISAGREES`` where the tool predicted otherwise
    (the row becomes INCOMPATIBLE), and the report's trial section; returns the number of disagreements."""
    disagreements = 0
    by_operator: dict[str, list[StateRow]] = {}
    for row in report.rows:
        by_operator.setdefault(row.operator, []).append(row)
    for label, rows in by_operator.items():
        operator = trial.find(label)
        if operator is None:
            disagreements += _without_operator(rows, trial, allow_non_restored_state)
        elif operator.restore_failure is not None:
            disagreements += _restore_failed(rows, operator, trial)
        else:
            for row in rows:
                disagreements += _state(row, operator, trial)
    report.trial = {"jar": trial.jar, "flink_version": trial.flink_version, "backend": trial.backend,
                    "key_groups": trial.key_groups, "seconds": round(trial.seconds, 1),
                    "disagreements": disagreements}
    return disagreements


def _state(row: StateRow, operator: TrialOperator, trial: TrialRestore) -> int:
    state: TrialState | None = (operator.state(row.state, operator_state=row.kind in OPERATOR_KINDS)
                                if row.state is not None else None)
    if state is None:
        if row.state is not None and operator.open_failure is not None:
            row.trial = f"not resolved: the operator failed to open: {operator.open_failure}"
        return 0
    row.trial = _OUTCOME_TEXT.get(state.outcome) or f"FAILED: {state.error}"
    if row.status not in COMPARED_STATUSES or state.restorable == row.flink_verdict.restorable:
        return 0
    _disagree(row, trial, f"Flink {'restores it' if state.restorable else 'fails'} ({row.trial})")
    return 1


def _restore_failed(rows: list[StateRow], operator: TrialOperator, trial: TrialRestore) -> int:
    for row in rows:
        row.trial = f"FAILED (the operator's restore): {operator.restore_failure}"
    compared = [row for row in rows if row.status in COMPARED_STATUSES]
    if not compared or any(not row.flink_verdict.restorable for row in rows):
        return 0
    worst = max(row.flink_verdict for row in compared)
    _disagree(compared[0], trial, f"Flink fails the operator's restore ({operator.restore_failure})",
              f"every state of the operator restorable (at worst {worst.name})")
    return 1


def _without_operator(rows: list[StateRow], trial: TrialRestore, allow_non_restored_state: bool) -> int:
    """A savepoint operator the job does not have: Flink refuses the savepoint unless allowNonRestoredState. (An
    operator the savepoint does not have was not restored at all: nothing to say.)"""
    removed = [row for row in rows if row.status == "operator-removed"]
    if not removed:
        return 0
    restorable = allow_non_restored_state
    for row in removed:
        row.trial = ("skipped (allowNonRestoredState)" if restorable else
                     "FAILED: no operator of the job takes its state (Flink refuses the savepoint)")
    if all(row.flink_verdict.restorable == restorable for row in removed):
        return 0
    _disagree(removed[0], trial, f"Flink {'skips' if restorable else 'refuses'} the operator's state")
    return 1


def _disagree(row: StateRow, trial: TrialRestore, flink: str, predicted: str | None = None) -> None:
    groups = "one key group" if trial.key_groups == "one" else "all key groups"
    row.findings.append(Finding(
        "TRIAL_DISAGREES", "",
        f"Flink's own restore ({trial.backend}, {groups}): {flink}; the check predicted "
        f"{predicted or row.flink_verdict.name}. The schema the check judged is not what Flink sees, or a rule "
        f"of the check is wrong: trust Flink's answer, and report it",
        INCOMPATIBLE, operator=row.operator, state=row.state, migratable=False))
    row.verdict = INCOMPATIBLE


__all__ = ["COMPARED_STATUSES", "apply_trial"]
