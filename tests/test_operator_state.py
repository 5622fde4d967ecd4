"""Operator state (split and union list state, broadcast state) on bytes Flink wrote: Flink's corpus
(tests/corpus/savepoints) and the sample job's savepoints of this test run (its source's splits).

The values are those Flink's own migration tests put there (``StatefulJobWBroadcastStateMigrationITCase``: the
source's ``CHECKPOINTED_STRING`` list and three broadcast maps), compared exactly, through the Python API and through
``flinkstate dump``. Where bytes are written (the proxy header, uncompressed streams), they are Flink's bytes.
"""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from flinkstate.binary import I64, Reader
from flinkstate.format.operator_state import (
    OperatorStateStream,
    read_operator_header,
    write_operator_stream,
)
from flinkstate.format_errors import SavepointFormatError, StateNotFound
from flinkstate.jsonify import to_json
from flinkstate.savepoint import Savepoint
from tests.test_flink_corpus import CORPUS, _run_cli, corpus_dirs

BROADCAST = "flink-tests/src/test/resources/new-stateful-broadcast-udf-migration-itcase-flink"
DRAGONS = ["Here be dragons!", "Here be more dragons!", "Here be yet more dragons!", "Here be the mostest dragons!"]
#: StatefulJobWBroadcastStateMigrationITCase: the three broadcast states every subtask holds.
FIRST = [[k, k] for k in range(4)]
SECOND = [[str(k), k] for k in range(4)]
THIRD = [[k, str(k)] for k in range(4)]
#: States whose elements flinkstate gives as bytes only (an unknown serializer snapshot class): none in the vendored
#: corpus.
UNDECODED: set[str] = set()


def _opened() -> list[tuple[str, Savepoint]]:
    opened = []
    for path in corpus_dirs():
        try:
            opened.append((path, Savepoint.open(CORPUS / path)))
        except SavepointFormatError:  # native RocksDB and changelog: refused in _metadata (test_flink_corpus)
            continue
    return opened


def test_every_operator_state_element_of_the_corpus_decodes() -> None:
    states = elements = compressed = 0
    undecoded: set[str] = set()
    for _, sp in _opened():
        for op in sp.operators:
            for _, stream in sp.operator_state_streams(op):
                compressed += stream.compressed()
                for name in stream.handle.states:
                    states += 1
                    for element in stream.elements(name):
                        elements += 1
                        if element.undecoded is not None:
                            undecoded.add(name)
                            assert element.undecoded.startswith("serializer snapshot class org.apache.flink.")
    assert undecoded == UNDECODED
    assert (states, elements, compressed) == (STATES, ELEMENTS, COMPRESSED)


#: Figures of the vendored corpus (regression: an element that stops decoding fails the test above).
STATES, ELEMENTS, COMPRESSED = 1371, 2426, 18


@pytest.mark.parametrize("version", ["1.8-rocksdb-savepoint", "1.10-savepoint", "1.15-hashmap-checkpoint",
                                     "1.20-hashmap-savepoint", "2.3-hashmap-checkpoint", "2.3-rocksdb-savepoint"])
def test_broadcast_job_values(version: str) -> None:
    sp = Savepoint.open(CORPUS / (BROADCAST + version))
    found: dict[tuple[str, str], list[tuple[int, Any]]] = {}
    for op in sp.operators:
        for name in sp.operator_state_modes(op):
            found[(op.operator_id, name)] = [(subtask, to_json(e.value)) for subtask, e in
                                             sp.iter_operator_state(op, name)]
    assert found[("12d7d939fd56473cac7cff0603179a41", "broadcast-state-1")] == [(s, FIRST) for s in range(4)]
    assert found[("12d7d939fd56473cac7cff0603179a41", "broadcast-state-2")] == [(s, SECOND) for s in range(4)]
    assert found[("56a26c4c54bda3adf3700194db4afe93", "broadcast-state-3")] == [(s, THIRD) for s in range(4)]
    # the job's four sources (union and split list state) each hold the four strings in subtask 0
    sources = [key for key in found if key[1] == "source-state"]
    assert sorted(op_id for op_id, _ in sources) == ["1f2b5df5a66154aca61fcb26193792be",
                                                     "63dd9c79b328282531c0a8c5cb466735",
                                                     "69f32d314b97c6f7f9ed7873983167f2",
                                                     "81afaf64abeedc40a0f29989b81a3659"]
    for key in sources:
        assert found[key] == [(0, d) for d in DRAGONS]
    assert sp.operator_state_modes("1f2b5df5a66154aca61fcb26193792be") == {"source-state": "UNION"}
    assert sp.operator_state_modes("12d7d939fd56473cac7cff0603179a41") == {"broadcast-state-1": "BROADCAST",
                                                                          "broadcast-state-2": "BROADCAST"}


def test_headers_and_uncompressed_streams_written_back_byte_for_byte() -> None:
    headers = streams = 0
    for path, sp in _opened():
        for op in sp.operators:
            for _, stream in sp.operator_state_streams(op):
                data = stream.source.read(0, stream.source.size)
                try:
                    header = read_operator_header(Reader(data, 0, path))
                except SavepointFormatError:
                    continue  # a serializer snapshot flinkstate does not know: no length, nothing to write back
                assert header.write() == data[:header.length]
                headers += 1
                if header.compressed:
                    continue
                by_offset = sorted(stream.handle.states.items(), key=lambda kv: kv[1].offsets[:1] or (0,))
                layout = {name: (meta.mode, [raw for _, raw in stream.element_bytes(name)]) for name, meta in by_offset}
                written, handle = write_operator_stream(header, layout)
                assert written == data
                assert handle.states == stream.handle.states
                streams += 1
    assert (headers, streams) > (800, 700)


def test_compressed_stream_values() -> None:
    """A Snappy-compressed operator state stream (the SQL restore tests' sinks): each element's frames decompress on
    their own, and decode to the sink's rows."""
    sp = Savepoint.open(CORPUS / "flink-table/flink-table-planner/src/test/resources/restore-tests/"
                        "stream-exec-calc_1/calc-coalesce/savepoint")
    op = next(op for op in sp.operators if op.uid == "3_sink")
    streams = sp.operator_state_streams(op)
    assert all(stream.compressed() for _, stream in streams)
    values = {name: [to_json(e.value) for _, e in sp.iter_operator_state(op, name)]
              for name in sorted(sp.operator_state_modes(op))}
    assert values == EXPECTED_CALC_COALESCE


#: The sink's buffered rows of the calc-coalesce restore test (DECIMAL and TIMESTAMP(3) columns).
EXPECTED_CALC_COALESCE: dict[str, list[Any]] = {
    "sink-results": [["11.22", "1970-01-01T00:00:00.123000000"]],
    "sink-retract-results": [["11.22", "1970-01-01T00:00:00.123000000"]],
}


def _dump(path: Path, operator: str, state: str) -> list[dict[str, Any]]:
    status, out, err = _run_cli(["dump", str(path), "--operator", operator, "--state", state])
    assert (status, err) == (0, "")
    return [json.loads(line) for line in out.splitlines()]


def test_dump_cli_list_and_broadcast_state() -> None:
    path = CORPUS / (BROADCAST + "2.3-hashmap-savepoint")
    assert _dump(path, "1f2b5df5a66154aca61fcb26193792be", "source-state") == \
        [{"subtask": 0, "mode": "UNION", "index": i, "value": d} for i, d in enumerate(DRAGONS)]
    assert _dump(path, "12d7d939fd56473cac7cff0603179a41", "broadcast-state-2") == \
        [{"subtask": s, "mode": "BROADCAST", "key": k, "value": v} for s in range(4) for k, v in SECOND]


def test_dump_cli_source_splits() -> None:
    """A FLIP-27 source's splits: bytes in Flink's SimpleVersionedSerialization, the split serializer's version and
    bytes given apart (the DataGen source's NumberSequenceSplit: split id, from, to)."""
    path = CORPUS / "flink-libraries/flink-state-processing-api/src/test/resources/table-state"
    records = _dump(path, "datagen-source-uid", "SourceReaderState")
    assert [(r["subtask"], r["index"], r["split"]["split_serializer_version"]) for r in records] == \
        [(0, 0, 1), (1, 0, 1)]
    for record in records:
        raw = base64.b64decode(record["value"])
        split = base64.b64decode(record["split"]["split_bytes"])
        assert raw[8:] == split
        reader = Reader(split)
        split_id = reader.utf()
        start, end = reader.i64(), reader.i64()
        assert reader.remaining() == 0
        assert (split_id, start, end) == SPLITS[record["subtask"]]
        assert I64.pack(end) == split[-8:]


#: The DataGen source's two splits of Long.MAX_VALUE - 1 numbers, as far as each had got.
SPLITS: dict[int, tuple[str, int, int]] = {0: ("2", 4611686018427387953, 9223372036854775806),
                                           1: ("1", 49, 4611686018427387903)}


def test_dump_cli_unknown_state_is_one_line() -> None:
    path = CORPUS / (BROADCAST + "2.3-hashmap-savepoint")
    status, out, err = _run_cli(["dump", str(path), "--operator", "1f2b5df5a66154aca61fcb26193792be", "--state",
                                 "nope"])
    assert status == 1 and out == "" and len(err.splitlines()) == 1 and "nope" in err, err


def test_iter_operator_state_unknown_name() -> None:
    sp = Savepoint.open(CORPUS / (BROADCAST + "2.3-hashmap-savepoint"))
    with pytest.raises(StateNotFound) as missing:
        list(sp.iter_operator_state("1f2b5df5a66154aca61fcb26193792be", "nope"))
    assert "(operator states: source-state)" in str(missing.value)


def test_element_decoded_past_its_end_is_refused(tmp_path: Path) -> None:
    """An element must end exactly where the next one starts: a handle offset moved by one is corruption."""
    sp = Savepoint.open(CORPUS / (BROADCAST + "2.3-hashmap-savepoint"))
    op = sp.operator("1f2b5df5a66154aca61fcb26193792be")
    _, stream = sp.operator_state_streams(op)[0]
    meta = stream.handle.states["source-state"]
    moved = type(stream.handle)({"source-state": type(meta)(meta.mode, (meta.offsets[0] + 1, *meta.offsets[1:]))},
                                stream.handle.delegate)
    broken = OperatorStateStream(sp.location, moved, "operator x, subtask 0")
    with pytest.raises(SavepointFormatError) as refused:
        list(broken.elements("source-state"))
    assert "\n" not in str(refused.value)
    assert "operator x, subtask 0, state source-state, element 0" in str(refused.value)


def test_unknown_serializer_gives_bytes_with_the_class_named(tmp_path: Path) -> None:
    """A state whose serializer snapshot class flinkstate does not know (a connector's own, say; here Flink's
    String snapshot renamed in place, so every offset stays right) is dumped as its elements' bytes, the class named."""
    target = tmp_path / "sp"
    shutil.copytree(CORPUS / (BROADCAST + "2.3-hashmap-savepoint"), target)
    _, stream = Savepoint.open(target).operator_state_streams("1f2b5df5a66154aca61fcb26193792be")[0]
    assert stream.source.name is not None
    file = target / stream.source.name
    data = file.read_bytes()
    known = b"StringSerializer$StringSerializerSnapshot"
    assert data.count(known) == 1
    file.write_bytes(data.replace(known, b"StringSerializer$StringSerializerSnapshoX"))
    unknown = "org.apache.flink.api.common.typeutils.base.StringSerializer$StringSerializerSnapshoX"
    records = _dump(target, "1f2b5df5a66154aca61fcb26193792be", "source-state")
    # Flink's StringSerializer: each element a StringValue (length + 1 as a varint, then the characters)
    assert records == [{"subtask": 0, "mode": "UNION", "index": i,
                        "bytes": base64.b64encode(bytes([len(d) + 1]) + d.encode()).decode(),
                        "undecoded": f"serializer snapshot class {unknown} is not known to flinkstate"}
                       for i, d in enumerate(DRAGONS)]


@pytest.mark.parametrize("variant", ["heap-p2", "rocksdb-p2-snappy"])
def test_sample_job_source_split_matches_its_keyed_state(flink_savepoints: dict[str, Path], variant: str) -> None:
    """The sample job's DataGen source (uid ``sequence-source``, parallelism 1) in a savepoint Flink 2.3 wrote in
    this run: its one split (NumberSequenceSplit: id, next number, last number) has got exactly as far as the events
    the keyed operator counted, since stop-with-savepoint takes the source's and the operator's state at one
    barrier: the split's next number is the sum of every key's count."""
    path = flink_savepoints[variant]
    records = _dump(path, "sequence-source", "SourceReaderState")
    assert [(r["subtask"], r["mode"], r["index"]) for r in records] == [(0, "SPLIT_DISTRIBUTE", 0)]
    reader = Reader(base64.b64decode(records[0]["split"]["split_bytes"]))
    split_id, next_number, last = reader.utf(), reader.i64(), reader.i64()
    assert reader.remaining() == 0
    assert (split_id, last) == ("1", (1 << 63) - 2)  # one split (id 1) of the numbers 0 .. Long.MAX_VALUE - 1
    counts = {key: value for key, _, value in Savepoint.open(path).iter_entries("stats", "count")}
    assert len(counts) == 20
    assert sum(counts.values()) == next_number


def test_describe_names_each_operator_state_with_mode_and_type() -> None:
    path = CORPUS / (BROADCAST + "1.8-rocksdb-savepoint")  # _metadata version 2, operator state proxy version 5
    status, out, err = _run_cli(["describe", str(path)])
    assert (status, err) == (0, "")
    assert ("operator 12d7d939fd56473cac7cff0603179a41\n  parallelism 4, max parallelism 4\n"
            "  operator state: broadcast-state-1, broadcast-state-2\n"
            "    broadcast-state-1: BROADCAST, Map<Long, Long>\n"
            "    broadcast-state-2: BROADCAST, Map<String, Long>\n") in out
    assert "  operator state: source-state\n    source-state: UNION, String\n" in out
    status, out, err = _run_cli(["describe", str(path), "--json"])
    ops = {op["id"]: op for op in json.loads(out)["operators"]}
    assert ops["81afaf64abeedc40a0f29989b81a3659"]["operator_state_details"] == \
        [{"name": "source-state", "mode": "SPLIT_DISTRIBUTE", "type": "String"}]
