"""A full disk, on a real file system of the test's own (a small tmpfs; mounting needs root, as CI runs): out of
space is reported as such, in one line naming the file, never as a bug in flinkstate; nothing half-written is left;
and the upgrade journal's writes either fail cleanly or, where the caller goes on without a record (the rollback,
the run's end), are retried and noted instead of raised."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flinkstate import StorageError, UpgradeJournal
from flinkstate.cli import main
from flinkstate.errors import is_out_of_space
from tests.support.small_disk import fill, small_disk

SAVEPOINT = (Path(__file__).parent / "corpus" / "savepoints" / "flink-tests" / "src" / "test" / "resources"
             / "new-stateful-udf-migration-itcase-flink2.3-hashmap-savepoint")
OUT_OF_SPACE = ": cannot write: out of space (No space left on device)"


@pytest.mark.parametrize("leave", [0, 8192], ids=["full", "full-while-writing-state"])
def test_migrate_to_a_full_disk_names_the_file_and_leaves_nothing(tmp_path: Path, leave: int,
                                                                   capsys: pytest.CaptureFixture[str]):
    manifest = tmp_path / "schema.yaml"
    assert main(["schema", str(SAVEPOINT), "-o", str(manifest)]) == 0
    capsys.readouterr()
    with small_disk(tmp_path / "disk", "1m") as disk:
        fill(disk, leave)  # full: the output's lock cannot be written; 8 KiB left: a state file of the staging area
        assert main(["migrate", str(SAVEPOINT), "--schema", str(manifest), "--output", str(disk / "out")]) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"flinkstate: error: {disk}/.out.") and err.endswith(f"{OUT_OF_SPACE}\n"), err
        assert err.count("\n") == 1 and "internal error" not in err, err
        assert sorted(p.name for p in disk.iterdir()) == ["filler"]


def test_journal_writes_on_a_full_disk(tmp_path: Path):
    with small_disk(tmp_path / "disk", "1m") as disk:
        base = disk / "savepoints"
        journal = UpgradeJournal.start({"savepoint_base": str(base), "job_name": "orders", "run_id": "r1",
                                        "run_dir": str(base / "orders" / "r1"), "job_id": "0" * 32,
                                        "old": {"jar": "/a.jar", "manifest": "/a.yaml"},
                                        "new": {"jar": "/b.jar", "manifest": "/b.yaml"}}, "resolve")
        journal.advance("stopped", "stop", stop_savepoint="/sp/savepoint-1")
        filler = fill(disk)
        stored = Path(journal.uri).read_bytes()
        # By default a failed write raises, in one line naming the journal; the stored one stays whole.
        with pytest.raises(StorageError) as refused:
            journal.advance("migrating", "migrate")
        assert str(refused.value) == f"{journal.uri}{OUT_OF_SPACE}"
        assert Path(journal.uri).read_bytes() == stored
        assert sorted(p.name for p in Path(journal.uri).parent.iterdir()) == [".orders.json.lock", "orders.json"]
        # Tolerated (the rollback's and the run's end's writes): retried, then noted, not raised.
        journal.tolerate_write_failures().advance("rolling_back", "conclude")
        assert journal.unsaved == [f"journal not written: {journal.uri}{OUT_OF_SPACE}"]
        assert Path(journal.uri).read_bytes() == stored
        # Once there is space again the next write goes through, compare-and-swap intact (the failed writes did
        # not move the revision it compares).
        filler.unlink()
        journal.finish("rolled back", "conclude", running={"version": "old", "job_id": "1" * 32})
        again = json.loads(Path(journal.uri).read_text())
        assert again["phase"] == "done" and again["outcome"] == "rolled back"
        assert again["revision"] == json.loads(stored)["revision"] + 1
        assert [s["phase"] for s in again["history"]][-2:] == ["rolling_back", "done"]


def test_the_watchdog_recovers_a_dead_run_on_a_full_disk(tmp_path: Path):
    """The watchdog's claim is a write too: on a full disk its compare passes and only the write fails, so the
    recovery goes on (restoring needs only reads), and its account says what it could not record and how to."""
    from flinkstate import recover

    with small_disk(tmp_path / "disk", "1m") as disk:
        base = disk / "savepoints"
        UpgradeJournal.start({"savepoint_base": str(base), "job_name": "orders", "run_id": "r1",
                              "run_dir": str(base / "orders" / "r1"), "job_id": "0" * 32,
                              "old": {"jar": "/a.jar", "manifest": "/a.yaml"},
                              "new": {"jar": "/b.jar", "manifest": "/b.yaml"}}, "resolve")
        journal = UpgradeJournal.for_deployment(str(base), "orders")
        assert journal is not None
        filler = fill(disk)
        stored = Path(journal.uri).read_bytes()
        result = recover(None, journal, "watchdog")  # type: ignore[arg-type]  # died before the stop: no Flink call
        assert result.outcome == "unchanged" and result.running == {"version": "old", "job_id": "0" * 32}
        assert f"NOT RECORDED (claim not written: {journal.uri}{OUT_OF_SPACE}; journal not written: " in result.account
        assert Path(journal.uri).read_bytes() == stored
        # Another error than a full disk is no licence to go on without the claim: here the journal's folder was
        # replaced by a file after the read.
        filler.unlink()
        again = UpgradeJournal.for_deployment(str(base), "orders")
        assert again is not None
        folder = Path(journal.uri).parent
        folder.rename(folder.with_name("moved"))
        folder.write_text("not a folder")
        with pytest.raises(OSError) as refused:
            recover(None, again, "watchdog")  # type: ignore[arg-type]
        assert not is_out_of_space(refused.value)
