"""The savepoint writer against real Flink: _metadata re-written byte for byte, identity rewrites (every entry
decoded and re-encoded) that are byte-identical where Flink's own order allows, and restores of rewritten
savepoints in metadata versions 3 to 6 on HashMap and RocksDB with every key's state checked."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from flinkstate.engine import LocalFlinkCluster
from flinkstate.format.checkpoint_properties import JAVA_SERIALIZED_NULL
from flinkstate.format.keyed_header import KeyedBackendHeader
from flinkstate.format.keyed_stream import KeyedStreamWriter, encode_block
from flinkstate.format.metadata import read_metadata, write_metadata
from flinkstate.migration.plan import OperatorTarget
from flinkstate.migration.runner import migrate_savepoint
from flinkstate.savepoint import Savepoint
from flinkstate.storage.uri import open_output
from tests.support import sample_job
from tests.support.sample_job import check_audit_record

STATES = ("stats", "count", "recent", "buckets", "_timer_state/processing_user-timers")


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _tree(directory: Path) -> dict[str, str]:
    return {p.name: _digest(p) for p in directory.iterdir()}


def test_metadata_is_rewritten_byte_for_byte(flink_savepoints: dict[str, Path]):
    for savepoint in flink_savepoints.values():
        data = (savepoint / "_metadata").read_bytes()
        metadata = read_metadata(data)
        assert len(metadata.trailer) == 756  # Flink 2.3's CheckpointProperties
        assert write_metadata(metadata) == data


def test_metadata_versions_3_to_6(flink_savepoints: dict[str, Path]):
    metadata = read_metadata((flink_savepoints["heap-p2"] / "_metadata").read_bytes())
    for version in (3, 4, 5, 6):
        data = write_metadata(metadata, version)
        again = read_metadata(data)
        assert again.version == version
        assert [op.operator_id for op in again.operators] == [op.operator_id for op in metadata.operators]
        assert [op.uid for op in again.operators] == [op.uid if version >= 5 else None for op in metadata.operators]
        assert again.trailer == (metadata.trailer if version >= 4 else b"")
    metadata.trailer = b""  # e.g. a V3 source written out as V4: Java's serialized null, like the State Processor API
    assert write_metadata(metadata, 4).endswith(JAVA_SERIALIZED_NULL)


def test_block_encoding_round_trips_through_the_reader(tmp_path: Path, flink_savepoints: dict[str, Path]):
    source = Savepoint.open(flink_savepoints["heap-p1"])
    ((_, stream),) = source.keyed_streams("stats")
    header: KeyedBackendHeader = stream.header()
    key_group, start, end = stream.blocks[0]
    block = stream.read_block(key_group, start, end)
    from flinkstate.format.keyed_stream import iter_raw_entries, raw_key

    runs: list[tuple[int, list[tuple[bytes, bytes]]]] = []
    for state_id, ks, ke, vs, ve in iter_raw_entries(block):
        if not runs or runs[-1][0] != state_id:
            runs.append((state_id, []))
        runs[-1][1].append((raw_key(block, ks, ke), block[vs:ve]))
    assert len(runs) > 1
    assert encode_block(runs) == block  # flags on each run's last key, next state ids, end mark: Flink's bytes
    with open(tmp_path / "stream", "wb") as sink:
        writer = KeyedStreamWriter(sink, header, stream.key_group_range, "stream")
        writer.write_block(key_group, encode_block(runs))
        handle = writer.finish()
    assert handle.offsets.offset(key_group) == header.length
    assert (tmp_path / "stream").read_bytes() == header.write() + block


@pytest.mark.parametrize("name", ["heap-p1", "heap-p2", "heap-p2-snappy", "rocksdb-p2", "rocksdb-p2-snappy"])
def test_identity_rewrite(flink_savepoints: dict[str, Path], tmp_path: Path, name: str):
    source_dir = flink_savepoints[name]
    before = _tree(source_dir)
    out = tmp_path / "rewritten"
    report = migrate_savepoint(str(source_dir), [OperatorTarget("stats")], open_output(out), reencode=True)
    assert _tree(source_dir) == before, "the source savepoint must not change"
    source, rewritten = Savepoint.open(source_dir), Savepoint.open(out)
    for state in STATES:
        assert list(rewritten.iter_entries("stats", state)) == list(source.iter_entries("stats", state))
        assert report.counts["stats"][state].written == sum(1 for _ in source.iter_entries("stats", state))
    compressed = "snappy" in name
    for (_, a), (_, b) in zip(source.keyed_streams("stats"), rewritten.keyed_streams("stats"), strict=True):
        assert b.header().write() == a.header().write()
        if not compressed:  # every entry decoded and re-encoded, in Flink's order: the very same bytes
            assert Path(b.source.path).read_bytes() == Path(a.source.path).read_bytes()
            assert b.handle.offsets == a.handle.offsets
    # The other operators (the source's reader state, the sink) are copied through byte for byte.
    copied = {n: d for n, d in _tree(out).items() if n != "_metadata" and not n.startswith("keyed-")}
    assert copied and all(before[n] == d for n, d in copied.items())
    assert not (tmp_path / ".rewritten.inprogress").exists()


#: (source savepoint, metadata version written, backend restoring it)
RESTORES = [("heap-p1", 3, "hashmap"), ("rocksdb-p2", 4, "rocksdb"), ("heap-p2-snappy", 5, "hashmap"),
            ("rocksdb-p2-snappy", 6, "rocksdb")]


@pytest.mark.flink
@pytest.mark.parametrize(("name", "version", "backend"), RESTORES)
def test_flink_restores_rewritten_savepoints(flink_cluster: LocalFlinkCluster, flink_savepoints: dict[str, Path],
                                             flink_savepoints_info: dict, tmp_path: Path, name: str, version: int,
                                             backend: str):
    out = tmp_path / "rewritten"
    migrate_savepoint(str(flink_savepoints[name]), [OperatorTarget("stats")], open_output(out),
                      metadata_version=version, reencode=True)
    assert int.from_bytes((out / "_metadata").read_bytes()[4:8], "big") == version
    keys = flink_savepoints_info[name]["keys"]
    records = sample_job.restore_audit(flink_cluster.client, "v1", out, tmp_path / "audit", keys=keys,
                                       state_backend=backend)
    assert len(records) == keys
    assert all(check_audit_record(record, "v1") > 0 for record in records)
