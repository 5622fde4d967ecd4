"""Upgrade a running stateful Flink job safely: savepoint, check, branch, (migrate,) restore, health gate, rollback.

    resolve -> preflight_savepoint -> check (Spark) -> choose_path
      restorable:   stop_for_restore -> restore_path_as_is ----------------------.
      migratable:   stop_for_migration -> migrate (Spark) -> recheck (Spark) ----+-> submit_new -> health_gate -> record
      incompatible: alert_incompatible (old job untouched; the run fails)        |
      check-only:   check_only_done                                              |
    any failure after the stop: rollback (old version from the stop savepoint), alert, the run fails

Trigger by hand with a conf (see ``params``), or from ``flink_scheduled_upgrades``. Business logic lives in
``plugins/flinkstate_airflow``; this file only wires it.
"""

from __future__ import annotations

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, Param, task
from flinkstate_airflow import upgrade
from flinkstate_airflow.hooks import FlinkHook
from flinkstate_airflow.notifiers import WebhookReportNotifier
from flinkstate_airflow.operators import FlinkSavepointOperator, FlinkStopWithSavepointOperator, FlinkSubmitJarOperator
from flinkstate_airflow.sensors import FlinkHealthGateSensor

SPARK = upgrade.spark_settings()


def plan_value(*keys: str, suffix: str = "", json: bool = False) -> str:
    """A template for a value of the run's plan (the ``resolve`` task's XCom), e.g. plan_value("new", "jar")."""
    path = "".join(f"[{key!r}]" for key in keys)
    # Templates render to native objects (lists, ints); tojson keeps a job id a string even if it were all digits.
    return "{{ ti.xcom_pull(task_ids='resolve')" + path + (" | tojson" if json else "") + " }}" + suffix


JOB_ID = plan_value("job_id", json=True)
RUN_DIR = plan_value("run_dir")

with DAG(
    dag_id="flink_state_upgrade",
    description="Safely upgrade a stateful Flink job: check its state first, migrate what Flink cannot, roll back",
    schedule=None,
    max_active_runs=1,  # one upgrade at a time (and so one per job)
    render_template_as_native_obj=True,
    params={
        "job_name": Param("", type="string", description="the running job's name (or give job_id)"),
        "job_id": Param("", type="string", description="the running job's id (wins over job_name)"),
        # Required values have empty defaults so that a failure callback can still render its context; the
        # resolve task refuses a run without them, in one line.
        "jar": Param("", type="string", description="the new version's jar (required)"),
        "entry_class": Param("", type="string"),
        "program_args": Param([], type="array", items={"type": "string"}),
        "parallelism": Param(None, type=["null", "integer"]),
        "manifest": Param("", type="string", description="the new version's state schema manifest (required)"),
        "savepoint_base": Param("", type="string",
                                description="local folder or s3://bucket/prefix for this run (required)"),
        "mode": Param("upgrade", enum=["upgrade", "check-only"]),
        "allow_non_restored_state": Param(False, type="boolean"),
        "max_dead_letters": Param(0, type="integer", minimum=0,
                                  description="entries a dead-letter migration policy may skip (default 0: none)"),
        "min_checkpoints": Param(2, type="integer", minimum=1, description="health gate: checkpoints after restore"),
        "max_restarts": Param(0, type="integer", minimum=0, description="health gate: restarts allowed"),
        "gate_timeout": Param(300, type="integer", minimum=10, description="health gate: seconds"),
        "current": Param(None, type=["null", "object"],
                         description="the running version (jar, manifest, entry_class, program_args, parallelism), "
                                     "when the deployment registry has no record of it"),
    },
    on_failure_callback=WebhookReportNotifier(
        "Flink upgrade of {{ params.job_name or params.job_id }} FAILED (run {{ run_id }})"),
    tags=["flink", "flinkstate"],
) as dag:

    @task
    def resolve(params: dict | None = None, run_id: str | None = None) -> dict:
        return upgrade.plan_run(params or {}, run_id or "manual", FlinkHook().get_conn())

    plan = resolve()

    preflight = FlinkSavepointOperator(
        task_id="preflight_savepoint", job_id=JOB_ID,
        target_directory=plan_value("run_dir", suffix="/preflight"))

    check = SparkSubmitOperator(
        task_id="check", conn_id=SPARK["conn_id"], env_vars=SPARK["env_vars"], name="flinkstate-check",
        application=f"{SPARK['jobs']}/check_compatibility.py",
        application_args=[
            "{{ ti.xcom_pull(task_ids='preflight_savepoint') }}", "--schema", plan_value("new", "manifest"),
            "--previous", plan_value("old", "manifest"), "--report-dir", plan_value("run_dir", suffix="/preflight"),
            "--allow-non-restored-state", "{{ params.allow_non_restored_state | string | lower }}",
            "--max-dead-letters", "{{ params.max_dead_letters | string }}"])

    @task.branch
    def choose_path(plan: dict) -> str:
        report = upgrade.read_check_report(f"{plan['run_dir']}/preflight")
        upgrade.write_run_record(plan, {"stage": "checked", "check_outcome": report["outcome"],
                                        "verdict": report["verdict"]})
        return upgrade.choose_branch(report, plan["mode"])

    branch = choose_path(plan)

    @task(on_success_callback=WebhookReportNotifier(
        "Flink upgrade check of {{ params.job_name or params.job_id }} (check-only: nothing changed)",
        report=plan_value("run_dir", suffix="/preflight/check-report.md")))
    def check_only_done(plan: dict) -> None:
        upgrade.write_run_record(plan, {"stage": "done", "outcome": "checked"})

    @task(on_failure_callback=WebhookReportNotifier(
        "Flink upgrade of {{ params.job_name or params.job_id }} REFUSED: the new version cannot restore the "
        "state; the old job keeps running", report=plan_value("run_dir", suffix="/preflight/check-report.md")))
    def alert_incompatible(plan: dict) -> None:
        upgrade.write_run_record(plan, {"stage": "done", "outcome": "refused"})
        raise upgrade.UpgradeError(f"{plan['job_name']}: the new version's state is incompatible "
                                   f"(report: {plan['run_dir']}/preflight/{upgrade.CHECK_REPORT_MARKDOWN})")

    stop_for_restore = FlinkStopWithSavepointOperator(
        task_id="stop_for_restore", job_id=JOB_ID,
        target_directory=plan_value("run_dir", suffix="/stop"))
    stop_for_migration = FlinkStopWithSavepointOperator(
        task_id="stop_for_migration", job_id=JOB_ID,
        target_directory=plan_value("run_dir", suffix="/stop"))

    @task
    def restore_path_as_is(stop_savepoint: str) -> str:
        return upgrade.local_path(stop_savepoint)

    migrate = SparkSubmitOperator(
        task_id="migrate", conn_id=SPARK["conn_id"], env_vars=SPARK["env_vars"], name="flinkstate-migrate",
        application=f"{SPARK['jobs']}/migrate_state.py",
        application_args=[
            "{{ ti.xcom_pull(task_ids='stop_for_migration') }}", "--schema", plan_value("new", "manifest"),
            "--old-schema", plan_value("old", "manifest"), "--output",
            plan_value("run_dir", suffix="/migrated/savepoint"),
            "--report", plan_value("run_dir", suffix="/migrated/report"),
            "--max-dead-letters", "{{ params.max_dead_letters | string }}"])
    recheck = SparkSubmitOperator(
        task_id="recheck", conn_id=SPARK["conn_id"], env_vars=SPARK["env_vars"], name="flinkstate-recheck",
        application=f"{SPARK['jobs']}/check_compatibility.py",
        application_args=[plan_value("run_dir", suffix="/migrated/savepoint"), "--schema",
                          plan_value("new", "manifest"), "--report-dir",
                          plan_value("run_dir", suffix="/migrated"), "--dry-run", "never", "--exit-code",
                          "--verify-against", "{{ ti.xcom_pull(task_ids='stop_for_migration') }}",
                          "--verify-old-schema", plan_value("old", "manifest")])

    @task
    def restore_path_migrated(plan: dict) -> str:
        return f"{plan['run_dir']}/migrated/savepoint"

    @task(trigger_rule="none_failed_min_one_success")
    def restore_path(as_is: str | None = None, migrated: str | None = None) -> str:
        return as_is or migrated or ""

    as_is_path = restore_path_as_is(stop_for_restore.output)
    migrated_path = restore_path_migrated(plan)
    chosen = restore_path(as_is_path, migrated_path)

    submit_new = FlinkSubmitJarOperator(
        task_id="submit_new", jar=plan_value("new", "jar"),
        entry_class=plan_value("new", "entry_class"), program_args=plan_value("new", "program_args"),
        parallelism=plan_value("new", "parallelism"),
        savepoint_path="{{ ti.xcom_pull(task_ids='restore_path') }}",
        allow_non_restored_state=plan_value("allow_non_restored_state"))

    gate = FlinkHealthGateSensor(
        task_id="health_gate", job_id="{{ ti.xcom_pull(task_ids='submit_new') | tojson }}",
        expected_savepoint="{{ ti.xcom_pull(task_ids='restore_path') }}",
        min_checkpoints="{{ params.min_checkpoints }}", max_restarts="{{ params.max_restarts }}",
        gate_timeout="{{ params.gate_timeout }}", poke_interval=2, mode="poke")

    @task(on_success_callback=WebhookReportNotifier(
        "Flink upgrade of {{ params.job_name or params.job_id }} succeeded: job "
        "{{ ti.xcom_pull(task_ids='submit_new') }} runs the new version",
        report=plan_value("run_dir", suffix="/preflight/check-report.md")))
    def record(plan: dict, new_job_id: str, restored_from: str) -> None:
        upgrade.DeploymentRegistry(plan["savepoint_base"]).record(
            plan["job_name"], upgrade.JobVersion(**plan["new"]), new_job_id, restored_from, plan["run_id"])
        upgrade.write_run_record(plan, {"stage": "done", "outcome": "upgraded", "job_id": new_job_id,
                                        "restored_from": restored_from})

    @task(trigger_rule="one_failed", on_failure_callback=WebhookReportNotifier(
        "Flink upgrade of {{ params.job_name or params.job_id }} FAILED after the old job was stopped; rollback "
        "attempted (see the task log and run.json in " + RUN_DIR + ")",
        report=plan_value("run_dir", suffix="/preflight/check-report.md")))
    def rollback(plan: dict, ti=None) -> None:  # Airflow injects the task instance
        stop = ti.xcom_pull(task_ids="stop_for_restore") or ti.xcom_pull(task_ids="stop_for_migration")
        new_job = ti.xcom_pull(task_ids="submit_new", key="job_id")
        account = upgrade.roll_back(FlinkHook().get_conn(), plan, new_job, upgrade.local_path(stop) if stop else None)
        upgrade.write_run_record(plan, {"stage": "done", "outcome": "rolled back", "rollback": account})
        raise upgrade.UpgradeError(f"upgrade of {plan['job_name']} failed and was rolled back: {account}")

    done = EmptyOperator(task_id="upgraded")  # the run's state follows this leaf on the success path

    plan >> preflight >> check >> branch
    branch >> [stop_for_restore, stop_for_migration, alert_incompatible(plan), check_only_done(plan)]
    stop_for_restore >> as_is_path
    stop_for_migration >> migrate >> recheck >> migrated_path
    [as_is_path, migrated_path] >> chosen >> submit_new >> gate
    recorded = record(plan, submit_new.output, chosen)
    gate >> recorded >> done
    [stop_for_restore, stop_for_migration, migrate, recheck, chosen, submit_new, gate] >> rollback(plan)
