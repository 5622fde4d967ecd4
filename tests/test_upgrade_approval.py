"""The approval before the stop (issue 29), in real Airflow (dag.test) against the real local Flink.

One running v1 job, three runs of the upgrade DAG to v2 with ``approval`` on: a person aborts, then nobody answers
in time, then a person approves. dag.test leaves a Human-in-the-loop task parked in AWAITING_INPUT until a response
is recorded from outside: a thread answers through Airflow's own HITL endpoint (the function the UI's Required
Actions page calls, with a signed-in user) or, for the timeout, runs the scheduler's own AWAITING_INPUT timeout sweep.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from flinkstate_airflow.ui import run_tab_url

from flinkstate.engine import LocalFlinkCluster
from tests import test_upgrade_dag
from tests.support import sample_job
from tests.support.airflow_env import ROOT, load_dag
from tests.test_upgrade_dag import _assert_restored, _conf, _states, _version, _wait_for_keys

pytestmark = [pytest.mark.flink, pytest.mark.airflow, pytest.mark.spark]

DEPLOYMENT = "keyed-stats-approval"

#: The upgrade DAG tests' module fixture: Airflow's connections, and a v1 job of the sample job running.
env = test_upgrade_dag.env


def _awaiting_input() -> Any:
    """The approve_stop task instance parked in AWAITING_INPUT (None until it is)."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from airflow.utils.state import TaskInstanceState
    from sqlalchemy import select

    with create_session() as session:
        return session.scalars(select(TaskInstance).where(
            TaskInstance.dag_id == "flink_state_upgrade", TaskInstance.task_id == "approve_stop",
            TaskInstance.state == TaskInstanceState.AWAITING_INPUT)).first()


def _answer(option: str) -> Callable[[Any], None]:
    """Answers as a signed-in user through the HITL endpoint the UI calls."""
    def answer(ti: Any) -> None:
        from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
        from airflow.api_fastapi.core_api.datamodels.hitl import UpdateHITLDetailPayload
        from airflow.api_fastapi.core_api.routes.public.hitl import update_hitl_detail
        from airflow.utils.session import create_session

        with create_session() as session:
            update_hitl_detail(dag_id=ti.dag_id, dag_run_id=ti.run_id, task_id=ti.task_id,
                               update_hitl_detail_payload=UpdateHITLDetailPayload(chosen_options=[option]),
                               user=SimpleAuthManagerUser(username="operator", role="admin"), session=session)
    return answer


def _time_out(ti: Any) -> None:
    """The scheduler's sweep of HITL tasks whose response timeout has passed, once it has."""
    from airflow.jobs.job import Job
    from airflow.jobs.scheduler_job_runner import SchedulerJobRunner
    from airflow.utils.session import create_session

    time.sleep(max(0.0, (ti.trigger_timeout.timestamp() - time.time()) + 0.5))
    with create_session() as session:
        SchedulerJobRunner(job=Job()).check_awaiting_input_timeouts(session=session)


def _run_answered(conf: dict[str, Any], respond: Callable[[Any], None]) -> tuple[Any, dict[str, Any]]:
    """One run, answered from another thread once approve_stop waits; also what the request showed."""
    shown: dict[str, Any] = {}
    run_ended = threading.Event()

    def responder() -> None:
        while (ti := _awaiting_input()) is None:
            if run_ended.wait(0.5):  # the run ended without asking (the test then fails on what it shows)
                return
        from airflow.models.hitl import HITLDetail
        from airflow.utils.session import create_session

        with create_session() as session:
            detail = session.get(HITLDetail, ti.id)
            shown.update(subject=detail.subject, body=detail.body, options=list(detail.options),
                         defaults=list(detail.defaults or []))
        respond(ti)
        shown["answered"] = True

    thread = threading.Thread(target=responder, daemon=True)
    thread.start()
    dag = load_dag("flink_state_upgrade", ROOT / "dags")
    # Without its DeadlineAlert: in dag.test (Airflow 3.3.2) a run that succeeds fails in DagRun.update_state, which
    # looks the DAG's deadline alerts up by id and is given the serialised alert instead (StatementError). The
    # deadline is not what this module tests (tests/test_upgrade_deadline.py does).
    dag.deadline = None
    try:
        run = dag.test(run_conf=conf)
    finally:
        run_ended.set()
        thread.join(timeout=10)
    return run, shown


@pytest.fixture(scope="module")
def approval_runs(env: dict[str, Any], flink_cluster: LocalFlinkCluster) -> dict[str, Any]:
    """Rejected, timed out, approved: the three runs of one v1 job, in that order (the job runs on after the first
    two), with the webhook's messages of each run."""
    new = _version("v2", "v2-overlay.yaml", env["work"] / "audit-v2")
    runs: dict[str, Any] = {}
    for name, respond, extra in (("rejected", _answer("abort"), {}), ("timed out", _time_out, {"approval_timeout": 2}),
                                 ("approved", _answer("migrate/restore"), {})):
        since = len(env["webhook"].received)
        started = time.monotonic()
        conf = _conf(env, new, job_name=DEPLOYMENT, job_id=env["v1_job"], current=env["v1"], approval=True, **extra)
        run, shown = _run_answered(conf, respond)
        run_dir = sorted((env["base"] / DEPLOYMENT).iterdir(), key=lambda p: p.stat().st_mtime)[-1]
        runs[name] = {"run": run, "shown": shown, "run_dir": run_dir, "seconds": time.monotonic() - started,
                      "record": json.loads((run_dir / "run.json").read_text()),
                      # As the run left them (the next runs change both).
                      "v1_state": env["client"].job_state(env["v1_job"]),
                      "journal": json.loads((env["base"] / "journal" / f"{DEPLOYMENT}.json").read_text()),
                      "alerts": [m["text"] for m in env["webhook"].received[since:]]}
    return runs


def _assert_not_approved(env: dict[str, Any], result: dict[str, Any], reason: str) -> None:
    run, states, record = result["run"], _states(result["run"]), result["record"]
    # The run fails like a refusal; nothing past the approval ran, the job was not stopped.
    assert str(run.state) == "failed", states
    assert states["approve_stop"] == "success" and states["approval_refused"] == "success", states
    for task in ("stop_for_restore", "stop_for_migration", "migrate", "submit_new", "alert_incompatible"):
        assert states[task] == "skipped", (task, states)
    assert result["v1_state"] == "RUNNING"
    assert not (result["run_dir"] / "stop").exists()
    assert record["outcome"] == "refused" and record["events"][-1]["running"] == {"version": "old",
                                                                                 "job_id": env["v1_job"]}
    journal = result["journal"]
    assert journal["outcome"] == "refused" and "stopping" not in [s["phase"] for s in journal["history"]]
    assert len(result["alerts"]) == 1, result["alerts"]
    assert result["alerts"][0].startswith(f"Flink upgrade of {DEPLOYMENT} REFUSED: the stop was not approved "
                                          f"({reason}); nothing was stopped."), result["alerts"]


def test_a_rejection_leaves_the_job_running_with_one_alert(env: dict[str, Any], approval_runs: dict[str, Any]):
    result = approval_runs["rejected"]
    shown = result["shown"]
    assert shown.get("answered"), shown
    # The request: the two answers (no answer is abort), the check report's headline, the run's page.
    assert shown["options"] == ["migrate/restore", "abort"] and shown["defaults"] == ["abort"]
    headline = (result["run_dir"] / "preflight" / "check-report.md").read_text().splitlines()[0].removeprefix("# ")
    assert f"**{headline}**" in shown["body"], shown["body"]
    assert "stop_for_migration" in shown["body"]
    assert run_tab_url("http://localhost:8080", "flink_state_upgrade", result["run"].run_id) in shown["body"]
    assert shown["subject"] == f"Stop {DEPLOYMENT} ({env['v1_job']}) and upgrade it?"
    _assert_not_approved(env, result, "operator chose 'abort'")
    approval = next(e["approval"] for e in result["record"]["events"] if "approval" in e)
    assert approval == {"chosen": "abort", "by": "operator", "timed_out": False, "timeout_seconds": 3600}


def test_no_answer_in_time_is_an_abort(env: dict[str, Any], approval_runs: dict[str, Any]):
    result = approval_runs["timed out"]
    assert result["shown"].get("answered"), result["shown"]
    _assert_not_approved(env, result, "no answer within 2 s")
    approval = next(e["approval"] for e in result["record"]["events"] if "approval" in e)
    assert approval == {"chosen": "abort", "by": None, "timed_out": True, "timeout_seconds": 2}


def test_an_approval_goes_on_to_the_stop_the_check_chose(env: dict[str, Any], approval_runs: dict[str, Any]):
    result = approval_runs["approved"]
    run, states = result["run"], _states(result["run"])
    assert str(run.state) == "success", states
    for task in ("approve_stop", "stop_for_migration", "migrate", "recheck", "submit_new", "health_gate", "record"):
        assert states[task] == "success", (task, states)
    for task in ("approval_refused", "stop_for_restore"):
        assert states[task] == "skipped", (task, states)
    assert result["v1_state"] == "FINISHED"
    assert result["record"]["outcome"] == "upgraded"
    approval = next(e["approval"] for e in result["record"]["events"] if "approval" in e)
    assert approval == {"chosen": "migrate/restore", "by": "operator", "timed_out": False, "timeout_seconds": 3600}
    assert len(result["alerts"]) == 1 and " succeeded: " in result["alerts"][0], result["alerts"]
    # v2 found every key's state as v1 left it (after the two runs that did not stop it), migrated.
    for record in _wait_for_keys(env["work"] / "audit-v2", "v2"):
        _assert_restored(record, count_type=int, label="migrated")
    print({name: round(r["seconds"], 1) for name, r in approval_runs.items()})
    assert sample_job.jar("v2").name in result["alerts"][0]
