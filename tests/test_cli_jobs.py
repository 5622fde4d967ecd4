"""``flinkstate jobs`` and ``flinkstate savepoint`` against a real Flink cluster, and where they find Flink."""

from __future__ import annotations

from pathlib import Path

import pytest

from flinkstate.cli import main
from flinkstate.cli.jobs import flink_url
from flinkstate.engine import LocalFlinkCluster
from flinkstate.savepoint import Savepoint
from tests.support import sample_job


@pytest.mark.flink
def test_jobs_and_savepoints_by_name_and_by_id(flink_cluster: LocalFlinkCluster, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]):
    run = sample_job.submit(flink_cluster.client, "v1", tmp_path / "audit", keys=4, rate=100)
    run.wait_for_keys()
    url = flink_cluster.client.base_url
    name = flink_cluster.client.job(run.job_id)["name"]
    assert main(["jobs", "--flink-url", url]) == 0
    listed = capsys.readouterr().out
    assert f"{run.job_id}  RUNNING" in listed and name in listed

    assert main(["savepoint", name, "--flink-url", url, "--target-directory", str(tmp_path / "sp")]) == 0
    location = capsys.readouterr().out.strip()
    assert Savepoint.open(location.removeprefix("file:")).operator("stats")  # a real, readable savepoint
    assert flink_cluster.client.job_state(run.job_id) == "RUNNING"

    assert main(["savepoint", run.job_id, "--stop", "--flink-url", url, "--target-directory",
                 str(tmp_path / "stop")]) == 0
    stopped = capsys.readouterr().out.strip()
    assert Savepoint.open(stopped.removeprefix("file:")).operator("stats")
    assert flink_cluster.client.job_state(run.job_id) == "FINISHED"
    assert main(["jobs", "--flink-url", url]) == 0 and run.job_id not in capsys.readouterr().out
    assert main(["jobs", "--all", "--flink-url", url]) == 0 and f"{run.job_id}  FINISHED" in capsys.readouterr().out

    assert main(["savepoint", "no-such-job", "--flink-url", url, "--target-directory", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no running job named 'no-such-job'" in err

    # The job started again from its stop savepoint, as `flink run -s` would: every task RUNNING, state restored.
    jar, savepoint = str(sample_job.jar("v1")), stopped.removeprefix("file:")
    assert main(["jobs", "submit", jar, "--flink-url", url, "-c", sample_job.ENTRY_CLASS, "--from-savepoint",
                 savepoint, "--", *run.program_args]) == 0
    restarted = capsys.readouterr().out.strip()
    try:
        assert flink_cluster.client.job_state(restarted) == "RUNNING"
        assert flink_cluster.client.checkpoints(restarted).restored_from.removeprefix("file:") == savepoint
    finally:
        flink_cluster.client.cancel(restarted)
    assert main(["jobs", "submit", jar, "--flink-url", url, "-c", sample_job.ENTRY_CLASS, "--from-savepoint",
                 str(tmp_path / "no-such-savepoint"), "--", *run.program_args]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("flinkstate: error: ") and "no-such-savepoint" in err, err


def test_flink_is_found_as_the_airflow_hook_finds_it(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("FLINKSTATE_FLINK_URL", raising=False)
    monkeypatch.delenv("AIRFLOW_CONN_FLINK_DEFAULT", raising=False)
    assert flink_url() == "http://127.0.0.1:8081"
    monkeypatch.setenv("AIRFLOW_CONN_FLINK_DEFAULT", '{"conn_type": "http", "host": "jm", "port": 8082}')
    assert flink_url() == "http://jm:8082"
    monkeypatch.setenv("AIRFLOW_CONN_FLINK_DEFAULT", "http://jm.example:9081/https")
    assert flink_url() == "https://jm.example:9081"
    monkeypatch.setenv("FLINKSTATE_FLINK_URL", "http://other:1/")
    assert flink_url() == "http://other:1"
    assert flink_url("http://given:2") == "http://given:2"
