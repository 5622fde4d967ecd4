"""docker-compose.yml, checked statically (no Docker engine here): it parses, every service can be built or pulled,
every host path it mounts or builds from exists, the Airflow services get the connections and settings the DAGs
read, Flink has its S3 file system configured for MinIO, and the image installs flinkstate's requirements."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import yaml

from tests.support.airflow_env import ROOT

COMPOSE = ROOT / "docker-compose.yml"
AIRFLOW_SERVICES = ("airflow-init", "airflow-apiserver", "airflow-scheduler", "airflow-dag-processor",
                    "airflow-triggerer")
#: Where the image and the mounts put the repository.
PROJECT = "/opt/flinkstate"


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(data, dict) and isinstance(data.get("services"), dict)
    return data


def interpolate(value: str) -> str:
    """Compose's ${NAME:-default} with nothing set: the defaults the file ships with."""
    return re.sub(r"\$\{[A-Z0-9_]+:-([^}]*)\}", r"\1", value)


def environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {key: interpolate(str(value)) for key, value in env.items()}


def test_every_service_has_an_image_or_a_build_whose_files_exist(compose: dict[str, Any]):
    expected = {"postgres", *AIRFLOW_SERVICES, "spark-master", "spark-worker", "flink-jobmanager",
                "flink-taskmanager", "minio", "create-buckets"}
    assert expected <= set(compose["services"])
    for name, service in compose["services"].items():
        assert service.get("image") or service.get("build"), name
        build = service.get("build")
        if build:
            context = ROOT / (build if isinstance(build, str) else build.get("context", "."))
            assert context.is_dir(), (name, context)
            dockerfile = context / (build.get("dockerfile", "Dockerfile") if isinstance(build, dict) else "Dockerfile")
            assert dockerfile.is_file(), (name, dockerfile)


def test_every_mounted_host_path_exists(compose: dict[str, Any]):
    named = set(compose.get("volumes") or {})
    mounts = 0
    for name, service in compose["services"].items():
        for volume in service.get("volumes") or []:
            source = volume.split(":", 1)[0] if isinstance(volume, str) else volume["source"]
            if source in named:
                continue
            assert source.startswith("./"), (name, volume)
            assert (ROOT / source).exists(), (name, volume)
            mounts += 1
    assert mounts >= 10


@pytest.mark.parametrize("service", ["airflow-scheduler", "spark-worker"])
def test_the_code_is_mounted_where_the_dag_expects_it(compose: dict[str, Any], service: str):
    # The Spark driver runs in the Airflow task (client mode) and the executors on the worker: both see the same
    # paths for the jobs, the manifests and the toolkit.
    targets = {v.split(":")[1] for v in compose["services"][service]["volumes"]}
    assert {f"{PROJECT}/{d}" for d in ("flinkstate", "spark_jobs", "examples")} <= targets
    if service.startswith("airflow"):
        assert {f"{PROJECT}/dags", f"{PROJECT}/plugins"} <= targets


@pytest.mark.parametrize("service", AIRFLOW_SERVICES)
def test_airflow_services_have_the_connections_and_settings_the_dags_read(compose: dict[str, Any], service: str):
    env = environment(compose["services"][service])
    flink = json.loads(env["AIRFLOW_CONN_FLINK_DEFAULT"])
    assert flink["conn_type"] == "http" and flink["host"] == "flink-jobmanager" and flink["port"] == 8081
    spark = json.loads(env["AIRFLOW_CONN_SPARK_DEFAULT"])
    # The Spark provider joins host and port: spark://spark-master:7077, a standalone master (not yarn).
    assert spark["conn_type"] == "spark" and f"{spark['host']}:{spark['port']}" == "spark://spark-master:7077"
    hook = json.loads(env["AIRFLOW_CONN_FLINK_UPGRADE_WEBHOOK"])
    assert hook["conn_type"] == "http" and hook["host"] and hook["extra"]["endpoint"].startswith("/")
    assert env["AWS_ENDPOINT_URL"] == "http://minio:9000" and env["AWS_ACCESS_KEY_ID"] and env["AWS_SECRET_ACCESS_KEY"]
    assert env["AWS_ACCESS_KEY_ID"] == environment(compose["services"]["minio"])["MINIO_ROOT_USER"]
    assert env["AIRFLOW__CORE__DAGS_FOLDER"] == f"{PROJECT}/dags"
    assert env["AIRFLOW__CORE__PLUGINS_FOLDER"] == f"{PROJECT}/plugins"
    assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("postgresql") and "@postgres/" in \
        env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
    # What plugins/flinkstate_airflow/upgrade.py:spark_settings() reads, and the scheduled DAG's release file.
    assert env["FLINKSTATE_SPARK_JOBS"] == f"{PROJECT}/spark_jobs"
    assert env["FLINKSTATE_SPARK_CONN_ID"] == "spark_default"
    assert env["FLINKSTATE_PYSPARK_PYTHON"].startswith("/")
    assert env["FLINKSTATE_RELEASE_FILE"].startswith("s3://flink-savepoints/")
    assert "SPARK_LOCAL_IP" not in env, "executors on another host must reach the driver"


def test_spark_workers_reach_minio_and_run_the_same_image(compose: dict[str, Any]):
    services = compose["services"]
    worker, scheduler = services["spark-worker"], services["airflow-scheduler"]
    assert worker["image"] == scheduler["image"], "the executors need the driver's Python with flinkstate"
    assert environment(worker)["AWS_ENDPOINT_URL"] == "http://minio:9000"
    assert "spark://spark-master:7077" in worker["entrypoint"]
    assert scheduler["hostname"] == "airflow-scheduler"


@pytest.mark.parametrize("service", ["flink-jobmanager", "flink-taskmanager"])
def test_flink_has_the_s3_file_system_for_minio(compose: dict[str, Any], service: str):
    spec = compose["services"][service]
    assert re.fullmatch(r"flink:2\.3\.\d+(-.+)?", spec["image"]), spec["image"]
    env = environment(spec)
    assert re.fullmatch(r"flink-s3-fs-(presto|hadoop)-2\.3\.\d+\.jar", env["ENABLE_BUILT_IN_PLUGINS"])
    properties = yaml.safe_load(env["FLINK_PROPERTIES"])
    minio = environment(compose["services"]["minio"])
    assert properties["s3.endpoint"] == "http://minio:9000" and properties["s3.path.style.access"] is True
    assert properties["s3.access-key"] == minio["MINIO_ROOT_USER"]
    assert properties["s3.secret-key"] == minio["MINIO_ROOT_PASSWORD"]
    assert properties["execution.checkpointing.savepoint-dir"].startswith("s3://flink-savepoints/")
    assert properties["jobmanager.rpc.address"] == "flink-jobmanager"
    assert environment(compose["services"]["create-buckets"])["FLINKSTATE_BUCKET"] == "flink-savepoints"


def test_the_image_installs_flinkstate_and_its_requirements():
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    assert re.search(r"^FROM apache/airflow:3\.3\.2-python3\.11$", dockerfile, re.M)
    copied = {word for line in dockerfile.splitlines() if line.startswith("COPY") and "--from=" not in line
              for word in line.split()[1:-1] if not word.startswith("--")}
    assert {"requirements.txt", "constraints.txt", "pyproject.toml", "flinkstate"} <= copied
    assert all((ROOT / path).exists() for path in copied)
    assert "pip install --no-cache-dir -r requirements.txt -c constraints.txt" in dockerfile
    assert f"-e {PROJECT}" in dockerfile and "openjdk-17" in dockerfile
    # The upgrade DAG's jar inspection: a JDK (javac builds the inspector), Flink's distribution of the cluster's
    # version as FLINK_HOME, and the inspector's sources where flinkstate looks for them (beside flinkstate/).
    assert "openjdk-17-jdk-headless" in dockerfile and re.search(r"^ENV FLINK_HOME=/opt/flink$", dockerfile, re.M)
    flink_stage = re.search(r"^FROM (flink:\S+) AS flink$", dockerfile, re.M)
    assert flink_stage and "COPY --from=flink --chown=airflow:root /opt/flink /opt/flink" in dockerfile
    compose = yaml.safe_load(COMPOSE.read_text())
    assert flink_stage.group(1) == compose["services"]["flink-jobmanager"]["image"]
    assert f"./inspector:{PROJECT}/inspector" in compose["services"]["airflow-scheduler"]["volumes"]
    # Every library flinkstate declares is pinned in requirements.txt, which the image installs.
    pyproject = (ROOT / "pyproject.toml").read_text()
    declared = re.findall(r'^\s+"([A-Za-z0-9_.-]+)[<>=!~]', pyproject.split("dependencies = [", 1)[1].split("]")[0],
                          re.M)
    pinned = {line.split("==")[0].split("[")[0].strip().lower()
              for line in (ROOT / "requirements.txt").read_text().splitlines() if "==" in line}
    assert declared and {d.lower() for d in declared} <= pinned, set(declared) - pinned
    assert {"apache-airflow", "apache-airflow-providers-apache-spark", "apache-airflow-providers-http",
            "pyspark"} <= pinned
    # The bucket script the init container runs is bounded and creates the savepoint bucket.
    script = (ROOT / "docker" / "create-buckets.sh").read_text()
    assert 'mc mb --ignore-existing "local/$FLINKSTATE_BUCKET"' in script and "-ge 120" in script
