"""``flinkstate upgrade run`` without a cluster: the conf it triggers flink_state_upgrade with (from options, or from a
release file's entry, as the scheduler builds it), its usage errors, its one-line errors (an Airflow that cannot be
reached, a server that is not Airflow), and how it reports a run's end (exit status, escaped names). The command on a
real Airflow with a real upgrade of the sample job: tests/test_airflow_standalone.py."""

from __future__ import annotations

import argparse
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from flinkstate.cli import build_parser, main, upgrade_run
from flinkstate.cli.upgrade_run import Concluded, _report, build_conf
from flinkstate.engine.local import free_port

V1_ARGS = ["--keys", "5", "--rate", "50"]


def conf_of(*argv: str) -> dict:
    args = build_parser().parse_args(["upgrade", "run", "--local", *argv])
    return build_conf(args)


def test_the_conf_from_options_is_the_dags_conf():
    conf = conf_of("--deployment", "keyed-stats", "--jar", "/jobs/v2.jar", "--entry-class", "sample.KeyedStatsJob",
                   "--manifest", "/m/v2-overlay.yaml", "--parallelism", "2", "--savepoint-base", "/sp/base/",
                   "--job-id", "a" * 32, "--current-jar", "/jobs/v1.jar", "--current-entry-class",
                   "sample.KeyedStatsJob", "--current-program-args=--keys 5 --rate '50'", "--current-parallelism",
                   "2", "--min-running-seconds", "3", "--gate-timeout", "120", "--engine", "in-process",
                   "--", *V1_ARGS)
    assert conf == {
        "job_name": "keyed-stats", "job_id": "a" * 32, "jar": "/jobs/v2.jar", "entry_class": "sample.KeyedStatsJob",
        "program_args": V1_ARGS, "parallelism": 2, "manifest": "/m/v2-overlay.yaml", "savepoint_base": "/sp/base",
        "mode": "upgrade", "min_running_seconds": 3, "gate_timeout": 120, "engine": "in-process",
        "current": {"jar": "/jobs/v1.jar", "manifest": None, "entry_class": "sample.KeyedStatsJob",
                    "program_args": V1_ARGS, "parallelism": 2}}
    # The least: the job found by the deployment's name, the DAG's defaults for everything else.
    assert conf_of("--deployment", "orders", "--jar", "/jobs/o.jar", "--savepoint-base", "s3://b/p") == {
        "job_name": "orders", "job_id": "", "jar": "/jobs/o.jar", "entry_class": "", "program_args": [],
        "parallelism": None, "manifest": "", "savepoint_base": "s3://b/p", "mode": "upgrade"}
    assert conf_of("--deployment", "orders", "--jar", "/jobs/o.jar", "--savepoint-base", "/sp", "--mode",
                   "check-only", "--allow-non-restored-state")["mode"] == "check-only"
    # A person approves the stop (the DAG's approval step), within the time given.
    approved = conf_of("--deployment", "orders", "--jar", "/jobs/o.jar", "--savepoint-base", "/sp", "--approval",
                       "--approval-timeout", "600")
    assert (approved["approval"], approved["approval_timeout"]) == (True, 600)
    # --local: no UI runs unless the user starts one; the command says what the run waits for, before it starts.
    assert upgrade_run.local_approval_note(approved) == (
        "flink_state_upgrade: approval: the run waits for a person's answer before the stop (600 s) in an Airflow UI "
        "on this AIRFLOW_HOME (airflow api-server); none in time aborts it (the job runs on)")
    assert "(no limit)" in str(upgrade_run.local_approval_note({"approval": True, "approval_timeout": 0}))
    assert upgrade_run.local_approval_note({"approval": False}) is None
    # The new version on another cluster (the DAG's target_flink_conn_id): the old one's stays flink_default.
    assert conf_of("--deployment", "orders", "--jar", "/jobs/o.jar", "--savepoint-base", "/sp",
                   "--target-flink-conn-id", "flink_2x")["target_flink_conn_id"] == "flink_2x"


RELEASE = """savepoint_base: {base}
jobs:
  keyed-stats:
    jar: /jobs/v2.jar
    entry_class: sample.KeyedStatsJob
    program_args: [--keys, "5"]
    parallelism: 2
    manifest: /m/v2-overlay.yaml
    window: {{start: "02:00", end: "03:00"}}
    current: {{jar: /jobs/v1.jar, program_args: [--keys, "5"]}}
    min_checkpoints: 3
    approval: true
    mode: check-only
  renamed:
    flink_job_name: keyed-stats-v1
    jar: /jobs/r.jar
"""


def test_the_conf_of_a_release_entry_is_the_schedulers(tmp_path: Path):
    release = tmp_path / "release.yaml"
    release.write_text(RELEASE.format(base=tmp_path / "base"))
    conf = conf_of("--deployment", "keyed-stats", "--release", str(release), "--gate-timeout", "99")
    assert conf == {
        "job_name": "keyed-stats", "job_id": "", "jar": "/jobs/v2.jar", "entry_class": "sample.KeyedStatsJob",
        "program_args": ["--keys", "5"], "parallelism": 2, "manifest": "/m/v2-overlay.yaml",
        "savepoint_base": str(tmp_path / "base"), "mode": "check-only", "min_checkpoints": 3, "approval": True,
        "gate_timeout": 99,
        "current": {"jar": "/jobs/v1.jar", "manifest": None, "entry_class": None, "program_args": ["--keys", "5"],
                    "parallelism": None}}
    # An option wins over the entry; the window is the scheduler's business, not a manual run's.
    assert conf_of("--deployment", "keyed-stats", "--release", str(release), "--mode", "upgrade")["mode"] == "upgrade"
    # An entry whose Flink job has another name: the job id given wins, and Flink is not asked.
    assert conf_of("--deployment", "renamed", "--release", str(release), "--job-id", "b" * 32)["job_id"] == "b" * 32


def test_a_release_entry_that_cannot_be_used_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    release = tmp_path / "release.yaml"
    release.write_text(RELEASE.format(base=tmp_path / "base"))
    closed = f"http://127.0.0.1:{free_port()}"
    cases = {
        ("--deployment", "nope", "--release", str(release)):
            f"flinkstate: error: {release}: jobs.nope: no such deployment (the file names keyed-stats, renamed)\n",
        # Its job is looked up by flink_job_name where Flink is: not reachable here.
        ("--deployment", "renamed", "--release", str(release), "--flink-url", closed):
            f"flinkstate: error: {release}: jobs.renamed: which job to upgrade: cannot reach the Flink REST API at "
            f"{closed}: connection refused or reset (give --job-id, or --flink-url)\n",
        ("--deployment", "x", "--release", str(tmp_path / "missing.yaml")):
            f"flinkstate: error: {tmp_path / 'missing.yaml'}: cannot read the release file: ",
    }
    for argv, line in cases.items():
        assert main(["upgrade", "run", "--local", *argv]) == 1
        captured = capsys.readouterr()
        assert captured.err.startswith(line) and captured.err.count("\n") == 1, captured.err
        assert captured.out == ""
    release.write_text("jobs:\n  a:\n    jar: /j.jar\n    window: {start: 2:00, end: '03:00'}\nsavepoint_base: /b\n")
    assert main(["upgrade", "run", "--local", "--deployment", "a", "--release", str(release)]) == 1
    assert capsys.readouterr().err == (f'flinkstate: error: {release}: jobs.a.window.start: expected "HH:MM" '
                                       f'(00:00-23:59), got 120 (quote it: "02:00")\n')


@pytest.mark.parametrize(("argv", "message"), [
    (["--local", "--deployment", "d", "--savepoint-base", "/b"], "give the new version (--jar JAR)"),
    (["--local", "--deployment", "d", "--jar", "/j.jar"], "and --savepoint-base, or --release FILE"),
    (["--local", "--deployment", "d", "--release", "r.yaml", "--jar", "/j.jar"], "drop --jar"),
    (["--local", "--deployment", "d", "--release", "r.yaml", "--", "--keys", "5"], "drop --"),
    (["--local", "--deployment", "d", "--jar", "/j.jar", "--savepoint-base", "/b", "--current-manifest", "m.yaml"],
     "--current-manifest describes the running version: give its --current-jar too"),
    (["--local", "--airflow-url", "http://a", "--deployment", "d"], "not allowed with argument"),
    (["--deployment", "d", "--jar", "/j.jar"], "one of the arguments --airflow-url --local is required"),
])
def test_usage_errors(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]):
    with pytest.raises(SystemExit) as exited:
        main(["upgrade", "run", *argv])
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_an_airflow_that_cannot_be_reached_is_one_line(capsys: pytest.CaptureFixture[str]):
    closed = f"http://127.0.0.1:{free_port()}"
    assert main(["upgrade", "run", "--airflow-url", closed, "--deployment", "d", "--jar", "/j.jar",
                 "--savepoint-base", "/b", "--airflow-user", "admin", "--airflow-password", "pw"]) == 1
    captured = capsys.readouterr()
    assert captured.err == (f"flinkstate: error: cannot reach Airflow's REST API at {closed} (ConnectionError): is "
                            "its api-server running there?\n")
    assert captured.out == ""


@pytest.fixture
def not_airflow(tmp_path: Path) -> Iterator[str]:
    """A web server that is not Airflow: Python's file server on an empty folder."""
    class Files(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: Any) -> None:
            super().__init__(*args, directory=str(tmp_path))

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Files)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_server_that_is_not_airflow_is_one_line(not_airflow: str, capsys: pytest.CaptureFixture[str]):
    argv = ["upgrade", "run", "--airflow-url", not_airflow, "--deployment", "d", "--jar", "/j.jar",
            "--savepoint-base", "/b"]
    assert main(argv) == 1
    assert capsys.readouterr().err == (f"flinkstate: error: Airflow at {not_airflow}: GET "
                                       "/api/v2/dags/flink_state_upgrade: 404 File not found\n")
    assert main([*argv, "--airflow-user", "admin", "--airflow-password", "pw"]) == 1
    assert capsys.readouterr().err == (f"flinkstate: error: Airflow at {not_airflow}: POST /auth/token: 501 "
                                       "Unsupported method ('POST')\n")


@pytest.mark.parametrize(("outcome", "state", "status"), [
    ("upgraded", "success", 0), ("checked", "success", 0), ("refused", "failed", 3), ("unchanged", "failed", 4),
    ("rolled back", "failed", 5), ("DOWN", "failed", 6)])
def test_the_exit_status_says_what_the_run_did(outcome: str, state: str, status: int,
                                               capsys: pytest.CaptureFixture[str]):
    assert _report(Concluded("manual__1", state, True, outcome, {"down": 12.345, "gate": 30.0}, "Flink upgrade ...")) \
        == status
    out = capsys.readouterr().out
    assert out.splitlines()[0] == (f"run manual__1: {state}; outcome: {outcome}; down 12.3 s (stop request -> every "
                                   "subtask of the job that runs now RUNNING)")


def test_a_run_without_an_outcome(capsys: pytest.CaptureFixture[str]):
    # It failed before it planned anything (resolve): nothing was touched.
    assert _report(Concluded("manual__2", "failed", False, None, {}, "Flink upgrade of d FAILED before anything "
                             "was changed: resolve: no such job")) == 4
    assert capsys.readouterr().out == ("run manual__2: failed; outcome: none recorded\nalert:\n  Flink upgrade of d "
                                       "FAILED before anything was changed: resolve: no such job\n")
    # It planned, and no outcome is known (a newer run replaced its journal): an error, not a guess.
    assert _report(Concluded("manual__3", "failed", True, None, {}, None)) == 1
    captured = capsys.readouterr()
    assert "alert: none received" in captured.out
    assert captured.err == "flinkstate: error: the run's outcome is not known (see the run and its journal)\n"


def test_names_are_printed_escaped(capsys: pytest.CaptureFixture[str]):
    hostile = "keyed\x1b[2J-stats\rFAKE"
    _report(Concluded(f"run\n{hostile}", "success", True, "upgraded", {},
                      f"Flink upgrade of {hostile} succeeded\nReport: /b/{hostile}/report.md"))
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\r" not in out
    assert out.splitlines() == ["run run\\nkeyed\\x1b[2J-stats\\rFAKE: success; outcome: upgraded", "alert:",
                                "  Flink upgrade of keyed\\x1b[2J-stats\\rFAKE succeeded",
                                "  Report: /b/keyed\\x1b[2J-stats\\rFAKE/report.md"]


def test_the_command_is_listed(capsys: pytest.CaptureFixture[str]):
    with pytest.raises(SystemExit):
        main(["upgrade", "--help"])
    assert "run" in capsys.readouterr().out
    assert isinstance(build_parser().parse_args(["upgrade", "run", "--local", "--deployment", "d"]),
                      argparse.Namespace)
