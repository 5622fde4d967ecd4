"""The older and native formats: ``_metadata`` version 2 (Flink 1.3 to 1.10) and the HashMap (heap) backend's own
snapshot format (HashMap checkpoints, native savepoints, heap savepoints before Flink 1.13), on bytes Flink wrote:
Flink's corpus (tests/corpus/savepoints) and, for the heap format, a native savepoint and a retained checkpoint that
the real Flink 2.3 cluster of this test run writes.

Values are compared with what the same Flink test job left in a canonical savepoint (the corpus holds, per Flink
test, savepoints of many versions of one deterministic job), or, for the cluster's snapshots, recomputed from each
key's event count (tests/support/sample_job.py). Where bytes are written, they must be Flink's bytes exactly.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from flinkstate.binary import I32
from flinkstate.engine import LocalFlinkCluster
from flinkstate.errors import WriteError
from flinkstate.format.handles import (
    SAVEPOINT_KEY_GROUPS,
    ByteStreamStateHandle,
    KeyGroupsStateHandle,
    RelativeFileStateHandle,
)
from flinkstate.format.heap_blocks import block_payload, encode_heap_block, heap_codecs, walk_heap_block
from flinkstate.format.metadata import read_metadata, write_metadata
from flinkstate.format_errors import SavepointFormatError
from flinkstate.jsonify import to_json
from flinkstate.savepoint import Savepoint
from tests.support import sample_job
from tests.test_flink_corpus import CORPUS, HEAP_FORMAT, corpus_dirs

T = "flink-tests/src/test/resources/"
UDF = T + "new-stateful-udf-migration-itcase-flink"
BROADCAST = T + "new-stateful-broadcast-udf-migration-itcase-flink"


def _v2_dirs() -> list[str]:
    return [p for p in corpus_dirs() if (CORPUS / p / "_metadata").read_bytes()[4:8] == b"\0\0\0\x02"]


def entries(path: str, timer_timestamps: bool = True) -> dict[tuple[str, str], list[str]]:
    """(operator id, state) -> the sorted JSON of every entry. Timers' timestamps are processing times of the run
    that wrote them, so comparisons across runs leave them out."""
    sp = Savepoint.open(CORPUS / path)
    found = {}
    for op in sp.operators:
        for state in sp.keyed_states(op):
            rows = (list(e[:2]) if state.kind == "TIMERS" and not timer_timestamps else list(e)
                    for e in sp.iter_entries(op, state.name))
            found[(op.operator_id, state.name)] = sorted(json.dumps(to_json(r), sort_keys=True) for r in rows)
    return found


# --------------------------------------------------------------------------------------------------------------------
# _metadata version 2
# --------------------------------------------------------------------------------------------------------------------


def test_corpus_holds_the_v2_savepoints() -> None:
    assert len(_v2_dirs()) == 18


@pytest.mark.parametrize("path", _v2_dirs())
def test_v2_metadata_written_back_byte_for_byte(path: str) -> None:
    data = (CORPUS / path / "_metadata").read_bytes()
    metadata = read_metadata(data, path)
    assert metadata.version == 2
    assert write_metadata(metadata) == data


def test_v2_fields_kept() -> None:
    """The unused V2 fields are what Flink wrote (chain length 1, duration -1), and no coordinator state."""
    metadata = read_metadata((CORPUS / T / "operatorstate/complexKeyed-flink1.8/_metadata").read_bytes())
    assert metadata.version == 2
    assert {op.chain_length for op in metadata.operators} == {1}
    assert {s.duration for op in metadata.operators for s in op.subtasks.values()} == {-1}
    assert all(op.coordinator_state is None for op in metadata.operators)


def test_v2_refuses_handles_flink_1_10_never_wrote() -> None:
    """A migration's canonical handle (code 7, relative file) has no place in version 2: refused in one line, and
    the same metadata writes as version 3, which reads back with the same operators."""
    path = UDF + "1.8-rocksdb-savepoint"
    metadata = read_metadata((CORPUS / path / "_metadata").read_bytes(), path)
    op = next(op for op in metadata.operators if any(s.managed_keyed_state for s in op.subtasks.values()))
    index, sub = next((i, s) for i, s in sorted(op.subtasks.items()) if s.managed_keyed_state)
    assert sub.managed_keyed_state is not None
    sub.managed_keyed_state = KeyGroupsStateHandle(SAVEPOINT_KEY_GROUPS, sub.managed_keyed_state.offsets,
                                                   RelativeFileStateHandle(10, "keyed-x"))
    with pytest.raises(WriteError) as refused:
        write_metadata(metadata)
    message = str(refused.value)
    assert "\n" not in message
    assert message == (f"operator {op.operator_id}, subtask {index}: managed keyed state (handle code 7) cannot be "
                       f"written as _metadata version 2 (Flink 1.10 and earlier wrote codes 1 to 4): write version 3 "
                       f"or later (migrate --metadata-version 3), which Flink 1.11 to 2.x restore")
    again = read_metadata(write_metadata(metadata, 3))
    assert again.version == 3
    assert [(o.operator_id, o.parallelism, o.max_parallelism, sorted(o.subtasks)) for o in again.operators] == \
        [(o.operator_id, o.parallelism, o.max_parallelism, sorted(o.subtasks)) for o in metadata.operators]
    assert again.operators[metadata.operators.index(op)].subtasks[index].managed_keyed_state == \
        sub.managed_keyed_state


@pytest.mark.parametrize("version", ["1.8", "1.9", "1.10"])
def test_v2_values_equal_the_canonical_savepoints(version: str) -> None:
    """Flink's complexKeyed job of 1.8 to 1.10 (V2 metadata, heap format) left the entries 1.13 left canonically."""
    canonical = entries(T + "operatorstate/complexKeyed-flink1.13")
    assert entries(T + f"operatorstate/complexKeyed-flink{version}") == canonical


# --------------------------------------------------------------------------------------------------------------------
# The HashMap backend's own format
# --------------------------------------------------------------------------------------------------------------------

#: (heap-format savepoint, canonical savepoint of the same Flink test job) pairs.
NATIVE_VERSIONS = ("1.15", "1.16", "1.20", "2.0", "2.1", "2.3")
HEAP_VS_CANONICAL = [
    *((f"{UDF}{v}-hashmap-{kind}", f"{UDF}1.20-hashmap-savepoint") for v in NATIVE_VERSIONS
      for kind in ("checkpoint", "savepoint-native")),
    *((f"{UDF}{v}-savepoint", f"{UDF}1.20-hashmap-savepoint") for v in ("1.8", "1.10", "1.11", "1.12")),
    *((f"{BROADCAST}{v}-hashmap-{kind}", f"{BROADCAST}1.20-hashmap-savepoint")
      for v in NATIVE_VERSIONS for kind in ("checkpoint", "savepoint-native")),
    *((f"{BROADCAST}{v}-savepoint", f"{BROADCAST}1.20-hashmap-savepoint") for v in ("1.8", "1.10", "1.11")),
    *((T + f"operatorstate/complexKeyed-flink{v}", T + "operatorstate/complexKeyed-flink1.13")
      for v in ("1.11", "1.12")),
]


@pytest.mark.parametrize(("heap", "canonical"), HEAP_VS_CANONICAL, ids=lambda p: p.rsplit("/", 1)[-1])
def test_heap_format_values_equal_the_canonical_savepoint(heap: str, canonical: str) -> None:
    assert heap in HEAP_FORMAT
    got, want = entries(heap, timer_timestamps=False), entries(canonical, timer_timestamps=False)
    assert got == want
    assert sum(map(len, got.values())) > 0 or "broadcast" in heap


def test_heap_format_decodes_known_values() -> None:
    """Exact values of one HashMap checkpoint of Flink 2.3: the keyed ValueState and the processing-time timers."""
    got = entries(UDF + "2.3-hashmap-checkpoint")
    assert got[("d5c8b168c6cbfe8c507a10f88b325243", "state-name")] == \
        [f"[[{k}], null, {k}]" for k in range(4)]
    timers = got[("41e91aae0bee218c44306cf7d21940ad", "_timer_state/processing_timer")]
    assert [json.loads(t)[:2] for t in timers] == [[[k], k] for k in range(4)]


@pytest.mark.parametrize("path", HEAP_FORMAT, ids=lambda p: p.rsplit("/", 1)[-1])
def test_heap_blocks_written_back_byte_for_byte(path: str) -> None:
    """Every stored block (every key group, compressed or not) re-encodes from its parsed elements to its bytes."""
    sp = Savepoint.open(CORPUS / path)
    blocks = 0
    for op in sp.operators:
        for _, stream in sp.keyed_streams(op):
            header = stream.header()
            if not stream.heap_format:  # the State Processor API's savepoints mix both formats
                continue
            codecs = heap_codecs(header)
            # HeapSnapshotStrategy writes every key group of the range
            assert [kg for kg, _, _ in stream.blocks] == list(stream.key_group_range)
            for key_group, start, end in stream.blocks:
                data = stream.source.read(start, end - start)
                block = walk_heap_block(data, key_group, codecs, header.compressed)
                assert sorted(state_id for state_id, _, _ in block.sections) == list(range(len(header.states)))
                assert encode_heap_block(block, header.compressed) == data
                blocks += 1
    assert blocks > 0


def _copy(path: str, tmp_path: Path) -> Path:
    target = tmp_path / "copy"
    shutil.copytree(CORPUS / path, target)
    return target


def test_heap_block_of_another_key_group_is_refused_in_one_line(tmp_path: Path) -> None:
    path = "flink-libraries/flink-state-processing-api/src/test/resources/table-state"
    target = _copy(path, tmp_path)
    sp = Savepoint.open(target)
    op = next(op for op in sp.operators if op.operator_id == "928f3b38bde6af749ed4cb45aa1237db")
    _, stream = sp.keyed_streams(op)[0]
    key_group, start, _ = stream.blocks[2]  # after the two blocks the format detection looks at
    handle = stream.handle.delegate
    assert isinstance(handle, ByteStreamStateHandle)  # the stream is inline in _metadata
    file = target / "_metadata"
    data = bytearray(file.read_bytes())
    at = data.find(handle.data)
    assert at > 0 and data.find(handle.data, at + 1) == -1
    data[at + start:at + start + 4] = I32.pack(key_group + 1)
    file.write_bytes(bytes(data))
    with pytest.raises(SavepointFormatError) as refused:
        list(Savepoint.open(target).iter_entries(op.operator_id, "KeyedPrimitiveValue"))
    assert str(refused.value) == (f"{stream.source.path}: offset {start}: operator keyed-state-process-uid, state "
                                  f"KeyedPrimitiveValue, key group {key_group}: block starts with key group "
                                  f"{key_group + 1}, expected {key_group}")


def test_heap_block_with_bytes_left_over_is_refused(tmp_path: Path) -> None:
    """A block is read to its last byte: a state section longer than its elements is corruption."""
    path = UDF + "2.3-hashmap-checkpoint"
    sp = Savepoint.open(CORPUS / path)
    _, stream = sp.keyed_streams("d5c8b168c6cbfe8c507a10f88b325243")[0]
    header = stream.header()
    key_group, start, end = stream.blocks[0]
    data = stream.source.read(start, end - start) + b"\0"
    with pytest.raises(SavepointFormatError) as refused:
        walk_heap_block(data, key_group, heap_codecs(header), header.compressed)
    assert refused.value.what == "1 bytes after the last state's section"


# --------------------------------------------------------------------------------------------------------------------
# Snapshots the real Flink 2.3 cluster writes in this test run
# --------------------------------------------------------------------------------------------------------------------

KEYS = 12


@pytest.fixture(scope="module")
def native_snapshots(flink_cluster: LocalFlinkCluster, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A native savepoint (stop-with-savepoint, formatType NATIVE, snapshot compression on) and a retained HashMap
    checkpoint (compression off) of the sample job, parallelism 2."""
    root = tmp_path_factory.mktemp("native")
    client = flink_cluster.client
    found: dict[str, Path] = {}
    run = sample_job.submit(client, "v1", root / "audit-native", keys=KEYS, rate=300, parallelism=2,
                            state_backend="hashmap", compression=True)
    run.wait_for_keys()
    time.sleep(0.5)
    trigger = client.trigger_stop_with_savepoint(run.job_id, str(root / "native"), format_type="NATIVE")
    found["native-savepoint"] = Path(client.wait_for_savepoint(run.job_id, trigger).removeprefix("file:"))
    checkpoints = root / "checkpoints"
    run = sample_job.submit(client, "v1", root / "audit-checkpoint", keys=KEYS, rate=300, parallelism=2,
                            state_backend="hashmap", compression=False,
                            extra_conf={"execution.checkpointing.interval": "200ms",
                                        "execution.checkpointing.dir": f"file://{checkpoints}",
                                        "execution.checkpointing.externalized-checkpoint-retention":
                                            "RETAIN_ON_CANCELLATION"})
    run.wait_for_keys()
    deadline = time.monotonic() + 60
    while client.checkpoints(run.job_id).completed < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    client.cancel(run.job_id)
    retained = sorted(checkpoints.glob(f"{run.job_id}/chk-*/_metadata"), key=lambda p: int(p.parent.name[4:]))
    assert retained, f"no retained checkpoint under {checkpoints}"
    found["checkpoint"] = retained[-1].parent
    return found


def _consistent(values: dict[str, dict[str, Any]]) -> None:
    """Each key's states are those of one event count n, as the job computes them."""
    assert len(values) == KEYS
    for key, states in values.items():
        n = states["count"]
        assert n >= 1
        assert states == sample_job.expected_state(key, n), key


@pytest.mark.parametrize("kind", ["native-savepoint", "checkpoint"])
def test_real_heap_snapshot_reads(native_snapshots: dict[str, Path], kind: str) -> None:
    sp = Savepoint.open(native_snapshots[kind])
    streams = sp.keyed_streams("stats")
    assert len(streams) == 2
    for _, stream in streams:
        assert stream.header().compressed is (kind == "native-savepoint")
        assert stream.heap_format
    values = sample_job.states_by_key(sp)
    _consistent(values)
    timer_state = next(s.name for s in sp.keyed_states("stats") if s.kind == "TIMERS")
    # one processing-time timer per key (VoidNamespace)
    assert sorted(key for key, _, _ in sp.iter_entries("stats", timer_state)) == sorted(values)
    # every block re-encodes: to Flink's bytes uncompressed; compressed, to Flink's payload (Flink's Java Snappy
    # and cramjam choose their chunks differently, so the compressed bytes themselves differ)
    for _, stream in streams:
        compressed = stream.header().compressed
        codecs = heap_codecs(stream.header())
        for key_group, start, end in stream.blocks:
            data = stream.source.read(start, end - start)
            encoded = encode_heap_block(walk_heap_block(data, key_group, codecs, compressed), compressed)
            if compressed:
                assert block_payload(encoded, True) == block_payload(data, True)
            else:
                assert encoded == data


@pytest.mark.parametrize("kind", ["native-savepoint", "checkpoint"])
def test_real_heap_snapshot_migrates_to_a_canonical_savepoint(native_snapshots: dict[str, Path], kind: str,
                                                             tmp_path: Path) -> None:
    """The identity migration re-encodes the heap elements as canonical entries: the same states, key by key."""
    from tests.test_flink_corpus import _run_cli

    source = native_snapshots[kind]
    manifest, output = tmp_path / "m.yaml", tmp_path / "out"
    assert _run_cli(["schema", str(source), "-o", str(manifest)])[0] == 0
    status, _, stderr = _run_cli(["migrate", str(source), "--schema", str(manifest), "--output", str(output)])
    assert (status, stderr) == (0, "")
    migrated = Savepoint.open(output)
    streams = migrated.keyed_streams("stats")
    assert len(streams) == 2 and not any(stream.heap_format for _, stream in streams)
    assert all(stream.handle.code == SAVEPOINT_KEY_GROUPS for _, stream in streams)
    assert sample_job.states_by_key(migrated) == sample_job.states_by_key(Savepoint.open(source))

