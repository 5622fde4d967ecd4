"""A standalone Flink cluster on 127.0.0.1, started from a Flink distribution (the PyPI ``apache-flink`` package).

Everything a cluster writes lives under its own work folder::

    <work_dir>/conf/         config.yaml (generated) and the distribution's log4j files
    <work_dir>/log/          JobManager and TaskManager logs and .out files
    <work_dir>/pid/          the daemons' pid files
    <work_dir>/tmp/          io.tmp.dirs, web.tmpdir, blob storage
    <work_dir>/checkpoints/  execution.checkpointing.dir
    <work_dir>/savepoints/   execution.checkpointing.savepoint-dir (the default savepoint target)
    <work_dir>/cluster.json  ports and pids, so that ``status`` and ``stop`` work from another process

Ports are chosen free on 127.0.0.1 unless given, so two clusters with two work folders never clash. ``stop`` ends
exactly the processes this work folder started (their pids, checked against their command line), nothing else.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from flinkstate.engine.rest import FlinkRestClient, FlinkRestError
from flinkstate.errors import EnvironmentProblem, FlinkStateError

MIN_JAVA = 17

#: Options every local cluster gets. Savepoints come out self-contained, with keyed state in separate files:
#: file-system checkpoint storage and an inline threshold of 0. Keys of Flink 1.x and 2.x are both set (each version
#: ignores the other's), so the same manager runs older distributions for a version matrix.
BASE_OPTIONS: dict[str, Any] = {
    "jobmanager.memory.process.size": "1024m",
    "taskmanager.memory.process.size": "1536m",
    "taskmanager.numberOfTaskSlots": 2,
    "parallelism.default": 1,
    "execution.checkpointing.storage": "filesystem",
    "state.checkpoint-storage": "filesystem",
    "execution.checkpointing.data-inline-threshold": "0b",
    "state.storage.fs.memory-threshold": "0b",
    "execution.checkpointing.num-retained": 2,
    "restart-strategy.type": "fixed-delay",
    "restart-strategy.fixed-delay.attempts": 2147483647,
    "restart-strategy.fixed-delay.delay": "2s",
}


def require_java(min_major: int = MIN_JAVA) -> tuple[str, int]:
    """Returns (path of ``java``, major version); raises EnvironmentProblem with a clear message otherwise."""
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if not java or not os.path.exists(java):
        raise EnvironmentProblem(
            f"Java {min_major}+ is required to run Flink but no 'java' was found"
            + (f" under JAVA_HOME={java_home}" if java_home else " on PATH")
            + f" (on Debian: apt-get install openjdk-{min_major}-jdk-headless)")
    out = subprocess.run([java, "-version"], capture_output=True, text=True, check=False).stderr
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if not match:
        raise EnvironmentProblem(f"cannot tell the version of {java}: it printed {out.strip()[:200]!r}")
    major = int(match.group(1))
    if major == 1 and match.group(2):  # "1.8.0_..." style
        major = int(match.group(2))
    if major < min_major:
        raise EnvironmentProblem(f"Java {min_major}+ is required to run Flink; {java} is Java {major}")
    return java, major


#: The checkout flinkstate runs from (an editable install): where `make setup` puts .venv-flink.
_PROJECT_ROOT = Path(__file__).resolve().parents[2]


def find_flink_home(
    explicit: str | os.PathLike[str] | None = None, *, venv: str | os.PathLike[str] | None = None
) -> Path:
    """Finds a Flink distribution: ``explicit``, else ``$FLINK_HOME``, else ``pyflink/`` inside the Flink virtual
    environment (``$FLINKSTATE_FLINK_VENV``, default ``.venv-flink`` in the current directory)."""
    candidates: list[Path] = []
    if explicit:
        candidates.append(Path(explicit))
    elif os.environ.get("FLINK_HOME"):
        candidates.append(Path(os.environ["FLINK_HOME"]))
    else:
        explicit_venv = venv or os.environ.get("FLINKSTATE_FLINK_VENV")
        # Without a setting: .venv-flink in the current folder, else the one `make setup` made beside this checkout
        # (so that the CLI works from any folder).
        venv_dirs = [Path(explicit_venv)] if explicit_venv else [Path(".venv-flink"), _PROJECT_ROOT / ".venv-flink"]
        for venv_dir in venv_dirs:
            pattern = str(venv_dir / "lib" / "python*" / "site-packages" / "pyflink")
            candidates.extend(Path(p) for p in sorted(glob.glob(pattern)))
        if not candidates:
            looked = " or ".join(str(d.resolve()) for d in venv_dirs)
            raise EnvironmentProblem(
                f"no Flink distribution found: no pyflink/ in {looked} (run 'make setup' in the flinkstate "
                "checkout, or set FLINK_HOME)")
    for home in candidates:
        if (home / "bin" / "jobmanager.sh").exists() and (home / "lib").is_dir():
            return home.resolve()
    raise EnvironmentProblem(f"{candidates[0]} is not a Flink distribution (no bin/jobmanager.sh)")


def flink_version(flink_home: Path) -> str:
    """The version of a distribution, read from its flink-dist jar name."""
    for jar in (flink_home / "lib").glob("flink-dist*.jar"):
        match = re.search(r"flink-dist[_0-9.]*-(\d+\.\d+\.\d+[^/]*)\.jar$", jar.name)
        if match:
            return match.group(1)
    raise EnvironmentProblem(f"cannot tell the Flink version of {flink_home}: no lib/flink-dist-*.jar")


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def _flatten(prefix: str, value: Any, out: dict[str, Any]) -> None:
    if isinstance(value, dict):
        for key, nested in value.items():
            _flatten(f"{prefix}.{key}" if prefix else str(key), nested, out)
    else:
        out[prefix] = value


def _ensure_scripts_executable(flink_home: Path) -> None:
    """Flink's scripts call each other directly; pip installs (``--target`` in particular) can drop the x bit."""
    for script in (flink_home / "bin").glob("*.sh"):
        mode = script.stat().st_mode
        if not mode & 0o100:
            try:
                script.chmod(mode | 0o755)
            except OSError as exc:
                raise EnvironmentProblem(f"{script} is not executable and cannot be made so ({exc})") from None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped) counts as gone.
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


@dataclass
class ClusterState:
    """What ``cluster.json`` records about a started cluster."""

    flink_home: str
    flink_version: str
    rest_port: int
    rpc_port: int
    pids: dict[str, int] = field(default_factory=dict)
    started_at: float = 0.0


class LocalFlinkCluster:
    """One standalone Flink cluster (a JobManager and one TaskManager) living in one work folder.

    Usable as a context manager, as a pytest fixture and from the CLI (``flinkstate cluster start|stop|status``)::

        with LocalFlinkCluster(".work/cluster") as cluster:
            job_id = cluster.client.submit_jar("job.jar")
    """

    def __init__(
        self,
        work_dir: str | os.PathLike[str],
        *,
        flink_home: str | os.PathLike[str] | None = None,
        rest_port: int | None = None,
        rpc_port: int | None = None,
        slots: int = 2,
        options: dict[str, Any] | None = None,
    ):
        self.work_dir = Path(work_dir).resolve()
        self._flink_home = Path(flink_home).resolve() if flink_home else None
        self._rest_port = rest_port
        self._rpc_port = rpc_port
        self.slots = slots
        self.options = dict(options or {})

    # ------------------------------------------------------------------ layout

    @property
    def conf_dir(self) -> Path:
        return self.work_dir / "conf"

    @property
    def log_dir(self) -> Path:
        return self.work_dir / "log"

    @property
    def pid_dir(self) -> Path:
        return self.work_dir / "pid"

    @property
    def tmp_dir(self) -> Path:
        return self.work_dir / "tmp"

    @property
    def savepoint_dir(self) -> Path:
        return self.work_dir / "savepoints"

    @property
    def checkpoint_dir(self) -> Path:
        return self.work_dir / "checkpoints"

    @property
    def state_file(self) -> Path:
        return self.work_dir / "cluster.json"

    def state(self) -> ClusterState | None:
        """The recorded state of a cluster started in this work folder (perhaps by another process)."""
        try:
            return ClusterState(**json.loads(self.state_file.read_text()))
        except FileNotFoundError:
            return None
        except (ValueError, TypeError) as exc:
            raise FlinkStateError(f"{self.state_file}: not a cluster state file ({exc})") from None

    @property
    def rest_url(self) -> str:
        state = self.state()
        if state is None:
            raise FlinkStateError(f"no cluster has been started in {self.work_dir}")
        return f"http://127.0.0.1:{state.rest_port}"

    @property
    def client(self) -> FlinkRestClient:
        return FlinkRestClient(self.rest_url)

    # ------------------------------------------------------------------ lifecycle

    def is_running(self) -> bool:
        """True when every process this work folder started is alive."""
        state = self.state()
        return bool(state and state.pids and all(self._owned_alive(pid) for pid in state.pids.values()))

    def _owned_alive(self, pid: int) -> bool:
        # The pid must still be ours: alive and started with this work folder's configuration directory.
        return _pid_alive(pid) and str(self.conf_dir) in _cmdline(pid)

    def start(self, *, timeout: float = 120.0) -> LocalFlinkCluster:
        """Starts the cluster and waits until the REST API reports free task slots. Idempotent: an already running
        cluster in this work folder is left as it is."""
        if self.is_running():
            self._wait_ready(timeout)
            return self
        self.stop()  # clears what a crashed earlier start left behind, killing only our own processes
        require_java()
        flink_home = find_flink_home(self._flink_home)
        rest_port = self._rest_port or free_port()
        rpc_port = self._rpc_port or free_port()
        for port in (rest_port, rpc_port):
            if port_in_use(port):
                raise FlinkStateError(f"cannot start Flink in {self.work_dir}: port {port} on 127.0.0.1 is in use")
        for folder in (self.log_dir, self.pid_dir, self.tmp_dir, self.savepoint_dir, self.checkpoint_dir):
            folder.mkdir(parents=True, exist_ok=True)
        self._write_conf(flink_home, rest_port, rpc_port)
        env = self._env(flink_home)
        _ensure_scripts_executable(flink_home)
        for daemon in ("jobmanager", "taskmanager"):
            result = subprocess.run(["bash", str(flink_home / "bin" / f"{daemon}.sh"), "start"], env=env,
                                    capture_output=True, text=True, check=False)
            if result.returncode != 0:
                self.stop()
                raise FlinkStateError(f"{daemon}.sh start failed in {self.work_dir}: "
                                      f"{(result.stderr or result.stdout).strip()[-500:]}")
        state = ClusterState(flink_home=str(flink_home), flink_version=flink_version(flink_home),
                             rest_port=rest_port, rpc_port=rpc_port, pids=self._read_pids(), started_at=time.time())
        self.state_file.write_text(json.dumps(asdict(state), indent=2))
        try:
            self._wait_ready(timeout)
        except FlinkStateError:
            self.stop()
            raise
        return self

    def start_taskmanager(self) -> int:
        """Starts one more TaskManager in this running cluster (e.g. to replace one that died) and returns its pid.
        It registers with the JobManager on its own; ``stop()`` stops it with the rest."""
        return self._start_daemon("taskmanager")

    def start_jobmanager(self) -> int:
        """Starts the JobManager again (after it died; without HA it comes back with no jobs) on the same ports, and
        returns its pid. The TaskManagers register with it on their own; ``stop()`` stops it with the rest."""
        return self._start_daemon("jobmanager")

    def _start_daemon(self, daemon: str) -> int:
        state = self.state()
        if state is None:
            raise FlinkStateError(f"no Flink cluster was started in {self.work_dir}")
        flink_home = Path(state.flink_home)
        before = set(self._read_pids().values())
        result = subprocess.run(["bash", str(flink_home / "bin" / f"{daemon}.sh"), "start"],
                                env=self._env(flink_home), capture_output=True, text=True, check=False)
        pids = self._read_pids()
        started = [pid for pid in pids.values() if pid not in before]
        if result.returncode != 0 or not started:
            raise FlinkStateError(f"{daemon}.sh start failed in {self.work_dir}: "
                                  f"{(result.stderr or result.stdout).strip()[-500:]}")
        state.pids = pids
        self.state_file.write_text(json.dumps(asdict(state), indent=2))
        return started[0]

    def _wait_ready(self, timeout: float) -> None:
        client = FlinkRestClient(self.rest_url, timeout=5)
        deadline = time.monotonic() + timeout
        last_error = "no answer yet"
        while time.monotonic() < deadline:
            state = self.state()
            # Only whether they live: a pid written a moment ago may not have exec'd java yet (its command line is
            # still the start script's, without our conf folder), which the ownership check would call dead.
            if state and not all(_pid_alive(pid) for pid in state.pids.values()):
                raise FlinkStateError(f"a Flink process in {self.work_dir} died while starting; see {self.log_dir}"
                                      + self._log_tail())
            try:
                overview = client.overview()
                if int(overview.get("slots-total", 0)) >= self.slots and int(overview.get("taskmanagers", 0)) >= 1:
                    return
                last_error = f"{overview.get('slots-total', 0)} slots registered"
            except FlinkRestError as exc:
                last_error = str(exc)
            time.sleep(0.5)
        raise FlinkStateError(f"Flink in {self.work_dir} was not ready within {timeout:.0f}s ({last_error}); "
                              f"see {self.log_dir}")

    def _log_tail(self) -> str:
        for log in sorted(self.log_dir.glob("*.log")):
            errors = [line for line in log.read_text(errors="replace").splitlines() if " ERROR " in line]
            if errors:
                return f": {errors[-1].strip()[:300]}"
        return ""

    def stop(self, *, timeout: float = 30.0) -> list[int]:
        """Stops exactly the processes this work folder started (SIGTERM, then SIGKILL after ``timeout``); returns
        the pids it stopped (empty: none of them ran)."""
        pids = set(self._read_pids().values())
        state = self.state()
        if state:
            pids.update(state.pids.values())
        owned = [pid for pid in pids if self._owned_alive(pid)]
        for pid in owned:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + timeout
        while any(_pid_alive(pid) for pid in owned) and time.monotonic() < deadline:
            time.sleep(0.2)
        for pid in owned:
            if _pid_alive(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        while any(_pid_alive(pid) for pid in owned) and time.monotonic() < deadline + 10:
            time.sleep(0.1)
        for pid_file in self.pid_dir.glob("*.pid") if self.pid_dir.exists() else []:
            pid_file.unlink()
        if self.state_file.exists():
            self.state_file.unlink()
        return sorted(owned)

    def status(self) -> dict[str, Any]:
        """A summary for people and scripts: running or not, ports, pids, version, and the REST overview."""
        state = self.state()
        if state is None:
            return {"work_dir": str(self.work_dir), "running": False}
        alive = {name: self._owned_alive(pid) for name, pid in state.pids.items()}
        result: dict[str, Any] = {"work_dir": str(self.work_dir), "running": bool(alive) and all(alive.values()),
                                  **asdict(state), "rest_url": f"http://127.0.0.1:{state.rest_port}",
                                  "processes": {name: {"pid": state.pids[name], "alive": up}
                                                for name, up in sorted(alive.items())}}
        if any(alive.values()):
            try:
                result["overview"] = FlinkRestClient(result["rest_url"], timeout=5).overview()
            except FlinkRestError as exc:
                result["overview_error"] = str(exc)
        # "running": every process up; "degraded": some are (e.g. the JobManager serves REST and jobs while the
        # TaskManager is dead: jobs cannot run); "stopped": none.
        result["health"] = ("running" if result["running"] else "degraded" if any(alive.values()) else "stopped")
        return result

    def __enter__(self) -> LocalFlinkCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ internals

    def _env(self, flink_home: Path) -> dict[str, str]:
        env = dict(os.environ)
        env.update({
            "FLINK_HOME": str(flink_home),
            "FLINK_CONF_DIR": str(self.conf_dir),
            "FLINK_LOG_DIR": str(self.log_dir),
            "FLINK_PID_DIR": str(self.pid_dir),
            # A fixed identity keeps pid file names stable whoever runs the scripts.
            "FLINK_IDENT_STRING": "flinkstate",
        })
        return env

    def _read_pids(self) -> dict[str, int]:
        pids: dict[str, int] = {}
        if not self.pid_dir.exists():
            return pids
        for pid_file in self.pid_dir.glob("*.pid"):
            daemon = pid_file.stem.rsplit("-", 1)[-1]
            for index, line in enumerate(pid_file.read_text().split()):
                if line.isdigit():
                    pids[f"{daemon}-{index}" if index else daemon] = int(line)
        return pids

    def _write_conf(self, flink_home: Path, rest_port: int, rpc_port: int) -> None:
        bundled = flink_home / "conf"
        if self.conf_dir.exists():
            shutil.rmtree(self.conf_dir)
        if not bundled.is_dir():
            raise EnvironmentProblem(f"{flink_home} has no conf/ folder (install apache-flink beside "
                                     "apache-flink-libraries: the scripts and conf/ come from apache-flink)")
        shutil.copytree(bundled, self.conf_dir)
        # The distribution's own options first (its env.java.opts.all carries the --add-opens Java 17 needs).
        options: dict[str, Any] = {}
        bundled_yaml = bundled / "config.yaml"
        if bundled_yaml.exists():
            _flatten("", yaml.safe_load(bundled_yaml.read_text()) or {}, options)
        # Flink 1.19+ reads config.yaml; a legacy flink-conf.yaml beside it would win on 1.x.
        (self.conf_dir / "flink-conf.yaml").unlink(missing_ok=True)
        options.update(BASE_OPTIONS)
        options.update({
            "taskmanager.numberOfTaskSlots": self.slots,
            "rest.address": "127.0.0.1",
            "rest.bind-address": "127.0.0.1",
            "rest.port": rest_port,
            "jobmanager.rpc.address": "127.0.0.1",
            "jobmanager.rpc.port": rpc_port,
            "jobmanager.bind-host": "127.0.0.1",
            "taskmanager.bind-host": "127.0.0.1",
            "taskmanager.host": "127.0.0.1",
            "io.tmp.dirs": str(self.tmp_dir),
            "web.tmpdir": str(self.tmp_dir / "web"),
            "blob.storage.directory": str(self.tmp_dir / "blobs"),
            "execution.checkpointing.dir": self.checkpoint_dir.as_uri(),
            "state.checkpoints.dir": self.checkpoint_dir.as_uri(),
            "execution.checkpointing.savepoint-dir": self.savepoint_dir.as_uri(),
            "state.savepoints.dir": self.savepoint_dir.as_uri(),
        })
        options.update(self.options)
        lines = ["# Generated by flinkstate for this work folder; edits are overwritten at the next start."]
        lines += [f"{key}: {json.dumps(value) if isinstance(value, str) else value}"
                  for key, value in sorted(options.items())]
        (self.conf_dir / "config.yaml").write_text("\n".join(lines) + "\n")
        (self.conf_dir / "workers").write_text("127.0.0.1\n")
        (self.conf_dir / "masters").write_text(f"127.0.0.1:{rest_port}\n")

