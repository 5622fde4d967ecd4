"""The version matrix: savepoints written by Flink 1.20 (metadata V4) and 2.2 (V6) in this test run, read back entry
by entry as those of 2.3."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from flinkstate.savepoint import Savepoint
from tests.conftest import MATRIX_VARIANTS, MATRIX_VERSIONS
from tests.support.sample_job import OPERATOR_UID
from tests.support.state_checks import assert_sample_state

pytestmark = pytest.mark.flink

#: The `_metadata` version each Flink version writes (FLINK-28597: 4 in 1.16-1.20; FLINK-33734: 6 from 2.1).
METADATA_VERSION = {"1.20.3": 4, "2.2.0": 6}


def test_each_version_wrote_self_contained_savepoints(flink_matrix_savepoints: dict[str, tuple[Path, dict[str, Any]]]):
    assert sorted(flink_matrix_savepoints) == sorted(f"{v}/{n}" for v in MATRIX_VERSIONS for n in MATRIX_VARIANTS)
    for name, (savepoint, info) in flink_matrix_savepoints.items():
        metadata = (savepoint / "_metadata").read_bytes()
        assert metadata[:4] == bytes.fromhex("4960672d"), name
        assert int.from_bytes(metadata[4:8], "big") == METADATA_VERSION[info["flink_version"]], name
        state_files = [p for p in savepoint.iterdir() if p.name != "_metadata"]
        assert len(state_files) >= 3, f"{name}: state must be in separate files, found {state_files}"


def test_reader_reads_every_entry_of_each_version(flink_matrix_savepoints: dict[str, tuple[Path, dict[str, Any]]]):
    for name, (savepoint, info) in flink_matrix_savepoints.items():
        opened = Savepoint.open(savepoint)
        assert opened.metadata.version == METADATA_VERSION[info["flink_version"]], name
        stats = opened.operator(OPERATOR_UID)
        if info["flink_version"].startswith("1."):  # operator names and uids enter the metadata in 2.0 (V5)
            assert stats.uid is None
        else:
            assert stats.uid == OPERATOR_UID
        counts = assert_sample_state(savepoint, info["keys"])
        assert sum(counts.values()) > info["keys"], f"{name}: keys should have seen several events"
