"""Migration output to s3:// against a real S3 endpoint on loopback (moto's server): the CLI from local disk and from
S3, the Spark job (byte for byte what the CLI writes, restored by real Flink after a copy back to local disk), a
failing migration that leaves nothing, and the refusals and clean-ups of the staged publish."""

from __future__ import annotations

import json
import pickle
import socket
from pathlib import Path
from typing import Any

import boto3
import pytest

from flinkstate.cli import main as flinkstate_main
from flinkstate.engine import LocalFlinkCluster
from flinkstate.errors import WriteError
from flinkstate.storage.outputs import OWNER_MARKER, STAGED_METADATA, Owner
from flinkstate.storage.s3_output import S3SavepointOutput
from flinkstate.storage.uri import copy_savepoint, open_output
from tests.support import sample_job
from tests.support.sample_job import check_audit_record, key_index
from tests.test_spark_jobs import MANIFESTS, _manifest_with, spark_submit

BUCKET = "migrations"


@pytest.fixture(scope="module")
def s3(s3_endpoint: str) -> Any:
    client = boto3.client("s3")
    client.create_bucket(Bucket=BUCKET)
    return client


def _objects(s3: Any, prefix: str) -> dict[str, bytes]:
    """name -> bytes of every object under ``prefix/`` in the test bucket."""
    found: dict[str, bytes] = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=f"{prefix}/"):
        for item in page.get("Contents", []):
            found[item["Key"][len(prefix) + 1:]] = s3.get_object(Bucket=BUCKET, Key=item["Key"])["Body"].read()
    return found


def _files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in directory.iterdir()}


def _cli_migrate(source: str | Path, manifest: str, output: str | Path) -> None:
    assert flinkstate_main(["migrate", str(source), "--schema", str(MANIFESTS / manifest), "--output",
                            str(output)]) == 0


def test_cli_migrates_a_local_savepoint_to_s3(s3: Any, flink_savepoints: dict[str, Path], tmp_path: Path):
    source = flink_savepoints["heap-p2"]
    before = _files(source)
    _cli_migrate(source, "v2.yaml", f"s3://{BUCKET}/local-to-s3")
    _cli_migrate(source, "v2.yaml", tmp_path / "local")
    written = _objects(s3, "local-to-s3")
    assert written == _files(tmp_path / "local"), "S3 output must hold the bytes the local output holds"
    assert _objects(s3, ".local-to-s3.inprogress") == {}, "the staging objects must be gone"
    report = json.loads(_objects(s3, "local-to-s3.report")["report.json"])
    assert report["states"]["stats"]["stats"]["written"] == 20
    assert _files(source) == before, "the source must not change"


def test_cli_migrates_an_s3_savepoint_to_s3(s3: Any, flink_savepoints: dict[str, Path], tmp_path: Path):
    local = flink_savepoints["rocksdb-p2-snappy"]
    source = copy_savepoint(local, f"s3://{BUCKET}/sources/rocksdb-p2-snappy")
    before = _objects(s3, "sources/rocksdb-p2-snappy")
    _cli_migrate(source, "v3-with-conversion.yaml", f"s3://{BUCKET}/s3-to-s3")
    _cli_migrate(local, "v3-with-conversion.yaml", tmp_path / "local")
    assert _objects(s3, "s3-to-s3") == _files(tmp_path / "local")
    assert _objects(s3, ".s3-to-s3.inprogress") == {}
    assert _objects(s3, "sources/rocksdb-p2-snappy") == before, "the source must not change"


def test_spark_job_writes_to_s3_what_the_cli_writes_and_flink_restores_it(
    s3: Any, flink_cluster: LocalFlinkCluster, flink_savepoints: dict[str, Path], tmp_path: Path
):
    source = flink_savepoints["heap-p2"]
    # The workers reach S3 through the AWS_* variables the s3_endpoint fixture set, which spark_submit passes on.
    result = spark_submit("migrate_state.py", source, "--schema", MANIFESTS / "v2.yaml",
                          "--output", f"s3://{BUCKET}/spark")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    _cli_migrate(source, "v2.yaml", tmp_path / "cli")
    assert _objects(s3, "spark") == _files(tmp_path / "cli"), "the Spark job must write the CLI's bytes"
    assert _objects(s3, ".spark.inprogress") == {}
    assert json.loads(_objects(s3, "spark.report")["report.json"])["states"]["stats"]["stats"]["written"] == 20

    # Flink here has no S3 file system: restore from a copy on local disk, as the pipeline does.
    restored = Path(copy_savepoint(f"s3://{BUCKET}/spark", tmp_path / "from-s3"))
    records = sample_job.restore_audit(flink_cluster.client, "v2", restored, tmp_path / "audit", keys=20)
    assert len(records) == 20
    for record in records:
        stats = dict(record["stats"])
        assert stats.pop("label") == "migrated"  # v2.yaml's default for the added field
        assert check_audit_record({**record, "stats": stats}, "v1") > 0


def test_failing_spark_migration_leaves_nothing_in_s3(s3: Any, flink_savepoints: dict[str, Path], tmp_path: Path):
    manifest = _manifest_with(tmp_path, "v3-fn.yaml", "v3-with-conversion.yaml",
                              "            count: {convert: to-string}\n",
                              "            count: {convert: to-string}\n"
                              "          function: tests.test_migration:fail_on_some_keys\n")
    result = spark_submit("migrate_state.py", flink_savepoints["heap-p2"], "--schema", manifest,
                          "--output", f"s3://{BUCKET}/failed", "--allow-code=tests.test_migration")
    assert result.returncode == 1
    error = result.stdout.strip().splitlines()[-1]
    assert error.startswith("migrate_state: error: operator stats, state stats, key ")
    assert "cannot upgrade key-" in error and key_index(error.split("'")[1]) % 4 == 0
    for prefix in ("failed", ".failed.inprogress", "failed.report"):
        assert _objects(s3, prefix) == {}, prefix


def test_migrating_onto_an_existing_s3_savepoint_is_refused(s3: Any, flink_savepoints: dict[str, Path],
                                                            capsys: pytest.CaptureFixture[str]):
    target = copy_savepoint(flink_savepoints["heap-p1"], f"s3://{BUCKET}/taken")
    before = _objects(s3, "taken")
    assert flinkstate_main(["migrate", str(flink_savepoints["heap-p2"]), "--schema", str(MANIFESTS / "v2.yaml"),
                            "--output", target]) == 1
    assert capsys.readouterr().err.strip() == f"flinkstate: error: {target}: output already exists"
    assert _objects(s3, "taken") == before
    assert _objects(s3, ".taken.inprogress") == {}


def test_publish_refuses_a_prefix_that_appeared_while_migrating(s3: Any):
    output = open_output(f"s3://{BUCKET}/raced")
    output.write_bytes("state-file", b"state")
    output.write_bytes("_metadata", b"metadata")
    s3.put_object(Bucket=BUCKET, Key="raced/_metadata", Body=b"someone else's")
    with pytest.raises(WriteError, match="raced: output appeared while migrating"):
        output.publish()
    assert _objects(s3, "raced") == {"_metadata": b"someone else's"}
    output.abort()
    assert _objects(s3, ".raced.inprogress") == {}


def test_publish_copies_metadata_last_and_a_rerun_clears_a_crashed_publish(s3: Any):
    output = open_output(f"s3://{BUCKET}/crashed")
    assert isinstance(output, S3SavepointOutput)
    for name in ("b-state", "a-state", "_metadata"):
        output.write_bytes(name, name.encode())
    copies: list[str] = []
    output.client.meta.events.register("before-call.s3.CopyObject",
                                       lambda params, **_: copies.append(params["url_path"].rsplit("/", 1)[-1]))
    output.publish()
    assert copies == ["a-state", "b-state", "_metadata"]
    assert _objects(s3, "crashed") == {"a-state": b"a-state", "b-state": b"b-state", "_metadata": b"_metadata"}

    # A publish killed after copying one file: the final prefix has no _metadata, the staging area is complete
    # (its metadata still under the staged name) and carries the dead run's owner marker.
    dead = Owner("0" * 32, socket.gethostname(), 2**22 + 1, 0.0, None)  # above pid_max's default: no such process
    for name, body in (("a-state", b"a-state"), ("b-state", b"b-state"), (STAGED_METADATA, b"_metadata"),
                       (OWNER_MARKER, dead.to_json())):
        s3.put_object(Bucket=BUCKET, Key=f"half/.published.inprogress/{name}", Body=body)
    s3.put_object(Bucket=BUCKET, Key="half/published/a-state", Body=b"a-state")
    rerun = open_output(f"s3://{BUCKET}/half/published")
    assert isinstance(rerun, S3SavepointOutput)
    assert _objects(s3, "half/published") == {}
    assert _objects(s3, "half/.published.inprogress") == {OWNER_MARKER: rerun.owner.to_json()}  # only the rerun's
    rerun.abort()
    assert _objects(s3, "half/.published.inprogress") == {}

    # Objects without _metadata and without our staging area are someone else's: refused, not deleted.
    s3.put_object(Bucket=BUCKET, Key="foreign/notes.txt", Body=b"keep")
    with pytest.raises(WriteError, match="foreign: output already exists"):
        open_output(f"s3://{BUCKET}/foreign")
    assert _objects(s3, "foreign") == {"notes.txt": b"keep"}


def test_the_output_pickles_without_its_client(s3: Any):
    output = open_output(f"s3://{BUCKET}/pickled")
    assert isinstance(output, S3SavepointOutput)
    output.write_bytes("_metadata", b"m")
    copy = pickle.loads(pickle.dumps(output))
    assert copy._client is None  # built again on first use, in the process that unpickled it
    assert copy.staged().read_metadata() == b"m"
    copy.abort()
    assert _objects(s3, ".pickled.inprogress") == {}
    output.abort()  # the driver's object holds the lock
    assert s3.list_objects_v2(Bucket=BUCKET, Prefix=".pickled.lock").get("KeyCount") == 0
