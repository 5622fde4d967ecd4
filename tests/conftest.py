"""Session fixtures: one real local Flink cluster for the whole test run, and real savepoints written by the sample
job on it (HashMap and RocksDB, snappy on and off, parallelism 1 and 2)."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import time
import types
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from flinkstate.engine import LocalFlinkCluster
from flinkstate.engine.rest import ACTIVE_STATES, FlinkRestError
from tests.support import sample_job

#: Session fixtures -> the marker of what they start. A test using one of them, directly or through another fixture,
#: is marked at collection, so `make unit` (-m "not flink and not spark and not airflow") never starts any of them.
FIXTURE_MARKERS: dict[str, str] = {
    "flink_cluster": "flink",
    "flink_matrix_savepoints": "flink",
    "flink1_job_savepoints": "flink",
    "older_flink_savepoints": "flink",
    "s3_endpoint": "s3",
    "airflow_home": "airflow",
    "webhook": "airflow",
}
#: Names whose use in a test's code (or in a helper function of its module that it calls) starts something without a
#: fixture. Module fixtures that start something and Airflow modules carry a module `pytestmark` instead;
#: tests/test_markers.py checks that every module that needs one has it.
CODE_MARKERS: dict[str, str] = {
    "LocalFlinkCluster": "flink",
    "spark_submit": "spark",
    "SPARK_SUBMIT": "spark",
    "SparkSession": "spark",
    "SparkStandaloneCluster": "spark",
    "load_dag": "airflow",
    "configure_airflow": "airflow",
    "set_connection": "airflow",
    "sync_playwright": "browser",
}


def _names_used(code: types.CodeType, module: types.ModuleType, seen: set[types.CodeType]) -> set[str]:
    """Global and attribute names a code object uses, with those of the same module's functions it calls."""
    if code in seen:
        return set()
    seen.add(code)
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):  # nested functions, lambdas, comprehensions
            names |= _names_used(const, module, seen)
    for name in list(names):
        helper = getattr(module, name, None)
        if isinstance(helper, types.FunctionType) and helper.__module__ == module.__name__:
            names |= _names_used(helper.__code__, module, seen)
    return names


def markers_for(item: pytest.Item) -> set[str]:
    """The markers a test needs from the fixtures it uses (their closure) and the names its code uses."""
    needed = {marker for fixture, marker in FIXTURE_MARKERS.items() if fixture in getattr(item, "fixturenames", ())}
    function = getattr(item, "function", None)
    module = getattr(item, "module", None)
    if isinstance(function, types.FunctionType) and module is not None:
        used = _names_used(function.__code__, module, set())
        needed |= {marker for name, marker in CODE_MARKERS.items() if name in used}
    return needed


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        for marker in sorted(markers_for(item)):
            if item.get_closest_marker(marker) is None:
                item.add_marker(marker)


#: name -> (state backend, snapshot compression, parallelism); the savepoints every reader test runs against.
SAVEPOINT_VARIANTS: dict[str, tuple[str, bool, int]] = {
    "heap-p1": ("hashmap", False, 1),
    "heap-p2": ("hashmap", False, 2),
    "heap-p2-snappy": ("hashmap", True, 2),
    "rocksdb-p2": ("rocksdb", False, 2),
    "rocksdb-p2-snappy": ("rocksdb", True, 2),
}
SAVEPOINT_KEYS = 20
#: Older Flink versions (installed by scripts/setup.sh into .flink-dists/) and the savepoints written on each.
MATRIX_VERSIONS = ("1.20.3", "2.2.0")
MATRIX_VARIANTS: dict[str, tuple[str, bool, int]] = {
    "heap-p2": ("hashmap", False, 2),
    "rocksdb-p2-snappy": ("rocksdb", True, 2),
}


@pytest.fixture(scope="session")
def flink_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalFlinkCluster]:
    """A real Flink 2.3 standalone cluster on 127.0.0.1, started once per test run."""
    global _session_cluster
    cluster = LocalFlinkCluster(tmp_path_factory.mktemp("flink-cluster"), slots=4)
    cluster.start()
    _session_cluster = cluster
    try:
        yield cluster
    finally:
        _session_cluster = None
        cluster.stop()


_session_cluster: LocalFlinkCluster | None = None


@pytest.fixture(scope="module", autouse=True)
def _no_job_outlives_its_module() -> Iterator[None]:
    """Cancels what a module left running on the session cluster (a fixture that failed half-way, a test that ended
    early): its jobs would hold the four slots, and every later module would fail for want of resources."""
    yield
    cluster = _session_cluster
    if cluster is None:
        return
    client = cluster.client
    for job in client.list_jobs():
        if job.get("state") in ACTIVE_STATES:
            try:
                client.cancel(job["jid"], wait=True, timeout=60)
            except FlinkRestError:
                pass  # ended by itself meanwhile


def write_savepoints(
    cluster: LocalFlinkCluster, root: Path, variants: dict[str, tuple[str, bool, int]], *,
    flink_version: str, build_dir: Path | None = None,
) -> dict[str, tuple[Path, dict[str, Any]]]:
    """Runs v1 of the sample job once per variant and stops it with a savepoint moved to root/<name>/savepoint."""
    written: dict[str, tuple[Path, dict[str, Any]]] = {}
    for name, (backend, compression, parallelism) in variants.items():
        audit = root / name / "audit"
        run = sample_job.submit(cluster.client, "v1", audit, keys=SAVEPOINT_KEYS, rate=400, build_dir=build_dir,
                                parallelism=parallelism, state_backend=backend, compression=compression)
        run.wait_for_keys()
        time.sleep(0.5)  # let keys see a few events each, so that lists and maps hold more than one entry
        location = cluster.client.stop_with_savepoint(run.job_id, str(root / name))
        target = root / name / "savepoint"
        shutil.move(location.removeprefix("file:"), target)
        info = {"backend": backend, "compression": compression, "parallelism": parallelism,
                "keys": SAVEPOINT_KEYS, "version": "v1", "flink_version": flink_version}
        (root / name / "info.json").write_text(json.dumps(info))
        written[name] = (target, info)
    return written


def made_once_per_run(tmp_path_factory: pytest.TempPathFactory, name: str,
                      make: Callable[[Path], dict[str, tuple[Path, dict[str, Any]]]]
                      ) -> dict[str, tuple[Path, dict[str, Any]]]:
    """Savepoints every worker reads (read-only), written once per test run: under pytest-xdist the first worker to
    ask writes them into the run's shared temporary folder, the others wait for it and take its list; each worker
    would otherwise spend the same minute or two of Flink writing its own copy."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        return make(tmp_path_factory.mktemp(name))
    root = tmp_path_factory.getbasetemp().parent / name
    with open(f"{root}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also when this worker dies
        made = root / "made.json"
        if made.exists():
            return {key: (Path(path), info) for key, (path, info) in json.loads(made.read_text()).items()}
        shutil.rmtree(root, ignore_errors=True)  # what a worker that failed half-way left
        root.mkdir()
        result = make(root)
        made.write_text(json.dumps({key: [str(path), info] for key, (path, info) in result.items()}))
        return result


@pytest.fixture(scope="session")
def _written_savepoints(
    flink_cluster: LocalFlinkCluster, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, tuple[Path, dict[str, Any]]]:
    return made_once_per_run(tmp_path_factory, "savepoints", lambda root: write_savepoints(
        flink_cluster, root, SAVEPOINT_VARIANTS, flink_version="2.3.0"))


@pytest.fixture(scope="session")
def flink_savepoints(_written_savepoints: dict[str, tuple[Path, dict[str, Any]]]) -> dict[str, Path]:
    """name -> directory of a canonical savepoint that Flink wrote in this test run (see SAVEPOINT_VARIANTS).
    Treat them as read-only: copy one before corrupting it."""
    return {name: path for name, (path, _) in _written_savepoints.items()}


@pytest.fixture(scope="session")
def flink_savepoints_info(_written_savepoints: dict[str, tuple[Path, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """name -> {backend, compression, parallelism, keys, version} of each savepoint in ``flink_savepoints``."""
    return {name: info for name, (_, info) in _written_savepoints.items()}


@pytest.fixture(scope="session")
def older_flink_savepoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict[str, Any]]]:
    """Everything written on the older Flinks' clusters (1.20.3, 2.2.0) in this test run, each on its own
    short-lived local cluster: the sample job's MATRIX_VARIANTS, and on 1.20.3 the Flink 1.x builds of the edge job
    and of the compatibility matrix's base (info ``job``). Use the two fixtures below."""
    def on_its_cluster(root: Path, version: str) -> dict[str, tuple[Path, dict[str, Any]]]:
        flink_home = sample_job.ROOT / ".flink-dists" / version / "pyflink"
        if not flink_home.is_dir():
            pytest.fail(f"Flink {version} is missing at {flink_home}: run 'make setup'")
        work = root / f"flink-{version}"
        written: dict[str, tuple[Path, dict[str, Any]]] = {}
        with LocalFlinkCluster(work / "cluster", flink_home=flink_home, slots=2) as cluster:
            build_dir = sample_job.JOB_DIR / "build" / f"flink-{version}"
            for name, entry in write_savepoints(cluster, work, MATRIX_VARIANTS, flink_version=version,
                                                build_dir=build_dir).items():
                written[f"{version}/{name}"] = entry
            if version == "1.20.3":
                for job, savepoint in write_flink1_job_savepoints(cluster, work / "jobs").items():
                    written[f"{version}/{job}"] = (savepoint, {"job": job, "flink_version": version})
        return written

    def make(root: Path) -> dict[str, tuple[Path, dict[str, Any]]]:
        # The versions' clusters side by side (each on its own ports): one after the other took 107 s, mostly
        # waiting on JVM starts and savepoints.
        with ThreadPoolExecutor(len(MATRIX_VERSIONS), thread_name_prefix="older-flink") as pool:
            parts = list(pool.map(lambda version: on_its_cluster(root, version), MATRIX_VERSIONS))
        return {name: entry for part in parts for name, entry in part.items()}

    return made_once_per_run(tmp_path_factory, "flink-matrix", make)


@pytest.fixture(scope="session")
def flink_matrix_savepoints(older_flink_savepoints: dict[str, tuple[Path, dict[str, Any]]]
                            ) -> dict[str, tuple[Path, dict[str, Any]]]:
    """``<flink version>/<variant>`` -> (savepoint directory, info) for the sample job's savepoints written by Flink
    1.20.3 (metadata version 4) and 2.2.0 (version 6) in this test run."""
    return {name: entry for name, entry in older_flink_savepoints.items() if "job" not in entry[1]}


@pytest.fixture(scope="session")
def flink1_job_savepoints(older_flink_savepoints: dict[str, tuple[Path, dict[str, Any]]]) -> dict[str, Path]:
    """``edge-job`` / ``compat-matrix-base`` -> the savepoint its Flink 1.20.3 build wrote on Flink 1.20.3."""
    return {info["job"]: path for path, info in older_flink_savepoints.values() if "job" in info}


def write_flink1_job_savepoints(cluster: LocalFlinkCluster, root: Path) -> dict[str, Path]:
    """The edge job's v1 and the matrix's base, their Flink 1.20.3 builds side by side (a slot each), each stopped
    with a savepoint once every key was seen."""
    from tests.support import compat_matrix, edge_job

    runs = {"edge-job": edge_job.submit(cluster.client, "v1", root / "audit-edge", keys=10, rate=400,
                                        build_dir=edge_job.JOB_DIR / "build" / "flink-1.20.3"),
            "compat-matrix-base": compat_matrix.submit(
                cluster.client, "base", root / "audit-matrix", backend="hashmap", rate=200,
                build_dir=compat_matrix.JOB_DIR / "build" / "flink-1.20.3")}
    savepoints = {}
    for job, run in runs.items():
        cluster.client.wait_until_running(run.job_id, timeout=120)
        run.wait_for_keys()
        location = cluster.client.stop_with_savepoint(run.job_id, str(root / f"raw-{job}"))
        savepoints[job] = Path(shutil.move(location.removeprefix("file:"), root / job))
    return savepoints


@pytest.fixture(scope="session")
def compat_matrix_base_savepoints(flink_cluster: LocalFlinkCluster,
                                  tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """backend ("hashmap", "rocksdb") -> savepoint of the compatibility matrix's base version (examples/compat-matrix)
    after every key saw a few events, written on the session cluster. Read-only: copy one before changing it."""
    from tests.support import compat_matrix

    def make(work: Path) -> dict[str, tuple[Path, dict[str, Any]]]:
        savepoints: dict[str, tuple[Path, dict[str, Any]]] = {}
        for backend in ("hashmap", "rocksdb"):
            run = compat_matrix.submit(flink_cluster.client, "base", work / f"audit-{backend}", backend=backend)
            flink_cluster.client.wait_until_running(run.job_id, timeout=120)
            run.wait_for_keys()
            location = flink_cluster.client.stop_with_savepoint(run.job_id, str(work / f"raw-{backend}"))
            savepoints[backend] = (Path(shutil.move(location.removeprefix("file:"), work / f"savepoint-{backend}")),
                                   {})
        return savepoints

    return {backend: path for backend, (path, _) in made_once_per_run(tmp_path_factory, "compat-matrix",
                                                                       make).items()}


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """A real S3 endpoint on 127.0.0.1 (moto's server), with AWS_* variables pointing boto3 at it."""
    from moto.server import ThreadedMotoServer

    from flinkstate.engine.local import free_port

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    variables = {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                 "AWS_DEFAULT_REGION": "us-east-1"}
    saved = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield endpoint
    finally:
        server.stop()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture(scope="session")
def airflow_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A throw-away AIRFLOW_HOME with an initialised database; DAGs are loaded from the project's dags/ folder and
    tests/airflow_dags/ (see tests/support/airflow_env.py)."""
    from tests.support.airflow_env import ROOT, configure_airflow

    home = tmp_path_factory.mktemp("airflow")
    configure_airflow(home, ROOT / "dags", ROOT / "tests" / "airflow_dags")
    return home


@pytest.fixture(scope="session")
def webhook() -> Iterator[Any]:
    """A local HTTP receiver playing the chat webhook, and the Airflow connection ``flink_upgrade_webhook`` to it."""
    from tests.support.airflow_env import WebhookReceiver, set_connection

    receiver = WebhookReceiver().start()
    set_connection("flink_upgrade_webhook", conn_type="http", host="127.0.0.1", port=receiver.port, schema="http",
                   extra={"endpoint": "/hooks/flink"})
    try:
        yield receiver
    finally:
        receiver.stop()
