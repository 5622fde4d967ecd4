"""Native RocksDB snapshots (``IncrementalRemoteKeyedStateHandle``, handle codes 5 and 11): RocksDB native savepoints
and retained RocksDB checkpoints, on the bytes Flink's own test suite wrote (tests/corpus/savepoints).

The handles are written back byte for byte; the header (``KeyedBackendSerializationProxy``) in the meta state file
gives ``describe``, ``schema`` and ``check``; the entries, read from the RocksDB instance rebuilt from the
snapshot's files, equal those of the canonical savepoint the same Flink test job wrote.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import replace
from pathlib import Path

import pytest

from flinkstate.binary import KeyGroupRange
from flinkstate.engine import LocalFlinkCluster
from flinkstate.errors import FlinkStateError
from flinkstate.format.handles import (
    INCREMENTAL_KEY_GROUPS_V2,
    SAVEPOINT_KEY_GROUPS,
    FileStateHandle,
    HandleAndLocalPath,
    IncrementalKeyedStateHandle,
    KeyGroupsStateHandle,
    RelativeFileStateHandle,
)
from flinkstate.format.metadata import read_metadata, write_metadata
from flinkstate.format.rocksdb_native import NativeRocksDBStream
from flinkstate.format_errors import SavepointFormatError, UnknownSerializerSnapshot, UnsupportedFormat
from flinkstate.jsonify import to_json
from flinkstate.savepoint import Savepoint
from flinkstate.storage.locations import HandleRefused
from tests.support import sample_job
from tests.test_flink_corpus import CORPUS, _run_cli, corpus_dirs

T = "flink-tests/src/test/resources/"


def _native(path: str) -> bool:
    try:
        metadata = read_metadata((CORPUS / path / "_metadata").read_bytes(), path)
    except UnsupportedFormat:  # the changelog checkpoint
        return False
    return any(isinstance(sub.managed_keyed_state, IncrementalKeyedStateHandle)
               for op in metadata.operators for sub in op.subtasks.values())


NATIVE_DIRS = [p for p in corpus_dirs() if (CORPUS / p / "_metadata").is_file() and _native(p)]


def test_corpus_holds_the_native_rocksdb_snapshots() -> None:
    assert len(NATIVE_DIRS) == 12
    assert sum(p.endswith("-savepoint-native") for p in NATIVE_DIRS) == 6


@pytest.mark.parametrize("path", NATIVE_DIRS)
def test_native_metadata_written_back_byte_for_byte(path: str) -> None:
    data = (CORPUS / path / "_metadata").read_bytes()
    assert write_metadata(read_metadata(data, path)) == data


def test_native_handle_fields() -> None:
    """Every field of one handle, as Flink 2.1 wrote it (checked against the files beside ``_metadata``)."""
    path = T + "new-stateful-broadcast-udf-migration-itcase-flink2.1-rocksdb-savepoint-native"
    metadata = read_metadata((CORPUS / path / "_metadata").read_bytes(), path)
    handles = [(op, index, sub.managed_keyed_state) for op in metadata.operators
               for index, sub in sorted(op.subtasks.items())
               if isinstance(sub.managed_keyed_state, IncrementalKeyedStateHandle)]
    assert len(handles) == 8  # BrProcess1 and BrProcess2, 4 subtasks each
    for op, index, handle in handles:
        assert isinstance(handle, IncrementalKeyedStateHandle)
        assert handle.code == INCREMENTAL_KEY_GROUPS_V2
        assert handle.checkpoint_id == metadata.checkpoint_id
        assert handle.state_handle_id is not None and len(handle.state_handle_id) == 36
        assert len(handle.backend_id) == 36
        # Subtask i of p owns key groups [i * maxP / p, ...]: here maxP 4 over parallelism 4 is one key group each.
        assert (op.max_parallelism, op.parallelism) == (4, 4)
        assert (handle.key_group_range.start, handle.key_group_range.end) == (index, index)
        names = {f.local_path for f in (*handle.shared, *handle.private)}
        assert "CURRENT" in names and any(n.startswith("MANIFEST-") for n in names)
        assert any(n.startswith("OPTIONS-") for n in names)
        for _, file_handle in handle.files():
            assert isinstance(file_handle, RelativeFileStateHandle)
            assert (CORPUS / path / file_handle.relative_path).stat().st_size == file_handle.size


def test_native_handle_in_other_metadata_is_refused_when_truncated() -> None:
    """A handle cut short is a one-line format error with the offset, not an index error."""
    path = NATIVE_DIRS[0]
    data = (CORPUS / path / "_metadata").read_bytes()
    with pytest.raises(SavepointFormatError, match="_metadata"):
        read_metadata(data[: len(data) // 2], f"{path}/_metadata")


# --------------------------------------------------------------------------------------------------------------------
# Header and entries
# --------------------------------------------------------------------------------------------------------------------

BROADCAST_21 = T + "new-stateful-broadcast-udf-migration-itcase-flink2.1-rocksdb-"
#: The keyed-state job (new-stateful-udf-migration-itcase) of the oldest and the newest Flink whose RocksDB native
#: savepoint and retained checkpoint are vendored beside its canonical savepoint (the whole corpus, Flink 1.16 to
#: 2.3, was compared the same way once, with the same result).
UDF_VERSIONS = ["1.16", "2.3"]


def entries(root: Path, path: str) -> dict[tuple[str, str], list[str]]:
    """(operator id, state) -> the sorted JSON of every entry. Processing-time timers' timestamps are wall-clock
    times of the run that wrote them, so they are left out; event-time timers keep theirs."""
    sp = Savepoint.open(root / path)
    found = {}
    for op in sp.operators:
        for state in sp.keyed_states(op):
            wall_clock = state.kind == "TIMERS" and "processing" in state.name
            found[(op.operator_id, state.name)] = sorted(
                json.dumps(to_json(list(e[:2] if wall_clock else e)), sort_keys=True)
                for e in sp.iter_entries(op, state.name))
    return found


def test_native_header_is_the_canonical_header() -> None:
    """The meta state file holds the same serializer snapshots as the canonical savepoint of the same job, state
    for state."""
    native, canonical = Savepoint.open(CORPUS / (BROADCAST_21 + "savepoint-native")), \
        Savepoint.open(CORPUS / (BROADCAST_21 + "savepoint"))
    for op in native.operators:
        assert native.keyed_states(op) == canonical.keyed_states(canonical.operator(op.operator_id))
    assert [s.name for s in native.keyed_states("BrProcess1")] == ["_timer_state/processing_user-timers",
                                                                   "_timer_state/event_user-timers"]
    streams = native.keyed_streams("BrProcess1")
    assert [s.key_group_range for _, s in streams] == [KeyGroupRange(i, i) for i in range(4)]
    assert all(isinstance(s, NativeRocksDBStream) for _, s in streams)


@pytest.mark.parametrize("kind", ["savepoint-native", "checkpoint"])
def test_vendored_native_entries_equal_the_canonical_savepoint(kind: str) -> None:
    assert entries(CORPUS, BROADCAST_21 + kind) == entries(CORPUS, BROADCAST_21 + "savepoint")


def test_native_with_an_unknown_serializer_is_refused_in_one_line() -> None:
    sp = Savepoint.open(CORPUS / (T + "type-serializer-snapshot-migration-itcase-flink1.16-rocksdb-savepoint-native"))
    op = next(op for op in sp.operators if any(s.managed_keyed_state for s in op.subtasks.values()))
    with pytest.raises(UnknownSerializerSnapshot, match="TestSerializerSnapshot") as caught:
        sp.keyed_states(op)
    assert "\n" not in str(caught.value)
    assert sp.describe()["operators"]  # describe lists what it can, the error on the operator


@pytest.mark.parametrize("version", UDF_VERSIONS)
def test_native_entries_equal_the_canonical_savepoint(version: str) -> None:
    """Savepoint, native savepoint and retained checkpoint of one deterministic job: the same 32 entries (value
    states and timers, timestamps included), per operator and state."""
    base = T + f"new-stateful-udf-migration-itcase-flink{version}-rocksdb-"
    canonical = entries(CORPUS, base + "savepoint")
    assert sum(map(len, canonical.values())) == 32
    assert entries(CORPUS, base + "savepoint-native") == canonical
    assert entries(CORPUS, base + "checkpoint") == canonical


def test_schema_then_check_of_a_native_savepoint_is_compatible(tmp_path: Path) -> None:
    source = CORPUS / T / "new-stateful-udf-migration-itcase-flink2.3-rocksdb-savepoint-native"
    manifest = tmp_path / "m.yaml"
    assert _run_cli(["schema", str(source), "-o", str(manifest)])[0] == 0
    assert "CheckpointingTimelyStatefulOperator1" in manifest.read_text()
    status, stdout, stderr = _run_cli(["check", str(source), "--schema", str(manifest), "--format", "json"])
    assert status == 0, stderr
    report = json.loads(stdout)
    assert report["findings"] == [], report["findings"]


def test_native_dump_is_the_canonical_dump() -> None:
    base = CORPUS / T / "new-stateful-udf-migration-itcase-flink2.3-rocksdb-"
    argv = ["--operator", "CheckpointingTimelyStatefulOperator1", "--state", "state-name"]
    native = _run_cli(["dump", str(base) + "savepoint-native", *argv])
    canonical = _run_cli(["dump", str(base) + "savepoint", *argv])
    assert native[0] == canonical[0] == 0
    assert native[1] == canonical[1]
    assert len(native[1].splitlines()) == 4


# --------------------------------------------------------------------------------------------------------------------
# Refusals
# --------------------------------------------------------------------------------------------------------------------


def test_migrate_of_a_native_savepoint_writes_a_canonical_one(tmp_path: Path) -> None:
    """(Every vendored native snapshot: tests/test_native_migrate.py.) RocksDB's files become canonical streams."""
    source = CORPUS / (BROADCAST_21 + "savepoint-native")
    manifest, output = tmp_path / "m.yaml", tmp_path / "out"
    assert _run_cli(["schema", str(source), "-o", str(manifest)])[0] == 0
    status, _, stderr = _run_cli(["migrate", str(source), "--schema", str(manifest), "--output", str(output)])
    assert (status, stderr) == (0, "")
    migrated = Savepoint.open(output)
    handles = [sub.managed_keyed_state for op in migrated.operators for sub in op.subtasks.values()
               if sub.managed_keyed_state is not None]
    assert len(handles) == 8 and all(isinstance(h, KeyGroupsStateHandle) and h.code == SAVEPOINT_KEY_GROUPS
                                     for h in handles)
    assert not [p.name for p in output.iterdir() if p.name.endswith(".sst") or "MANIFEST" in p.name]


def _with_file(tmp_path: Path, local_path: str, handle: FileStateHandle) -> Path:
    """A copy of a vendored native savepoint whose RocksDB file ``local_path`` (of BrProcess1, subtask 0) is
    ``handle``."""
    target = tmp_path / "sp"
    shutil.copytree(CORPUS / (BROADCAST_21 + "savepoint-native"), target)
    metadata = read_metadata((target / "_metadata").read_bytes())
    op = next(op for op in metadata.operators if op.uid == "BrProcess1")
    old = op.subtasks[0].managed_keyed_state
    assert isinstance(old, IncrementalKeyedStateHandle)
    def swap(files: tuple[HandleAndLocalPath, ...]) -> tuple[HandleAndLocalPath, ...]:
        return tuple(HandleAndLocalPath(f.local_path, handle) if f.local_path == local_path else f for f in files)

    op.subtasks[0].managed_keyed_state = replace(old, shared=swap(old.shared), private=swap(old.private))
    (target / "_metadata").write_bytes(write_metadata(metadata))
    return target


def test_native_file_outside_the_savepoint_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside.sst"
    outside.write_bytes(b"x" * 16)
    target = _with_file(tmp_path, "CURRENT", FileStateHandle(16, str(outside)))
    with pytest.raises(HandleRefused, match="points outside the savepoint directory"):
        Savepoint.open(target)


def test_native_file_shorter_than_recorded_is_refused(tmp_path: Path) -> None:
    sp_dir = CORPUS / (BROADCAST_21 + "savepoint-native")
    metadata = read_metadata((sp_dir / "_metadata").read_bytes())
    op = next(op for op in metadata.operators if op.uid == "BrProcess1")
    old = op.subtasks[0].managed_keyed_state
    assert isinstance(old, IncrementalKeyedStateHandle)
    current = next(f for f in old.private if f.local_path == "CURRENT")
    assert isinstance(current.handle, RelativeFileStateHandle)
    inside = str(tmp_path / "sp" / current.handle.relative_path)
    target = _with_file(tmp_path, "CURRENT", FileStateHandle(current.handle.size + 5, inside))
    sp = Savepoint.open(target)
    with pytest.raises(FlinkStateError, match="the metadata records 21") as caught:
        list(sp.iter_entries("BrProcess1", "_timer_state/event_user-timers"))
    assert "\n" not in str(caught.value) and "BrProcess1" in str(caught.value)


# --------------------------------------------------------------------------------------------------------------------
# A native RocksDB savepoint the real Flink 2.3 cluster of this test run writes
# --------------------------------------------------------------------------------------------------------------------

KEYS = 12


def test_real_rocksdb_native_savepoint_reads(flink_cluster: LocalFlinkCluster, tmp_path: Path) -> None:
    """Stop-with-savepoint, formatType NATIVE, of the sample job on RocksDB (parallelism 2): value, LIST (RocksDB
    merge operands), MAP and timer state; each key's states are those of one event count, as the job computes
    them, and migrate writes a canonical savepoint holding the same states."""
    client = flink_cluster.client
    run = sample_job.submit(client, "v1", tmp_path / "audit", keys=KEYS, rate=300, parallelism=2,
                            state_backend="rocksdb")
    run.wait_for_keys()
    time.sleep(0.5)
    trigger = client.trigger_stop_with_savepoint(run.job_id, str(tmp_path / "native"), format_type="NATIVE")
    source = Path(client.wait_for_savepoint(run.job_id, trigger).removeprefix("file:"))
    sp = Savepoint.open(source)
    streams = sp.keyed_streams("stats")
    assert len(streams) == 2 and all(isinstance(s, NativeRocksDBStream) for _, s in streams)
    values = sample_job.states_by_key(sp)
    assert len(values) == KEYS
    for key, states in values.items():
        assert states == sample_job.expected_state(key, states["count"]), key
    timer_state = next(s.name for s in sp.keyed_states("stats") if s.kind == "TIMERS")
    assert sorted(key for key, _, _ in sp.iter_entries("stats", timer_state)) == sorted(values)
    # key groups come out in order, each within its subtask's range
    for _, stream in streams:
        groups = [kg for kg, _ in stream.iter_blocks("count")]
        assert groups == sorted(groups) and all(kg in stream.key_group_range for kg in groups)
    # every state (POJO, list of merge operands, map, timers) read by the compiled key-group scan alone, as its
    # reference reads it (issue 28: the corpus's native savepoints hold only Long values and timers)
    from tests.test_speedups import assert_native_scan_compiled

    scanned = {state.name for _, stream in streams for state in stream.header().states
               if state.name in stream._families and assert_native_scan_compiled(
                   stream, state, list(stream._scan(stream._open_db(), state.name, b"")), state.name)}
    assert {"stats", "count", "recent", "buckets", timer_state} <= scanned, scanned
    manifest, output = tmp_path / "m.yaml", tmp_path / "out"
    assert _run_cli(["schema", str(source), "-o", str(manifest)])[0] == 0
    status, stdout, stderr = _run_cli(["check", str(source), "--schema", str(manifest), "--format", "json"])
    assert status == 0 and json.loads(stdout)["findings"] == [], stderr
    status, _, stderr = _run_cli(["migrate", str(source), "--schema", str(manifest), "--output", str(output)])
    assert (status, stderr) == (0, "")
    assert sample_job.states_by_key(Savepoint.open(output)) == values  # canonical now, the same states


def test_native_raw_entries_are_the_canonical_bytes() -> None:
    """RocksDB's key and value bytes are the canonical savepoint's (which copies them from RocksDB)."""
    from flinkstate.format.keyed_stream import KeyedStateStream, iter_raw_entries, raw_key
    from flinkstate.format.rocksdb_native import iter_raw

    base = CORPUS / T / "new-stateful-udf-migration-itcase-flink2.3-rocksdb-"
    native, canonical = Savepoint.open(f"{base}savepoint-native"), Savepoint.open(f"{base}savepoint")
    compared = 0
    for op in native.operators:
        for state in native.keyed_states(op):
            ours = sorted((key, value) for _, stream in native.keyed_streams(op)
                          if isinstance(stream, NativeRocksDBStream) for _, key, value in iter_raw(stream, state.name))
            theirs = []
            for _, stream in canonical.keyed_streams(canonical.operator(op.operator_id)):
                assert isinstance(stream, KeyedStateStream)
                index = stream.header().state_index(state.name)
                for key_group, start, end in stream.blocks:
                    data = stream.read_block(key_group, start, end)
                    theirs += [(raw_key(data, ks, ke), data[vs:ve]) for sid, ks, ke, vs, ve in iter_raw_entries(data)
                               if sid == index]
            if "processing" not in state.name:  # wall-clock timestamps in processing-time timer keys
                assert ours == sorted(theirs)
                compared += len(ours)
    assert compared == 24
