"""The sample job on real Flink through the REST client: savepoints while running, stop-with-savepoint, restores
from a relocated copy, Flink's own POJO migration (v1 -> v2) and its refusal (v1 -> v3)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from flinkstate.engine import FlinkJobFailed, FlinkRestError, LocalFlinkCluster
from tests.support import sample_job
from tests.support.sample_job import check_audit_record

pytestmark = pytest.mark.flink


def _local(location: str) -> Path:
    return Path(location.removeprefix("file:"))


def _state_files(savepoint: Path) -> list[Path]:
    return [p for p in savepoint.iterdir() if p.name != "_metadata"]


@pytest.fixture(scope="module")
def stopped_v1(flink_cluster: LocalFlinkCluster, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """v1 run, savepoint while running, then stop-with-savepoint: the inputs of the restore tests below."""
    work = tmp_path_factory.mktemp("v1")
    client = flink_cluster.client
    run = sample_job.submit(client, "v1", work / "audit", keys=10, rate=200, parallelism=2)
    first_records = run.wait_for_keys()
    time.sleep(1.0)

    running_savepoint = _local(client.savepoint(run.job_id, str(work / "savepoints")))
    assert client.job_state(run.job_id) == "RUNNING", "a savepoint must leave the job running"
    time.sleep(0.5)
    stop_savepoint = _local(client.stop_with_savepoint(run.job_id, str(work / "savepoints")))
    assert client.job_state(run.job_id) == "FINISHED"
    return {"work": work, "run": run, "first_records": first_records,
            "running_savepoint": running_savepoint, "stop_savepoint": stop_savepoint}


def test_fresh_start_has_empty_state(stopped_v1: dict):
    records = stopped_v1["first_records"]
    assert sorted(r["key"] for r in records) == [f"key-{k}" for k in range(10)]
    assert all(check_audit_record(r, "v1") == 0 for r in records)


@pytest.mark.parametrize("which", ["running_savepoint", "stop_savepoint"])
def test_savepoints_are_self_contained_directories_with_state_in_files(stopped_v1: dict, which: str):
    savepoint = stopped_v1[which]
    assert savepoint.is_dir() and savepoint.name.startswith("savepoint-")
    metadata = (savepoint / "_metadata").read_bytes()
    assert metadata[:4] == bytes.fromhex("4960672d")  # Flink's metadata magic
    assert int.from_bytes(metadata[4:8], "big") == 6  # Flink 2.x writes metadata version 6
    # Inline threshold 0: keyed state of both subtasks, and the source's operator state, live in separate files
    # referenced by relative names, so the directory can be moved.
    assert len(_state_files(savepoint)) >= 3
    for state_file in _state_files(savepoint):
        assert state_file.name.encode() in metadata
        assert str(savepoint).encode() not in metadata


def test_restore_from_a_relocated_copy_continues_the_counts(
    flink_cluster: LocalFlinkCluster, stopped_v1: dict, tmp_path: Path
):
    original = stopped_v1["stop_savepoint"]
    copy = tmp_path / "elsewhere" / "copied-savepoint"
    shutil.copytree(original, copy)
    # Hide the original while the copy is restored: any absolute reference to it would fail the restore.
    hidden = original.with_name(original.name + ".hidden")
    original.rename(hidden)
    try:
        run = sample_job.submit(flink_cluster.client, "v1", tmp_path / "audit", keys=10, rate=200,
                                parallelism=2, savepoint_path=copy)
        records = run.wait_for_keys()
        stats = flink_cluster.client.checkpoints(run.job_id)
        flink_cluster.client.cancel(run.job_id)
    finally:
        hidden.rename(original)
    restored_counts = [check_audit_record(r, "v1") for r in records]
    assert all(n > 0 for n in restored_counts), "every key must continue from its restored count"
    assert stats.restored_from is not None and Path(stats.restored_from.removeprefix("file:")) == copy
    assert stats.restored_is_savepoint is True


def test_restore_with_a_different_parallelism(flink_cluster: LocalFlinkCluster, stopped_v1: dict, tmp_path: Path):
    run = sample_job.submit(flink_cluster.client, "v1", tmp_path / "audit", keys=10, rate=200, parallelism=1,
                            savepoint_path=stopped_v1["running_savepoint"])
    records = run.wait_for_keys()
    flink_cluster.client.cancel(run.job_id)
    assert all(check_audit_record(r, "v1") > 0 for r in records)


def test_v2_restores_v1_state_through_flinks_pojo_migration(
    flink_cluster: LocalFlinkCluster, stopped_v1: dict, tmp_path: Path
):
    run = sample_job.submit(flink_cluster.client, "v2", tmp_path / "audit", keys=10, rate=200, parallelism=2,
                            savepoint_path=stopped_v1["stop_savepoint"])
    records = run.wait_for_keys()
    flink_cluster.client.cancel(run.job_id)
    for record in records:
        assert record["version"] == "v2"
        assert "label" in record["stats"] and record["stats"]["label"] is None  # the added field restores as null
        assert check_audit_record(record, "v1") > 0


@pytest.mark.parametrize("backend", ["hashmap", "rocksdb"])
def test_v3_is_refused_and_the_client_reports_flinks_error(
    flink_cluster: LocalFlinkCluster, tmp_path: Path, backend: str
):
    client = flink_cluster.client
    v1 = sample_job.submit(client, "v1", tmp_path / "audit-v1", keys=5, rate=200, state_backend=backend)
    v1.wait_for_keys()
    savepoint = client.stop_with_savepoint(v1.job_id, str(tmp_path / "savepoints"))

    v3 = sample_job.submit(client, "v3", tmp_path / "audit-v3", keys=5, rate=200, state_backend=backend,
                           savepoint_path=_local(savepoint), wait=False)
    try:
        with pytest.raises(FlinkJobFailed) as failure:
            client.wait_until_running(v3.job_id, timeout=90)
        message = str(failure.value)
        assert "\n" not in message
        if backend == "hashmap":  # the heap backend deserializes with the old serializer into the new class
            assert "Can not set java.lang.String field sample.Stats.count to java.lang.Long" in message
        else:  # RocksDB checks compatibility when the state is registered
            assert "StateMigrationException" in message and "incompatible" in message
        assert client.exceptions(v3.job_id), "Flink's exception history records the failure"
        assert not v3.audit(), "v3 never processed an event"
    finally:
        client.cancel(v3.job_id)


def test_rest_errors_carry_flinks_message(flink_cluster: LocalFlinkCluster, tmp_path: Path):
    client = flink_cluster.client
    with pytest.raises(FlinkRestError) as missing:
        client.job("0" * 32)
    assert missing.value.status == 404 and "\n" not in str(missing.value)
    with pytest.raises(FlinkRestError) as bad_savepoint:
        sample_job.submit(client, "v1", tmp_path / "audit", savepoint_path=tmp_path / "no-such-savepoint")
    assert "no-such-savepoint" in bad_savepoint.value.details


def test_find_job_by_name(flink_cluster: LocalFlinkCluster, tmp_path: Path):
    client = flink_cluster.client
    run = sample_job.submit(client, "v2", tmp_path / "audit", keys=3, rate=50)
    try:
        assert client.find_job("keyed-stats-v2") == run.job_id
        assert client.num_restarts(run.job_id) == 0
    finally:
        client.cancel(run.job_id)
    assert client.job_state(run.job_id) == "CANCELED"
    with pytest.raises(FlinkRestError, match="no running job named 'keyed-stats-v2'"):
        client.find_job("keyed-stats-v2")
