"""The migration's Spark application started before the stop (issue 28): its JVM, session and Python workers are paid
while the old job still runs, so that the job is down only for the migration itself.

    prestart_migration (after the check)    when the check says migrate: spark-submit migrate_state.py
                                            --await-handoff DIR ...: builds its session, writes DIR/ready.json, waits
                                            for the stop savepoint
    stop_for_migration                      waits (bounded) for ready.json, stops the job, hands the stop savepoint
                                            over (DIR/handoff.json)
    migrate                                 waits for the application's result (DIR/result.json)
    stop_for_restore, conclude              call the migration off: the application ends, migrating nothing

The protocol and its files are :mod:`flinkstate.upgrades.handoff`'s. Whether Spark runs at all is the engine choice
of :mod:`.spark_submit` (by the preflight savepoint's size: the stop savepoint does not exist yet); a small state
starts nothing and migrates in-process after the stop. It starts after the check, not beside it: on a Spark cluster
the first application takes every free core, and a migration application waiting for its stop savepoint would
starve the check it waits for; and a run the check sends to the restore path starts no JVM. Whatever goes wrong
before the stop (the application does not get ready in time, or died) falls back to a spark-submit after the stop,
as before: slower, never unsafe. The application publishes only while the DAG run holds the run's journal (its
fence), and gives up when the run no longer does (closed, taken over) or no path comes in time."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from flinkstate import (
    HANDOFF_FILE,
    READY_FILE,
    RESULT_FILE,
    AppRef,
    FlinkRestClient,
    FlinkStateError,
    HandoffRefused,
    printable,
)
from flinkstate_airflow.operators import TaskRefused
from flinkstate_airflow.spark_submit import FlinkStateSparkSubmitOperator, choose_engine
from flinkstate_airflow.upgrade import MIGRATE, choose_branch, local_path, read_check_report, stop_old

log = logging.getLogger(__name__)

#: The longest a stop waits for the pre-started application's session (then it falls back to a spark-submit after
#: the stop): far above the 13-28 s measured, for a loaded machine.
READY_TIMEOUT = 300.0
#: The application's own bound on its wait for the stop savepoint, besides the approval's time when there is one.
HANDOFF_TIMEOUT = 900
#: The longest the migrate task waits for the application's result while its process runs (a migration of 10^8
#: entries at the measured rates takes minutes, not hours).
RESULT_TIMEOUT = 4 * 3600.0
#: The XCom key of ``prestart_migration``'s launch (``started``, ``why``, and the application's when started).
LAUNCH = "launch"


class PrestartedApp:
    """One launch of the migration application, as the DAG's tasks pass it on (the ``prestart_migration`` XCom):
    owns its process (on the host that launched it) and its handoff files."""

    def __init__(self, launch: dict[str, Any]) -> None:
        self.launch = launch
        self.ref = AppRef(launch["folder"], launch["run"], launch["token"])
        self.pid, self.host, self.log_path = int(launch["pid"]), str(launch["host"]), str(launch["log"])

    @classmethod
    def of(cls, launch: Any) -> PrestartedApp | None:
        """The launch the ``prestart_migration`` task pushed, None when it started none (a small state, check-only)."""
        return cls(launch) if isinstance(launch, dict) and launch.get("started") else None

    @classmethod
    def start(cls, command: list[str], env: dict[str, str], ref: AppRef) -> PrestartedApp:
        """Starts ``command`` (spark-submit) detached from the task: a session of its own, so that the task's end
        does not end it; its output goes to a log file the migrate task shows."""
        folder = ref.folder if not urlparse(ref.folder).scheme else tempfile.gettempdir()
        Path(folder).mkdir(parents=True, exist_ok=True)
        log_path = Path(folder) / ("app.log" if folder == ref.folder else f"flinkstate-migrate-{ref.token}.log")
        with open(log_path, "ab") as output:
            process = subprocess.Popen(command, env=env, stdout=output, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, start_new_session=True)
        return cls({"folder": ref.folder, "run": ref.run, "token": ref.token, "pid": process.pid,
                    "host": socket.gethostname(), "log": str(log_path)})

    def alive(self) -> bool:
        """Whether its process runs (known only on the host that launched it; elsewhere: assumed, the waits are
        bounded)."""
        if self.host != socket.gethostname():
            return True
        try:
            waited, _ = os.waitpid(self.pid, os.WNOHANG)  # a child of this process (the prestart task under test)
            if waited == self.pid:
                return False
        except ChildProcessError:
            pass  # not our child: the launching task has ended
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return Path(f"/proc/{self.pid}/stat").exists() and "Z" not in _proc_state(self.pid)

    def await_ready(self, timeout: float = READY_TIMEOUT) -> dict[str, Any] | None:
        log.info("waiting (at most %.0f s) for the pre-started migration application (pid %s on %s) to have its "
                 "Spark session: %s", timeout, self.pid, self.host, self.ref.path(READY_FILE))
        return self.ref.wait_for(self.ref.ready, timeout, alive=self.alive)

    def hand_over(self, stop_savepoint: str) -> None:
        self.ref.hand_over(stop_savepoint)
        log.info("handed the stop savepoint %s over to the pre-started migration application: %s", stop_savepoint,
                 self.ref.path(HANDOFF_FILE))

    def call_off(self, why: str) -> None:
        try:
            self.ref.call_off(why)
        except Exception as exc:  # any storage error: the application's own bounds still end it
            log.warning("could not call the pre-started migration application off (%s): %s", self.ref.folder,
                        printable(exc))

    def stop(self) -> None:
        """Ends the application's process group (spark-submit, its JVM and Python driver), on its host."""
        if self.host == socket.gethostname() and self.alive():
            try:
                os.killpg(self.pid, signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass

    def log_tail(self, lines: int = 40) -> list[str]:
        try:
            return Path(self.log_path).read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            return []


def _proc_state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


def stop_and_hand_over(plan: dict[str, Any], client: FlinkRestClient, app: PrestartedApp | None) -> str:
    """The stop for a migration: with a pre-started application, first waits (bounded) until it has its session,
    then stops the job and hands it the stop savepoint. An application not ready in time (or gone) is called off and
    stopped: the migrate task then runs the job after the stop, as without one."""
    if app is not None and app.await_ready() is None:
        log.warning("the pre-started migration application (pid %s) is not ready: the migration starts its own "
                    "after the stop; its log: %s", app.pid, app.log_path)
        app.call_off("not ready in time: the migrate task runs its own")
        app.stop()
        app = None
    location = stop_old(plan, client, "stop_for_migration")
    if app is not None:
        app.hand_over(local_path(location))
    return location


class PrestartMigrationOperator(FlinkStateSparkSubmitOperator):
    """Starts the migration application before the stop, when the check's path is the migration (its report in
    ``<run_dir>/preflight``; never for ``mode`` check-only) and the engine choice (on ``estimate_savepoint``, the
    preflight savepoint: the same state) says Spark: spark-submit of ``application`` with ``application_args`` (the
    migrate task's, without the savepoint) and ``--await-handoff``. Handed the stop savepoint, the application
    applies the engine choice again to it (``--in-process-max-bytes``): a stop savepoint that turns out small is
    migrated by its driver, without Spark stages. Its XCom ``launch`` says whether it started one, why, and the
    application (for the stop and migrate tasks)."""

    template_fields: Sequence[str] = (*FlinkStateSparkSubmitOperator.template_fields, "estimate_savepoint",
                                      "run_dir", "run", "handoff_timeout", "mode")

    def __init__(self, *, estimate_savepoint: str, run_dir: str, run: dict[str, str] | str,
                 handoff_timeout: int | str = HANDOFF_TIMEOUT, mode: str = "upgrade", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.estimate_savepoint, self.run_dir, self.run = estimate_savepoint, run_dir, run
        self.handoff_timeout, self.mode = handoff_timeout, mode

    def execute(self, context: Any) -> None:
        launch = self._launch()
        context["ti"].xcom_push(key=LAUNCH, value=launch)

    def _launch(self) -> dict[str, Any]:
        try:  # what the check said (in <run_dir>/preflight); choose_path judges it and refuses a broken one
            branch = choose_branch(read_check_report(f"{self.run_dir}/preflight"), str(self.mode))
        except (FlinkStateError, KeyError) as exc:
            branch = f"unknown ({printable(exc)})"
        if branch != MIGRATE:
            self.log.info("no migration application started: the check's path is %s", branch)
            return {"started": False, "why": f"the check's path is {branch}"}
        engine, why = choose_engine(str(self.estimate_savepoint), str(self.engine), int(self.in_process_max_bytes))
        if engine != "spark":
            self.log.info("no migration application started: a migration would run in-process (%s, by the "
                          "preflight savepoint)", why)
            return {"started": False, "why": why}
        run = self.run if isinstance(self.run, dict) else {}
        ref = AppRef.new(str(self.run_dir), run)
        # The stop savepoint's own size decides again in the application (driver or Spark tasks), by the same
        # bound; a forced engine "spark" means Spark tasks whatever it holds.
        driver_max = int(self.in_process_max_bytes) if str(self.engine) == "auto" else 0
        self.application_args = [*map(str, self.application_args or []), "--await-handoff", ref.folder,
                                 "--handoff-token", ref.token, f"--handoff-timeout={self.handoff_timeout}",
                                 f"--in-process-max-bytes={driver_max}"]
        hook = self._get_hook()
        command = hook._build_spark_submit_command(self.application)  # also sets the environment it runs with
        try:
            app = PrestartedApp.start(command, {**os.environ, **(hook._env or {})}, ref)
        except OSError as exc:  # no spark-submit here, say: the migrate task's own spark-submit will tell
            self.log.warning("the migration application could not be started before the stop: %s", exc)
            return {"started": False, "why": f"not started: {printable(exc)}"}
        self.log.info("started the migration application before the stop (pid %s, %s by the preflight savepoint): "
                      "it builds its Spark session, then waits for the stop savepoint in %s; its log: %s", app.pid,
                      why, ref.path(HANDOFF_FILE), app.log_path)
        return {**app.launch, "started": True, "why": why}


class MigrateOperator(FlinkStateSparkSubmitOperator):
    """The migrate task: with a pre-started application that was handed the stop savepoint (``prestarted``: the
    ``prestart_migration`` XCom), only waits for its result; otherwise runs the job itself after the stop, on the
    path the engine choice takes (in-process or a spark-submit), as before."""

    template_fields: Sequence[str] = (*FlinkStateSparkSubmitOperator.template_fields, "prestarted")

    def __init__(self, *, prestarted: Any = None, result_timeout: float = RESULT_TIMEOUT, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.prestarted, self.result_timeout = prestarted, result_timeout
        self._app: PrestartedApp | None = None

    def execute(self, context: Any) -> None:
        app = PrestartedApp.of(self.prestarted)
        try:
            handed_over = app.ref.handed_over() if app is not None else None
        except HandoffRefused as exc:  # not this launch's handoff: nothing of it is migrated
            raise TaskRefused(str(exc)) from None
        if app is None or not handed_over:
            return super().execute(context)
        self._app = app
        why = f"started before the stop (pid {app.pid} on {app.host}), handed {handed_over}"
        context["ti"].xcom_push(key="engine", value={"engine": "spark", "prestarted": True, "why": why})
        wait_for_result(app, self, self.result_timeout)
        return None

    def on_kill(self) -> None:
        if self._app is not None:  # the task killed: the application too (it would publish for a dead task)
            self._app.stop()
            return
        super().on_kill()


def wait_for_result(app: PrestartedApp, task: Any, timeout: float) -> None:
    """The migrate task with a pre-started application: waits for its result (it migrates, verifies, publishes and
    re-checks), shows its log, and fails in one line unless it published."""
    task.log.info("waiting (at most %.0f s) for the pre-started migration application (pid %s on %s) to migrate "
                  "the stop savepoint %s: %s", timeout, app.pid, app.host, app.ref.handed_over(),
                  app.ref.path(RESULT_FILE))
    try:
        result = app.ref.wait_for(app.ref.result, timeout, alive=app.alive)
    except HandoffRefused as exc:
        raise TaskRefused(str(exc)) from None
    for line in app.log_tail():
        task.log.info("application: %s", line)
    if result is None:
        app.stop()
        raise TaskRefused(f"the pre-started migration application (pid {app.pid}) ended without a "
                          f"result, or gave none within {timeout:.0f} s; its log: {app.log_path}")
    if result.get("outcome") != "published" or result.get("exit_code") != 0:
        raise TaskRefused(f"the pre-started migration application did not publish: "
                          f"{printable(str(result.get('line')))}")
    task.log.info("the pre-started migration application %s", result.get("line"))
