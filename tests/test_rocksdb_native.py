"""Native RocksDB snapshots (``IncrementalRemoteKeyedStateHandle``, handle codes 5 and 11): RocksDB native savepoints
and retained RocksDB checkpoints, on the bytes Flink's own test suite wrote (tests/corpus/savepoints).

The handles are written back byte for byte; the header (``KeyedBackendSerializationProxy``) in the meta state file
gives ``describe``, ``schema`` and ``check``; the entries, read from the RocksDB instance rebuilt from the
snapshot's files, equal those of the canonical savepoint the same Flink test job wrote.
"""

from __future__ import annotations

import pytest

from flinkstate.format.handles import INCREMENTAL_KEY_GROUPS_V2, IncrementalKeyedStateHandle, RelativeFileStateHandle
from flinkstate.format.metadata import read_metadata, write_metadata
from flinkstate.format_errors import SavepointFormatError, UnsupportedFormat
from tests.test_flink_corpus import CORPUS, corpus_dirs

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
    assert len(NATIVE_DIRS) == 8
    assert sum(p.endswith("-savepoint-native") for p in NATIVE_DIRS) == 4


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
