"""Approval before the stop: the upgrade DAG's optional human-in-the-loop step (Airflow's standard provider).

Between the check and the stop, when the run's ``approval`` param asks for it, ``choose_path`` branches to
``approve_stop`` instead of the stop the check chose. A person sees the check report's headline and a link to the run's
page, and answers "migrate/restore" (go on to that stop) or "abort"; no answer within ``approval_timeout`` seconds is
"abort" (Airflow applies the default). An abort leaves the job running: ``approval_refused`` records it as a refusal
(journal and ``run.json``), and ``conclude`` sends the run's one alert.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from airflow.providers.standard.operators.hitl import HITLBranchOperator

from flinkstate import escape_markdown
from flinkstate_airflow.notifiers import run_view_url
from flinkstate_airflow.upgrade import CHECK_REPORT_MARKDOWN, MIGRATE, RESTORE, report_markdown, write_run_record

#: The two answers: go on to the stop the check chose, or leave the job running.
APPROVE, ABORT = "migrate/restore", "abort"
APPROVAL_TASK, REFUSED_TASK = "approve_stop", "approval_refused"


def approval_required(params: dict[str, Any]) -> bool:
    return bool(params.get("approval"))


def report_headline(run_dir: str) -> str:
    """The preflight check report's headline (its Markdown's title line)."""
    first = report_markdown(f"{run_dir}/preflight").splitlines()[0] if run_dir else ""
    return first.removeprefix("#").strip() or f"(no check report in {run_dir}/preflight)"


def request_text(plan: dict[str, Any], stop_task: str, view: str) -> tuple[str, str]:
    """The subject and the body (Markdown: Airflow renders it) a person answers. The deployment's name and its run
    folder come from a release file or a trigger's conf: escaped in both (:func:`flinkstate.escape_markdown`), so
    that no name forges a line or renders as a link whose text hides its target, wherever a UI renders Markdown."""
    subject = f"Stop {escape_markdown(plan['job_name'])} ({escape_markdown(plan['job_id'])}) and upgrade it?"
    run_dir = escape_markdown(plan["run_dir"])
    body = (f"**{escape_markdown(report_headline(plan['run_dir']))}**\n\n"
            f"Approving ({APPROVE}) runs {stop_task}: the running job is stopped with a savepoint, then the new "
            f"version is started from it (rolled back if it fails). {ABORT} leaves the job running.\n\n"
            f"The run and its check report: {view}\n\n"
            f"Report: {run_dir}/preflight/{CHECK_REPORT_MARKDOWN}")
    return subject, body


class StopApprovalOperator(HITLBranchOperator):
    """Asks a person before the stop; branches to the stop the check chose (``choose_path``'s XCom ``stop_task``)
    or to ``approval_refused``. Subject, body and timeout are the run's, set when it starts."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(subject="Approve the upgrade's stop", options=[APPROVE, ABORT], defaults=[ABORT],
                         options_mapping={ABORT: REFUSED_TASK}, **kwargs)

    def execute(self, context: Any) -> Any:
        ti = context["ti"]
        plan = ti.xcom_pull(task_ids="resolve")
        self.subject, self.body = request_text(plan, ti.xcom_pull(task_ids="choose_path", key="stop_task"),
                                               run_view_url(ti))
        seconds = int(context["params"].get("approval_timeout") or 0)
        self.response_timeout = timedelta(seconds=seconds) if seconds > 0 else None
        return super().execute(context)

    def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:
        ti = context["ti"]
        # Known only now: the stop the check chose is what "migrate/restore" approves.
        self.options_mapping = {APPROVE: ti.xcom_pull(task_ids="choose_path", key="stop_task"), ABORT: REFUSED_TASK}
        chosen = list(event.get("chosen_options") or [])
        user = event.get("responded_by_user") or {}
        decision = {"chosen": chosen[0] if chosen else None,
                    "by": None if event.get("timedout") else (user.get("name") or user.get("id")),
                    "timed_out": bool(event.get("timedout")),
                    "timeout_seconds": int(context["params"].get("approval_timeout") or 0)}
        ti.xcom_push(key="decision", value=decision)
        write_run_record(ti.xcom_pull(task_ids="resolve"), {"stage": "approval", "approval": decision})
        return super().execute_complete(context=context, event=event)



def path_before_stop(path: str, params: dict[str, Any], ti: Any) -> str:
    """``choose_path``'s branch: the approval first when the run asks for one and the check chose a stop (the stop is
    kept in the XCom ``stop_task`` for the approval to branch to), else the check's own path."""
    if path in (RESTORE, MIGRATE) and approval_required(params):
        ti.xcom_push(key="stop_task", value=path)
        return APPROVAL_TASK
    return path
