"""The migration's run-by-run block rewrite (flinkstate/migration/rewrite.py ``_rewrite_runs``, compiled
``block_runs``): a kept state's run of entries is copied as it is and a migrated state's run decoded in one compiled
pass. Its twin is the entry-by-entry reference (``COPY_RUNS`` off): on savepoints Flink writes in this test run both
write the same files byte for byte, on Flink's corpus the runs are exactly the blocks' entries, and a wrong value
written by the fast path is refused by the verifier.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest

from flinkstate import _speedups
from flinkstate.format.keyed_header import END_OF_KEY_GROUP_MARK
from flinkstate.format.keyed_stream import iter_raw_entries
from flinkstate.migration import rewrite
from flinkstate.migration.plan import MigrationError, OperatorTarget, StateTarget
from flinkstate.migration.runner import migrate_savepoint
from flinkstate.migration.spec import parse_migration
from flinkstate.savepoint import Savepoint
from flinkstate.serializers.pojo import PojoSnapshot
from flinkstate.serializers.primitives import simple
from flinkstate.storage.uri import open_output

SAVEPOINTS = Path(__file__).parent / "corpus" / "savepoints"
SAVEPOINT_DIRS = (SAVEPOINTS / "dirs.txt").read_text(encoding="utf-8").split()
needs_compiled = pytest.mark.skipif(not _speedups.enabled(),
                                    reason="the compiled fast path is off: the reference alone is under test")
STATE_ID = struct.Struct(">H")


def _v2_targets() -> list[OperatorTarget]:
    stats = PojoSnapshot.create("sample.Stats", [("key", simple("String")), ("total", simple("Long")),
                                                 ("count", simple("Long")), ("label", simple("String"))])
    return [OperatorTarget("stats", states=[StateTarget("stats", value=stats, migration=parse_migration(
        {"fields": {"label": {"default": "n/a"}}}))])]


def _files(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


@needs_compiled
@pytest.mark.flink
@pytest.mark.parametrize("variant", ["heap-p1", "heap-p2", "heap-p2-snappy", "rocksdb-p2", "rocksdb-p2-snappy"])
def test_runs_and_entries_write_the_same_savepoint(flink_savepoints: dict[str, Path], tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch, variant: str) -> None:
    source = flink_savepoints[variant]
    calls: list[bool] = []
    runs = rewrite._SubtaskMigrator._rewrite_runs

    def counted(self: Any, data: bytes, key_group: int, block_offset: int) -> bytes | None:
        result = runs(self, data, key_group, block_offset)
        calls.append(result is not None)
        return result

    outputs: list[dict[str, bytes]] = []
    reports: list[Any] = []
    for copy_runs in (True, False):
        with monkeypatch.context() as patch:
            patch.setattr(rewrite, "COPY_RUNS", copy_runs)
            patch.setattr(rewrite._SubtaskMigrator, "_rewrite_runs", counted)
            out = tmp_path / f"runs-{copy_runs}"
            report = migrate_savepoint(str(source), _v2_targets(), open_output(str(out)))
        outputs.append(_files(out))
        reports.append((report.counts, report.verification))
    assert outputs[0] == outputs[1]
    assert reports[0] == reports[1]  # the same counts per state, the same verification
    assert any(name.startswith("keyed-") for name in outputs[0])  # the rewritten keyed streams are compared
    assert calls and all(calls)  # not hollow: every block of the first run went through the run-by-run rewrite


@needs_compiled
@pytest.mark.parametrize("path", SAVEPOINT_DIRS, ids=lambda p: p.split("resources/")[-1])
def test_block_runs_are_exactly_the_blocks_entries(path: str) -> None:
    try:
        sp = Savepoint.open(SAVEPOINTS / path)
        streams = [stream for op in sp.operators for _, stream in sp.keyed_streams(op)]
        streams = [s for s in streams if s.header() and s.canonical_blocks]
    except Exception:
        return  # a savepoint this tool refuses: nothing to walk (test_speedups covers its errors)
    for stream in streams:
        count = len(stream.header().states)
        for key_group, start, end in stream.blocks:
            data = stream.read_block(key_group, start, end)
            try:
                entries = list(iter_raw_entries(data, count))
            except Exception:
                assert _speedups.block_runs(stream, data, key_group) is None
                continue
            runs = _speedups.block_runs(stream, data, key_group)
            assert runs is not None
            # the runs, each behind its state id, then the end mark: the block itself
            assert b"".join(STATE_ID.pack(sid) + data[a:b] for sid, a, b, _ in runs) \
                + STATE_ID.pack(END_OF_KEY_GROUP_MARK) == data
            assert [sid for sid, *_ in entries] == [sid for sid, _, _, n in runs for _ in range(n)]


@needs_compiled
@pytest.mark.flink
@pytest.mark.parametrize("path", ["compiled run", "entry loop"])
def test_a_wrong_value_from_the_fast_path_is_refused(flink_savepoints: dict[str, Path], tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch, path: str) -> None:
    one = rewrite._SubtaskMigrator._migrate_one
    seen = []

    def wrong(self: Any, codec: Any, state: Any, entry: tuple[Any, ...], key_group: int,
              kept_key: bytes | None) -> tuple[bytes, bytes] | None:
        seen.append(entry)
        if len(seen) == 3:  # the third migrated entry: its label written as "n/b", not the declared "n/a"
            entry = (*entry[:2], {**entry[2], "label": "n/b"})
            new: tuple[bytes, bytes] | None = codec.encode_entry(entry, key_group, kept_key)
            return new
        return one(self, codec, state, entry, key_group, kept_key)

    compiled_run = rewrite.migrate_block

    def wrong_run(*args: Any) -> bytearray | None:  # the first run's last label written as "n/b"
        run = compiled_run(*args)
        if run is not None and not seen:
            seen.append(args)
            at = run.rindex(b"n/a")
            run[at:at + 3] = b"n/b"
        return run

    if path == "compiled run":
        monkeypatch.setattr(rewrite, "migrate_block", wrong_run)
    else:
        monkeypatch.setattr(rewrite, "migrate_block", lambda *args: None)
        monkeypatch.setattr(rewrite._SubtaskMigrator, "_migrate_one", wrong)
    out = tmp_path / "wrong"
    with pytest.raises(MigrationError) as error:
        migrate_savepoint(str(flink_savepoints["heap-p1"]), _v2_targets(), open_output(str(out)))
    message = str(error.value)
    assert message.startswith("verification: ") and "state stats, key group" in message
    assert "'n/b'" in message and "\n" not in message
    assert not out.exists()  # nothing published
