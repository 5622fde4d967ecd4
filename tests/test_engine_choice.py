"""The upgrade DAG's path choice (``engine``, ``in_process_max_bytes``; plugins/flinkstate_airflow/spark_submit.py):
a small savepoint never goes to Spark, a large one does, either is forced by ``engine``, and a wrong value is
refused in one line. The in-process run's output is Spark's byte for byte: tests/test_spark_jobs.py."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from flinkstate import savepoint_bytes
from tests.support.airflow_env import ROOT

SAVEPOINT = (ROOT / "tests" / "corpus" / "savepoints" / "flink-tests" / "src" / "test" / "resources"
             / "new-stateful-udf-migration-itcase-flink2.3-hashmap-checkpoint")


@pytest.fixture
def savepoint(airflow_home: Path, tmp_path: Path) -> Path:  # airflow_home: the plugins import
    copy = tmp_path / "savepoint"
    shutil.copytree(SAVEPOINT, copy)
    return copy


def test_a_small_savepoint_never_goes_to_spark(savepoint: Path):
    from flinkstate_airflow.spark_submit import DEFAULT_IN_PROCESS_MAX_BYTES, choose_engine

    size = sum(p.stat().st_size for p in savepoint.iterdir())
    assert savepoint_bytes(str(savepoint)) == size
    engine, why = choose_engine(str(savepoint), "auto", DEFAULT_IN_PROCESS_MAX_BYTES)
    assert engine == "in-process", why
    assert why == f"the savepoint's {size:,} bytes are at most in_process_max_bytes ({DEFAULT_IN_PROCESS_MAX_BYTES:,})"
    assert choose_engine(str(savepoint), "auto", size)[0] == "in-process"  # the bound is inclusive


def test_a_savepoint_above_the_bound_goes_to_spark_and_either_path_can_be_forced(savepoint: Path):
    from flinkstate_airflow.spark_submit import choose_engine

    size = sum(p.stat().st_size for p in savepoint.iterdir())
    engine, why = choose_engine(str(savepoint), "auto", size - 1)
    assert engine == "spark" and why == f"the savepoint's {size:,} bytes are more than in_process_max_bytes " \
                                        f"({size - 1:,})"
    assert choose_engine(str(savepoint), "spark", 10 ** 12) == ("spark", "engine set")
    assert choose_engine(str(savepoint), "in-process", 0) == ("in-process", "engine set")


def test_an_unknown_engine_is_refused_in_one_line(savepoint: Path):
    from flinkstate_airflow.operators import TaskRefused
    from flinkstate_airflow.spark_submit import choose_engine

    with pytest.raises(TaskRefused) as refused:
        choose_engine(str(savepoint), "yarn\x1b[2J", 0)
    assert str(refused.value) == "engine 'yarn\\x1b[2J': expected one of auto, spark, in-process"
