"""flinkstate's Spark jobs (``spark_jobs/``) as Airflow tasks, on the path that costs least: Spark for a large
savepoint, the same application in one Python process (``--in-process``: no JVM, no Spark session, no Python
workers to start) for a small one.

A spark-submit pays its JVM and session start (13 to 28 s measured on 2 cores) whatever the size of the savepoint;
one process decodes, migrates and verifies at about 1M entries/s. Below ``in_process_max_bytes`` of savepoint files
the in-process run ends before Spark would have started (the rule: ``flinkstate.fits_one_process``); the output and
the reports are byte for byte those of the Spark run (tests/test_spark_jobs.py). ``engine`` forces either path."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from flinkstate import IN_PROCESS_MAX_BYTES, FlinkStateError, fits_one_process, printable
from flinkstate_airflow.operators import TaskRefused

ENGINES = ("auto", "spark", "in-process")
#: Savepoints up to this many bytes of files run in-process under ``engine="auto"``.
DEFAULT_IN_PROCESS_MAX_BYTES = IN_PROCESS_MAX_BYTES


def choose_engine(savepoint: str, engine: str, max_bytes: int) -> tuple[str, str]:
    """("spark" or "in-process", why) for a job on ``savepoint``."""
    if engine not in ENGINES:
        raise TaskRefused(f"engine '{printable(engine)}': expected one of {', '.join(ENGINES)}")
    if engine != "auto":
        return engine, "engine set"
    small, why = fits_one_process(savepoint, max_bytes)
    return ("in-process" if small else "spark"), why


class FlinkStateSparkSubmitOperator(SparkSubmitOperator):
    """A SparkSubmitOperator for one of flinkstate's Spark jobs whose first application argument is the savepoint it
    reads: ``engine`` "spark" submits it, "in-process" runs the same script with ``--in-process`` in a Python
    process of its own on this worker, "auto" (the default) picks by the savepoint's size
    (``in_process_max_bytes``). The path taken, and why, goes to the log and to XCom (key ``engine``)."""

    template_fields: Sequence[str] = (*SparkSubmitOperator.template_fields, "engine", "in_process_max_bytes")

    def __init__(self, *, engine: str = "auto", in_process_max_bytes: int | str = DEFAULT_IN_PROCESS_MAX_BYTES,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.engine = engine
        self.in_process_max_bytes = in_process_max_bytes
        self._process: subprocess.Popen[str] | None = None

    def execute(self, context: Any) -> None:
        args = [str(a) for a in self.application_args or []]
        if not args:
            raise TaskRefused(f"{self.task_id}: the job's first argument must be the savepoint it reads")
        try:
            engine, why = choose_engine(args[0], str(self.engine), int(self.in_process_max_bytes))
        except FlinkStateError as exc:  # the savepoint cannot be listed: the job itself would say why
            engine, why = "spark", f"the savepoint's size is unknown ({printable(exc)})"
        self.log.info("%s runs %s: %s", self.task_id, "on Spark" if engine == "spark" else "in-process", why)
        context["ti"].xcom_push(key="engine", value={"engine": engine, "why": why})
        if engine == "spark":
            return super().execute(context)
        self._run_in_process(args)
        return None

    def _run_in_process(self, args: list[str]) -> None:
        # The workers' environment as spark-submit would give it (PYTHONPATH for user migration functions, S3).
        env = {**os.environ, **(self.env_vars or {})}
        python = env.get("PYSPARK_PYTHON") or sys.executable
        self._process = subprocess.Popen([python, self.application, *args, "--in-process"], env=env, text=True,
                                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        last = ""
        assert self._process.stdout is not None
        for line in self._process.stdout:
            self.log.info("%s", line.rstrip("\n"))
            if line.strip():
                last = line.strip()
        status = self._process.wait()
        if status != 0:
            # The job's last line is its one-line error ("migrate_state: error: ..."), as spark-submit's would be.
            raise TaskRefused(f"{self.name or self.task_id} failed in-process (exit {status}): {printable(last)}")

    def on_kill(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            return
        super().on_kill()
