"""Session fixtures: one real local Flink cluster for the whole test run, and real savepoints written by the sample
job on it (HashMap and RocksDB, snappy on and off, parallelism 1 and 2)."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from flinkstate.engine import LocalFlinkCluster
from tests.support import sample_job

#: name -> (state backend, snapshot compression, parallelism); the savepoints every reader test runs against.
SAVEPOINT_VARIANTS: dict[str, tuple[str, bool, int]] = {
    "heap-p1": ("hashmap", False, 1),
    "heap-p2": ("hashmap", False, 2),
    "heap-p2-snappy": ("hashmap", True, 2),
    "rocksdb-p2": ("rocksdb", False, 2),
    "rocksdb-p2-snappy": ("rocksdb", True, 2),
}
SAVEPOINT_KEYS = 20


@pytest.fixture(scope="session")
def flink_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalFlinkCluster]:
    """A real Flink 2.3 standalone cluster on 127.0.0.1, started once per test run."""
    cluster = LocalFlinkCluster(tmp_path_factory.mktemp("flink-cluster"), slots=4)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def _written_savepoints(
    flink_cluster: LocalFlinkCluster, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, tuple[Path, dict[str, Any]]]:
    root = tmp_path_factory.mktemp("savepoints")
    written: dict[str, tuple[Path, dict[str, Any]]] = {}
    for name, (backend, compression, parallelism) in SAVEPOINT_VARIANTS.items():
        audit = root / name / "audit"
        run = sample_job.submit(flink_cluster.client, "v1", audit, keys=SAVEPOINT_KEYS, rate=400,
                                parallelism=parallelism, state_backend=backend, compression=compression)
        run.wait_for_keys()
        time.sleep(0.5)  # let keys see a few events each, so that lists and maps hold more than one entry
        location = flink_cluster.client.stop_with_savepoint(run.job_id, str(root / name))
        target = root / name / "savepoint"
        shutil.move(location.removeprefix("file:"), target)
        info = {"backend": backend, "compression": compression, "parallelism": parallelism,
                "keys": SAVEPOINT_KEYS, "version": "v1"}
        (root / name / "info.json").write_text(json.dumps(info))
        written[name] = (target, info)
    return written


@pytest.fixture(scope="session")
def flink_savepoints(_written_savepoints: dict[str, tuple[Path, dict[str, Any]]]) -> dict[str, Path]:
    """name -> directory of a canonical savepoint that Flink wrote in this test run (see SAVEPOINT_VARIANTS).
    Treat them as read-only: copy one before corrupting it."""
    return {name: path for name, (path, _) in _written_savepoints.items()}


@pytest.fixture(scope="session")
def flink_savepoints_info(_written_savepoints: dict[str, tuple[Path, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """name -> {backend, compression, parallelism, keys, version} of each savepoint in ``flink_savepoints``."""
    return {name: info for name, (_, info) in _written_savepoints.items()}
