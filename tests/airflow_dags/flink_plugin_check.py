"""A DAG that exercises every plugin piece against a real Flink cluster (tests only): submit v1, savepoint while
running, stop-with-savepoint (trigger + sensor), submit v2 from it, health gate, cancel, and webhook notifications
on success and on failure."""

from __future__ import annotations

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, Param
from flinkstate_airflow.notifiers import WebhookReportNotifier
from flinkstate_airflow.operators import (
    FlinkCancelJobOperator,
    FlinkSavepointOperator,
    FlinkStopWithSavepointOperator,
    FlinkSubmitJarOperator,
)
from flinkstate_airflow.sensors import FlinkHealthGateSensor, FlinkSavepointSensor

with DAG(
    dag_id="flink_plugin_check",
    schedule=None,
    params={
        "jar_v1": Param("", type="string"),
        "jar_v2": Param("", type="string"),
        "program_args": Param([], type="array"),
        "savepoint_dir": Param("", type="string"),
        "expected_savepoint": Param("", type="string"),  # empty: the stop savepoint
        "report": Param("", type="string"),
    },
    on_failure_callback=WebhookReportNotifier("plugin check FAILED: {{ dag_run.run_id }}",
                                              report="{{ params.report }}"),
    render_template_as_native_obj=True,
) as dag:
    submit_v1 = FlinkSubmitJarOperator(task_id="submit_v1", jar="{{ params.jar_v1 }}",
                                       entry_class="sample.KeyedStatsJob", program_args="{{ params.program_args }}",
                                       parallelism=2)
    savepoint = FlinkSavepointOperator(task_id="savepoint", job_id="{{ ti.xcom_pull(task_ids='submit_v1') }}",
                                       target_directory="{{ params.savepoint_dir }}")
    stop = FlinkStopWithSavepointOperator(task_id="stop", job_id="{{ ti.xcom_pull(task_ids='submit_v1') }}",
                                          target_directory="{{ params.savepoint_dir }}", wait=False)
    stopped = FlinkSavepointSensor(task_id="stopped", job_id="{{ ti.xcom_pull(task_ids='submit_v1') }}",
                                   trigger_id="{{ ti.xcom_pull(task_ids='stop') }}", poke_interval=1, timeout=120)
    submit_v2 = FlinkSubmitJarOperator(task_id="submit_v2", jar="{{ params.jar_v2 }}",
                                       entry_class="sample.KeyedStatsJob", program_args="{{ params.program_args }}",
                                       parallelism=2, savepoint_path="{{ ti.xcom_pull(task_ids='stopped') }}")
    gate = FlinkHealthGateSensor(
        task_id="health_gate", job_id="{{ ti.xcom_pull(task_ids='submit_v2') }}",
        expected_savepoint="{{ params.expected_savepoint or ti.xcom_pull(task_ids='stopped') }}",
        min_checkpoints=2, max_restarts=0, poke_interval=1, timeout=120)
    cancel = FlinkCancelJobOperator(
        task_id="cancel", job_id="{{ ti.xcom_pull(task_ids='submit_v2') }}", trigger_rule="all_done",
        on_success_callback=WebhookReportNotifier("plugin check done: {{ ti.xcom_pull(task_ids='stopped') }}",
                                                  report="{{ params.report }}"))
    # The run's state follows its leaves: `cancel` always runs (all_done), `passed` carries the gate's outcome.
    passed = EmptyOperator(task_id="passed")
    submit_v1 >> savepoint >> stop >> stopped >> submit_v2 >> gate >> [cancel, passed]
