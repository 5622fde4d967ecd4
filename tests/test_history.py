"""Issue 29: a deployment's savepoint history and its retention (``flinkstate history``), on run folders laid out as
the upgrade DAG writes them (``run.json`` through the plugin's own ``write_run_record``, the registry and the
journal through flinkstate's), with a real savepoint of Flink's corpus in each place, locally and on a real S3
endpoint on loopback. Retention never removes the savepoint the running job was restored from nor any of an
unfinished run, and the history still shows a run whose savepoints are gone."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import boto3
import pytest

from flinkstate.cli import main
from flinkstate.storage.uri import copy_savepoint
from tests.support.run_folders import SAVEPOINT, lay_out_runs


def _history(capsys: pytest.CaptureFixture[str], base: str, *args: str) -> dict[str, Any]:
    assert main(["history", "orders", "--savepoint-base", base, "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


def _savepoints(history: dict[str, Any]) -> dict[str, list[tuple[str, str]]]:
    return {run["run_id"]: [(s["kind"], s["needed"]) for s in run["savepoints"]] for run in history["runs"]}


def _check_retention(capsys: pytest.CaptureFixture[str], base: str, exists: Any) -> None:
    where = lay_out_runs(base)
    history = _history(capsys, base)
    assert [(r["run_id"], r["outcome"], r["check_outcome"], r["version"]) for r in history["runs"]] == [
        ("r1", "upgraded", "migrate", "/jobs/v2.jar"), ("r2", "upgraded", "migrate", "/jobs/v3.jar"),
        ("r3", None, "migrate", "/jobs/v4.jar")]
    running, unfinished = "the running job was restored from it", "its run is unfinished"
    assert _savepoints(history) == {
        "r1": [("migrated", ""), ("preflight", ""), ("stop", "")],
        "r2": [("migrated", running), ("preflight", ""), ("stop", "")],
        "r3": [("migrated", unfinished), ("preflight", unfinished), ("stop", unfinished)]}
    # A dry run says what would go and removes nothing.
    planned = _history(capsys, base, "--keep", "1", "--dry-run")["would_remove"]
    assert sorted(where[p] for p in planned) == ["r1/migrated", "r1/preflight", "r1/stop", "r2/preflight", "r2/stop"]
    assert all(exists(p) for p in where)
    # Kept: the newest run's, the running job's, the unfinished run's; the removed runs stay in the history.
    removed = _history(capsys, base, "--keep", "1")["removed"]
    assert removed == planned
    assert sorted(where[p] for p in where if exists(p)) == ["r2/migrated", "r3/migrated", "r3/preflight", "r3/stop"]
    after = _history(capsys, base)
    assert [r["run_id"] for r in after["runs"]] == ["r1", "r2", "r3"] and _savepoints(after)["r1"] == []
    # Keeping every run removes nothing more; keeping none is refused in one line.
    assert _history(capsys, base, "--keep", "3")["removed"] == []
    assert main(["history", "orders", "--savepoint-base", base, "--keep", "0"]) == 1
    assert capsys.readouterr().err.strip() == ("flinkstate: error: --keep 0: keep at least the newest run's "
                                               "savepoints")


def test_history_and_retention_on_a_local_base(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    base = tmp_path / "base"
    _check_retention(capsys, str(base), lambda location: (Path(location) / "_metadata").is_file())
    # The text form names each run and savepoint, and what keeps one.
    assert main(["history", "orders", "--savepoint-base", str(base)]) == 0
    text = capsys.readouterr().out
    assert "2026-11-02T10:00:00Z  run r2: upgraded; check: migrate (COMPATIBLE_AFTER_MIGRATION)" in text
    assert f"migrated  {base}/orders/r2/migrated/savepoint  [kept: the running job was restored from it]" in text


def test_a_linked_savepoint_folder_is_not_followed(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    base = tmp_path / "base"
    lay_out_runs(str(base))
    elsewhere = Path(copy_savepoint(SAVEPOINT, tmp_path / "elsewhere"))
    linked = base / "orders" / "r1" / "stop" / "savepoint-linked"
    linked.symlink_to(elsewhere)
    assert main(["history", "orders", "--savepoint-base", str(base), "--keep", "1"]) == 0
    assert (elsewhere / "_metadata").is_file() and linked.is_symlink()


def test_history_and_retention_on_s3(s3_endpoint: str, capsys: pytest.CaptureFixture[str]):
    client = boto3.client("s3")
    client.create_bucket(Bucket="history")

    def exists(location: str) -> bool:
        key = location.removeprefix("s3://history/") + "/_metadata"
        return "Contents" in client.list_objects_v2(Bucket="history", Prefix=key)

    _check_retention(capsys, "s3://history/base", exists)
