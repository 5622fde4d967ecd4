"""flink_state_upgrade under a real ``airflow standalone`` (api-server, scheduler with LocalExecutor, dag-processor,
triggerer), driven only through Airflow's REST API as an operator would: v1 of the sample job running on the real
local Flink is upgraded to v2 through the migration branch (Spark in local mode), then standalone is stopped and no
process of it may remain. The upgraded run is then looked at in the Airflow UI, in headless Chromium, through the
link its alert gives: the DAG run's "Flink upgrade" tab (the plugin's view) with the run's figures and verdicts."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from flinkstate.engine import LocalFlinkCluster
from flinkstate.engine.local import free_port
from flinkstate.savepoint import Savepoint
from tests.support import sample_job
from tests.support.airflow_env import ROOT
from tests.support.browser import chromium

pytestmark = [pytest.mark.flink, pytest.mark.airflow, pytest.mark.spark,  # the DAG runs spark-submit
              pytest.mark.browser]  # the view, in Chromium

DAG_ID = "flink_state_upgrade"
MANIFESTS = ROOT / "examples" / "sample-job" / "manifests"
VENV_BIN = Path(sys.executable).parent
DEADLINE_SECONDS = 30  # the upgrade DAG's deadline here: shorter than any upgrade run of this module
OVERRAN = "Flink upgrade still running after "
WATCHDOG_GRACE = 5  # seconds a dead run's journal must be quiet before the watchdog acts (FLINKSTATE_WATCHDOG_GRACE)
#: Where the view's screenshots are kept (the README's docs/airflow-view.png is the run's tab, copied from there).
SCREENSHOTS = Path(os.environ.get("FLINKSTATE_TEST_ARTIFACTS", ROOT / ".work" / "test-artifacts"))
#: How a check report words each verdict (flinkstate.report), in its Markdown table and its HTML page alike.
VERDICT_WORDS = {"COMPATIBLE_AS_IS": "as is", "COMPATIBLE_WITH_RECONFIGURED_SERIALIZER": "reconfigured",
                 "COMPATIBLE_AFTER_MIGRATION": "after migration", "INCOMPATIBLE": "INCOMPATIBLE"}


class Api:
    """Airflow's public REST API (v2) with a bearer token."""

    def __init__(self, base: str) -> None:
        self.base, self.token = base, ""

    def call(self, method: str, path: str, body: Any = None, *, timeout: float = 30) -> Any:
        request = urllib.request.Request(f"{self.base}{path}", method=method,
                                         data=None if body is None else json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json",
                                                  **({"Authorization": f"Bearer {self.token}"} if self.token else {})})
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read() or b"null")

    def wait_for(self, what: str, probe: Any, timeout: float, interval: float = 0.5) -> Any:
        """Calls ``probe`` until it returns something truthy (errors count as not yet); bounded by ``timeout``."""
        deadline, last = time.monotonic() + timeout, None
        while time.monotonic() < deadline:
            try:
                result = probe()
                if result:
                    return result
            except (urllib.error.URLError, OSError, KeyError, ValueError) as exc:
                last = exc
            time.sleep(interval)
        raise TimeoutError(f"{what}: not within {timeout:.0f} s (last error: {last})")


def processes_with_env(marker: str, group: int | None = None) -> list[int]:
    """Ids of the processes standalone started, however they re-grouped themselves: those whose environment holds
    ``marker`` (the fresh AIRFLOW_HOME), and those in its process ``group``. Both are needed: LocalExecutor
    workers rename themselves (setproctitle), which overwrites their environment block, but stay in the group."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if group is not None and _process_group(entry) == group:
                found.append(int(entry.name))
            elif marker.encode() in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue  # gone, or not ours
    return found


def _process_group(entry: Path) -> int:
    # /proc/<pid>/stat: "pid (comm) state ppid pgrp ..."; comm may hold spaces, so split after its ")".
    return int((entry / "stat").read_text().rsplit(")", 1)[1].split()[2])


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory, flink_cluster: LocalFlinkCluster, webhook: Any
               ) -> Iterator[tuple[Api, Path, Path]]:
    """One standalone for the module's tests (its start is the slow part), with the upgrade watchdog scheduled
    every minute over the savepoint base the tests use."""
    tmp_path = tmp_path_factory.mktemp("standalone")
    home = tmp_path / "airflow-home"
    home.mkdir()
    port = free_port()
    # A clean environment: nothing of the in-process Airflow of other tests (AIRFLOW__*, AIRFLOW_CONN_*) leaks in.
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update({
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__HOST": "127.0.0.1",
        # The alerts link to the run's page in the UI at this address (Airflow's own links use it too).
        "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
        # Task processes talk to the api-server's execution API: by default on :8080, which is not ours.
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "AIRFLOW__CORE__PARALLELISM": "4",  # a 2-core machine shared with other tests
        "AIRFLOW_CONN_FLINK_DEFAULT": json.dumps({"conn_type": "http", "host": "127.0.0.1",
                                                  "port": flink_cluster.status()["rest_port"]}),
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
        "AIRFLOW_CONN_FLINK_UPGRADE_WEBHOOK": json.dumps({"conn_type": "http", "host": "127.0.0.1",
                                                          "port": webhook.port, "schema": "http",
                                                          "extra": {"endpoint": "/hooks/standalone"}}),
        "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",  # spark-submit and airflow
        "SPARK_LOCAL_IP": "127.0.0.1",
        "FLINKSTATE_WATCHDOG_SCHEDULE": "* * * * *",
        "FLINKSTATE_WATCHDOG_GRACE": str(WATCHDOG_GRACE),
        "FLINKSTATE_SAVEPOINT_BASES": str(tmp_path / "watched-savepoints"),
        # The upgrade DAG's deadline (plugins/flinkstate_airflow/deadline.py): every run here outlasts it, so the
        # scheduler misses it and the triggerer runs its callback, which alerts while the run goes on.
        "FLINKSTATE_UPGRADE_DEADLINE_SECONDS": str(DEADLINE_SECONDS),
    })
    log_path = tmp_path / "standalone.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen([str(VENV_BIN / "airflow"), "standalone"], env=env, cwd=home, stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    marker = f"AIRFLOW_HOME={home}"
    try:
        api = Api(f"http://127.0.0.1:{port}")
        # standalone migrates its database and starts four components before the api-server listens: seen to take
        # more than 180 s on a loaded 2-core machine (the api-server started 2 s after a 180 s wait gave up)
        api.wait_for("api-server healthy", lambda: api.call("GET", "/api/v2/monitor/health")["metadatabase"]
                     ["status"] == "healthy", timeout=360)
        passwords = home / "simple_auth_manager_passwords.json.generated"
        password = api.wait_for("admin password", lambda: json.loads(passwords.read_text()).get("admin"), 60)
        api.token = api.call("POST", "/auth/token", {"username": "admin", "password": password})["access_token"]
        yield api, home, log_path
    except BaseException:
        print_tail(log_path)
        raise
    finally:
        stop_standalone(process, marker, log_path)


def stop_standalone(process: subprocess.Popen[bytes], marker: str, log_path: Path) -> None:
    """Stops standalone's whole process group: SIGINT first (SIGTERM to the parent alone leaves its workers behind),
    then SIGTERM and SIGKILL to the group when a component does not exit in time (under load its scheduler can
    hang in shutdown, and its LocalExecutor workers ignore SIGINT and SIGTERM: seen here, they needed SIGKILL; so did
    its dag-processor, which outlived 60 s of SIGINT and 20 s of SIGTERM, hence the short graces; in a run
    measured here the scheduler and the workers outlived 20 s of SIGINT and 10 s of SIGTERM alike, so long graces
    only made the teardown wait 30 s for the SIGKILL that ends them). Passes only when no process of ours is left."""
    for signum, grace in ((signal.SIGINT, 8), (signal.SIGTERM, 4), (signal.SIGKILL, 10)):
        try:
            os.killpg(process.pid, signum)
        except ProcessLookupError:
            pass
        for pid in processes_with_env(marker, process.pid):  # a component that left the group is still ours
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        while (process.poll() is None or processes_with_env(marker, process.pid)) and time.monotonic() < deadline:
            time.sleep(0.2)
        if process.poll() is not None and not processes_with_env(marker, process.pid):
            print(f"airflow standalone stopped on {signal.Signals(signum).name} in "
                  f"{grace - (deadline - time.monotonic()):.0f} s")
            return
        print(f"airflow standalone still running {grace} s after {signal.Signals(signum).name}: "
              f"{ {pid: describe(pid) for pid in processes_with_env(marker, process.pid)} }")
    left = {pid: describe(pid) for pid in processes_with_env(marker, process.pid)}
    print_tail(log_path)
    pytest.fail(f"airflow standalone left processes behind even after SIGKILL: {left}")


def describe(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:160]
    except OSError:
        return "(gone)"


def print_tail(path: Path, lines: int = 80) -> None:
    if path.exists():
        text = path.read_text(errors="replace").splitlines()
        print(f"----- last {lines} lines of {path} -----\n" + "\n".join(text[-lines:]))


def upgrade_run(api: Api, home: Path, output: Path, options: list[str]) -> subprocess.Popen[bytes]:
    """``flinkstate upgrade run --airflow-url`` in a process of its own, as an operator runs it: signed in as the
    admin standalone made (user and password from the environment, not on the command line), its output to
    ``output``; from the project's folder, so that it is this checkout's flinkstate."""
    password = json.loads((home / "simple_auth_manager_passwords.json.generated").read_text())["admin"]
    env = {**os.environ, "FLINKSTATE_AIRFLOW_USER": "admin", "FLINKSTATE_AIRFLOW_PASSWORD": password}
    with open(output, "wb") as sink:
        return subprocess.Popen([sys.executable, "-m", "flinkstate", "upgrade", "run", "--airflow-url", api.base,
                                 "--poll", "1", *options], cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT)


def triggered_run(output: Path) -> str | None:
    """The run id ``flinkstate upgrade run`` printed once it triggered the run."""
    match = re.search(rf"^{DAG_ID}: run (\S+) of keyed-stats triggered: ", output.read_text(), re.MULTILINE)
    return match[1] if match else None


def test_upgrade_v1_to_v2_through_the_rest_api_of_airflow_standalone(
        standalone: tuple[Api, Path, Path], flink_cluster: LocalFlinkCluster, webhook: Any, tmp_path: Path):
    """The whole upgrade through Airflow's REST API, triggered and followed by `flinkstate upgrade run --airflow-url`
    (its options make the conf; it prints each task's state, the outcome, the downtime and the alert, and exits 0),
    with the fault of issue 24: the scheduler leaves a gap far
    longer than the watchdog's grace between two tasks after the stop (the DAG is paused from `migrate` until the
    watchdog has swept the quiet journal). The run's owner is its DAG run, still running: the watchdog leaves it
    alone, the run ends with v2 alone RUNNING and one alert that says so."""
    api, home, log_path = standalone
    client = flink_cluster.client
    running = sample_job.submit(client, "v1", tmp_path / "audit", keys=5, rate=50,
                                extra_args=["--checkpoint-interval-ms", "1000"])
    new_job = None
    received_before = len(webhook.received)
    command: subprocess.Popen[bytes] | None = None
    try:
        api.wait_for(f"{DAG_ID} parsed", lambda: api.call("GET", f"/api/v2/dags/{DAG_ID}"), timeout=180)
        assert api.call("PATCH", f"/api/v2/dags/{DAG_ID}", {"is_paused": False})["is_paused"] is False

        base = home.parent / "watched-savepoints"  # the base FLINKSTATE_SAVEPOINT_BASES names: the watchdog sweeps it
        v1 = {"jar": str(sample_job.jar("v1")), "manifest": str(MANIFESTS / "v1.yaml"),
              "entry_class": sample_job.ENTRY_CLASS, "program_args": running.program_args, "parallelism": 1}
        conf = {"job_id": running.job_id, "job_name": "keyed-stats", "jar": str(sample_job.jar("v2")),
                "entry_class": sample_job.ENTRY_CLASS, "program_args": running.program_args, "parallelism": 1,
                "manifest": str(MANIFESTS / "v2.yaml"), "savepoint_base": str(base), "mode": "upgrade",
                "min_checkpoints": 2, "gate_timeout": 120, "min_running_seconds": 3, "approval": True, "current": v1}
        output = tmp_path / "upgrade-run.out"
        command = upgrade_run(api, home, output, [
            "--deployment", "keyed-stats", "--job-id", running.job_id, "--jar", str(sample_job.jar("v2")),
            "--entry-class", sample_job.ENTRY_CLASS, "--parallelism", "1", "--manifest", str(MANIFESTS / "v2.yaml"),
            "--savepoint-base", str(base), "--min-checkpoints", "2", "--gate-timeout", "120", "--approval",
            "--min-running-seconds", "3", "--current-jar", v1["jar"], "--current-manifest", v1["manifest"],
            "--current-entry-class", sample_job.ENTRY_CLASS, "--current-parallelism", "1",
            f"--current-program-args={shlex.join(running.program_args)}", "--", *running.program_args])
        run_id = api.wait_for("the command to trigger the run", lambda: triggered_run(output), timeout=120)
        # --approval: nothing is stopped until a person answers; the command says where, and the answer goes through
        # the endpoint the UI's required actions call.
        api.wait_for("the command to say the stop awaits an answer",
                     lambda: re.search(r"approve_stop: \w+ \(waiting for a person's answer", output.read_text()),
                     timeout=300)
        assert client.job_state(running.job_id) == "RUNNING"
        # A person takes seconds to answer. An answer within about a second of the question races Airflow 3.3 itself:
        # the executor then reports the asking process's exit while the answered task is queued again, and the
        # scheduler fails it ("finished with state success, but the task instance's state attribute is queued").
        time.sleep(8)
        api.wait_for("the answer to be taken", lambda: api.call(
            "PATCH", f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/approve_stop/-1/hitlDetails",
            {"chosen_options": ["migrate/restore"]}), timeout=60)
        journal_file = base / "journal" / "keyed-stats.json"

        def phase(wanted: str) -> Callable[[], dict[str, Any] | None]:
            def probe() -> dict[str, Any] | None:
                journal = json.loads(journal_file.read_text())
                return journal if journal["phase"] == wanted else None
            return probe

        # The scheduler gap: nothing after `migrate` is scheduled while the DAG is paused.
        api.wait_for("the run to stop the old job and start migrating", phase("migrating"), timeout=300, interval=0.2)
        api.call("PATCH", f"/api/v2/dags/{DAG_ID}", {"is_paused": True})
        migrated = api.wait_for("the migration to end", phase("migrated"), timeout=300, interval=0.5)
        quiet_from = float(migrated["updated_epoch"]) + WATCHDOG_GRACE
        time.sleep(max(0.0, quiet_from - time.time()))
        api.call("PATCH", "/api/v2/dags/flink_upgrade_watchdog", {"is_paused": False})

        def swept_after_the_grace() -> bool:
            runs = api.call("GET", "/api/v2/dags/flink_upgrade_watchdog/dagRuns")["dag_runs"]
            return any(r["state"] == "success" and r.get("start_date") and
                       datetime.fromisoformat(r["start_date"]).timestamp() > quiet_from for r in runs)

        api.wait_for("a watchdog run to sweep the quiet journal", swept_after_the_grace, timeout=150, interval=1)
        gap = time.time() - float(migrated["updated_epoch"])
        api.call("PATCH", "/api/v2/dags/flink_upgrade_watchdog", {"is_paused": True})
        assert json.loads(journal_file.read_text())["phase"] == "migrated"  # the watchdog left the live run alone
        api.call("PATCH", f"/api/v2/dags/{DAG_ID}", {"is_paused": False})
        print(f"scheduler gap after migrate: {gap:.0f} s (watchdog grace {WATCHDOG_GRACE} s)")

        started = time.monotonic()
        status = command.wait(timeout=420)  # the command follows the run to its end
        took = time.monotonic() - started
        printed = output.read_text()
        run = api.call("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}")
        tasks = {t["task_id"]: t["state"] for t in
                 api.call("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances")["task_instances"]}
        assert run["state"] == "success" and status == 0, (status, printed, tasks)
        assert run["conf"] == conf  # the command's options made the conf a trigger by hand sends
        # Its progress: the state it printed last for each task is the one Airflow ended it with.
        assert dict(re.findall(r"^  \[ *\d+ s\] (\w+): (\w+)$", printed, re.MULTILINE)) == tasks, printed
        print(f"upgrade run took {took:.0f} s: {tasks}")
        assert tasks["stop_for_migration"] == tasks["migrate"] == tasks["recheck"] == "success", tasks
        assert tasks["stop_for_restore"] == "skipped" and tasks["conclude"] == "success", tasks
        assert tasks["approve_stop"] == "success" and tasks["approval_refused"] == "skipped", tasks

        registry = json.loads((base / "deployments.json").read_text())["keyed-stats"]
        new_job = registry["job_id"]
        assert registry["version"]["jar"] == str(sample_job.jar("v2"))
        assert registry["version"]["manifest"] == str(MANIFESTS / "v2.yaml")
        assert registry["savepoint"].endswith("/migrated/savepoint")
        assert client.job_state(new_job) == "RUNNING" and client.job_state(running.job_id) == "FINISHED"
        assert client.job(new_job)["name"] == "keyed-stats-v2"
        # v2 restored v1's state migrated by Spark: every key's audit line matches v1's state at its count.
        deadline = time.monotonic() + 60
        while len({r["key"] for r in sample_job.read_audit(tmp_path / "audit", "v2")}) < 5:
            assert time.monotonic() < deadline, "v2 did not report every key within 60 s"
            time.sleep(0.5)
        first: dict[str, dict[str, Any]] = {}
        for record in sample_job.read_audit(tmp_path / "audit", "v2"):
            first.setdefault(record["key"], record)
        # The migration filled v2's new field with the manifest's default (Flink alone would leave it null).
        assert {r["stats"].pop("label") for r in first.values()} == {"migrated"}, first
        assert all(sample_job.check_audit_record(r, "v1") > 0 for r in first.values())

        final = json.loads(journal_file.read_text())
        assert final["outcome"] == "upgraded" and final["running"]["version"] == "new", final
        assert not [s for s in final["history"] if str(s.get("actor", "")).startswith("watchdog")], final["history"]
        # Exactly one version RUNNING: v2 (the old job was stopped once, and nobody restored it).
        assert [j["jid"] for j in client.list_jobs() if j["state"] == "RUNNING"] == [new_job]

        posted = [m for m in webhook.received[received_before:] if m["path"] == "/hooks/standalone"]
        # The deadline's alert, sent while the run went on (it outlasted DEADLINE_SECONDS), before the outcome's.
        overran = [m["text"] for m in posted if m["text"].startswith(OVERRAN)]
        posted = [m for m in posted if not m["text"].startswith(OVERRAN)]
        assert overran == [f"{OVERRAN}{DEADLINE_SECONDS} s: DAG run {run_id} of {DAG_ID}, deployment keyed-stats, "
                           f"queued at {run['queued_at']}, running. It goes on; see where it is: "
                           f"{api.base}/dags/{DAG_ID}/runs/{quote(run_id, safe='')}/plugin/flink-upgrade"], overran
        assert len(posted) == 1, posted
        assert posted[0]["text"].startswith("Flink upgrade of keyed-stats succeeded: RUNNING now: the new version")
        assert f"as job {new_job}" in posted[0]["text"]
        # The command printed the run's outcome, run.json's downtime, and the alert the webhook got.
        done = [e for e in json.loads((Path(final["run_dir"]) / "run.json").read_text())["events"]
                if e["stage"] == "done"][-1]
        head, alert = printed.split("\nalert:\n", 1)
        assert head.splitlines()[-1] == (f"run {run_id}: success; outcome: upgraded; down "
                                         f"{done['durations']['down']:.1f} s (stop request -> every subtask of the "
                                         "job that runs now RUNNING)"), printed
        assert "\n".join(line.removeprefix("  ") for line in alert.split("\n")[:-1]) == posted[0]["text"], printed
        # The alert links to the run's tab in the Airflow UI, where the run's figures and verdicts are seen.
        link = posted[0]["text"].split("See it in Airflow: ", 1)[1].split()[0]
        assert link == f"{api.base}/dags/{DAG_ID}/runs/{quote(run_id, safe='')}/plugin/flink-upgrade", posted[0]
        see_the_run_in_chromium(api, link, base / "keyed-stats", run_id, new_job)
        # The task logs as the UI's log tab shows them: choose_path holds the check report's headline and the
        # states that needed more than a restore, conclude the alert.
        logs = f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/{{}}/logs/1?full_content=true"
        chosen = json.dumps(api.call("GET", logs.format("choose_path")))
        assert "compatibility check: migration required and possible (verdict COMPATIBLE_AFTER_MIGRATION)" in chosen
        assert "the check report: " in chosen, chosen[-2000:]
        concluded = json.dumps(api.call("GET", logs.format("conclude")))
        assert "flink upgrade alert:" in concluded and "succeeded: RUNNING now: the new version" in concluded
    except BaseException:
        print_tail(log_path)
        raise
    finally:
        if command is not None and command.poll() is None:  # a failure before its end: it is ours to stop
            command.kill()
        for job in (running.job_id, new_job):
            if job and client.job_state(job) == "RUNNING":
                client.cancel(job)


def see_the_run_in_chromium(api: Api, link: str, deployment_dir: Path, run_id: str, new_job: str) -> None:
    """The upgrade run as a person sees it: the alert's link opened in headless Chromium, signed in (the simple
    auth manager's cookie, with the token the test got): the DAG run's "Flink upgrade" tab shows the plugin's page of
    the run, with run.json's outcome, what runs and the downtime, and the preflight check's verdict of every state;
    the "Flink upgrades" page in the navigation lists the run. The page asks nothing of any other server. Without
    signing in, the view answers 401."""
    started = time.monotonic()
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{api.base}/flink-upgrades/", timeout=30)
    assert refused.value.code == 401
    run_dir = next(d for d in deployment_dir.iterdir() if json.loads((d / "run.json").read_text())["plan"]["run_id"]
                   == run_id)
    done = [e for e in json.loads((run_dir / "run.json").read_text())["events"] if e["stage"] == "done"][-1]
    report = json.loads((run_dir / "preflight" / "check-report.json").read_text())
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with chromium() as browser:
        context = browser.new_context(viewport={"width": 1400, "height": 1500})  # the figures and the report
        context.add_cookies([{"name": "_token", "value": api.token, "url": api.base}])
        page = context.new_page()
        requested: list[str] = []
        page.on("request", lambda request: requested.append(request.url))
        page.goto(link)
        tab = page.frame_locator('iframe[title="Flink upgrade"]')
        tab.locator("table.figures").wait_for(timeout=90_000)
        figures = dict(zip(tab.locator("table.figures th").all_inner_texts(),
                           tab.locator("table.figures td").all_inner_texts(), strict=True))
        assert figures["outcome"] == "upgraded", figures
        assert figures["running after it"] == f"the new version (sample-job-v2.jar) as job {new_job}", figures
        assert figures["down"].startswith(f"{done['durations']['down']:.1f} s (from the stop request"), figures
        # The preflight check's verdicts: its HTML page inline when the run has one, else its Markdown.
        if run_dir.joinpath("preflight", "check-report.html").is_file():
            rows = tab.frame_locator("iframe.report").locator("tr").all_inner_texts()
        else:
            rows = tab.locator("pre.report").inner_text().splitlines()
        for state in report["states"]:
            words = [state["operator"], state["state"] or "", VERDICT_WORDS[state["verdict"]]]
            assert any(all(w in row for w in words) for row in rows), (words, rows)
        page.screenshot(path=str(SCREENSHOTS / "airflow-view-run.png"))
        page.goto(f"{api.base}/plugin/flink-upgrades")
        listing = page.frame_locator('iframe[title="Flink upgrades"]')
        row = listing.locator("tr", has=listing.get_by_role("link", name=run_id, exact=True))
        row.wait_for(timeout=60_000)
        cells = row.locator("td").all_inner_texts()
        assert cells[3:6] == ["upgraded", f"the new version (sample-job-v2.jar) as job {new_job}",
                              f"{done['durations']['down']:.1f} s"], cells
        page.screenshot(path=str(SCREENSHOTS / "airflow-view-list.png"))
        context.close()
    assert [u for u in requested if not u.startswith((api.base, f"blob:{api.base}", "data:", "about:"))] == []
    print(f"the run seen in Chromium in {time.monotonic() - started:.0f} s; screenshots in {SCREENSHOTS}")


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:  # each process once: its children are found, then their own children in turn
        kids = children.get(todo.pop(), [])
        found += kids
        todo += kids
    return sorted(set(found))


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def test_a_run_killed_after_the_stop_is_recovered_by_the_watchdog(
        standalone: tuple[Api, Path, Path], flink_cluster: LocalFlinkCluster, webhook: Any, tmp_path: Path):
    """The fault of issue 13: the Airflow process running the upgrade dies right after the stop (its task process
    and the worker supervising it are SIGKILLed: no callback runs, the run stays "running"). The scheduled watchdog
    finds the journal of a dead run and restores the old version from the stop savepoint, with its exact state,
    and sends one alert, with no person involved."""
    api, home, log_path = standalone
    client = flink_cluster.client
    base = home.parent / "watched-savepoints"  # the base FLINKSTATE_SAVEPOINT_BASES names
    running = sample_job.submit(client, "v1", tmp_path / "audit", keys=5, rate=50,
                                extra_args=["--checkpoint-interval-ms", "1000"])
    received_before = len(webhook.received)
    restored_job = None
    try:
        api.wait_for(f"{DAG_ID} parsed", lambda: api.call("GET", f"/api/v2/dags/{DAG_ID}"), timeout=180)
        api.call("PATCH", f"/api/v2/dags/{DAG_ID}", {"is_paused": False})
        v1 = {"jar": str(sample_job.jar("v1")), "manifest": str(MANIFESTS / "v1.yaml"),
              "entry_class": sample_job.ENTRY_CLASS, "program_args": running.program_args, "parallelism": 1}
        conf = {"job_id": running.job_id, "job_name": "killed-stats", "jar": str(sample_job.jar("v2")),
                "entry_class": sample_job.ENTRY_CLASS, "program_args": running.program_args, "parallelism": 1,
                "manifest": str(MANIFESTS / "v2.yaml"), "savepoint_base": str(base), "mode": "upgrade",
                "min_checkpoints": 2, "gate_timeout": 120, "min_running_seconds": 3, "current": v1}
        run_id = api.call("POST", f"/api/v2/dags/{DAG_ID}/dagRuns", {"logical_date": None, "conf": conf})["dag_run_id"]
        journal_file = base / "journal" / "killed-stats.json"

        def migrating() -> dict[str, Any] | None:
            journal = json.loads(journal_file.read_text())
            return journal if journal["phase"] == "migrating" else None

        journal = api.wait_for("the run to stop the old job and start migrating", migrating, timeout=300, interval=0.2)
        assert client.job_state(running.job_id) == "FINISHED"  # production is down from here
        task_pid = int(journal["owner"]["pid"])
        supervisor = _parent(task_pid)
        victims = [supervisor, task_pid, *_descendants(task_pid)]
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        killed_at = time.monotonic()
        # Unpaused, the watchdog runs at once (its last cron tick is past), then every minute. Its first run must
        # find the journal quiet for the grace period already, or the recovery waits for the next tick (up to 60 s).
        quiet_from = float(json.loads(journal_file.read_text())["updated_epoch"]) + WATCHDOG_GRACE
        time.sleep(max(0.0, quiet_from - time.time()))
        api.call("PATCH", "/api/v2/dags/flink_upgrade_watchdog", {"is_paused": False})

        def recovered() -> dict[str, Any] | None:
            data = json.loads(journal_file.read_text())
            return data if data["phase"] == "done" else None

        final = api.wait_for("the watchdog to recover the dead run", recovered, timeout=240, interval=0.5)
        print(f"watchdog recovered the killed run {time.monotonic() - killed_at:.0f} s after the kill")
        assert final["outcome"] == "rolled back" and final["running"]["version"] == "old", final
        restored_job = final["running"]["job_id"]
        assert final["history"][-1]["actor"].startswith("watchdog"), final["history"][-1]
        assert [s["phase"] for s in final["history"]][:4] == ["planned", "stopping", "stopped", "migrating"]
        assert client.job_state(restored_job) == "RUNNING"
        stop = final["stop_savepoint"]
        assert stop.startswith(str(base / "killed-stats")) and "/stop/savepoint-" in stop
        assert client.checkpoints(restored_job).restored_from.removeprefix("file:") == stop
        registry = json.loads((base / "deployments.json").read_text())["killed-stats"]
        assert registry["job_id"] == restored_job and registry["version"]["jar"] == str(sample_job.jar("v1"))
        # The restarted v1 found exactly the state v1 stopped with. The sample job audits each key's first event
        # per run, so each key has two records once the restart has seen it: the later one is the restart's.
        stats = {key: value for key, _, value in Savepoint.open(stop).iter_entries("stats", "stats")}
        assert len(stats) == 5

        def restart_records() -> list[dict[str, Any]] | None:
            latest: dict[str, list[dict[str, Any]]] = {}
            for record in sample_job.read_audit(tmp_path / "audit", "v1"):
                latest.setdefault(record["key"], []).append(record)
            if len(latest) == 5 and all(len(r) >= 2 for r in latest.values()):
                return [max(r, key=lambda x: x["seq"]) for r in latest.values()]
            return None

        for record in api.wait_for("every key seen by the restored v1", restart_records, timeout=60, interval=0.5):
            assert record["count"] == stats[record["key"]]["count"], (record, stats[record["key"]])
            assert sample_job.check_audit_record(record, "v1") == stats[record["key"]]["count"]
        def watchdog_alerts() -> list[str] | None:  # posted after the restart, maybe after v1's first records
            found = [m["text"] for m in webhook.received[received_before:] if m["path"] == "/hooks/standalone"
                     and not m["text"].startswith(OVERRAN)]  # the deadline's, if this run outlasted it
            return found or None

        alerts = api.wait_for("the watchdog's alert", watchdog_alerts, timeout=60, interval=0.5)
        time.sleep(2)  # and no second one
        alerts = watchdog_alerts() or []
        assert len(alerts) == 1, alerts
        assert alerts[0].startswith(f"Flink upgrade of killed-stats: run {run_id} DIED in phase migrating"), alerts
        assert f"RUNNING now: the old version (sample-job-v1.jar) as job {restored_job}" in alerts[0], alerts
    except BaseException:
        print_tail(log_path)
        raise
    finally:
        for job in (running.job_id, restored_job):
            if job and client.job_state(job) == "RUNNING":
                client.cancel(job)
