"""Changelog state backend checkpoints (flinkstate.format.changelog), against Flink's own corpus: the only changelog
checkpoint Flink's tests committed (StatefulJobSnapshotMigrationITCase, Flink 1.17, HashMap backend wrapped by the
changelog backend with in-memory changelog storage, nothing materialized yet: every entry comes from the log).

The same test program wrote canonical HashMap savepoints with other Flink versions (1.16 and 1.18 are vendored). Its
sources emit (k, k) for k in 0..3 in both pipelines; the keyed flat maps store ``state-name = k`` under key
``Tuple1(k)`` (VoidNamespace), the timely operators ``state-name = k`` under namespace ``k``, an event-time timer at
``watermark + 10`` (Long.MIN_VALUE + 10 before any watermark) and a processing-time timer at ``now + 30 s`` (wall
clock: only its key and namespace can match another run's). So every state equals the savepoint's value by value,
except the processing-time timers' timestamps.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from flinkstate.errors import FlinkStateError
from flinkstate.format.changelog import ChangelogStream
from flinkstate.format.changelog_handles import ChangelogBackendHandle, InMemoryChangelogHandle
from flinkstate.format.metadata import read_metadata, write_metadata
from flinkstate.format_errors import UnsupportedFormat
from flinkstate.migration.native import is_native
from flinkstate.savepoint import Savepoint

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
    `schema` (and with it `check`) cannot write their types and says so, naming the operator."""
    result = subprocess.run([sys.executable, "-m", "flinkstate", "schema", str(CHECKPOINT), "-o",
                             str(tmp_path / "m.yaml")], capture_output=True, text=True)
    assert result.returncode == 1 and result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert "the key serializer is recorded nowhere in this snapshot" in result.stderr and "operator " in result.stderr
    assert not (tmp_path / "m.yaml").exists()


def test_migrate_refuses_in_one_line_while_planning() -> None:
    sp = Savepoint.open(CHECKPOINT)
    (_, stream), *_ = sp.keyed_streams(TIMELY[0])
    assert isinstance(stream, ChangelogStream)
    with pytest.raises(UnsupportedFormat) as raised:
        is_native(stream)
    message = str(raised.value)
    assert "\n" not in message and "migrate does not read keyed state in a changelog checkpoint" in message
    assert TIMELY[0] not in message or "operator" in message


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
