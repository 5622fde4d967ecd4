"""Retained checkpoints written by this test run's Flink 2.3 (issue 15): what a Kubernetes operator "last-state"
upgrade restores from, migrated v1 -> v2 by ``migrate`` and restored by real Flink.

* The sample job v1 (parallelism 2, 12 keys) runs once per backend with its checkpoints retained on cancellation and
  a checkpoint directory of its own: HashMap (full checkpoints, one key-group stream per subtask inside ``chk-N``) and
  RocksDB **incremental** (the ``_metadata`` names SST files under ``<checkpoint dir>/<job id>/shared/`` by absolute
  path, outside ``chk-N``). A checkpoint is triggered through the REST API once every key has been seen, then the
  job is cancelled; the newest retained ``chk-N`` is the input.
* Each is migrated for v2 (the POJO gains ``label``, default ``n/a``); the output is self-contained (every file handle
  of its ``_metadata`` names a file inside it: it restores after being moved), holds every key's state recomputed
  from the key's count, and v2 restores it on Flink with every record checked (the HashMap checkpoint's migration
  on RocksDB too: a canonical savepoint restores on either backend).
* The verification can fail on this input: a byte flipped in a migrated keyed-state file of the RocksDB checkpoint's
  migration is refused, naming the key group; and without ``--allow-external-handles`` the incremental checkpoint is
  refused in one line naming the shared file it points at.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from flinkstate.engine import LocalFlinkCluster
from flinkstate.engine.rest import FlinkRestClient
from flinkstate.format.handles import (
    SAVEPOINT_KEY_GROUPS,
    FileStateHandle,
    IncrementalKeyedStateHandle,
    KeyGroupsStateHandle,
    RelativeFileStateHandle,
)
from flinkstate.format.metadata import read_metadata
from flinkstate.format.rocksdb_native import NativeRocksDBStream
from flinkstate.migration.plan import plan_migration
from flinkstate.migration.runner import migrate_savepoint
from flinkstate.migration.verify import VerificationError, verify_migration
from flinkstate.savepoint import Savepoint
from flinkstate.storage.locations import HandleRefused, local_path
from flinkstate.storage.uri import open_output
from tests.support import sample_job
from tests.support.corruption import flip_a_value_byte
from tests.test_migration import LABEL_DEFAULT, check_record, target_for

KEYS = 12
#: Short, so that the incremental RocksDB checkpoint taken last reuses SST files uploaded by earlier ones.
CHECKPOINT_INTERVAL_MS = 500
BACKENDS = ("hashmap", "rocksdb")
FLINKSTATE = Path(sample_job.ROOT) / ".venv" / "bin" / "flinkstate"


@dataclass(frozen=True)
class Retained:
    """One retained checkpoint of the sample job v1."""

    backend: str
    #: ``<checkpoint dir>/<job id>/chk-N``: holds ``_metadata`` (and the HashMap backend's state files).
    checkpoint: Path
    #: ``<checkpoint dir>/<job id>``: ``shared/`` (incremental RocksDB's SST files) and ``taskowned/`` live here.
    job_dir: Path
    #: The checkpoint this test triggered once every key had been seen (``checkpoint`` is it or a later one).
    triggered_id: int


def trigger_checkpoint(client: FlinkRestClient, job_id: str, timeout: float = 60.0) -> int:
    """``POST /jobs/<id>/checkpoints`` (Flink 1.19+), then polls the trigger until the checkpoint completes; returns
    its id. (FlinkRestClient has no checkpoint trigger: plain requests against its base URL.)"""
    response = requests.post(f"{client.base_url}/jobs/{job_id}/checkpoints", json={"checkpointType": "CONFIGURED"},
                             timeout=30)
    response.raise_for_status()
    trigger = response.json()["request-id"]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        body = requests.get(f"{client.base_url}/jobs/{job_id}/checkpoints/{trigger}", timeout=30).json()
        if (body.get("status") or {}).get("id") == "COMPLETED":
            operation = body.get("operation") or {}
            assert "checkpointId" in operation, f"checkpoint of job {job_id} failed: {operation}"
            return int(operation["checkpointId"])
        time.sleep(0.2)
    raise TimeoutError(f"checkpoint {trigger} of job {job_id} did not complete in {timeout:.0f} s")


def newest_retained(job_dir: Path) -> Path:
    """The newest complete ``chk-N`` (one with ``_metadata``: a checkpoint in flight at cancellation has none)."""
    complete = [p for p in job_dir.glob("chk-*") if (p / "_metadata").is_file()]
    assert complete, f"no retained checkpoint with _metadata under {job_dir}: {sorted(os.listdir(job_dir))}"
    return max(complete, key=lambda p: int(p.name.removeprefix("chk-")))


@pytest.fixture(scope="module")
def retained(flink_cluster: LocalFlinkCluster, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Retained]:
    """backend -> a checkpoint of v1 retained on cancellation (HashMap full, RocksDB incremental)."""
    root = tmp_path_factory.mktemp("retained")
    client = flink_cluster.client
    found: dict[str, Retained] = {}
    for backend in BACKENDS:
        checkpoints = root / f"checkpoints-{backend}"
        conf = {"execution.checkpointing.externalized-checkpoint-retention": "RETAIN_ON_CANCELLATION",
                "execution.checkpointing.dir": checkpoints.as_uri(),
                "execution.checkpointing.incremental": str(backend == "rocksdb").lower()}
        run = sample_job.submit(client, "v1", root / f"audit-{backend}", keys=KEYS, rate=300, parallelism=2,
                                state_backend=backend, extra_conf=conf,
                                extra_args=["--checkpoint-interval-ms", str(CHECKPOINT_INTERVAL_MS)])
        try:
            run.wait_for_keys()
            time.sleep(0.5)  # a few events more per key, so that lists and maps hold more than one entry
            triggered = trigger_checkpoint(client, run.job_id)
        finally:
            client.cancel(run.job_id)
        job_dir = checkpoints / run.job_id
        chk = newest_retained(job_dir)
        assert int(chk.name.removeprefix("chk-")) >= triggered, (chk, triggered)
        found[backend] = Retained(backend, chk, job_dir, triggered)
    return found


def _file_path(handle: FileStateHandle | RelativeFileStateHandle, directory: Path) -> Path:
    if isinstance(handle, RelativeFileStateHandle):
        return directory / handle.relative_path
    return Path(local_path(handle.path) if handle.path.startswith("file:") else handle.path)


def _outside(path: Path, directory: Path) -> bool:
    real, base = Path(os.path.realpath(path)), Path(os.path.realpath(directory))
    return real != base and base not in real.parents


# --------------------------------------------------------------------------------------------------------------------
# The inputs are what the tests claim
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_input_is_a_retained_checkpoint(retained: dict[str, Retained], backend: str) -> None:
    """A checkpoint (not a savepoint) that cancellation does not discard; HashMap: its key-group streams inside
    ``chk-N``; RocksDB incremental: SST files under ``<job dir>/shared/``, outside ``chk-N``."""
    source = retained[backend]
    metadata = read_metadata((source.checkpoint / "_metadata").read_bytes())
    assert metadata.checkpoint_id == int(source.checkpoint.name.removeprefix("chk-"))
    props = metadata.properties
    assert props is not None and not props.is_savepoint and not props.discard_cancelled, props
    stats = next(op for op in metadata.operators if op.uid == sample_job.OPERATOR_UID or op.name == "stats")
    handles = [s.managed_keyed_state for s in stats.subtasks.values()]
    assert len(handles) == 2
    outside = [p for _, h in metadata.file_handles() if _outside(p := _file_path(h, source.checkpoint),
                                                                   source.checkpoint)]
    if backend == "hashmap":
        assert all(isinstance(h, KeyGroupsStateHandle) and h.code != SAVEPOINT_KEY_GROUPS for h in handles), handles
        assert outside == []
        return
    assert all(isinstance(h, IncrementalKeyedStateHandle) for h in handles), handles
    shared = [_file_path(f.handle, source.checkpoint) for h in handles if isinstance(h, IncrementalKeyedStateHandle)
              for f in h.shared if isinstance(f.handle, (FileStateHandle, RelativeFileStateHandle))]
    assert shared and all(p.parent == source.job_dir / "shared" and p.is_file() for p in shared), shared
    assert {p.name for p in shared} <= {p.name for p in outside}
    assert all(f.local_path.endswith(".sst") for h in handles if isinstance(h, IncrementalKeyedStateHandle)
               for f in h.shared)
    # Incremental: the checkpoint reuses SST files that an earlier retained checkpoint (num-retained 2) uploaded.
    earlier = [c for c in source.job_dir.glob("chk-*") if c != source.checkpoint and (c / "_metadata").is_file()]
    assert earlier, sorted(os.listdir(source.job_dir))
    before = {_file_path(h, c) for c in earlier
              for _, h in read_metadata((c / "_metadata").read_bytes()).file_handles()}
    assert set(shared) & before, (shared, before)
    # and the self-containment check of the migrated outputs below refuses this input
    with pytest.raises(AssertionError):
        assert_self_contained(source.checkpoint)


# --------------------------------------------------------------------------------------------------------------------
# Migrated v1 -> v2, checked value by value, restored by Flink
# --------------------------------------------------------------------------------------------------------------------


def _migrate(source: Retained, out: Path) -> None:
    # Only the incremental RocksDB checkpoint needs the opt-in: the HashMap one is read as it is, proving that its
    # handles are all inside chk-N.
    report = migrate_savepoint(str(source.checkpoint), [target_for("v2")], open_output(out),
                               allow_external_handles=source.backend == "rocksdb")
    assert report.entries_written > 0
    assert all(c.read == c.written for states in report.counts.values() for c in states.values()), report.counts
    state_lines = [line for line in report.verification if "entries equal" in line]
    assert state_lines and all("to the declared transform" in line for line in state_lines), report.verification


def assert_self_contained(out: Path) -> int:
    """Every file handle of the output's ``_metadata`` names a regular file inside ``out``, and every file in
    ``out`` is one of them or ``_metadata``; returns how many handles. (Absolute paths inside ``out`` would
    also break a moved copy: the restore below is from a moved copy.)"""
    metadata = read_metadata((out / "_metadata").read_bytes())
    named: set[Path] = set()
    for where, handle in metadata.file_handles():
        path = _file_path(handle, out)
        assert not _outside(path, out), (where, handle)
        assert path.is_file() and path.stat().st_size == handle.size, (where, handle)
        named.add(Path(os.path.realpath(path)))
    assert {Path(os.path.realpath(p)) for p in out.iterdir() if p.name != "_metadata"} == named
    return len(named)


@pytest.mark.parametrize(("source", "backend"), [("hashmap", "hashmap"), ("rocksdb", "rocksdb"),
                                                 ("hashmap", "rocksdb")])
def test_retained_checkpoint_migrated_for_v2_restores_on_flink(flink_cluster: LocalFlinkCluster,
                                                                retained: dict[str, Retained], tmp_path: Path,
                                                                source: str, backend: str) -> None:
    checkpoint = retained[source]
    out = tmp_path / "migrated"
    _migrate(checkpoint, out)
    assert assert_self_contained(out) > 0
    migrated = Savepoint.open(out, allow_external_handles=False)
    assert all(isinstance(s.managed_keyed_state, KeyGroupsStateHandle)
               and s.managed_keyed_state.code == SAVEPOINT_KEY_GROUPS
               for s in migrated.operator("stats").subtasks.values())
    # every key's state is the one recomputed from its count, and the checkpoint's own, with label added
    values = sample_job.states_by_key(migrated)
    assert len(values) == KEYS
    before = sample_job.states_by_key(Savepoint.open(checkpoint.checkpoint, allow_external_handles=True))
    for key, states in values.items():
        want = sample_job.expected_state(key, states["count"])
        assert before[key] == want, key
        assert states == {**want, "stats": {**want["stats"], "label": LABEL_DEFAULT}}, key
    # Restored from a moved copy: only a self-contained savepoint restores after a move.
    moved = tmp_path / "moved" / "savepoint"
    moved.parent.mkdir()
    shutil.move(out, moved)
    records = sample_job.restore_audit(flink_cluster.client, "v2", moved, tmp_path / "audit", keys=KEYS,
                                       state_backend=backend)
    assert len(records) == KEYS and all(r["version"] == "v2" for r in records)
    for record in records:
        check_record(record, stats="v2", label=LABEL_DEFAULT)


# --------------------------------------------------------------------------------------------------------------------
# The checks can fail on this input
# --------------------------------------------------------------------------------------------------------------------


def test_a_corrupted_migration_of_the_incremental_checkpoint_is_refused_naming_the_key_group(
        retained: dict[str, Retained], tmp_path: Path) -> None:
    source_dir = retained["rocksdb"].checkpoint
    out = tmp_path / "out"
    migrate_savepoint(str(source_dir), [target_for("v2")], open_output(out), allow_external_handles=True)
    source, migrated = Savepoint.open(source_dir, allow_external_handles=True), Savepoint.open(out)
    assert all(isinstance(s, NativeRocksDBStream) for _, s in source.keyed_streams("stats"))
    plan = plan_migration(source, [target_for("v2")])
    assert verify_migration(source, migrated, plan).entries > 0  # as published: verified
    state, key_group = flip_a_value_byte(out, "stats")
    with pytest.raises(VerificationError) as refused:
        verify_migration(source, Savepoint.open(out), plan)
    message = str(refused.value)
    assert f"state {state}, key group {key_group}: " in message, message
    assert "\n" not in message and str(out) in message


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(FLINKSTATE), *args], capture_output=True, text=True, timeout=300, check=False)


def test_without_the_opt_in_the_incremental_checkpoint_is_refused_naming_the_shared_file(
        retained: dict[str, Retained], tmp_path: Path) -> None:
    source = retained["rocksdb"]
    with pytest.raises(HandleRefused) as refused:
        Savepoint.open(source.checkpoint)
    assert "\n" not in str(refused.value) and f"{source.job_dir / 'shared'}/" in str(refused.value), refused.value
    manifest, out = tmp_path / "m.yaml", tmp_path / "out"
    schema = _cli("--allow-external-handles", "schema", str(source.checkpoint), "-o", str(manifest))
    assert (schema.returncode, schema.stderr) == (0, ""), schema.stderr
    migrate = ["migrate", str(source.checkpoint), "--schema", str(manifest), "--output", str(out)]
    denied = _cli(*migrate)
    assert denied.returncode == 1, denied
    lines = denied.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in denied.stderr, denied.stderr
    assert lines[0].startswith("flinkstate: error: ") and "--allow-external-handles" in lines[0], lines[0]
    named = [p for p in (source.job_dir / "shared").iterdir() if f"{p}'" in lines[0]]  # the whole path, quoted
    assert len(named) == 1 and named[0].is_file() and str(source.checkpoint) in lines[0], lines[0]
    assert not out.exists()
    # the same command with the opt-in: the one difference
    allowed = _cli("--allow-external-handles", *migrate)
    assert (allowed.returncode, allowed.stderr) == (0, ""), allowed.stderr
    assert assert_self_contained(out) > 0
