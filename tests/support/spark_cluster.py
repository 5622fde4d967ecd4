"""A real Spark standalone cluster on loopback for tests: a master and workers as separate JVM processes, started
from the PySpark distribution's ``bin/spark-class`` (``org.apache.spark.deploy.master.Master`` and ``...worker.Worker``)
on free ports, with their logs, work and scratch folders in a temporary directory. Each process runs in a session of
its own, so stopping kills the whole process group (the JVM and the Python workers its executors started), and the
stop waits until none of them is left.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import TracebackType

import pyspark

SPARK_HOME = Path(pyspark.__file__).resolve().parent
SPARK_CLASS = SPARK_HOME / "bin" / "spark-class"
ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class SparkStandaloneCluster:
    """``with SparkStandaloneCluster(work_dir, workers=2) as cluster:`` then ``cluster.master_url`` (spark://...).
    Executors inherit the workers' environment: this process's (so the AWS_* variables of a loopback S3 endpoint
    started before) with ``PYTHONPATH`` at the project root, as a deployment installs flinkstate and the jobs on its
    workers."""

    def __init__(self, work_dir: Path, workers: int = 2, cores_per_worker: int = 1, memory: str = "1g") -> None:
        self.work_dir = work_dir
        self.workers = workers
        self.cores_per_worker = cores_per_worker
        self.memory = memory
        self.processes: list[subprocess.Popen[bytes]] = []
        self.port = free_port()
        self.web_port = free_port()
        self.master_url = f"spark://127.0.0.1:{self.port}"

    def _env(self) -> dict[str, str]:
        return {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1",
                "SPARK_LOG_DIR": str(self.work_dir / "logs"), "SPARK_LOCAL_DIRS": str(self.work_dir / "local"),
                "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": str(ROOT),
                "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}

    def _start(self, name: str, *args: str) -> None:
        log = open(self.work_dir / f"{name}.log", "wb")
        self.processes.append(subprocess.Popen([str(SPARK_CLASS), *args], stdout=log, stderr=subprocess.STDOUT,
                                               env=self._env(), cwd=self.work_dir, start_new_session=True))
        log.close()  # the child holds its own descriptor

    def start(self) -> SparkStandaloneCluster:
        for folder in ("logs", "local", "work"):
            (self.work_dir / folder).mkdir(parents=True, exist_ok=True)
        try:
            self._start("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                        "--port", str(self.port), "--webui-port", str(self.web_port))
            for index in range(self.workers):
                self._start(f"worker-{index}", "org.apache.spark.deploy.worker.Worker", self.master_url,
                            "--host", "127.0.0.1", "--port", str(free_port()), "--webui-port", str(free_port()),
                            "--cores", str(self.cores_per_worker), "--memory", self.memory,
                            "--work-dir", str(self.work_dir / "work"))
            self._wait_for_workers(timeout=120)
        except BaseException:
            self.stop()
            raise
        return self

    def status(self) -> dict[str, object]:
        """The master's JSON status (workers, cores, applications)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.web_port}/json/", timeout=5) as answer:
            status: dict[str, object] = json.load(answer)
            return status

    def alive_workers(self) -> int:
        workers = self.status().get("workers", [])
        assert isinstance(workers, list)
        return sum(1 for w in workers if isinstance(w, dict) and w.get("state") == "ALIVE")

    def _wait_for_workers(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            for process in self.processes:
                if process.poll() is not None:
                    raise RuntimeError(f"a Spark process exited with {process.returncode}; see {self.work_dir}/*.log")
            try:
                if self.alive_workers() == self.workers:
                    return
            except OSError:
                pass  # the master's web UI is not up yet
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.workers} Spark workers not registered within {timeout} s; see "
                                   f"{self.work_dir}/*.log")
            time.sleep(0.5)

    def stop(self) -> None:
        """SIGTERM to every process group, SIGKILL after 20 s, and wait until each is reaped and its group empty."""
        for process in reversed(self.processes):
            _signal_group(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        for process in reversed(self.processes):
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(process.pid, signal.SIGKILL)
                process.wait(timeout=10)
            # Executors and Python workers the JVM started live in its group: none may outlive the cluster.
            _signal_group(process.pid, signal.SIGKILL)
        for process in self.processes:
            gone = time.monotonic() + 15
            while group_alive(process.pid):  # killed members are reaped by init a moment later
                if time.monotonic() > gone:
                    raise RuntimeError(f"process group {process.pid} of the Spark cluster survived SIGKILL")
                time.sleep(0.1)
        self.processes.clear()

    def __enter__(self) -> SparkStandaloneCluster:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass


def group_alive(pid: int) -> bool:
    """Whether any process of the group led by ``pid`` still runs. Zombies do not count: a killed member whose
    parent died is reparented to PID 1, and where PID 1 reaps nothing (some containers, CI) it stays a zombie."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        if fields[0] != "Z" and int(fields[2]) == pid:  # fields after the name: state, ppid, pgrp, ...
            return True
    return False
