"""Progress on a terminal, none in a pipe: ``flinkstate dump`` on a savepoint Flink wrote in this run."""

from __future__ import annotations

import json
import os
import pty
import subprocess
from pathlib import Path

import pytest

from tests.support.sample_job import ROOT

pytestmark = pytest.mark.flink
FLINKSTATE = str(ROOT / ".venv" / "bin" / "flinkstate")


def _dump(savepoint: Path, *options: str, terminal: bool) -> tuple[str, str]:
    argv = [FLINKSTATE, *options, "dump", str(savepoint), "--operator", "stats", "--state", "buckets"]
    if not terminal:
        result = subprocess.run(argv, capture_output=True, text=True, check=True)
        return result.stdout, result.stderr
    primary, secondary = pty.openpty()
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=secondary, env={**os.environ, "COLUMNS": "100"})
    os.close(secondary)
    chunks = []
    while True:
        try:
            chunk = os.read(primary, 4096)
        except OSError:  # the terminal closed with the process
            break
        if not chunk:
            break
        chunks.append(chunk)
    out = process.stdout.read().decode() if process.stdout else ""
    assert process.wait() == 0
    os.close(primary)
    return out, b"".join(chunks).decode(errors="replace")


def test_dump_shows_progress_on_a_terminal_only(flink_savepoints: dict[str, Path]):
    savepoint = flink_savepoints["heap-p2"]
    piped_out, piped_err = _dump(savepoint, terminal=False)
    assert piped_err == ""
    entries = [json.loads(line) for line in piped_out.splitlines()]
    assert len(entries) > 20
    tty_out, tty_err = _dump(savepoint, terminal=True)
    assert "dump buckets" in tty_err and "key groups" in tty_err
    assert tty_out == piped_out  # the data never mixes with the progress
    quiet_out, quiet_err = _dump(savepoint, "--quiet", terminal=True)
    assert quiet_err == "" and quiet_out == piped_out
    _, forced_err = _dump(savepoint, "--progress", terminal=False)
    assert "key groups" in forced_err


def test_migrate_shows_progress_when_asked(flink_savepoints: dict[str, Path], tmp_path: Path):
    manifest = ROOT / "examples" / "sample-job" / "manifests" / "v2.yaml"
    argv = [FLINKSTATE, "--progress", "migrate", str(flink_savepoints["heap-p2"]), "--schema", str(manifest),
            "--output", str(tmp_path / "out")]
    result = subprocess.run(argv, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "keyed streams" in result.stderr and "verify stats" in result.stderr
    quiet = subprocess.run([*argv[:1], *argv[2:-1], str(tmp_path / "quiet")], capture_output=True, text=True)
    assert quiet.returncode == 0 and quiet.stderr == ""
