"""Checks a savepoint of the sample job entry by entry, through flinkstate's reader: every state of every key must
hold exactly what the job wrote (``expected_state``), in the key group Flink assigns, inside its subtask's standard
key-group range, with nothing missing or extra."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from flinkstate.binary import assign_key_group, java_string_hash, key_group_range_for_operator_index
from flinkstate.savepoint import Savepoint
from tests.support.sample_job import OPERATOR_UID, counts_for_position, expected_state, key_name

PROCESSING_TIMERS = "_timer_state/processing_user-timers"
EVENT_TIMERS = "_timer_state/event_user-timers"

Found = dict[str, list[tuple[int, tuple[Any, ...]]]]


def collect(savepoint: Savepoint, state: str, operator: str = OPERATOR_UID) -> Found:
    """key -> [(key group, entry)] of one state, checking every block against its subtask's key-group range and
    every key against Flink's key-group assignment."""
    op = savepoint.operator(operator)
    found: Found = defaultdict(list)
    for index, stream in savepoint.keyed_streams(op):
        standard = key_group_range_for_operator_index(op.max_parallelism, op.parallelism, index)
        assert stream.key_group_range == standard
        for key_group, entries in stream.iter_blocks(state):
            assert key_group in standard
            for entry in entries:
                assert key_group == assign_key_group(java_string_hash(entry[0]), op.max_parallelism), entry
                assert entry[1] is None  # VoidNamespace
                found[entry[0]].append((key_group, entry))
    return found


def single(found: Found) -> dict[str, Any]:
    """key -> value of a state holding one entry per key."""
    for key, entries in found.items():
        assert len(entries) == 1, (key, entries)
    return {key: entries[0][1][2] for key, entries in found.items()}


def assert_sample_state(path: Path, keys: int, version: str = "v1", operator: str = OPERATOR_UID) -> dict[str, int]:
    """Asserts the whole keyed state of the sample job's ``stats`` operator; returns each key's count."""
    savepoint = Savepoint.open(path)
    names = [key_name(i) for i in range(keys)]

    counts = single(collect(savepoint, "count", operator))
    assert sorted(counts) == sorted(names)
    assert counts == counts_for_position(sum(counts.values()), keys)

    stats = single(collect(savepoint, "stats", operator))
    recent = single(collect(savepoint, "recent", operator))
    timers = single(collect(savepoint, PROCESSING_TIMERS, operator))
    buckets: dict[str, dict[str, list[Any]]] = defaultdict(dict)
    for key, entries in collect(savepoint, "buckets", operator).items():
        for _, (_, _, user_key, value) in entries:
            assert user_key not in buckets[key]
            buckets[key][user_key] = list(value)
    assert not collect(savepoint, EVENT_TIMERS, operator)
    for name, found in (("stats", stats), ("recent", recent), ("buckets", buckets), ("timers", timers)):
        assert sorted(found) == sorted(names), name

    for key in names:
        expected = expected_state(key, counts[key], version)
        assert stats[key] == expected["stats"]
        assert list(stats[key]) == sorted(expected["stats"])  # POJO fields in Flink's (sorted) order
        assert [list(item) for item in recent[key]] == expected["recent"]
        assert buckets[key] == expected["buckets"]
        assert isinstance(timers[key], int) and timers[key] > 0
    return counts
