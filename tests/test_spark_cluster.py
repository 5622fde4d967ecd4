"""The Spark jobs on a real Spark standalone cluster (a master and two one-core workers as separate processes on
127.0.0.1, tests/support/spark_cluster.py), with ``spark://`` as the master, against savepoints on the loopback S3
endpoint: the check with its dry run and the migration with its distributed verification give what the same job gives
in one process (``--in-process``, itself held to local mode's bytes by tests/test_spark_jobs.py), byte for byte; the
re-check on the cluster refuses a corrupted migration; the upgrade DAG runs its Spark jobs there through the Spark
connection alone; and the cluster leaves no process behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from flinkstate.engine import LocalFlinkCluster
from flinkstate.storage.uri import copy_savepoint
from tests.support import sample_job
from tests.support.airflow_env import load_dag, set_connection
from tests.support.sample_job import ENTRY_CLASS, ROOT, expected_count
from tests.support.spark_cluster import SparkStandaloneCluster, group_alive
from tests.test_spark_jobs import in_process

pytestmark = [pytest.mark.flink, pytest.mark.spark, pytest.mark.s3]

MANIFESTS = ROOT / "examples" / "sample-job" / "manifests"
SPARK_SUBMIT = Path(sys.executable).parent / "spark-submit"
BUCKET = "cluster"


@pytest.fixture(scope="module")
def cluster(s3_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkStandaloneCluster]:
    # Started after the S3 endpoint: the workers' executors reach it through the AWS_* variables they inherit.
    with SparkStandaloneCluster(tmp_path_factory.mktemp("spark-cluster"), workers=2) as running:
        yield running


@pytest.fixture(scope="module")
def s3(s3_endpoint: str, flink_savepoints: dict[str, Path]) -> Any:
    client = boto3.client("s3")
    client.create_bucket(Bucket=BUCKET)
    for name in ("heap-p1",):
        copy_savepoint(flink_savepoints[name], f"s3://{BUCKET}/sources/{name}")
    return client


def spark_submit(master: str, job: str, *args: str | Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1", "PYTHONPATH": str(ROOT)}
    return subprocess.run([str(SPARK_SUBMIT), "--master", master, str(ROOT / "spark_jobs" / job), *map(str, args)],
                          capture_output=True, text=True, env=env, timeout=600)


@pytest.fixture(scope="module")
def cluster_migrations(cluster: SparkStandaloneCluster, s3: Any) -> Callable[[str, str], str]:
    """(source, manifest) -> the S3 prefix (in BUCKET) of that source's migration on the cluster, run once per
    module: the migration test compares it with local mode's bytes, the corruption test corrupts a copy of it."""
    done: dict[tuple[str, str], str] = {}

    def migrated(source: str, manifest: str) -> str:
        if (source, manifest) not in done:
            output = f"{source}-cluster"
            result = spark_submit(cluster.master_url, "migrate_state.py", f"s3://{BUCKET}/sources/{source}",
                                  "--schema", MANIFESTS / manifest, "--output", f"s3://{BUCKET}/{output}", "--units",
                                  "5", "--json")
            assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
            done[source, manifest] = output
        return done[source, manifest]

    return migrated


def _objects(s3: Any, prefix: str) -> dict[str, bytes]:
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix=f"{prefix}/").get("Contents", [])
    return {o["Key"][len(prefix) + 1:]: s3.get_object(Bucket=BUCKET, Key=o["Key"])["Body"].read() for o in listed}


def _apps(cluster: SparkStandaloneCluster) -> list[dict[str, Any]]:
    """The applications the master has seen finish."""
    apps = cluster.status()["completedapps"]
    assert isinstance(apps, list)
    return apps


def test_the_cluster_runs_two_workers_on_loopback(cluster: SparkStandaloneCluster):
    status = cluster.status()
    assert cluster.master_url.startswith("spark://127.0.0.1:") and status["status"] == "ALIVE"
    assert cluster.alive_workers() == 2 and status["cores"] == 2


def test_check_job_on_the_cluster_reports_what_one_process_reports(cluster: SparkStandaloneCluster, s3: Any):
    # Against the job run without Spark (--in-process), which tests/test_spark_jobs.py holds to local mode's report.
    reports = {}
    for name in ("cluster", "one process"):
        args = ("check_compatibility.py", f"s3://{BUCKET}/sources/heap-p1", "--schema", MANIFESTS / "v2.yaml",
                "--previous", MANIFESTS / "v1.yaml", "--report-dir", f"s3://{BUCKET}/check-{name}")
        result = spark_submit(cluster.master_url, *args) if name == "cluster" else in_process(*args)
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
        reports[name] = json.loads(_objects(s3, f"check-{name}")["check-report.json"])
        assert reports[name]["dry_run"].pop("seconds") > 0  # the figures that may differ: time, and tasks
        assert reports[name]["dry_run"].pop("tasks") == (4 if name == "cluster" else 2)
    assert reports["cluster"] == reports["one process"]
    dry = reports["cluster"]["dry_run"]
    assert reports["cluster"]["outcome"] == "migrate" and dry["ran"] and dry["failures"] == 0
    assert dry["entries"] == 20 * 4 + 80 and dry["states"]["stats/stats"] == {"read": 20, "converted": 20,
                                                                             "failed": 0}
    # The tasks ran on the workers' executors, not in the driver.
    assert any(a["name"] == "flinkstate-check-compatibility" for a in _apps(cluster))


# One source on the cluster (each spark-submit costs a minute or more here): the RocksDB snappy source with a
# conversion is migrated on local Spark in test_spark_jobs, against the CLI's bytes and restored by Flink.
@pytest.mark.parametrize("source, manifest", [("heap-p1", "v2.yaml")])
def test_migrate_job_on_the_cluster_writes_one_process_bytes_and_verifies_on_the_executors(
    cluster: SparkStandaloneCluster, s3: Any, cluster_migrations: Callable[[str, str], str], tmp_path: Path,
    source: str, manifest: str
):
    # Against the job run without Spark (--in-process), which tests/test_spark_jobs.py holds to local mode's bytes.
    outputs = {}
    for name in ("cluster", "local"):
        if name == "cluster":
            assert cluster_migrations(source, manifest) == f"{source}-cluster"
        else:
            result = in_process("migrate_state.py", f"s3://{BUCKET}/sources/{source}", "--schema",
                                MANIFESTS / manifest, "--output", f"s3://{BUCKET}/{source}-local", "--units", "2",
                                "--json")
            assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
        outputs[name] = _objects(s3, f"{source}-{name}")
        assert _objects(s3, f".{source}-{name}.inprogress") == {} and _objects(s3, f"{source}-{name}.parts") == {}
        assert _objects(s3, f".{source}-{name}.parts.inprogress") == {}
    assert outputs["cluster"] == outputs["local"], "the cluster must write one process's savepoint byte for byte"
    assert "_metadata" in outputs["cluster"] and len(outputs["cluster"]) >= 2
    report = json.loads(_objects(s3, f"{source}-cluster.report")["report.json"])
    assert report["states"]["stats"]["stats"]["written"] == 20 and report["dead_letters"] == 0
    assert any(line.startswith("stats/stats: 20 entries equal to the declared transform") for line in
               report["verification"])
    # (The re-check on the cluster, passing: the DAG test below, whose migration re-checks in its application; and
    # refusing: the corrupted migration's test.)


def test_a_corrupted_migration_is_refused_by_the_recheck_on_the_cluster(
    cluster: SparkStandaloneCluster, s3: Any, cluster_migrations: Callable[[str, str], str]
):
    source = "heap-p1"  # uncompressed: flipping a byte inside a block keeps the block parseable
    output = f"{source}-to-corrupt"
    # A copy of the cluster's migration of this source (the migration test's, run once), corrupted below.
    copy_savepoint(f"s3://{BUCKET}/{cluster_migrations(source, 'v2.yaml')}", f"s3://{BUCKET}/{output}")
    stream = next(name for name in _objects(s3, output) if name.startswith("keyed-"))
    body = bytearray(s3.get_object(Bucket=BUCKET, Key=f"{output}/{stream}")["Body"].read())
    # Inside a value, whatever the job wrote: v2's new field holds its default, "migrated", in every stats value.
    # One letter changed keeps the stream parseable, so only the comparison with the source can find it.
    body[body.rindex(b"migrated")] ^= 0x01
    s3.put_object(Bucket=BUCKET, Key=f"{output}/{stream}", Body=bytes(body))
    result = spark_submit(cluster.master_url, "check_compatibility.py", f"s3://{BUCKET}/{output}", "--schema",
                          MANIFESTS / "v2.yaml", "--report-dir", f"s3://{BUCKET}/{output}-recheck",
                          "--verify-against", f"s3://{BUCKET}/sources/{source}", "--dry-run", "never")
    assert result.returncode == 1
    error = result.stdout.strip().splitlines()[-1]
    assert error.startswith(f"check_compatibility: error: s3://{BUCKET}/{output} against its source "
                            f"s3://{BUCKET}/sources/{source}: operator stats, state "), error
    assert ", key group " in error and "Traceback" not in result.stdout + result.stderr


def test_the_upgrade_dag_migrates_on_the_cluster_named_by_the_spark_connection(
    cluster: SparkStandaloneCluster, airflow_home: Path, flink_cluster: LocalFlinkCluster, webhook: Any,
    tmp_path: Path
):
    """The DAG, unchanged, runs its check, migration and re-check on the standalone cluster because the Spark
    connection names it: nothing else tells it where Spark is."""
    saved = {name: os.environ.get(name) for name in ("AIRFLOW_CONN_FLINK_DEFAULT", "AIRFLOW_CONN_SPARK_DEFAULT",
                                                     "PATH", "SPARK_LOCAL_IP")}
    client = flink_cluster.client
    keys = 8
    v1 = sample_job.submit(client, "v1", tmp_path / "audit-v1", keys=keys, rate=100, parallelism=1)
    new_job = None
    try:
        set_connection("flink_default", conn_type="http", host="127.0.0.1", port=flink_cluster.status()["rest_port"])
        set_connection("spark_default", conn_type="spark", host="spark://127.0.0.1", port=cluster.port)
        os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"  # spark-submit
        os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
        v1.wait_for_keys()

        def version(name: str, manifest: str) -> dict[str, Any]:
            return {"jar": str(sample_job.jar(name)), "manifest": str(MANIFESTS / manifest),
                    "entry_class": ENTRY_CLASS, "parallelism": 1,
                    "program_args": ["--keys", str(keys), "--rate", "100", "--audit-dir",
                                     str(tmp_path / f"audit-{name}")]}

        apps_before = {a["id"] for a in _apps(cluster)}
        conf = {"job_name": "", "job_id": v1.job_id, **version("v2", "v2.yaml"), "current": version("v1", "v1.yaml"),
                "savepoint_base": str(tmp_path / "savepoints"), "min_checkpoints": 2, "gate_timeout": 90,
                "min_running_seconds": 3, "engine": "spark"}  # a savepoint this small runs in-process on "auto"
        run = load_dag("flink_state_upgrade", ROOT / "dags").test(run_conf=conf)
        states = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
        assert str(run.state) == "success", states
        for task in ("check", "migrate", "recheck", "submit_new", "health_gate"):
            assert states[task] == "success", (task, states)
        registry = json.loads((tmp_path / "savepoints" / "deployments.json").read_text())
        entry = next(iter(registry.values()))
        new_job = entry["job_id"]
        assert client.job_state(new_job) == "RUNNING"

        # The Spark jobs ran as applications of the standalone cluster.
        apps = [a for a in _apps(cluster) if a["id"] not in apps_before]
        # (named by the jobs' sessions: the check, and the migration with its re-check and distributed verification
        # in the same application)
        assert sorted(a["name"] for a in apps) == ["flinkstate-check-compatibility", "flinkstate-migrate-state"]
        assert all(a["state"] == "FINISHED" for a in apps), apps

        # v2 found every key's state as v1 left it, the field v2 added filled by the migration's default.
        records = sample_job.wait_for_all_keys(lambda: sample_job.read_audit(tmp_path / "audit-v2", "v2"), keys,
                                               tmp_path / "audit-v2")
        first: dict[str, dict[str, Any]] = {}
        for record in records:
            first.setdefault(record["key"], record)
        for record in first.values():
            n = expected_count(record["key"], record["seq"], record["keys"])
            assert n > 0 and record["stats"]["count"] == n and record["stats"]["label"] == "migrated", record
            assert record["stats"]["total"] == n * (n + 1) // 2
    finally:
        for job in (v1.job_id, new_job):
            if job is not None and client.job_state(job) == "RUNNING":
                client.cancel(job)
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def test_a_cluster_stops_without_leaving_a_process(cluster: SparkStandaloneCluster):
    """Last in the module: the module's own cluster is stopped here (a second cluster for this alone cost 30 s), and
    the fixture's stop afterwards finds nothing left."""
    groups = [process.pid for process in cluster.processes]
    assert cluster.alive_workers() == 2 and all(group_alive(pid) for pid in groups)
    cluster.stop()
    assert not any(group_alive(pid) for pid in groups)
    with pytest.raises(OSError):
        cluster.status()  # the master's web UI is gone with it
