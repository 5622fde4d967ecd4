"""Upgrade a running stateful Flink job safely: savepoint, check, branch, (migrate,) restore, health gate, rollback.

    resolve -> preflight_checks -> preflight_savepoint -> check (Spark*) -> prestart_migration (Spark**) ->
    choose_path [-> approve_stop]
      restorable:   stop_for_restore -> restore_path_as_is ----------------------.
      migratable:   stop_for_migration -> migrate (Spark*) -> recheck -----------+-> submit_new -> health_gate -> record
      incompatible: alert_incompatible (old job untouched; the run fails)        |
      check-only:   check_only_done                                              |
      not approved: approval_refused (old job untouched; the run fails)
    approve_stop (params approval, approval_timeout): a person answers migrate/restore (go on to the stop the check
    chose) or abort before anything is stopped; abort or no answer in time is recorded as a refusal.
    every path ends in conclude (runs whatever happened): after a failure past the stop it rolls back (old version
    from the stop savepoint; never when nothing was stopped), writes the outcome, sends the run's one alert, and
    fails the run unless it upgraded (or only checked).

(*) Spark jobs (``spark_jobs/``) on Spark, or in one process on the Airflow worker for a small savepoint (``engine``,
``in_process_max_bytes``): the same application, the same output, without a JVM and session to start.
(**) When the check says migrate and the migration would run on Spark (by the preflight savepoint's size), its
application is started before the stop (``plugins/flinkstate_airflow/prestart.py``): the stop waits for its session
to be ready and hands it the stop savepoint, and ``migrate`` only waits for its result; the stop for restore and
``conclude`` call it off. The JVM and session start are then outside the job's downtime.

``preflight_checks`` resolves each version's state schema once, before anything is stopped: the new jar's (its
``main()`` run in a JVM of its own), completed by the given manifest as an overlay (refused when it contradicts the
jar), and the running version's likewise; it writes both into the run's folder, and the Spark jobs judge those.

The migration's Spark application also re-checks what it published (the new manifest's check and the independent
verifier against the stop savepoint), in the same session: one spark-submit while the job is down. ``recheck`` judges
the report it wrote beside the migrated savepoint and starts nothing.

Each step is journalled (``<savepoint_base>/journal/<job>.json``) before and after it changes anything, so that a run
that dies is recovered by the next run of the same job, or by the ``flink_upgrade_watchdog`` DAG.

Trigger by hand with a conf (see ``params``), or from ``flink_scheduled_upgrades``. Business logic lives in
``plugins/flinkstate_airflow``; this file only wires it.
"""

from __future__ import annotations

from airflow.sdk import DAG, Param, task
from flinkstate_airflow import upgrade
from flinkstate_airflow.approval import REFUSED_TASK, StopApprovalOperator, path_before_stop
from flinkstate_airflow.deadline import upgrade_deadline
from flinkstate_airflow.hooks import FlinkHook, spark_master
from flinkstate_airflow.notifiers import run_view_url, send_alert
from flinkstate_airflow.operators import FlinkSavepointOperator, FlinkSubmitJarOperator, TaskRefused
from flinkstate_airflow.prestart import MigrateOperator, PrestartedApp, PrestartMigrationOperator, stop_and_hand_over
from flinkstate_airflow.recheck import recheck_problem
from flinkstate_airflow.sensors import FlinkHealthGateSensor
from flinkstate_airflow.spark_submit import DEFAULT_IN_PROCESS_MAX_BYTES, FlinkStateSparkSubmitOperator

# A task called with an upstream task's output gets an XComArg, which Airflow resolves to the value at run time; its
# type hints expect the value itself, hence `type: ignore[arg-type]` on those calls (and only there).

SPARK = upgrade.spark_settings()


def plan_value(*keys: str, suffix: str = "", json: bool = False) -> str:
    """A template for a value of the run's plan (the ``resolve`` task's XCom), e.g. plan_value("new", "jar")."""
    path = "".join(f"[{key!r}]" for key in keys)
    # Templates render to native objects (lists, ints); tojson keeps a job id a string even if it were all digits.
    return "{{ ti.xcom_pull(task_ids='resolve')" + path + (" | tojson" if json else "") + " }}" + suffix


JOB_ID = plan_value("job_id", json=True)
#: One argument, empty when not set (then the workers' FLINKSTATE_ALLOW_CODE applies): the dry run, the migration
#: and its re-check's verifier import the manifest's migration functions only with it.
ALLOW_CODE = "--allow-code={{ params.allow_code }}"
ENGINE, IN_PROCESS_MAX_BYTES = "{{ params.engine }}", "{{ params.in_process_max_bytes }}"
#: The DAG run the migration works for: its publish is fenced on the run's journal held by this run.
FENCE_RUN = ("{{ {'dag_id': ti.xcom_pull(task_ids='resolve')['dag_id'], "
             "'run_id': ti.xcom_pull(task_ids='resolve')['run_id']} | tojson }}")
#: The migration application's arguments after the savepoint it reads (the stop savepoint, or the handoff's).
MIGRATE_ARGS = [
    "--schema", plan_value("schemas", "new"), "--old-schema", plan_value("schemas", "old"), "--output",
    plan_value("run_dir", suffix="/migrated/savepoint"), "--report", plan_value("run_dir", suffix="/migrated/report"),
    # The re-check, in the same application: the published savepoint against the new manifest and its source; the
    # report goes beside it, for the recheck task.
    "--recheck-report-dir", plan_value("run_dir", suffix="/migrated"),
    # The check's verdict is the plan migrate runs: the same answer on dropped states for both.
    "--allow-non-restored-state", "{{ params.allow_non_restored_state | string | lower }}",
    # One argument: the DAG renders templates natively, and a bare number would arrive as an int.
    "--max-dead-letters={{ params.max_dead_letters }}", ALLOW_CODE,
    # The fence of the publish: only while this DAG run still owns the journal (no watchdog or person took it over
    # during the migration) is the migrated savepoint published.
    "--fence-journal", plan_value("journal"), f"--fence-run={FENCE_RUN}"]
PRESTARTED = "{{ ti.xcom_pull(task_ids='prestart_migration', key='launch') }}"

with DAG(
    dag_id="flink_state_upgrade",
    description="Safely upgrade a stateful Flink job: check its state first, migrate what Flink cannot, roll back",
    schedule=None,
    # One active run per deployment, not per DAG: the deployment's journal is the lock (a run refuses to start while
    # another run of the same deployment lives), so one deployment's stuck run never blocks another's upgrade.
    max_active_runs=16,
    # An upgrade still running after FLINKSTATE_UPGRADE_DEADLINE_SECONDS (when set) alerts while it runs.
    deadline=upgrade_deadline(),
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
        "manifest": Param("", type="string",
                          description="optional: the new version's state schema is its jar's (its main() with "
                                      "entry_class and program_args, run in a JVM of its own before anything is "
                                      "stopped); a manifest given here is an overlay of it: what a jar cannot say "
                                      "(migrations, renames, dropped states, Row field names), refused if it "
                                      "contradicts the jar"),
        "savepoint_base": Param("", type="string",
                                description="local folder or s3://bucket/prefix for this run (required)"),
        "mode": Param("upgrade", enum=["upgrade", "check-only"]),
        "allow_non_restored_state": Param(False, type="boolean"),
        "allow_code": Param("", type="string",
                            description="code the manifest's migration functions may run: trusted modules "
                                        "(comma-separated) or 'all'; empty: the workers' FLINKSTATE_ALLOW_CODE, else "
                                        "none (a manifest is data)"),
        "max_dead_letters": Param(0, type="integer", minimum=0,
                                  description="entries a dead-letter migration policy may skip (default 0: none)"),
        "engine": Param("auto", enum=["auto", "spark", "in-process"],
                        description="where check and migrate run: Spark, in one process on the Airflow worker (no "
                                    "JVM or Spark session to start while the job is down), or auto: in-process up "
                                    "to in_process_max_bytes of savepoint files, Spark above"),
        "in_process_max_bytes": Param(DEFAULT_IN_PROCESS_MAX_BYTES, type="integer", minimum=0,
                                      description="engine auto: the largest savepoint run in-process"),
        "min_checkpoints": Param(2, type="integer", minimum=1, description="health gate: checkpoints after restore"),
        "max_restarts": Param(0, type="integer", minimum=0, description="health gate: restarts allowed"),
        "gate_timeout": Param(300, type="integer", minimum=10, description="health gate: seconds"),
        "min_running_seconds": Param(30, type="integer", minimum=0,
                                     description="health gate: seconds RUNNING with all tasks up, without a break"),
        "rollback_timeout": Param(300, type="integer", minimum=10,
                                  description="rollback: seconds for the old version to run again before the run "
                                              "reports production DOWN"),
        "approval": Param(False, type="boolean",
                          description="a person approves (migrate/restore) or aborts in Airflow before the job is "
                                      "stopped; abort or no answer leaves it running, recorded as refused"),
        "approval_timeout": Param(3600, type="integer", minimum=0,
                                  description="approval: seconds to wait for an answer (then abort); 0: no limit"),
        "target_flink_conn_id": Param("", type="string",
                                      description="the Flink connection the new version runs on, when it is another "
                                                  "cluster than the old one's (flink_default), e.g. a Flink 2.x "
                                                  "cluster for a job on 1.x: stop, savepoints and the rollback act "
                                                  "on the old cluster, submit and health gate on this one; empty: "
                                                  "the same cluster"),
        "current": Param(None, type=["null", "object"],
                         description="the running version (jar, entry_class, program_args, parallelism, and its "
                                     "manifest if it has one), when the deployment registry has no record of it"),
    },
    # Every task claims the run's journal for this DAG run before it starts (pre_execute: a task whose run another
    # actor took over fails there, before its step) and records the phase it enters; its success and failure are
    # journalled too (what failed, in one line, for the run's one alert).
    default_args={"pre_execute": upgrade.task_started, "on_success_callback": upgrade.task_succeeded,
                  "on_failure_callback": upgrade.task_failed},
    tags=["flink", "flinkstate"],
) as dag:

    def target_hook(params: dict) -> FlinkHook | None:
        """The new version's cluster (params.target_flink_conn_id), None: the old one's."""
        conn_id = params.get("target_flink_conn_id") or ""
        return FlinkHook(conn_id) if conn_id and conn_id != FlinkHook.default_conn_name else None

    @task
    def resolve(params: dict | None = None, run_id: str | None = None, ti=None) -> dict:  # Airflow injects ti
        target = target_hook(params or {})
        return upgrade.plan_run(params or {}, run_id or "manual", FlinkHook().get_conn(), dag_id=ti.dag_id,
                                probe=upgrade.airflow_probe(ti), target=target.get_conn() if target else None,
                                conn_ids=(FlinkHook.default_conn_name,
                                          target.flink_conn_id if target else FlinkHook.default_conn_name),
                                connect=lambda conn_id: FlinkHook(conn_id).get_conn())

    plan = resolve()

    @task
    def preflight_checks(plan: dict) -> None:
        problems = upgrade.preflight_checks(plan, FlinkHook(plan["flink_conn_id"]).get_conn(),
                                            spark_master(SPARK["conn_id"]),
                                            FlinkHook(plan["new_flink_conn_id"]).get_conn())
        if problems:  # an expected refusal: one log line, no traceback
            raise TaskRefused(f"checks before the stop failed: {'; '.join(problems)}")

    checks = preflight_checks(plan)  # type: ignore[arg-type]

    preflight = FlinkSavepointOperator(
        task_id="preflight_savepoint", job_id=JOB_ID, flink_conn_id=plan_value("flink_conn_id"),
        target_directory=plan_value("run_dir", suffix="/preflight"))

    # Started before the stop when the check says migrate on Spark: see (**) above. Its wait for the stop savepoint
    # is bounded, with the approval's time on top when a person approves the stop.
    prestart = PrestartMigrationOperator(
        task_id="prestart_migration", engine=ENGINE, in_process_max_bytes=IN_PROCESS_MAX_BYTES,
        conn_id=SPARK["conn_id"], env_vars=SPARK["env_vars"], name="flinkstate-migrate",
        application=f"{SPARK['jobs']}/migrate_state.py", application_args=MIGRATE_ARGS,
        estimate_savepoint="{{ ti.xcom_pull(task_ids='preflight_savepoint') }}", run_dir=plan_value("run_dir"),
        run="{{ {'dag_id': ti.xcom_pull(task_ids='resolve')['dag_id'], "
            "'run_id': ti.xcom_pull(task_ids='resolve')['run_id']} }}",
        handoff_timeout="{{ 900 + (params.approval_timeout or 86400 if params.approval else 0) }}",
        mode="{{ params.mode }}")

    check = FlinkStateSparkSubmitOperator(
        task_id="check", engine=ENGINE, in_process_max_bytes=IN_PROCESS_MAX_BYTES, conn_id=SPARK["conn_id"],
        env_vars=SPARK["env_vars"], name="flinkstate-check",
        application=f"{SPARK['jobs']}/check_compatibility.py",
        application_args=[
            "{{ ti.xcom_pull(task_ids='preflight_savepoint') }}", "--schema", plan_value("schemas", "new"),
            "--previous", plan_value("schemas", "old"), "--report-dir", plan_value("run_dir", suffix="/preflight"),
            "--allow-non-restored-state", "{{ params.allow_non_restored_state | string | lower }}",
            # One argument: the DAG renders templates natively, and a bare number would arrive as an int.
            "--max-dead-letters={{ params.max_dead_letters }}", ALLOW_CODE])

    @task.branch
    def choose_path(plan: dict, params: dict | None = None, ti=None) -> str:  # Airflow injects params and ti
        report = upgrade.read_check_report(f"{plan['run_dir']}/preflight")
        upgrade.record_check(plan, report)
        return path_before_stop(upgrade.choose_branch(report, plan["mode"]), params or {}, ti)

    branch = choose_path(plan)  # type: ignore[arg-type]

    @task
    def check_only_done(plan: dict) -> None:
        upgrade.finish_checked(plan)

    @task
    def alert_incompatible(plan: dict) -> None:  # recorded here; conclude sends the one alert and fails the run
        upgrade.finish_refused(plan)

    approve_stop = StopApprovalOperator(task_id="approve_stop")

    @task(task_id=REFUSED_TASK)
    def approval_refused(plan: dict, ti=None) -> None:  # recorded here; conclude sends the one alert
        upgrade.finish_not_approved(plan, ti.xcom_pull(task_ids="approve_stop", key="decision") or {})

    # Each stop follows the check's branch or the approval's: it runs when one of them chose it (the other skipped).
    @task(trigger_rule="none_failed_min_one_success")
    def stop_for_restore(plan: dict, ti=None) -> str:  # Airflow injects the task instance
        app = PrestartedApp.of(ti.xcom_pull(task_ids="prestart_migration", key="launch"))
        if app is not None:
            app.call_off("the run restores the stop savepoint as it is")
        return upgrade.stop_old(plan, FlinkHook(plan["flink_conn_id"]).get_conn(), "stop_for_restore")

    @task(trigger_rule="none_failed_min_one_success")
    def stop_for_migration(plan: dict, ti=None) -> str:  # Airflow injects the task instance
        app = PrestartedApp.of(ti.xcom_pull(task_ids="prestart_migration", key="launch"))
        return stop_and_hand_over(plan, FlinkHook(plan["flink_conn_id"]).get_conn(), app)

    stopped_for_restore, stopped_for_migration = stop_for_restore(plan), stop_for_migration(plan)  # type: ignore[arg-type]

    @task
    def restore_path_as_is(stop_savepoint: str) -> str:
        return upgrade.local_path(stop_savepoint)

    # With a pre-started application that got the stop savepoint, only waits for its result; else runs the job.
    migrate = MigrateOperator(
        task_id="migrate", engine=ENGINE, in_process_max_bytes=IN_PROCESS_MAX_BYTES, conn_id=SPARK["conn_id"],
        env_vars=SPARK["env_vars"], name="flinkstate-migrate", prestarted=PRESTARTED,
        application=f"{SPARK['jobs']}/migrate_state.py",
        application_args=["{{ ti.xcom_pull(task_ids='stop_for_migration') }}", *MIGRATE_ARGS])

    @task
    def recheck(plan: dict, stop_savepoint: str) -> None:
        problem = recheck_problem(f"{plan['run_dir']}/migrated", f"{plan['run_dir']}/migrated/savepoint",
                                  stop_savepoint)
        if problem:  # an expected refusal: one log line, no traceback
            raise TaskRefused(problem)

    rechecked = recheck(plan, stopped_for_migration)  # type: ignore[arg-type]

    @task
    def restore_path_migrated(plan: dict) -> str:
        return f"{plan['run_dir']}/migrated/savepoint"

    @task(trigger_rule="none_failed_min_one_success")
    def restore_path(ti=None) -> str:  # Airflow injects the task instance
        # One branch ran, the other was skipped and pushed nothing. Pulled by task ids, not taken as arguments: an
        # argument is fetched as one XCom, and Airflow logs each one missing as an error ("XCom not found") on an
        # upgrade that went well; a pull by task ids lists what exists (None for the skipped branch).
        found = ti.xcom_pull(task_ids=["restore_path_as_is", "restore_path_migrated"])
        return next((path for path in found if path), "")

    as_is_path = restore_path_as_is(stopped_for_restore)  # type: ignore[arg-type]
    migrated_path = restore_path_migrated(plan)  # type: ignore[arg-type]
    chosen = restore_path()

    # The new version's cluster: the old one's unless params.target_flink_conn_id names another.
    submit_new = FlinkSubmitJarOperator(
        task_id="submit_new", flink_conn_id=plan_value("new_flink_conn_id"), jar=plan_value("new", "jar"),
        entry_class=plan_value("new", "entry_class"), program_args=plan_value("new", "program_args"),
        parallelism=plan_value("new", "parallelism"),
        savepoint_path="{{ ti.xcom_pull(task_ids='restore_path') }}",
        allow_non_restored_state=plan_value("allow_non_restored_state"))

    gate = FlinkHealthGateSensor(
        task_id="health_gate", flink_conn_id=plan_value("new_flink_conn_id"),
        job_id="{{ ti.xcom_pull(task_ids='submit_new') | tojson }}",
        expected_savepoint="{{ ti.xcom_pull(task_ids='restore_path') }}",
        min_checkpoints="{{ params.min_checkpoints }}", max_restarts="{{ params.max_restarts }}",
        gate_timeout="{{ params.gate_timeout }}", min_running_seconds="{{ params.min_running_seconds }}",
        poke_interval=2, mode="poke")

    @task
    def record(plan: dict, new_job_id: str, restored_from: str, gate_result: dict | None = None) -> None:
        upgrade.record_upgrade(plan, new_job_id, restored_from, gate_result)

    # retries=0: the run's end is decided once (its alert is sent once).
    @task(trigger_rule="all_done", retries=0)
    def conclude(params: dict | None = None, ti=None) -> None:  # Airflow injects the task instance
        plan = ti.xcom_pull(task_ids="resolve")
        # What failed, where the journal could not hold it (no plan yet, or a full disk): each task's XCom.
        failures = [f for f in ti.xcom_pull(task_ids=sorted(ti.task.upstream_task_ids), key="failure") or [] if f]
        client = FlinkHook(plan["flink_conn_id"]).get_conn() if plan else None
        app = PrestartedApp.of(ti.xcom_pull(task_ids="prestart_migration", key="launch"))
        if app is not None:  # whatever happened, it has nothing more to wait for (a handoff made stays)
            app.call_off("the run concluded")
        ok, alert = upgrade.conclude(plan, client, deployment=(params or {}).get("job_name") or
                                     (params or {}).get("job_id") or "?", failures=failures,
                                     view=run_view_url(ti),
                                     timeout=float((params or {}).get("rollback_timeout") or 300))
        # For whoever triggered the run (flinkstate upgrade run): the outcome, the downtime and the alert, through
        # Airflow's REST API. Pushed before the alert is sent: a webhook that fails must not hide the outcome.
        ti.xcom_push(key="conclusion", value=upgrade.conclusion(plan, alert))
        if alert:
            send_alert(alert, succeeded=ok)  # a success is logged at INFO, anything else at WARNING
        if not ok:  # the run fails on purpose, its alert sent: the headline in one log line, not a traceback
            raise TaskRefused(alert.splitlines()[0] if alert else "the upgrade did not complete")

    plan >> checks >> preflight >> check >> prestart >> branch
    incompatible, checked_only = alert_incompatible(plan), check_only_done(plan)  # type: ignore[arg-type]
    not_approved = approval_refused(plan)  # type: ignore[arg-type]
    branch >> [stopped_for_restore, stopped_for_migration, incompatible, checked_only, approve_stop]
    approve_stop >> [stopped_for_restore, stopped_for_migration, not_approved]
    stopped_for_migration >> migrate >> rechecked >> migrated_path
    [as_is_path, migrated_path] >> chosen >> submit_new >> gate
    recorded = record(plan, submit_new.output, chosen, gate.output)  # type: ignore[arg-type]
    gate >> recorded
    everything = [plan, checks, preflight, prestart, check, branch, stopped_for_restore, stopped_for_migration, migrate,
                  rechecked, as_is_path, migrated_path, chosen, submit_new, gate, recorded, incompatible, checked_only,
                  approve_stop, not_approved]
    everything >> conclude()
