"""``migrate`` from native snapshots (issue 15): HashMap checkpoints and native savepoints, heap savepoints of Flink
1.8 to 1.12, RocksDB native savepoints and retained RocksDB checkpoints are migrated into canonical savepoints.

* Every native snapshot of Flink's corpus (tests/corpus) migrated as it is (``schema`` -> ``migrate``): the output
  opens, has the same operators and non-keyed state, its keyed state is canonical streams only (handle code 7), and
  every state's entries equal the source's, value by value per key group; RocksDB's key and value bytes are the
  output's, byte for byte (copied, not re-encoded).
* A byte flipped in a migrated heap-native and RocksDB-native output is refused by the verifier, naming the key
  group.
* On the real Flink 2.3 cluster of this test run: the sample job's native stop-with-savepoints (HashMap and RocksDB)
  migrated v1 -> v2 and restored by v2, every key's state checked (a HashMap one also by RocksDB: a canonical
  savepoint restores on either backend).
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

from flinkstate.engine import LocalFlinkCluster
from flinkstate.format.handles import SAVEPOINT_KEY_GROUPS, KeyGroupsStateHandle
from flinkstate.format.keyed_stream import raw_key
from flinkstate.format.metadata import read_metadata
from flinkstate.format.rocksdb_native import NativeRocksDBStream, iter_raw
from flinkstate.jsonify import to_json
from flinkstate.migration.plan import MigrationPlan, plan_migration
from flinkstate.migration.runner import migrate_savepoint
from flinkstate.migration.units import map_locally, migrate_in_units
from flinkstate.migration.verify import VerificationError, verify_migration
from flinkstate.savepoint import Savepoint
from flinkstate.storage.uri import open_output
from tests.support import sample_job
from tests.support.corruption import flip_a_value_byte
from tests.test_flink_corpus import CORPUS, HEAP_FORMAT, ROCKSDB_NATIVE_FORMAT, _run_cli, assert_same_operators, short
from tests.test_migration import LABEL_DEFAULT, check_record, target_for

#: Their serializer needs the test plugin: tests/test_serializer_plugins.py migrates them with it.
NEEDS_PLUGIN = "type-serializer-snapshot-migration-itcase"
NATIVE = [p for p in [*HEAP_FORMAT, *ROCKSDB_NATIVE_FORMAT] if NEEDS_PLUGIN not in p]
T = "flink-tests/src/test/resources/"


def test_the_corpus_native_snapshots() -> None:
    assert len(NATIVE) == 49
    assert sum(p in ROCKSDB_NATIVE_FORMAT for p in NATIVE) == 10


def _state_entries(sp: Savepoint) -> dict[tuple[str, str, int], list[str]]:
    """(operator id, state, key group) -> the entries as sorted JSON lines (a key group's order is not Flink's
    contract: the HashMap backend writes its maps' order)."""
    found: dict[tuple[str, str, int], list[str]] = defaultdict(list)
    for op in sp.operators:
        for state in sp.keyed_states(op):
            for key_group, entries in sp.iter_key_groups(op, state.name):
                found[(op.operator_id, state.name, key_group)] += [json.dumps(to_json(e), sort_keys=True)
                                                                   for e in entries]
    return {k: sorted(v) for k, v in found.items()}


def _migrate_cli(source: Path, tmp_path: Path) -> Path:
    manifest, output = tmp_path / "m.yaml", tmp_path / "out"
    assert _run_cli(["schema", str(source), "-o", str(manifest)])[:3:2] == (0, "")
    args = ["migrate", str(source), "--schema", str(manifest), "--output", str(output)]
    if read_metadata((source / "_metadata").read_bytes()).version == 2:
        args += ["--metadata-version", "3"]  # version 2 has no canonical savepoint handle (code 7)
    status, _, stderr = _run_cli(args)
    assert (status, stderr) == (0, ""), stderr
    return output


@pytest.mark.parametrize("path", NATIVE, ids=short)
def test_identity_migration_of_a_native_snapshot(path: str, tmp_path: Path) -> None:
    source = CORPUS / path
    output = _migrate_cli(source, tmp_path)
    before, after = Savepoint.open(source), Savepoint.open(output)
    assert_same_operators(before, after)
    # The keyed state is canonical now, subtask by subtask, with the same key-group ranges and state lists.
    for op in before.operators:
        new_op = after.operator(op.operator_id)
        for index, sub in op.subtasks.items():
            handle = new_op.subtasks[index].managed_keyed_state
            if sub.managed_keyed_state is None:
                assert handle is None
                continue
            assert isinstance(handle, KeyGroupsStateHandle) and handle.code == SAVEPOINT_KEY_GROUPS
            assert handle.key_group_range == sub.managed_keyed_state.key_group_range
        for (index, old_stream), (new_index, new_stream) in zip(before.keyed_streams(op), after.keyed_streams(new_op),
                                                                 strict=True):
            assert index == new_index and not new_stream.heap_format
            assert not isinstance(new_stream, NativeRocksDBStream)
            assert [s.name for s in new_stream.header().states] == [s.name for s in old_stream.header().states]
    want, got = _state_entries(before), _state_entries(after)
    assert got == want
    assert sum(map(len, got.values())) > 0 or "broadcast" in path or "table-state" in path
    if path in ROCKSDB_NATIVE_FORMAT:
        assert _same_raw_bytes(before, after) == sum(map(len, got.values()))


def _same_raw_bytes(native: Savepoint, migrated: Savepoint) -> int:
    """RocksDB's key and value bytes are the migrated stream's, in RocksDB's order, state by state; how many."""
    compared = 0
    for op in native.operators:
        for state in native.keyed_states(op):
            theirs = [(key, value) for _, stream in native.keyed_streams(op) if isinstance(stream, NativeRocksDBStream)
                      for _, key, value in iter_raw(stream, state.name)]
            ours = []
            for _, stream in migrated.keyed_streams(op.operator_id):
                index = stream.header().state_index(state.name)
                for key_group, start, end in stream.blocks:
                    data = stream.read_block(key_group, start, end)
                    ours += [(raw_key(data, ks, ke), data[vs:ve]) for sid, ks, ke, vs, ve in
                             stream.raw_entries(data, key_group, start) if sid == index]
            assert ours == theirs, (op.operator_id, state.name)
            compared += len(ours)
    return compared


# --------------------------------------------------------------------------------------------------------------------
# The verifier refuses a corrupted output
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [T + "new-stateful-udf-migration-itcase-flink2.3-hashmap-checkpoint",
                                  T + "new-stateful-udf-migration-itcase-flink2.3-rocksdb-savepoint-native"],
                         ids=short)
def test_a_corrupted_output_is_refused_naming_the_key_group(path: str, tmp_path: Path) -> None:
    source_path = CORPUS / path
    out = tmp_path / "out"
    migrate_savepoint(str(source_path), [], open_output(out))
    source, migrated = Savepoint.open(source_path), Savepoint.open(out)
    plan = plan_migration(source, [])
    assert verify_migration(source, migrated, plan).entries > 0  # as published: verified
    # The last byte of the first value of a (non-timer) state, flipped in place: the stream still parses.
    op = next(op for op in migrated.operators if migrated.keyed_header(op) is not None)
    state, key_group = flip_a_value_byte(out, op.operator_id)
    with pytest.raises(VerificationError) as refused:
        verify_migration(source, Savepoint.open(out), plan)
    message = str(refused.value)
    assert f"state {state}, key group {key_group}: " in message, message
    assert "\n" not in message and str(out) in message


# --------------------------------------------------------------------------------------------------------------------
# The sample job's native savepoints, written, migrated and restored by the real Flink 2.3 of this test run
# --------------------------------------------------------------------------------------------------------------------

KEYS = 12


@pytest.fixture(scope="module")
def native_savepoints(flink_cluster: LocalFlinkCluster, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Native stop-with-savepoints of v1 (parallelism 2) on HashMap (snapshot compression on) and RocksDB."""
    root = tmp_path_factory.mktemp("native-migrate")
    client = flink_cluster.client
    found: dict[str, Path] = {}
    for backend in ("hashmap", "rocksdb"):
        run = sample_job.submit(client, "v1", root / f"audit-{backend}", keys=KEYS, rate=300, parallelism=2,
                                state_backend=backend, compression=backend == "hashmap")
        run.wait_for_keys()
        time.sleep(0.5)
        trigger = client.trigger_stop_with_savepoint(run.job_id, str(root / backend), format_type="NATIVE")
        found[backend] = Path(client.wait_for_savepoint(run.job_id, trigger).removeprefix("file:"))
    return found


@pytest.mark.parametrize(("source", "backend"), [("hashmap", "hashmap"), ("rocksdb", "rocksdb"),
                                                 ("hashmap", "rocksdb")])
def test_native_savepoint_migrated_for_v2_restores_on_flink(flink_cluster: LocalFlinkCluster,
                                                            native_savepoints: dict[str, Path], tmp_path: Path,
                                                            source: str, backend: str) -> None:
    native = Savepoint.open(native_savepoints[source])
    for _, stream in native.keyed_streams("stats"):
        stream.header()  # which says whether the blocks are the HashMap backend's own
        assert isinstance(stream, NativeRocksDBStream) if source == "rocksdb" else stream.heap_format
    out = tmp_path / "migrated"
    report = migrate_savepoint(str(native_savepoints[source]), [target_for("v2")], open_output(out))
    assert report.entries_written > 0
    assert all(c.read == c.written for states in report.counts.values() for c in states.values()), report.counts
    # every state compared as values decoded from both sides (a native source has no canonical bytes to compare)
    state_lines = [line for line in report.verification if "entries equal" in line]
    assert state_lines and all("to the declared transform" in line for line in state_lines), report.verification
    migrated = Savepoint.open(out)
    assert all(isinstance(s.managed_keyed_state, KeyGroupsStateHandle)
               and s.managed_keyed_state.code == SAVEPOINT_KEY_GROUPS
               for s in migrated.operator("stats").subtasks.values())
    assert migrated.keyed_header("stats").compressed is (source == "hashmap")  # type: ignore[union-attr]
    values = sample_job.states_by_key(migrated)
    assert len(values) == KEYS
    for key, states in values.items():
        want = sample_job.expected_state(key, states["count"])
        assert states == {**want, "stats": {**want["stats"], "label": LABEL_DEFAULT}}, key
    records = sample_job.restore_audit(flink_cluster.client, "v2", out, tmp_path / "audit", keys=KEYS,
                                       state_backend=backend)
    assert len(records) == KEYS and all(r["version"] == "v2" for r in records)
    for record in records:
        check_record(record, stats="v2", label=LABEL_DEFAULT)


# --------------------------------------------------------------------------------------------------------------------
# Split by key-group ranges (the Spark job's units): the same savepoint byte for byte
# --------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _IdentityJob:
    """What a unit rebuilds the plan from (:class:`flinkstate.migration.units.PlanSource`): no target, so the
    native operators are planned as identity migrations."""

    savepoint: str

    def plan(self, source: Savepoint) -> MigrationPlan:
        return plan_migration(source, [])


@pytest.mark.parametrize("backend", ["hashmap", "rocksdb"])
def test_native_migration_in_units_is_the_single_process_one(native_savepoints: dict[str, Path], backend: str,
                                                             tmp_path: Path) -> None:
    source = str(native_savepoints[backend])  # 128 key groups over 2 subtasks: ranges to cut
    migrate_savepoint(source, [], open_output(tmp_path / "one"))
    _, run = migrate_in_units(_IdentityJob(source), str(tmp_path / "units"), map_locally, 5)
    streams = sum(len(Savepoint.open(source).keyed_streams(op)) for op in Savepoint.open(source).operators)
    assert run.units > streams and run.verification_units > streams  # streams were cut into key-group ranges
    one = {p.name: p.read_bytes() for p in (tmp_path / "one").iterdir()}
    assert {p.name: p.read_bytes() for p in (tmp_path / "units").iterdir()} == one


def test_rocksdb_blocks_are_the_canonical_savepoints_in_any_order() -> None:
    """``canonical_block`` of every key group, read forwards (one iterator per state) and backwards (a seek each),
    holds the canonical savepoint's entries of the same Flink job, state by state in the same order (its
    processing-time timers aside: wall-clock timestamps)."""
    base = CORPUS / T / "new-stateful-udf-migration-itcase-flink2.3-rocksdb-"
    native, canonical = Savepoint.open(f"{base}savepoint-native"), Savepoint.open(f"{base}savepoint")
    compared = 0
    for op in native.operators:
        theirs = dict(canonical.keyed_streams(op.operator_id))
        for index, stream in native.keyed_streams(op):
            assert isinstance(stream, NativeRocksDBStream)
            groups = [kg for kg, _, _ in stream.blocks]
            forwards = {kg: stream.canonical_block(kg) for kg in groups}
            assert {kg: stream.canonical_block(kg) for kg in reversed(groups)} == forwards
            other = theirs[index]
            stored = {kg: other.read_block(kg, start, end) for kg, start, end in other.blocks}
            names = [s.name for s in stream.header().states]
            assert names == [s.name for s in other.header().states]
            for kg in groups:
                ours, want = (
                    [(names[sid], raw_key(block, ks, ke), block[vs:ve])
                     for sid, ks, ke, vs, ve in (stream.raw_entries(block, kg, 0) if block else ())
                     if "processing" not in names[sid]]
                    for block in (forwards[kg], stored.get(kg, b"")))
                assert ours == want, (op.operator_id, kg)
                compared += len(ours)
    assert compared > 0
