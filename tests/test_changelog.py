"""Changelog state backend checkpoints (flinkstate.format.changelog), against Flink's own corpus: the only changelog
checkpoint Flink's tests committed (StatefulJobSnapshotMigrationITCase, Flink 1.17, HashMap backend wrapped by the
changelog backend with in-memory changelog storage, nothing materialized yet: every entry comes from the log), read
and migrated into a canonical savepoint.

The same test program wrote canonical HashMap savepoints with other Flink versions (1.16 and 1.18 are vendored). Its
sources emit (k, k) for k in 0..3 in both pipelines; the keyed flat maps store ``state-name = k`` under key
``Tuple1(k)`` (VoidNamespace), the timely operators ``state-name = k`` under namespace ``k``, an event-time timer at
``watermark + 10`` (Long.MIN_VALUE + 10 before any watermark) and a processing-time timer at ``now + 30 s`` (wall
clock: only its key and namespace can match another run's). So every state equals the savepoint's value by value,
except the processing-time timers' timestamps.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from flinkstate.binary import operator_id_from_uid
from flinkstate.errors import FlinkStateError
from flinkstate.format.changelog_handles import ChangelogBackendHandle, InMemoryChangelogHandle
from flinkstate.format.handles import SAVEPOINT_KEY_GROUPS, KeyGroupsStateHandle, RelativeFileStateHandle
from flinkstate.format.metadata import read_metadata, write_metadata
from flinkstate.manifest import load_manifest
from flinkstate.migration.job import MigrationJob
from flinkstate.migration.manifest_targets import targets_from_manifest
from flinkstate.migration.plan import MigrationError, plan_migration
from flinkstate.migration.units import map_locally, migrate_in_units
from flinkstate.migration.verify import VerificationError, verify_migration
from flinkstate.savepoint import Savepoint
from tests.support.corruption import flip_a_value_byte
from tests.test_flink_corpus import _run_cli, assert_same_operators

pytestmark = pytest.mark.corpus

ROOT = Path(__file__).resolve().parent.parent
RESOURCES = ROOT / "tests" / "corpus" / "savepoints" / "flink-tests" / "src" / "test" / "resources"
CHECKPOINT = RESOURCES / "new-stateful-udf-migration-itcase-flink1.17-hashmap-checkpoint"
SAVEPOINTS = [RESOURCES / f"new-stateful-udf-migration-itcase-flink{v}-hashmap-savepoint" for v in ("1.16", "1.18")]
FLAT_MAPS = ("CheckpointingKeyedStateFlatMap1", "CheckpointingKeyedStateFlatMap2")
TIMELY = ("CheckpointingTimelyStatefulOperator1", "CheckpointingTimelyStatefulOperator2")
PROCESSING = "_timer_state/processing_timer"


def test_handles_parse_and_write_back_byte_for_byte() -> None:
    data = (CHECKPOINT / "_metadata").read_bytes()
    metadata = read_metadata(data, str(CHECKPOINT / "_metadata"))
    assert write_metadata(metadata) == data
    handles = [sub.managed_keyed_state for op in metadata.operators for sub in op.subtasks.values()
               if sub.managed_keyed_state is not None]
    # 4 keyed operators x parallelism 4, but the 4 keys fall into 3 of the 4 key groups: one subtask per operator
    # never saw a key and has no keyed state handle
    assert len(handles) == 12
    for handle in handles:
        assert isinstance(handle, ChangelogBackendHandle)
        assert handle.code == 14 and handle.checkpoint_id == 2 and handle.materialization_id == 0
        assert handle.materialized == ()  # never materialized: the log is the whole state
        assert len(handle.key_group_range) == 1
        (part,) = handle.non_materialized
        assert isinstance(part, InMemoryChangelogHandle)


def _entries(sp: Savepoint, uid: str, state: str) -> list[tuple[int, tuple[Any, ...]]]:
    return sorted(((kg, entry) for kg, entries in sp.iter_key_groups(uid, state) for entry in entries), key=repr)


@pytest.mark.parametrize("savepoint", SAVEPOINTS, ids=lambda p: p.name)
def test_entries_equal_the_canonical_savepoint_of_the_same_program(savepoint: Path) -> None:
    changelog = Savepoint.open(CHECKPOINT)
    canonical = Savepoint.open(savepoint)
    compared = 0
    for uid in TIMELY:
        assert [s.name for s in changelog.keyed_states(uid)] == ["state-name", "_timer_state/event_timer",
                                                                PROCESSING]
        for info in changelog.keyed_states(uid):
            assert info == canonical.state_info(uid, info.name)  # same kinds and types
            ours, theirs = _entries(changelog, uid, info.name), _entries(canonical, uid, info.name)
            assert len(ours) == 4
            if info.name == PROCESSING:  # wall-clock timestamps: same key groups, keys and namespaces
                ours = [(kg, entry[:2]) for kg, entry in ours]
                theirs = [(kg, entry[:2]) for kg, entry in theirs]
            assert ours == theirs
            compared += len(ours)
    for uid in FLAT_MAPS:
        # No materialized part and no timer state: the key serializer is in no byte of the checkpoint, so keys come
        # out as their bytes; decoded with the savepoint's key serializer (Tuple1<Long>) they are the same keys.
        header = canonical.keyed_header(uid)
        assert header is not None and header.key_serializer is not None
        decode_key = header.key_serializer.decoder()
        ours = _entries(changelog, uid, "state-name")
        assert all(isinstance(entry[0], bytes) and len(entry[0]) == 8 for _, entry in ours)
        decoded = sorted(((kg, (decode_key(entry[0], 0)[0], *entry[1:])) for kg, entry in ours), key=repr)
        assert decoded == _entries(canonical, uid, "state-name")
        compared += len(decoded)
    assert compared == 4 * 3 * 2 + 4 * 2


def test_values_are_the_programs_data() -> None:
    sp = Savepoint.open(CHECKPOINT)
    for uid in TIMELY:
        assert sorted(sp.iter_entries(uid, "state-name")) == [((k,), k, k) for k in range(4)]
        assert sorted(sp.iter_entries(uid, "_timer_state/event_timer")) == [((k,), k, -(1 << 63) + 10)
                                                                            for k in range(4)]
    for uid in FLAT_MAPS:
        assert sorted(sp.iter_entries(uid, "state-name")) == [(k.to_bytes(8, "big"), None, k) for k in range(4)]


def test_cli_describe_and_dump() -> None:
    cli = [sys.executable, "-m", "flinkstate"]
    described = subprocess.run([*cli, "describe", str(CHECKPOINT)], capture_output=True, text=True)
    assert described.returncode == 0, described.stderr
    assert "keyed state _timer_state/event_timer: TIMERS" in described.stdout
    assert "key Tuple1<Long>, namespace Long" in described.stdout
    dumped = subprocess.run([*cli, "dump", str(CHECKPOINT), "--operator", TIMELY[0], "--state", "state-name"],
                            capture_output=True, text=True)
    assert dumped.returncode == 0, dumped.stderr
    assert sorted(dumped.stdout.splitlines()) == [f'{{"key": [{k}], "namespace": {k}, "value": {k}}}'
                                                  for k in range(4)]


def test_schema_without_a_key_serializer_is_one_line(tmp_path: Path) -> None:
    """The flat-map operators hold no materialized state and no timers: the log does not record their key type, so
    `schema` cannot write their types without it and says so, naming the operator and the way out (--key)."""
    result = subprocess.run([sys.executable, "-m", "flinkstate", "schema", str(CHECKPOINT), "-o",
                             str(tmp_path / "m.yaml")], capture_output=True, text=True)
    assert result.returncode == 1 and result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert "the key serializer is recorded nowhere in this snapshot" in result.stderr
    # metadata version 4 records no uids: the operator is named by its id, the hash of its uid
    flat_map = operator_id_from_uid(FLAT_MAPS[0])
    assert f"operator {flat_map}" in result.stderr and f"(--key {flat_map}=TYPE)" in result.stderr
    assert not (tmp_path / "m.yaml").exists()


# --------------------------------------------------------------------------------------------------------------------
# migrate: canonical savepoints from the changelog's state
# --------------------------------------------------------------------------------------------------------------------

KEY_TYPE = "Tuple1<Long>"  # the program's keyBy (the canonical savepoints of the same program record it)


def _schema_with_keys(tmp_path: Path, key: str = KEY_TYPE) -> Path:
    manifest = tmp_path / "m.yaml"
    status, _, stderr = _run_cli(["schema", str(CHECKPOINT), "-o", str(manifest),
                                  *(arg for uid in FLAT_MAPS for arg in ("--key", f"{uid}={key}"))])
    assert (status, stderr) == (0, ""), stderr
    return manifest


def _one_subtask_materialized(tmp_path: Path) -> Path:
    """The checkpoint with the flat map's subtask 1 given a materialized part: Flink 1.16's savepoint of the same
    program has the same key-group ranges, so its key groups file of that subtask serves as the HashMap snapshot the
    log was taken after (its SETs write the same values again). Its header records the key serializer; the other
    subtasks of the operator still record none (materialization runs per subtask, so such a mix happens)."""
    target = tmp_path / "checkpoint"
    shutil.copytree(CHECKPOINT, target)
    savepoint = read_metadata((SAVEPOINTS[0] / "_metadata").read_bytes())
    metadata = read_metadata((target / "_metadata").read_bytes())
    flat_map = operator_id_from_uid(FLAT_MAPS[0])
    (materialized,) = [op.subtasks[1].managed_keyed_state for op in savepoint.operators
                       if op.operator_id == flat_map]
    assert isinstance(materialized, KeyGroupsStateHandle)
    delegate = materialized.delegate
    assert isinstance(delegate, RelativeFileStateHandle)
    shutil.copy(SAVEPOINTS[0] / delegate.relative_path, target / delegate.relative_path)
    (op,) = [op for op in metadata.operators if op.operator_id == flat_map]
    handle = op.subtasks[1].managed_keyed_state
    assert isinstance(handle, ChangelogBackendHandle) and handle.key_group_range == materialized.key_group_range
    op.subtasks[1].managed_keyed_state = dataclasses.replace(handle, materialized=(materialized,))
    (target / "_metadata").write_bytes(write_metadata(metadata))
    return target


def test_a_subtask_without_the_key_serializer_reads_its_siblings(tmp_path: Path) -> None:
    checkpoint = _one_subtask_materialized(tmp_path)
    sp = Savepoint.open(checkpoint)
    assert not sp.unrecorded_key(FLAT_MAPS[0])
    header = sp.keyed_header(FLAT_MAPS[0])
    assert header is not None and header.key_serializer is not None
    assert header.key_serializer.type_name() == KEY_TYPE
    assert sorted(sp.iter_entries(FLAT_MAPS[0], "state-name")) == [((k,), None, k) for k in range(4)]
    # schema needs no --key for it now (the other flat map still does), and the migration writes the same bytes
    # as with the key given
    manifest = tmp_path / "m.yaml"
    status, _, stderr = _run_cli(["schema", str(checkpoint), "-o", str(manifest), "--key",
                                  f"{FLAT_MAPS[1]}={KEY_TYPE}"])
    assert (status, stderr) == (0, ""), stderr
    key = load_manifest(manifest).operators[operator_id_from_uid(FLAT_MAPS[0])].key
    assert key is not None and key.type_name() == KEY_TYPE


def test_dump_reads_the_keys_with_the_key_type_given() -> None:
    cli = [sys.executable, "-m", "flinkstate", "dump", str(CHECKPOINT), "--operator", FLAT_MAPS[0], "--state",
           "state-name"]
    dumped = subprocess.run([*cli, "--key", KEY_TYPE], capture_output=True, text=True)
    assert (dumped.returncode, dumped.stderr) == (0, "")
    assert sorted(dumped.stdout.splitlines()) == [f'{{"key": [{k}], "namespace": null, "value": {k}}}'
                                                  for k in range(4)]
    wrong = subprocess.run([*cli, "--key", "Tuple8<Boolean, Boolean, Boolean, Boolean, Boolean, Boolean, Boolean, "
                                           "Boolean>"], capture_output=True, text=True)
    assert wrong.returncode == 1 and len(wrong.stderr.splitlines()) == 1 and "belongs to key group" in wrong.stderr
    recorded = subprocess.run([*cli[:5], "--operator", TIMELY[0], "--state", "state-name", "--key", KEY_TYPE],
                              capture_output=True, text=True)
    assert recorded.returncode == 1 and "records its key serializer" in recorded.stderr


def test_schema_check_and_identity_migrate_with_the_key_type_given(tmp_path: Path) -> None:
    """schema (the flat maps' key type given) -> check -> identity migrate: the output is canonical, keeps every
    operator, and its entries are the checkpoint's (keys decoded) and those of the canonical savepoints that Flink
    1.16 and 1.18 wrote of the same program."""
    manifest = _schema_with_keys(tmp_path)
    status, report, stderr = _run_cli(["check", str(CHECKPOINT), "--schema", str(manifest)])
    assert (status, stderr) == (0, ""), stderr
    # check says the flat maps' key was not checked (Flink does not either), and how migrate checks it
    assert report.count("`KEY_NOT_RECORDED`") == 2
    assert all(f"`{operator_id_from_uid(uid)} / key`" in report for uid in FLAT_MAPS)
    output = tmp_path / "out"
    status, _, stderr = _run_cli(["migrate", str(CHECKPOINT), "--schema", str(manifest), "--output", str(output)])
    assert (status, stderr) == (0, ""), stderr
    source, migrated = Savepoint.open(CHECKPOINT), Savepoint.open(output)
    assert_same_operators(source, migrated)
    for op in source.operators:
        for index, sub in op.subtasks.items():
            handle = migrated.operator(op.operator_id).subtasks[index].managed_keyed_state
            if sub.managed_keyed_state is None:
                assert handle is None
                continue
            assert isinstance(handle, KeyGroupsStateHandle) and handle.code == SAVEPOINT_KEY_GROUPS
            assert handle.key_group_range == sub.managed_keyed_state.key_group_range
    for uid in FLAT_MAPS:
        header = migrated.keyed_header(uid)
        assert header is not None and header.key_serializer is not None
        assert header.key_serializer.type_name() == KEY_TYPE
    compared = 0
    for savepoint in SAVEPOINTS:
        canonical = Savepoint.open(savepoint)
        for uid in (*TIMELY, *FLAT_MAPS):
            # same names, kinds and types (the order is registration order: the log's and the heap's differ)
            assert sorted(migrated.keyed_states(uid), key=repr) == sorted(canonical.keyed_states(uid), key=repr)
            for info in migrated.keyed_states(uid):
                ours, theirs = _entries(migrated, uid, info.name), _entries(canonical, uid, info.name)
                if info.name == PROCESSING:  # wall-clock timestamps
                    ours = [(kg, entry[:2]) for kg, entry in ours]
                    theirs = [(kg, entry[:2]) for kg, entry in theirs]
                assert ours == theirs and len(ours) == 4, (savepoint.name, uid, info.name)
                compared += len(ours)
    assert compared == 2 * (4 * 3 * 2 + 4 * 2)
    for uid in TIMELY:  # and the checkpoint's own entries, timestamps included
        for info in source.keyed_states(uid):
            assert _entries(migrated, uid, info.name) == _entries(source, uid, info.name)


def test_migration_in_units_writes_the_single_process_bytes(tmp_path: Path) -> None:
    """The Spark job's path (units planned and verified apart, each opening the checkpoint anew and taking the key type
    from the manifest again): the same files, byte for byte."""
    manifest = _schema_with_keys(tmp_path)
    one, units = tmp_path / "one", tmp_path / "units"
    status, _, stderr = _run_cli(["migrate", str(CHECKPOINT), "--schema", str(manifest), "--output", str(one)])
    assert (status, stderr) == (0, ""), stderr
    job = MigrationJob(str(CHECKPOINT), str(manifest), str(units))
    _, run = migrate_in_units(job, str(units), map_locally, 8)
    assert run.units >= 12 and run.verification_units >= 12  # one per keyed subtask at least
    assert {p.name: p.read_bytes() for p in units.iterdir()} == {p.name: p.read_bytes() for p in one.iterdir()}


def test_migrate_without_the_key_type_is_refused_in_one_line() -> None:
    """No manifest entry for the flat maps (planned as identity, the checkpoint's format needs rewriting): nothing
    says their key type, so the plan is refused before anything is written."""
    with pytest.raises(MigrationError) as refused:
        plan_migration(Savepoint.open(CHECKPOINT), [])
    message = str(refused.value)
    assert "\n" not in message and "does not record the key serializer" in message
    assert "declare the job's key type in the manifest (key:)" in message and "operator " in message


@pytest.mark.parametrize(("key", "expected"), [
    ("Integer", "change 0 (SET): value decoded to -4 bytes beyond the change"),
    ("String", "state state-name (keys read as String, a key type the checkpoint does not record)"),
    # 8 bytes as the Longs, but Boolean hashes are not Long's: the key group Flink logged the key in says so
    ("Tuple8<Boolean, Boolean, Boolean, Boolean, Boolean, Boolean, Boolean, Boolean>",
     "belongs to key group 3: the job's key type is another"),
], ids=["too-short", "undecodable", "other-key-group"])
def test_a_wrong_key_type_is_refused_before_publishing(tmp_path: Path, key: str, expected: str) -> None:
    manifest = _schema_with_keys(tmp_path, key)
    output = tmp_path / "out"
    status, _, stderr = _run_cli(["migrate", str(CHECKPOINT), "--schema", str(manifest), "--output", str(output)])
    assert status == 1 and len(stderr.strip().splitlines()) == 1 and "Traceback" not in stderr, stderr
    assert expected in stderr and f"operator {operator_id_from_uid(FLAT_MAPS[0])}" in stderr, stderr
    assert not output.exists()


def test_check_reads_the_unrecorded_keys_with_the_new_key_type(tmp_path: Path) -> None:
    """Flink restores such a log with the new job's key serializer unchecked: a wrong key type would restore
    misread, so check reads the logged keys with it and calls a wrong one a silent misread (exit 4)."""
    good = _schema_with_keys(tmp_path)
    status, report, _ = _run_cli(["check", str(CHECKPOINT), "--schema", str(good)])
    assert status == 0
    assert report.count("the keys of all 4 logged entries, read as Tuple1<Long>, decode to exactly their bytes and "
                        "hash to the key groups Flink logged them in") == 2
    wrong = tmp_path / "wrong"
    wrong.mkdir()
    bad = _schema_with_keys(wrong, "Tuple8<Boolean, Boolean, Boolean, Boolean, Boolean, Boolean, Boolean, Boolean>")
    status, report, stderr = _run_cli(["check", str(CHECKPOINT), "--schema", str(bad), "--format", "json"])
    assert (status, stderr) == (4, "")
    findings = [f for f in json.loads(report)["findings"] if f["code"] == "KEY_NOT_RECORDED"]
    assert len(findings) == 2 and all(f["silent_misread"] for f in findings)
    assert all("so Flink would restore them misread" in f["message"] and "belongs to key group" in f["message"]
               for f in findings)


def test_a_corrupted_output_is_refused_naming_the_key_group(tmp_path: Path) -> None:
    """The verification can fail: a value's byte flipped in the migrated flat map's stream."""
    manifest = _schema_with_keys(tmp_path)
    output = tmp_path / "out"
    status, _, stderr = _run_cli(["migrate", str(CHECKPOINT), "--schema", str(manifest), "--output", str(output)])
    assert (status, stderr) == (0, ""), stderr
    source = Savepoint.open(CHECKPOINT)
    plan = plan_migration(source, targets_from_manifest(source, load_manifest(manifest)))
    assert verify_migration(source, Savepoint.open(output), plan).entries > 0
    state, key_group = flip_a_value_byte(output, FLAT_MAPS[0])
    with pytest.raises(VerificationError) as refused:
        verify_migration(Savepoint.open(CHECKPOINT), Savepoint.open(output), plan)
    message = str(refused.value)
    assert f"operator {operator_id_from_uid(FLAT_MAPS[0])}, state {state}, key group {key_group}: " in message
    assert "\n" not in message


def _copy_with(tmp_path: Path, patch: Any) -> Path:
    target = tmp_path / "checkpoint"
    shutil.copytree(CHECKPOINT, target)
    data = bytearray((target / "_metadata").read_bytes())
    patch(data)
    (target / "_metadata").write_bytes(bytes(data))
    return target


def _first_data_change(data: bytes) -> int:
    """Offset of the first data change's op code in _metadata (the flat map's SET of key 3)."""
    return data.index(bytes.fromhex("0100000000000000000003000000000000000003"))


@pytest.mark.parametrize("patch, expected", [
    (lambda d: d.__setitem__(_first_data_change(d), 0x03), "(ADD): operation ADD on a VALUE state"),
    (lambda d: d.__setitem__(_first_data_change(d), 0x2A), "operation 42 on a VALUE state"),
    (lambda d: d.__setitem__(_first_data_change(d) + 2, 0x07), "names state id 7, which the changelog never "
                                                                "registered"),
    (lambda d: d.__setitem__(d.index(b"state-name") - 3, 0x05), "state meta info version 5 in the changelog"),
], ids=["wrong-operation", "unknown-operation", "unregistered-state", "meta-version"])
def test_corrupted_changes_are_one_line_errors(tmp_path: Path, patch: Any, expected: str) -> None:
    target = _copy_with(tmp_path, patch)
    result = subprocess.run([sys.executable, "-m", "flinkstate", "dump", str(target), "--operator",
                             "d5c8b168c6cbfe8c507a10f88b325243", "--state", "state-name"],
                            capture_output=True, text=True)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert expected in result.stderr and "_metadata" in result.stderr


def test_every_byte_of_the_log_corrupted_reads_or_fails_in_one_line(tmp_path: Path) -> None:
    """Each byte of one subtask's logged changes, changed: the state reads (a value changed) or a FlinkStateError
    names what is wrong; never another exception."""
    original = (CHECKPOINT / "_metadata").read_bytes()
    start = original.index(bytes.fromhex("0800000006000a")) - 8  # the first change's key group and length
    end = _first_data_change(original) + 20
    outcomes = {"read": 0, "refused": 0}
    for offset in range(start, end):
        data = bytearray(original)
        data[offset] ^= 0xFF
        (tmp_path / "_metadata").write_bytes(bytes(data))
        try:
            sp = Savepoint.open(tmp_path)
            for op in sp.operators:
                for info in sp.keyed_states(op):
                    list(sp.iter_entries(op, info.name))
            outcomes["read"] += 1
        except FlinkStateError as exc:
            assert "\n" not in str(exc)
            outcomes["refused"] += 1
    assert outcomes["refused"] > 0 and sum(outcomes.values()) == end - start


def test_truncated_metadata_is_one_line(tmp_path: Path) -> None:
    original = (CHECKPOINT / "_metadata").read_bytes()
    cut = _first_data_change(original) + 10
    target = _copy_with(tmp_path, lambda d: d.__delitem__(slice(cut, None)))
    result = subprocess.run([sys.executable, "-m", "flinkstate", "describe", str(target)], capture_output=True,
                            text=True)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
