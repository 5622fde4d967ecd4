"""The reader against real savepoints that Flink wrote in this test run (``flink_savepoints`` from conftest): every
entry of every state is checked against the value the sample job must have written, and damaged copies must fail
with a one-line error naming the file and the offset."""

from __future__ import annotations

import json
import shutil
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from flinkstate.binary import (
    KeyGroupRange,
    assign_key_group,
    java_string_hash,
    key_group_range_for_operator_index,
    operator_id_from_uid,
)
from flinkstate.cli import main
from flinkstate.errors import FlinkStateError
from flinkstate.format.keyed_stream import KeyedStateStream
from flinkstate.format_errors import SavepointFormatError, UnknownSerializerSnapshot
from flinkstate.savepoint import Savepoint
from tests.support.sample_job import OPERATOR_UID, SOURCE_UID, counts_for_position, expected_state
from tests.support.state_checks import EVENT_TIMERS, PROCESSING_TIMERS, assert_sample_state

NAMES = ("heap-p1", "heap-p2", "heap-p2-snappy", "rocksdb-p2", "rocksdb-p2-snappy")


@pytest.fixture(params=NAMES)
def case(request: pytest.FixtureRequest, flink_savepoints: dict[str, Path],
         flink_savepoints_info: dict[str, dict[str, Any]]) -> tuple[Path, dict[str, Any]]:
    return flink_savepoints[request.param], flink_savepoints_info[request.param]


def test_every_entry_matches_what_the_job_wrote(case: tuple[Path, dict[str, Any]]) -> None:
    path, info = case
    assert_sample_state(path, info["keys"])


def test_metadata_and_operators(case: tuple[Path, dict[str, Any]]) -> None:
    path, info = case
    savepoint = Savepoint.open(path / "_metadata")
    assert savepoint.metadata.version == 6
    assert savepoint.metadata.trailer.startswith(b"\xac\xed\x00\x05")
    stats = savepoint.operator(OPERATOR_UID)
    assert stats.operator_id == operator_id_from_uid(OPERATOR_UID)
    assert savepoint.operator(stats.operator_id) is stats
    assert (stats.uid, stats.parallelism, stats.max_parallelism) == (OPERATOR_UID, info["parallelism"], 128)
    source = savepoint.operator(SOURCE_UID)
    assert source.coordinator_state is not None
    assert set(source.subtasks[0].managed_operator_state.states) == {"SourceReaderState"}  # type: ignore[union-attr]
    ranges = savepoint.key_group_ranges(stats)
    assert [r for _, r in ranges] == [key_group_range_for_operator_index(128, info["parallelism"], i)
                                      for i in range(info["parallelism"])]


def test_state_types(case: tuple[Path, dict[str, Any]]) -> None:
    savepoint = Savepoint.open(case[0])
    described = {(s.name, s.kind, s.key_type, s.namespace_type, s.value_type, s.user_key_type)
                 for s in savepoint.keyed_states(OPERATOR_UID)}
    assert described == {
        ("stats", "VALUE", "String", "VoidNamespace", "POJO sample.Stats{count: Long, key: String, total: Long}",
         None),
        ("count", "VALUE", "String", "VoidNamespace", "Long", None),
        ("recent", "LIST", "String", "VoidNamespace", "Tuple2<Long, String>", None),
        ("buckets", "MAP", "String", "VoidNamespace", "Row(INT, STRING, DOUBLE)", "String"),
        (PROCESSING_TIMERS, "TIMERS", "String", "VoidNamespace", "Long (timestamp)", None),
        (EVENT_TIMERS, "TIMERS", "String", "VoidNamespace", "Long (timestamp)", None),
    }


def test_header_written_back_is_byte_identical(case: tuple[Path, dict[str, Any]]) -> None:
    savepoint = Savepoint.open(case[0])
    for _, stream in savepoint.keyed_streams(OPERATOR_UID):
        header = stream.header()
        assert header.compressed == case[1]["compression"]
        assert header.write() == stream.source.read(0, header.length)


def test_key_group_range_reads_only_its_blocks(case: tuple[Path, dict[str, Any]]) -> None:
    path, _ = case
    savepoint = Savepoint.open(path)
    everything = sorted(e[0] for e in savepoint.iter_entries(OPERATOR_UID, "count"))
    reads: list[tuple[str, int, int]] = []
    original = savepoint.location.read_range

    def recording(name: str, offset: int, length: int) -> bytes:
        reads.append((name, offset, length))
        return original(name, offset, length)

    savepoint.location.read_range = recording  # type: ignore[method-assign]
    halves = [KeyGroupRange(0, 40), KeyGroupRange(41, 127)]
    parts = []
    for part in halves:
        reads.clear()
        keys = [e[0] for e in savepoint.iter_entries(OPERATOR_UID, "count", part)]
        assert all(assign_key_group(java_string_hash(k), 128) in part for k in keys)
        parts += keys
        allowed = set()
        for _, stream in savepoint.keyed_streams(OPERATOR_UID):
            name = stream.source.name
            allowed |= {(name, start) for kg, start, _ in stream.blocks if kg in part}
            allowed.add((name, 0))  # the header, if not read yet
        assert {(name, offset) for name, offset, _ in reads} <= allowed
    assert sorted(parts) == everything


def test_stream_stays_bounded_by_block() -> None:
    # Design guard: blocks are read one at a time through read_range; no API reads whole state files.
    assert not hasattr(KeyedStateStream, "read_all")


# -- CLI --------------------------------------------------------------------------------------------------------------


def test_describe_json(case: tuple[Path, dict[str, Any]], capsys: pytest.CaptureFixture[str]) -> None:
    path, info = case
    assert main(["describe", str(path), "--json"]) == 0
    description = json.loads(capsys.readouterr().out)
    assert description["metadata_version"] == 6
    assert isinstance(description["checkpoint_id"], int)
    ops = {op["uid"]: op for op in description["operators"]}
    stats = ops[OPERATOR_UID]
    assert stats["id"] == operator_id_from_uid(OPERATOR_UID)
    assert (stats["parallelism"], stats["max_parallelism"]) == (info["parallelism"], 128)
    states = {s["name"]: s for s in stats["keyed_states"]}
    assert states["buckets"] == {"name": "buckets", "kind": "MAP", "key_type": "String",
                                 "namespace_type": "VoidNamespace", "value_type": "Row(INT, STRING, DOUBLE)",
                                 "user_key_type": "String"}
    assert states["recent"]["kind"] == "LIST" and states[PROCESSING_TIMERS]["kind"] == "TIMERS"
    assert ops[SOURCE_UID]["keyed_states"] == []
    assert main(["describe", str(path)]) == 0
    assert "keyed state stats: VALUE" in capsys.readouterr().out


def _dump(path: Path, state: str, capsys: pytest.CaptureFixture[str], operator: str = OPERATOR_UID
          ) -> list[dict[str, Any]]:
    assert main(["dump", str(path), "--operator", operator, "--state", state]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_dump_every_state(case: tuple[Path, dict[str, Any]], capsys: pytest.CaptureFixture[str]) -> None:
    path, info = case
    counts = {r["key"]: r["value"] for r in _dump(path / "_metadata", "count", capsys,
                                                   operator_id_from_uid(OPERATOR_UID))}
    assert counts == counts_for_position(sum(counts.values()), info["keys"])
    for record in _dump(path, "stats", capsys):
        assert set(record) == {"key", "namespace", "value"} and record["namespace"] is None
        assert record["value"] == expected_state(record["key"], counts[record["key"]])["stats"]
    recent = _dump(path, "recent", capsys)
    assert {r["key"]: r["value"] for r in recent} == {k: expected_state(k, n)["recent"] for k, n in counts.items()}
    buckets: dict[str, dict[str, Any]] = defaultdict(dict)
    for record in _dump(path, "buckets", capsys):
        assert set(record) == {"key", "namespace", "user_key", "value"}
        buckets[record["key"]][record["user_key"]] = record["value"]
    assert buckets == {k: expected_state(k, n)["buckets"] for k, n in counts.items()}
    timers = _dump(path, PROCESSING_TIMERS, capsys)
    assert sorted(r["key"] for r in timers) == sorted(counts)
    assert _dump(path, EVENT_TIMERS, capsys) == []


# -- bad input --------------------------------------------------------------------------------------------------------


@pytest.fixture
def damaged(flink_savepoints: dict[str, Path], tmp_path: Path) -> Any:
    """Copies a savepoint into tmp_path (the originals are never modified)."""

    def copy(name: str) -> Path:
        target = tmp_path / name
        shutil.copytree(flink_savepoints[name], target)
        return target

    return copy


def _keyed_file(path: Path, subtask: int = 0) -> tuple[Path, KeyedStateStream]:
    streams = dict(Savepoint.open(path).keyed_streams(OPERATOR_UID))
    stream = streams[subtask]
    assert stream.source.name is not None
    return path / stream.source.name, stream


def _fails(argv: list[str], capsys: pytest.CaptureFixture[str], *needles: str) -> str:
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("flinkstate: error: ") and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, (needle, err)
    return err


def test_truncated_metadata(damaged: Any, capsys: pytest.CaptureFixture[str]) -> None:
    path = damaged("heap-p2")
    data = (path / "_metadata").read_bytes()
    (path / "_metadata").write_bytes(data[:300])
    _fails(["describe", str(path)], capsys, str(path / "_metadata"), "offset", "truncated")


def test_wrong_magic(damaged: Any, capsys: pytest.CaptureFixture[str]) -> None:
    path = damaged("heap-p1")
    data = (path / "_metadata").read_bytes()
    (path / "_metadata").write_bytes(b"\x00\x00\x00\x00" + data[4:])
    _fails(["describe", str(path)], capsys, str(path / "_metadata"), "offset 0", "magic")
    with pytest.raises(SavepointFormatError):
        Savepoint.open(path)


def test_unsupported_metadata_version(damaged: Any, capsys: pytest.CaptureFixture[str]) -> None:
    path = damaged("heap-p1")
    data = bytearray((path / "_metadata").read_bytes())
    data[4:8] = (7).to_bytes(4, "big")  # versions 2 to 6 are read; 7 does not exist (yet)
    (path / "_metadata").write_bytes(bytes(data))
    _fails(["describe", str(path)], capsys, "offset 4", "version 7")


def test_missing_state_file(damaged: Any, capsys: pytest.CaptureFixture[str]) -> None:
    path = damaged("rocksdb-p2")
    state_file, _ = _keyed_file(path, 1)
    state_file.unlink()
    _fails(["dump", str(path), "--operator", OPERATOR_UID, "--state", "count"], capsys, str(state_file))


def test_truncated_state_file(damaged: Any, capsys: pytest.CaptureFixture[str]) -> None:
    path = damaged("heap-p2")
    state_file, _ = _keyed_file(path)
    data = state_file.read_bytes()
    state_file.write_bytes(data[:-100])
    _fails(["dump", str(path), "--operator", OPERATOR_UID, "--state", "stats"], capsys, str(state_file),
           f"offset {len(data) - 100}", "truncated")


@pytest.mark.parametrize("name", ["heap-p2", "rocksdb-p2-snappy"])
def test_corrupted_key_group_block(name: str, damaged: Any, capsys: pytest.CaptureFixture[str]) -> None:
    path = damaged(name)
    state_file, stream = _keyed_file(path)
    key_group, start, _ = stream.blocks[1]
    data = bytearray(state_file.read_bytes())
    data[start + 2:start + 12] = b"\x7f" * 10  # first key length of the block (or snappy chunk header) garbled
    state_file.write_bytes(bytes(data))
    err = _fails(["dump", str(path), "--operator", OPERATOR_UID, "--state", "count"], capsys, str(state_file),
                 "offset", f"key group {key_group}")
    assert "state count" in err


def test_unknown_serializer_snapshot(damaged: Any, capsys: pytest.CaptureFixture[str]) -> None:
    path = damaged("heap-p1")
    state_file, _ = _keyed_file(path)
    data = state_file.read_bytes()
    original = b"org.apache.flink.api.java.typeutils.runtime.PojoSerializerSnapshot"
    renamed = b"com.example.serializers.runtime.Pojo2CustomSerializerSnapshotXYZ"
    renamed = renamed + b"W" * (len(original) - len(renamed))
    assert data.count(original) == 1
    state_file.write_bytes(data.replace(original, renamed))
    savepoint = Savepoint.open(path)
    with pytest.raises(UnknownSerializerSnapshot) as raised:
        list(savepoint.iter_entries(OPERATOR_UID, "stats"))
    assert raised.value.class_name == renamed.decode()
    message = str(raised.value)
    for needle in (str(state_file), "operator stats", "state stats", renamed.decode(), "offset"):
        assert needle in message
    description = savepoint.describe()
    stats = next(op for op in description["operators"] if op["uid"] == OPERATOR_UID)
    assert renamed.decode() in stats["error"]
    assert next(op for op in description["operators"] if op["uid"] == SOURCE_UID)["operator_states"]
    _fails(["dump", str(path), "--operator", OPERATOR_UID, "--state", "count"], capsys, renamed.decode())


def test_unknown_operator_and_state(flink_savepoints: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    path = flink_savepoints["heap-p1"]
    _fails(["dump", str(path), "--operator", "nope", "--state", "count"], capsys, "no operator 'nope'")
    _fails(["dump", str(path), "--operator", OPERATOR_UID, "--state", "nope"], capsys, "no keyed state 'nope'")
    with pytest.raises(FlinkStateError):
        Savepoint.open(path / "does-not-exist")
