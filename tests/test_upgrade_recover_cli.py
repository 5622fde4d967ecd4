"""Recovery without a cluster: ``flinkstate upgrade recover`` says why it leaves an unfinished run alone (its owner
alive, or its last write within the grace), exits non-zero while one is left, and treats a zombie owner (dead, not
yet reaped) as dead (a run that died before it stopped anything is closed without asking Flink); the rollback asks
a Flink that does not answer again until its timeout, not once."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

from flinkstate import UpgradeJournal, client_for, restore_old
from flinkstate.engine.local import free_port
from flinkstate.upgrades.ownership import process_start

FLINKSTATE = str(Path(sys.executable).parent / "flinkstate")
UNREACHABLE = "http://127.0.0.1:9"  # never asked: nothing was stopped


def _journal(base: Path) -> UpgradeJournal:
    return UpgradeJournal.start({"savepoint_base": str(base), "job_name": "orders", "run_id": "r1",
                                 "run_dir": str(base / "orders" / "r1"), "job_id": "0" * 32,
                                 "old": {"jar": "/a.jar", "manifest": "/a.yaml"},
                                 "new": {"jar": "/b.jar", "manifest": "/b.yaml"}}, "resolve")


def _owned_by(journal: UpgradeJournal, pid: int, pid_start: str | None, quiet_for: float = 0) -> None:
    data = json.loads(Path(journal.uri).read_text())
    data["owner"].update(pid=pid, pid_start=pid_start)
    data["updated_epoch"] = time.time() - quiet_for
    Path(journal.uri).write_text(json.dumps(data))


def _flinkstate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([FLINKSTATE, "upgrade", *args], capture_output=True, text=True, check=False, timeout=120)


def test_recover_says_why_it_leaves_a_run_alone_and_fails(tmp_path: Path):
    journal = _journal(tmp_path)
    host = socket.gethostname()
    # The owner lives (this process): left alone, whatever the grace.
    out = _flinkstate("recover", "--savepoint-base", str(tmp_path), "--flink-url", UNREACHABLE)
    assert out.returncode == 1, out
    assert re.fullmatch(f"orders: run r1 UNFINISHED in phase planned, not recovered: owner alive: pid {os.getpid()} "
                        rf"on host {host} \(resolve\), last write \d+ s ago; grace 60 s\n", out.stdout), out
    # The owner is gone, but the journal was written 12 s ago: within the grace (the next task may be starting).
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    _owned_by(journal, child.pid, "1", quiet_for=12)
    out = _flinkstate("recover", "--savepoint-base", str(tmp_path), "--flink-url", UNREACHABLE)
    assert out.returncode == 1, out
    said = re.fullmatch(f"orders: run r1 UNFINISHED in phase planned, not recovered: owner gone: pid {child.pid} on "
                        rf"host {host} \(resolve\), last write (\d+) s ago, within the grace of 60 s\n", out.stdout)
    assert said and 12 <= int(said.group(1)) < 60, out
    status = _flinkstate("status", "--savepoint-base", str(tmp_path))
    assert status.returncode == 0 and "UNFINISHED in phase planned" in status.stdout, status


def test_recover_treats_a_zombie_owner_as_dead(tmp_path: Path):
    journal = _journal(tmp_path)
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])  # exits at once; not waited for: a zombie
    try:
        deadline = time.monotonic() + 30
        while Path(f"/proc/{zombie.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
            assert time.monotonic() < deadline, "the child never became a zombie"
            time.sleep(0.05)
        _owned_by(journal, zombie.pid, process_start(zombie.pid), quiet_for=61)
        out = _flinkstate("recover", "--savepoint-base", str(tmp_path), "--flink-url", UNREACHABLE)
    finally:
        zombie.wait()
    assert out.returncode == 0, out
    assert "run r1 DIED in phase planned" in out.stdout and "unchanged: the run died before it stopped anything" \
        in out.stdout, out
    again = UpgradeJournal.for_deployment(str(tmp_path), "orders")
    assert again is not None and again.finished and again.data["outcome"] == "unchanged"


def test_the_rollback_asks_an_unreachable_flink_again_until_its_timeout(tmp_path: Path):
    """A JobManager restarting answers nothing for a while: the rollback keeps asking until ``timeout`` (and only
    then reports production DOWN), instead of giving up at the first refused connection."""
    journal = _journal(tmp_path)
    journal.advance("stopped", "stop_for_migration", stop_savepoint=str(tmp_path / "stop" / "savepoint-1"))
    nobody = client_for(f"http://127.0.0.1:{free_port()}")  # a port nothing listens on: connection refused
    began = time.monotonic()
    result = restore_old(nobody, journal, "conclude", timeout=6)
    waited = time.monotonic() - began
    assert 4 <= waited < 30, waited
    assert result.outcome == "DOWN" and "cannot reach the Flink REST API" in result.account, result
    again = UpgradeJournal.for_deployment(str(tmp_path), "orders")
    assert again is not None and again.data["outcome"] == "DOWN" and again.data["running"] is None
