"""The version matrix: the sample job runs, savepoints and restores on Flink 1.20 and 2.2 as on 2.3."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import MATRIX_VARIANTS, MATRIX_VERSIONS

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
