"""The list-merge job (tests/support/list_merge_job/listmerge/ListMergeJob.java) seen from the tests: how to build and
run it, and every value its keyed state must hold after it processed the sequence prefix 0..N-1.

Its two keyed operators hold state that RocksDB keeps as merge operands (``ListState.add()``: one operand per
element, resolved by the column family's StringAppendTESTOperator on read): ``lists`` (state ``added``, element
``"<seq>,<key>"``) and ``windows`` (tumbling event-time windows with a ProcessWindowFunction: Flink's list state
``window-contents``, one namespace per window, and an event-time timer per window). Keep this module in step with
the Java source.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flinkstate.binary import Reader
from flinkstate.engine.rest import FlinkRestClient
from flinkstate.savepoint import Savepoint
from flinkstate.serializers.namespaces import TimeWindow
from tests.support.java_build import build_jar

SOURCE_DIR = Path(__file__).resolve().parent / "list_merge_job"
BUILD_DIR = SOURCE_DIR / "build"
ENTRY_CLASS = "listmerge.ListMergeJob"
SOURCE_UID, LISTS_UID, WINDOWS_UID = "sequence-source", "lists", "windows"
LIST_STATE, WINDOW_STATE, WINDOW_TIMERS = "added", "window-contents", "_timer_state/event_window-timers"
PROCESSING_WINDOW_TIMERS = "_timer_state/processing_window-timers"  # created empty beside the event-time queue
#: A watermark this far behind the sequence never fires a window: every window stays in the state.
NO_FIRING_LAG_MS = 10**12


def build(flink_home: Path | None = None, out_dir: Path = BUILD_DIR) -> Path:
    """The job's jar, compiled with javac against the Flink distribution's lib/ when a source is newer than it."""
    return build_jar(SOURCE_DIR, out_dir / "list-merge-job.jar", ENTRY_CLASS, flink_home)


@dataclass(frozen=True)
class Shape:
    """The job's parameters that the expected state depends on."""

    keys: int = 8
    window_ms: int = 40


def key_name(index: int) -> str:
    return f"key-{index}"


def submit(client: FlinkRestClient, jar: Path, audit_dir: Path, shape: Shape, *, rate: float, lag_ms: int,
           parallelism: int = 2, conf: dict[str, str] | None = None, checkpoint_interval_ms: int = 0,
           savepoint_path: str | os.PathLike[str] | None = None, extra_args: Sequence[str] = ()) -> str:
    """Submits the job on RocksDB (keyed operators at ``parallelism``, the source at 1) and waits until its tasks
    run; returns the job id. ``extra_args``: more program arguments (``--count-window N``: the other version)."""
    args = ["--keys", str(shape.keys), "--window-ms", str(shape.window_ms), "--rate", str(rate),
            "--lag-ms", str(lag_ms), "--audit-dir", str(audit_dir),
            "--checkpoint-interval-ms", str(checkpoint_interval_ms)]
    for key, value in {"state.backend.type": "rocksdb", **(conf or {})}.items():
        args += ["--set", f"{key}={value}"]
    args += extra_args
    job_id = client.submit_jar(jar, entry_class=ENTRY_CLASS, program_args=args, parallelism=parallelism,
                               savepoint_path=os.fspath(savepoint_path) if savepoint_path else None)
    client.wait_until_running(job_id, timeout=120)
    return job_id


def read_audit(audit_dir: Path) -> list[dict[str, Any]]:
    lines: list[dict[str, Any]] = []
    for path in sorted(audit_dir.glob("audit-*.jsonl")) if audit_dir.is_dir() else ():
        lines += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return lines


def wait_for_audit(audit_dir: Path, done: Any, timeout: float = 60.0) -> list[dict[str, Any]]:
    """Polls the audit lines until ``done(lines)`` holds; returns them."""
    deadline = time.monotonic() + timeout
    while True:
        lines = read_audit(audit_dir)
        if done(lines):
            return lines
        if time.monotonic() > deadline:
            raise TimeoutError(f"the job's audit in {audit_dir} is incomplete after {timeout:.0f} s "
                               f"({len(lines)} lines)")
        time.sleep(0.3)


# -- the values after the prefix 0..n-1 -------------------------------------------------------------------------------


def expected_lists(n: int, shape: Shape) -> dict[str, list[str]]:
    """``added`` per key: every element the key was given, in order."""
    return {key_name(k): [f"{s},{key_name(k)}" for s in range(k, n, shape.keys)] for k in range(min(n, shape.keys))}


def expected_windows(n: int, shape: Shape) -> dict[tuple[str, TimeWindow], list[int]]:
    """``window-contents`` per (key, window): the key's sequence numbers (= event times) inside the window, in
    order; every window holding one is still open (the job ran with NO_FIRING_LAG_MS)."""
    windows: dict[tuple[str, TimeWindow], list[int]] = {}
    for s in range(n):
        start = s - s % shape.window_ms
        windows.setdefault((key_name(s % shape.keys), TimeWindow(start, start + shape.window_ms)), []).append(s)
    return windows


def expected_timers(n: int, shape: Shape) -> set[tuple[str, TimeWindow, int]]:
    """The window operator's event-time timers: one per open window, at its last millisecond."""
    return {(key, window, window.end - 1) for key, window in expected_windows(n, shape)}


@dataclass(frozen=True)
class SnapshotState:
    """Every keyed value of a snapshot of the job, read by flinkstate."""

    lists: dict[str, list[str]]
    windows: dict[tuple[str, TimeWindow], list[int]]
    timers: set[tuple[str, TimeWindow, int]]


def read_state(sp: Savepoint) -> SnapshotState:
    lists = {key: list(value) for key, _, value in sp.iter_entries(LISTS_UID, LIST_STATE)}
    windows = {(key, window): list(value) for key, window, value in sp.iter_entries(WINDOWS_UID, WINDOW_STATE)}
    timers = {(key, window, timestamp) for key, window, timestamp in sp.iter_entries(WINDOWS_UID, WINDOW_TIMERS)}
    return SnapshotState(lists, windows, timers)


def source_position(sp: Savepoint) -> int:
    """N, read from the source's operator state (not from the keyed state under test): its one split
    (NumberSequenceSplit: split id, next number, last number, after SimpleVersionedSerialization's version and
    length) says which number comes next. Checkpoint barriers follow the records, so the keyed operators' state in
    the same snapshot is that after exactly 0..N-1."""
    (_, element), = sp.iter_operator_state(SOURCE_UID, "SourceReaderState")
    reader = Reader(element.value[8:])
    reader.utf()
    next_number = reader.i64()
    reader.i64()
    assert reader.remaining() == 0
    return next_number


def expected_state(n: int, shape: Shape) -> SnapshotState:
    return SnapshotState(expected_lists(n, shape), expected_windows(n, shape), expected_timers(n, shape))
