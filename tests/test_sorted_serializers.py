"""The Table runtime's sorted serializers (flinkstate.serializers.sorted) on the savepoints of Flink's own restore
tests: a Top-N with the retract strategy (SortedMap state, ``RankTestPrograms``) and a process table function's
sort buffer (SortedLong user keys, ``ProcessTableFunctionTestPrograms``): values pinned to what the tests' SQL wrote,
every stored entry re-encoded to Flink's bytes, the snapshots written back byte for byte, and Flink's rule (the
comparator alone decides, by what ``ComparableRecordComparator.equals`` compares) on comparators Java-serialized by
Flink and edited in place."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from flinkstate.binary import Reader
from flinkstate.compatibility import AS_IS, INCOMPATIBLE
from flinkstate.migration.plan import OperatorTarget
from flinkstate.migration.runner import migrate_savepoint
from flinkstate.savepoint import Savepoint
from flinkstate.serializers.registry import read_snapshot, snapshot_bytes
from flinkstate.serializers.sorted import SortedLongSnapshot, SortedMapSnapshot
from flinkstate.storage.uri import open_output
from tests.support.edge_job import raw_values

pytestmark = pytest.mark.corpus

RESTORE = Path(__file__).resolve().parent / "corpus/savepoints/flink-table/flink-table-planner/src/test/resources/" \
    "restore-tests"
RANK = RESTORE / "stream-exec-rank_1/rank-test-retract-strategy/savepoint"
PTF = RESTORE / "stream-exec-process-table-function_1/process-order-by-restore/savepoint"


def _operator_with(savepoint: Path, state: str) -> tuple[str, Any]:
    sp = Savepoint.open(savepoint)
    for op in sp.operators:
        for _, stream in sp.keyed_streams(op):
            for meta in stream.header().states:
                if meta.name == state:
                    return op.operator_id, meta
    raise AssertionError(f"{state} not in {savepoint}")


def test_sorted_map_values_are_the_ranked_rows() -> None:
    # RankTestPrograms' retract strategy: per key a..c, the sort keys seen (ascending) with their counts
    op, meta = _operator_with(RANK, "sorted-map")
    assert isinstance(meta.value_serializer, SortedMapSnapshot)
    entries = {key: value for key, _, value in Savepoint.open(RANK).iter_entries(op, "sorted-map")}
    assert entries == {("a",): {(5,): 1, (6,): 1}, ("b",): {(7,): 1, (8,): 1}, ("c",): {(9,): 1, (10,): 1}}
    assert all(list(value) == sorted(value) for value in entries.values())  # stored in the comparator's order


def test_sorted_long_user_keys_are_the_rowtimes() -> None:
    op, meta = _operator_with(PTF, "input-sort-buffer-data-0")
    assert isinstance(meta.user_key_serializer, SortedLongSnapshot)
    entries = list(Savepoint.open(PTF).iter_entries(op, "input-sort-buffer-data-0"))
    assert [(key, user_key) for key, _, user_key, _ in entries] == [(("Alice",), 19)]
    assert str(entries[0][3][0][2]) == "1970-01-01T00:00:00.019000000Z"  # the row's own rowtime: the user key


@pytest.mark.parametrize("savepoint,state", [(RANK, "sorted-map"), (PTF, "input-sort-buffer-data-0")])
def test_entries_reencode_to_flinks_bytes(savepoint: Path, state: str, tmp_path: Path) -> None:
    op, _ = _operator_with(savepoint, state)
    out = tmp_path / "out"
    report = migrate_savepoint(str(savepoint), [OperatorTarget(op)], open_output(out), reencode=True)
    [counts] = report.counts.values()  # by uid where the operator has one
    assert counts[state].written > 0
    assert raw_values(out, state, op) == raw_values(savepoint, state, op)


def test_sorted_long_flips_the_sign_bit() -> None:
    snapshot = SortedLongSnapshot()
    for value, stored in [(0, "8000000000000000"), (-1, "7fffffffffffffff"), (19, "8000000000000013"),
                          (-(1 << 63), "0000000000000000"), ((1 << 63) - 1, "ffffffffffffffff")]:
        out = bytearray()
        snapshot.encoder()(value, out)
        assert out.hex() == stored
        assert snapshot.decoder()(bytes(out), 0) == (value, 8)


def _edited(snapshot: SortedMapSnapshot, old: bytes, new: bytes) -> SortedMapSnapshot:
    data = snapshot_bytes(snapshot)
    assert data.count(old) >= 1
    edited = read_snapshot(Reader(data.replace(old, new)))
    assert isinstance(edited, SortedMapSnapshot)
    return edited


def test_the_comparators_equals_decides() -> None:
    _, meta = _operator_with(RANK, "sorted-map")
    snapshot: SortedMapSnapshot = meta.value_serializer
    assert snapshot_bytes(read_snapshot(Reader(snapshot_bytes(snapshot)))) == snapshot_bytes(snapshot)
    assert snapshot.resolve_compatibility(snapshot).verdict is AS_IS
    # The generated code's class name changes with every compilation; equals ignores it.
    recompiled = _edited(snapshot, b"StreamExecSortComparator$31", b"StreamExecSortComparator$97")
    assert recompiled.comparator != snapshot.comparator
    assert recompiled.resolve_compatibility(snapshot).verdict is AS_IS
    # The sort order (compareOrders: one boolean, true = ascending) is compared: descending is another comparator.
    ascending = b"ur\x00\x02[ZW\x8f 9\x14\xb8]\xe2\x02\x00\x00xp\x00\x00\x00\x01\x01"
    descending = _edited(snapshot, ascending, ascending[:-1] + b"\x00")
    result = descending.resolve_compatibility(snapshot)
    assert result.verdict is INCOMPATIBLE
    assert [f.code for f in result.findings] == ["SORTED_MAP_COMPARATOR_CHANGED"]
