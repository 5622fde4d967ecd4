"""The README's Python API example, run as written on a savepoint Flink wrote in this test run (only its paths are
replaced), so that the documented API cannot drift from the real one."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

import flinkstate
from tests.support.airflow_env import ROOT

pytestmark = pytest.mark.flink


def _python_example() -> str:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## The Python API", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 1, "the Python API section has one example"
    return blocks[0]


def test_the_readme_python_example_runs(flink_savepoints: dict[str, Path], tmp_path: Path, capsys):
    source = tmp_path / "savepoint"
    shutil.copytree(next(iter(flink_savepoints.values())), source)
    code = (_python_example().replace("/savepoints/savepoint-1a2b3c", str(source))
            .replace("/savepoints/migrated", str(tmp_path / "migrated"))
            .replace("/tmp/schema.yaml", str(tmp_path / "schema.yaml")))
    exec(compile(code, "README.md (Python API)", "exec"), {})
    printed = capsys.readouterr().out
    assert "count" in printed and printed.count("\n") > 10  # the entries of the sample job's states
    migrated = flinkstate.open_savepoint(tmp_path / "migrated")
    original = flinkstate.open_savepoint(source)
    for op in original.operators:
        for state in original.keyed_states(op):
            assert sorted(map(repr, migrated.iter_entries(op, state.name))) == \
                sorted(map(repr, original.iter_entries(op, state.name)))
