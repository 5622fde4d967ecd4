"""The independent walk of RocksDB's SST files (flinkstate/format/sst_walk.py) and the verifier's cross-check of the
RocksDB reader against it (issue 23). No cluster: Flink's native snapshots in tests/corpus, and RocksDB instances
written here by rocksdict (RocksDB itself). Merge operands from real Flink 2.3: tests/test_list_merge.py.

* Every column family of every native RocksDB snapshot of the corpus (Flink 1.15 to 2.3) resolves to exactly what
  RocksDB returns, key by key and byte by byte.
* A RocksDB written here with several files, overwrites and deletions across them, small blocks, Snappy and
  uncompressed blocks, and index restart intervals above 1 (delta-encoded block handles) does too, also from a
  start key.
* What the walk does not read is refused in one line naming the file: format_version 6, ZSTD blocks, a data block
  hash index, range deletions, a block's unknown compression type, a truncated file, a wrong magic number.
* The verifier refuses a reader that returns a changed value or a key the files do not hold, naming the key group.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from rocksdict import (
    AccessType,
    BlockBasedOptions,
    DataBlockIndexType,
    DBCompressionType,
    Options,
    Rdict,
)

from flinkstate.format.rocksdb_native import NativeRocksDBStream, column_family_options
from flinkstate.format.sst_walk import column_family_tables, open_table, resolved_entries
from flinkstate.format_errors import SavepointFormatError
from flinkstate.migration.plan import MigrationError
from flinkstate.migration.runner import migrate_savepoint
from flinkstate.savepoint import Savepoint
from flinkstate.storage.uri import open_output
from tests.test_flink_corpus import CORPUS
from tests.test_rocksdb_native import NATIVE_DIRS

UDF_23 = "flink-tests/src/test/resources/new-stateful-udf-migration-itcase-flink2.3-rocksdb-savepoint-native"


def _rocksdb_items(directory: str, family: str, start: bytes = b"") -> list[tuple[bytes, bytes]]:
    """What RocksDB itself returns for one column family (its options from the OPTIONS file)."""
    options = column_family_options(directory)[0]
    db = Rdict(directory, options=Options(raw_mode=True), column_families=options,
               access_type=AccessType.read_only())
    try:
        cursor = db.get_column_family(family).iter()
        cursor.seek(start)
        found = []
        while cursor.valid():
            found.append((bytes(cursor.key()), bytes(cursor.value())))
            cursor.next()
        cursor.status()
        return found
    finally:
        del cursor
        db.close()


def _walked(directory: str, family: str, start: bytes = b"") -> list[tuple[bytes, bytes]]:
    files = [(os.path.join(directory, f), f) for f in sorted(os.listdir(directory)) if f.endswith(".sst")]
    return [(key, value) for key, value, _ in resolved_entries(column_family_tables(files).get(family, []), start)]


def test_every_corpus_native_snapshot_walks_to_what_rocksdb_reads() -> None:
    compared = families = 0
    for path in NATIVE_DIRS:
        sp = Savepoint.open(CORPUS / path, allow_external_handles=True)
        for op in sp.operators:
            for _, stream in sp.keyed_streams(op):
                assert isinstance(stream, NativeRocksDBStream)
                tables = column_family_tables(stream.sst_files())
                db = stream._open_db()  # RocksDB with the snapshot's own options (its merge operator)
                for family in stream._families:
                    walked = [(k, v) for k, v, _ in resolved_entries(tables.get(family, []))]
                    assert walked == list(stream._scan(db, family, b"")), (path, op.operator_id, family)
                    compared += len(walked)
                    families += 1
    assert (len(NATIVE_DIRS), families, compared) == (12, 316, 136)


def _write(directory: Path, *, compression: Any = None, format_version: int = 5, index_restart: int = 4,
           hash_index: bool = False, between: Callable[[Rdict], None] | None = None) -> str:
    """A RocksDB in ``directory`` (column families default and ``state``): three flushed files, no compaction:
    keys k000..k199 with values of several lengths, then every third overwritten, then every fifth deleted (an
    overwrite and a deletion always in a newer file than the value they hide)."""
    table = BlockBasedOptions()
    table.set_format_version(format_version)
    table.set_block_size(256)  # many data blocks
    table.set_index_block_restart_interval(index_restart)
    if hash_index:
        table.set_data_block_index_type(DataBlockIndexType.binary_and_hash())
    options = Options(raw_mode=True)
    options.create_if_missing(True)
    options.create_missing_column_families(True)
    options.set_disable_auto_compactions(True)
    options.set_block_based_table_factory(table)
    if compression is not None:
        options.set_compression_type(compression)
    db = Rdict(str(directory), options, column_families={"state": options})
    state = db.get_column_family("state")
    for i in range(200):
        state[b"k%03d" % i] = b"v%d," % i * (i % 7 + 1)
    state.flush()
    for i in range(0, 200, 3):
        state[b"k%03d" % i] = b"new %d" % i
    state.flush()
    for i in range(0, 200, 5):
        del state[b"k%03d" % i]
    if between is not None:
        between(state)
    state.flush()
    del state
    db.close()
    return str(directory)


@pytest.mark.parametrize("compression", ["snappy", "none"])
@pytest.mark.parametrize("index_restart", [1, 4])
def test_a_rocksdb_written_here_walks_to_what_rocksdb_reads(tmp_path: Path, compression: str,
                                                            index_restart: int) -> None:
    directory = _write(tmp_path / "db", compression=getattr(DBCompressionType, compression)(),
                       index_restart=index_restart)
    files = [f for f in os.listdir(directory) if f.endswith(".sst")]
    assert len(files) == 3
    tables = [open_table(os.path.join(directory, f), f) for f in files]
    assert {t.column_family for t in tables} == {"state"} and sum(len(t.blocks) for t in tables) > 10
    if index_restart > 1:
        assert all(t.number("rocksdb.index.value.is.delta.encoded") for t in tables)
    want = _rocksdb_items(directory, "state")
    assert len(want) == 160 and (b"k003", b"new 3") in want and (b"k001", b"v1,v1,") in want
    assert _walked(directory, "state") == want
    assert _walked(directory, "state", b"k1") == _rocksdb_items(directory, "state", b"k1")
    assert _walked(directory, "default") == []


def _refused(directory: str) -> str:
    with pytest.raises(SavepointFormatError) as refused:
        _walked(directory, "state")
    message = str(refused.value)
    assert "\n" not in message and ".sst" in message, message
    return message


def test_what_the_walk_does_not_read_is_refused_in_one_line(tmp_path: Path) -> None:
    assert "format_version 6 (this walk reads 2 to 5" in _refused(_write(tmp_path / "v6", format_version=6))
    assert "compression type 7 (ZSTD)" in _refused(_write(tmp_path / "zstd", compression=DBCompressionType.zstd()))
    assert "a data block with a hash index" in _refused(_write(tmp_path / "hash", hash_index=True))
    ranged = _write(tmp_path / "range", between=lambda state: state.delete_range(b"k010", b"k020"))
    assert "range deletions" in _refused(ranged)


def _damaged(tmp_path: Path, change: Callable[[bytearray, int], None]) -> str:
    """A copy of a RocksDB written here with one SST file changed in place."""
    directory = _write(tmp_path / "db", compression=DBCompressionType.snappy())
    sst = os.path.join(directory, sorted(f for f in os.listdir(directory) if f.endswith(".sst"))[0])
    data = bytearray(Path(sst).read_bytes())
    table = open_table(sst, "x")
    change(data, table.blocks[0][1] + table.blocks[0][2])  # the first data block's trailer
    Path(sst).write_bytes(bytes(data))
    return directory


def test_damaged_files_are_refused_in_one_line(tmp_path: Path) -> None:
    def unknown_compression(data: bytearray, trailer: int) -> None:
        data[trailer] = 0x42

    def truncated(data: bytearray, trailer: int) -> None:
        del data[len(data) // 2:]

    def magic(data: bytearray, trailer: int) -> None:
        data[-1] ^= 0xFF

    assert "compression type 66 (unknown)" in _refused(_damaged(tmp_path / "a", unknown_compression))
    assert "not a block-based table" in _refused(_damaged(tmp_path / "b", truncated))
    assert "not a block-based table (magic" in _refused(_damaged(tmp_path / "c", magic))


# --------------------------------------------------------------------------------------------------------------------
# The verifier's cross-check (the old reader's lost entries: tests/test_list_merge.py)
# --------------------------------------------------------------------------------------------------------------------


def _reader_changed(monkeypatch: pytest.MonkeyPatch,
                    change: Callable[[Iterator[tuple[bytes, bytes]]], Iterator[tuple[bytes, bytes]]]) -> None:
    """The verifier's reads of the source (``_scan``) changed by ``change`` (the migration's writer is not)."""
    scan = NativeRocksDBStream._scan

    def changed(self: NativeRocksDBStream, db: Any, state_name: str, start_key: bytes
                ) -> Iterator[tuple[bytes, bytes]]:
        return change(scan(self, db, state_name, start_key)) if state_name == "state-name" else \
            scan(self, db, state_name, start_key)

    monkeypatch.setattr(NativeRocksDBStream, "_scan", changed)


def _refused_migration(tmp_path: Path) -> str:
    out = tmp_path / "out"
    with pytest.raises(MigrationError) as refused:
        migrate_savepoint(str(CORPUS / UDF_23), [], open_output(out))
    assert not out.exists()
    message = str(refused.value)
    assert "\n" not in message and message.startswith("verification: ") and ", state state-name, key group " in \
        message, message
    return message


def test_the_verifier_refuses_a_value_the_files_do_not_resolve_to(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    def last_value_changed(entries: Iterator[tuple[bytes, bytes]]) -> Iterator[tuple[bytes, bytes]]:
        for key, value in entries:
            yield key, value[:-1] + bytes([value[-1] ^ 1])

    _reader_changed(monkeypatch, last_value_changed)
    message = _refused_migration(tmp_path)
    assert "the RocksDB reader's value (8 bytes) is not the one the SST file " in message, message
    assert "(000010.sst) resolves to (8 bytes" in message, message


def test_the_verifier_refuses_a_key_the_files_do_not_hold(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def key_added(entries: Iterator[tuple[bytes, bytes]]) -> Iterator[tuple[bytes, bytes]]:
        for key, value in entries:
            yield key, value
            yield key + b"\x00", value

    _reader_changed(monkeypatch, key_added)
    assert "which the snapshot's SST files do not hold" in _refused_migration(tmp_path)


def test_the_walk_names_the_savepoints_own_files(tmp_path: Path) -> None:
    """Messages name the savepoint's file each walked copy was made of (and RocksDB's name for it)."""
    target = tmp_path / "sp"
    shutil.copytree(CORPUS / UDF_23, target)
    sp = Savepoint.open(target)
    files = [name for op in sp.operators for _, stream in sp.keyed_streams(op)
             if isinstance(stream, NativeRocksDBStream) for _, name in stream.sst_files()]
    assert files and all(name.startswith(str(target) + "/") and name.endswith(".sst)") for name in files), files
