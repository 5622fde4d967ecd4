"""The local cluster manager: start, status, two clusters side by side, stop leaving nothing behind."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from flinkstate.engine import FlinkRestClient, FlinkUnreachable, LocalFlinkCluster
from flinkstate.engine.local import _pid_alive, port_in_use

pytestmark = pytest.mark.flink


def test_second_cluster_runs_beside_the_first_and_stops_cleanly(flink_cluster: LocalFlinkCluster, tmp_path: Path):
    first = flink_cluster.status()
    second = LocalFlinkCluster(tmp_path / "second", slots=1)
    second.start()
    try:
        status = second.status()
        assert status["running"]
        assert status["rest_port"] != first["rest_port"] and status["rpc_port"] != first["rpc_port"]
        assert status["overview"]["slots-total"] == 1
        assert status["overview"]["flink-version"] == "2.3.0"
        for folder in ("conf", "log", "pid", "tmp"):
            assert (tmp_path / "second" / folder).is_dir()
        assert f"rest.port: {status['rest_port']}" in (tmp_path / "second" / "conf" / "config.yaml").read_text()
        # starting again is a no-op on a running cluster
        assert second.start().status()["pids"] == status["pids"]
        pids = list(status["pids"].values())
        assert len(pids) == 2 and all(_pid_alive(pid) for pid in pids)
        # `cluster stop` says what it stopped (not the status afterwards, which says that none runs)
        stop = subprocess.run([sys.executable, "-m", "flinkstate", "cluster", "stop", "--work-dir",
                               str(tmp_path / "second")], capture_output=True, text=True)
        assert stop.returncode == 0 and stop.stdout == (f"stopped the Flink cluster in {status['work_dir']} (pids "
                                                        f"{', '.join(map(str, sorted(pids)))})\n"), stop
    finally:
        second.stop()
    assert not any(_pid_alive(pid) for pid in pids), "stop left Flink processes running"
    assert not port_in_use(status["rest_port"]) and not port_in_use(status["rpc_port"])
    assert second.status() == {"work_dir": str((tmp_path / "second").resolve()), "running": False}
    with pytest.raises(FlinkUnreachable, match="cannot reach the Flink REST API"):
        FlinkRestClient(status["rest_url"], timeout=2).overview()
    # The first cluster was not touched.
    assert flink_cluster.is_running()
    assert flink_cluster.client.overview()["taskmanagers"] == 1


def test_stop_leaves_other_processes_alone(tmp_path: Path):
    # A process that is not ours, whose pid is planted in our pid folder, must survive stop().
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        cluster = LocalFlinkCluster(tmp_path / "c")
        (tmp_path / "c" / "pid").mkdir(parents=True)
        (tmp_path / "c" / "pid" / "flink-flinkstate-standalonesession.pid").write_text(f"{bystander.pid}\n")
        cluster.stop()
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


def test_cli_status_of_a_stopped_cluster(tmp_path: Path):
    result = subprocess.run([sys.executable, "-m", "flinkstate", "cluster", "status", "--work-dir",
                             str(tmp_path)], capture_output=True, text=True, env={**os.environ})
    assert result.returncode == 1
    assert "no Flink cluster running" in result.stdout


def test_cli_stop_of_a_stopped_cluster_says_nothing_was_running(tmp_path: Path):
    result = subprocess.run([sys.executable, "-m", "flinkstate", "cluster", "stop", "--work-dir", str(tmp_path)],
                            capture_output=True, text=True)
    assert result.returncode == 0
    assert result.stdout == f"no Flink cluster was running in {tmp_path.resolve()}: nothing to stop\n"


def test_unreachable_flink_is_a_one_line_error(tmp_path: Path):
    from flinkstate.engine.local import free_port

    client = FlinkRestClient(f"http://127.0.0.1:{free_port()}", timeout=2)
    with pytest.raises(FlinkUnreachable) as info:
        client.list_jobs()
    assert "\n" not in str(info.value)


def test_status_with_a_dead_taskmanager_says_degraded(tmp_path: Path):
    # The JobManager still serves REST (and lists its jobs) while the TaskManager is gone: not "no cluster".
    import signal

    with LocalFlinkCluster(tmp_path / "c", slots=1) as cluster:
        pids = cluster.status()["pids"]
        taskmanager = next(pid for name, pid in pids.items() if name.startswith("taskexecutor"))
        os.kill(taskmanager, signal.SIGKILL)
        result = subprocess.run([sys.executable, "-m", "flinkstate", "cluster", "status", "--work-dir",
                                 str(tmp_path / "c")], capture_output=True, text=True)
        assert result.returncode == 3, result.stdout + result.stderr
        assert "DEGRADED" in result.stdout and f"pid {taskmanager}, NOT RUNNING" in result.stdout
        assert "standalonesession: pid" in result.stdout and "running" in result.stdout
        status = cluster.status()
        assert status["health"] == "degraded" and "overview" in status  # REST still answers


def test_the_flink_distribution_is_found_from_any_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from flinkstate.engine.local import find_flink_home

    monkeypatch.delenv("FLINK_HOME", raising=False)
    monkeypatch.delenv("FLINKSTATE_FLINK_VENV", raising=False)
    monkeypatch.chdir(tmp_path)
    assert (find_flink_home() / "bin" / "jobmanager.sh").exists()
