"""Issue 23: list state that RocksDB keeps as merge operands, in native RocksDB savepoints and retained incremental
checkpoints written by this test run's Flink 2.3.

The list-merge job (tests/support/list_merge_job/) fills a ``ListState`` with ``add()`` only and keeps tumbling
event-time windows open with a ``ProcessWindowFunction`` (Flink's list state ``window-contents``, one namespace per
window): RocksDB stores one merge operand per element and resolves them on read with the column family's merge
operator. flinkstate used to open the instance without one: the iterator stopped on its error as if the data had
ended, and ``dump`` and ``migrate`` silently dropped those entries (and the verifier, reading with the same reader,
agreed). One job run writes a canonical savepoint, a native savepoint and a retained incremental checkpoint:

* the SST files of the native snapshots hold merge operands (else this module tests nothing);
* every value of every snapshot equals the value recomputed from N, the prefix of the sequence it holds: each
  key's list, each window's elements, each window's timer; an independent walk of the SST files
  (:mod:`flinkstate.format.sst_walk`) resolves every column family to exactly what the RocksDB reader returns;
* ``dump`` prints every list of the native savepoint;
* the native savepoint migrated (identity) is restored by real Flink with every list and window checked in the job
  (windows fire after the restore, each audited with every element it held); the checkpoint migrates, verified;
* a reader that drops entries as the old one did (no merge operator, iterator errors ignored) is caught by the
  verifier's SST walk and nothing is published; without the merge operator, the reader refuses in one line.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from flinkstate.engine import LocalFlinkCluster
from flinkstate.engine.jar_schema import inspect_jar, trial_restore
from flinkstate.engine.rest import FlinkJobFailed
from flinkstate.format.rocksdb_native import NativeRocksDBStream
from flinkstate.format.sst_walk import column_family_tables, resolved_entries
from flinkstate.format_errors import SavepointFormatError
from flinkstate.manifest import Manifest
from flinkstate.manifest_overlay import manifest_of_jar
from flinkstate.migration.plan import MigrationError
from flinkstate.migration.runner import migrate_savepoint
from flinkstate.migration.trial import apply_trial
from flinkstate.migration.verdict import check
from flinkstate.savepoint import Savepoint
from flinkstate.storage.uri import open_output
from tests.support import list_merge_job as lm
from tests.test_flink_corpus import _run_cli
from tests.test_retained_checkpoints import newest_retained, trigger_checkpoint

SHAPE = lm.Shape(keys=8, window_ms=40)
RATE = 400
KINDS = ("canonical", "native", "checkpoint")


@dataclass(frozen=True)
class Snapshots:
    jar: Path
    paths: dict[str, Path]


@pytest.fixture(scope="module")
def snapshots(flink_cluster: LocalFlinkCluster, tmp_path_factory: pytest.TempPathFactory) -> Snapshots:
    """One run of the job on RocksDB (parallelism 2, incremental checkpoints every 500 ms, retained on
    cancellation, no window ever fires): a canonical savepoint, a native savepoint and a checkpoint taken while it
    runs, then cancelled."""
    root = tmp_path_factory.mktemp("list-merge")
    client = flink_cluster.client
    jar = lm.build()
    conf = {"execution.checkpointing.externalized-checkpoint-retention": "RETAIN_ON_CANCELLATION",
            "execution.checkpointing.dir": (root / "checkpoints").as_uri(),
            "execution.checkpointing.incremental": "true"}
    job = lm.submit(client, jar, root / "audit", SHAPE, rate=RATE, lag_ms=lm.NO_FIRING_LAG_MS, conf=conf,
                    checkpoint_interval_ms=500)
    try:
        lm.wait_for_audit(root / "audit", lambda lines: len({line["key"] for line in lines}) == SHAPE.keys)
        time.sleep(3)  # ~1,200 events more: lists of ~150 elements, several checkpoints (some files compacted)
        paths = {kind: Path(client.wait_for_savepoint(job, client.trigger_savepoint(
            job, str(root / "savepoints"), format_type=kind.upper())).removeprefix("file:"))
            for kind in ("canonical", "native")}
        triggered = trigger_checkpoint(client, job)
    finally:
        client.cancel(job)
    paths["checkpoint"] = newest_retained(root / "checkpoints" / job)
    assert int(paths["checkpoint"].name.removeprefix("chk-")) >= triggered
    return Snapshots(jar, paths)


def _open(snapshots: Snapshots, kind: str) -> Savepoint:
    return Savepoint.open(snapshots.paths[kind], allow_external_handles=kind == "checkpoint")


def _walk_equals_reader(sp: Savepoint, operator: str) -> dict[str, int]:
    """Per column family of the operator's native streams: the SST walk's resolved entries are the RocksDB reader's,
    key by key and byte by byte; returns how many merge operands the files hold per column family."""
    operands: dict[str, int] = {}
    for _, stream in sp.keyed_streams(operator):
        assert isinstance(stream, NativeRocksDBStream)
        tables = column_family_tables(stream.sst_files())
        for state in stream.header().states:
            db = stream._open_db()
            read = list(stream._scan(db, state.name, b"")) if state.name in stream._families else []
            walked = [(key, value) for key, value, _ in resolved_entries(tables.get(state.name, []))]
            assert walked == read, (operator, state.name)
            operands[state.name] = operands.get(state.name, 0) + sum(
                t.number("rocksdb.merge.operands") for t in tables.get(state.name, []))
    return operands


def test_the_native_snapshots_hold_merge_operands(snapshots: Snapshots) -> None:
    for kind in ("native", "checkpoint"):
        sp = _open(snapshots, kind)
        lists, windows = _walk_equals_reader(sp, lm.LISTS_UID), _walk_equals_reader(sp, lm.WINDOWS_UID)
        assert lists[lm.LIST_STATE] > 0 and windows[lm.WINDOW_STATE] > 0, (kind, lists, windows)
    assert not any(isinstance(s, NativeRocksDBStream) for _, s in _open(snapshots, "canonical").keyed_streams("lists"))


@pytest.mark.parametrize("kind", KINDS)
def test_every_value_is_the_recomputed_one(snapshots: Snapshots, kind: str) -> None:
    sp = _open(snapshots, kind)
    state, n = lm.read_state(sp), lm.source_position(sp)
    assert n > 1_000, n
    want = lm.expected_state(n, SHAPE)
    assert state.lists == want.lists
    assert state.windows == want.windows
    assert state.timers == want.timers
    assert len(state.windows) > 200


def test_dump_prints_every_list_of_the_native_savepoint(snapshots: Snapshots) -> None:
    status, stdout, stderr = _run_cli(["dump", str(snapshots.paths["native"]), "--operator", lm.LISTS_UID,
                                       "--state", lm.LIST_STATE])
    assert (status, stderr) == (0, "")
    lines = [json.loads(line) for line in stdout.splitlines()]
    want = lm.expected_lists(lm.source_position(_open(snapshots, "native")), SHAPE)
    assert len(lines) == SHAPE.keys and {line["key"]: line["value"] for line in lines} == want


def _restored_audit(client: Any, snapshots: Snapshots, savepoint: Path, audit: Path, n: int) -> list[dict[str, Any]]:
    """v1 again from ``savepoint``, windows firing (lag 0): the audit once every key reported its list and every
    window the savepoint holds has fired."""
    windows = {(key, window.start) for key, window in lm.expected_windows(n, SHAPE)}

    def complete(lines: list[dict[str, Any]]) -> bool:
        fired = {(line["key"], line["start"]) for line in lines if line["kind"] == "window"}
        listed = {line["key"] for line in lines if line["kind"] == "list"}
        return windows <= fired and len(listed) == SHAPE.keys

    job = lm.submit(client, snapshots.jar, audit, SHAPE, rate=RATE, lag_ms=0, savepoint_path=savepoint)
    try:
        lines = lm.wait_for_audit(audit, complete)
        restored_from = client.checkpoints(job).restored_from
    finally:
        client.cancel(job)
    assert restored_from is not None and Path(restored_from.removeprefix("file:")) == savepoint, restored_from
    return lines


def test_the_migrated_native_savepoint_restores_with_every_value_checked(
        flink_cluster: LocalFlinkCluster, snapshots: Snapshots, tmp_path: Path) -> None:
    out = tmp_path / "migrated"
    report = migrate_savepoint(str(snapshots.paths["native"]), [], open_output(out))
    migrated = Savepoint.open(out)
    n = lm.source_position(migrated)
    assert n == lm.source_position(_open(snapshots, "native"))
    assert lm.read_state(migrated) == lm.expected_state(n, SHAPE)
    assert report.entries_written >= SHAPE.keys + len(lm.expected_windows(n, SHAPE))
    lines = _restored_audit(flink_cluster.client, snapshots, out, tmp_path / "audit", n)
    lists = [line for line in lines if line["kind"] == "list"]
    for line in lists:  # the list a key found at its first event after the restore: every element added before N
        k = int(line["key"].removeprefix("key-"))
        assert line["seq"] == n + (k - n) % SHAPE.keys, line
        assert line["found"] == lm.expected_lists(n, SHAPE)[line["key"]], line["key"]
    fired = [line for line in lines if line["kind"] == "window"]
    for line in fired:  # every element of the window, those restored and those that came after the restore
        k, start, end = int(line["key"].removeprefix("key-")), line["start"], line["end"]
        assert end == start + SHAPE.window_ms and line["elements"] == [
            s for s in range(start, end) if s % SHAPE.keys == k], line
    # every window the savepoint held fired (a window starting before N whose key had no element before N may fire
    # too: its elements, checked above, all came after the restore)
    assert {(key, window.start) for key, window in lm.expected_windows(n, SHAPE)} <= \
        {(line["key"], line["start"]) for line in fired}


def test_the_retained_checkpoint_migrates_verified(snapshots: Snapshots, tmp_path: Path) -> None:
    out = tmp_path / "migrated"
    report = migrate_savepoint(str(snapshots.paths["checkpoint"]), [], open_output(out), allow_external_handles=True)
    assert any(f"{lm.LIST_STATE}: {SHAPE.keys} entries equal" in line for line in report.verification), \
        report.verification
    migrated = Savepoint.open(out)
    n = lm.source_position(migrated)
    assert n == lm.source_position(_open(snapshots, "checkpoint"))
    assert lm.read_state(migrated) == lm.expected_state(n, SHAPE)


# --------------------------------------------------------------------------------------------------------------------
# The old reader's blind spot, and the checks that catch it
# --------------------------------------------------------------------------------------------------------------------


def _old_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reader as it was: the instance opened without the merge operator, an iterator's error taken for the end
    of the data (both the migration's writer and the verifier's source read go through it)."""
    monkeypatch.setattr("flinkstate.format.rocksdb_native.column_family_options", lambda directory: ({}, ""))
    monkeypatch.setattr(NativeRocksDBStream, "_check_status", lambda self, cursor: None)


@pytest.mark.parametrize("kind", ["native", "checkpoint"])
def test_a_reader_that_drops_entries_is_refused_by_the_verifier(snapshots: Snapshots, kind: str, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    _old_reader(monkeypatch)
    assert lm.read_state(_open(snapshots, kind)).lists == {}  # the old silent loss, reproduced
    out = tmp_path / "out"
    with pytest.raises(MigrationError) as refused:
        migrate_savepoint(str(snapshots.paths[kind]), [], open_output(out), allow_external_handles=True)
    message = str(refused.value)
    assert message.startswith("verification: "), message
    assert "\n" not in message and re.search(
        r"operator (lists, state added|windows, state window-contents), key group \d+: the RocksDB reader did not "
        r"return key 0x[0-9a-f]+(\.\.\.)?, which the SST file .*\.sst\) holds", message), message
    assert not out.exists()


def test_an_iterator_error_is_refused_in_one_line(snapshots: Snapshots, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the merge operator RocksDB's iterator stops on an error at the first merge operand: an error naming
    the file, operator and state, not the end of the list state."""
    monkeypatch.setattr("flinkstate.format.rocksdb_native.column_family_options",
                        lambda directory: ({}, "; (no options, as the test wants)"))
    sp = _open(snapshots, "native")
    with pytest.raises(SavepointFormatError) as refused:
        list(sp.iter_entries(lm.LISTS_UID, lm.LIST_STATE))
    message = str(refused.value)
    assert "\n" not in message and "state added" in message and "lists" in message, message
    assert "merge_operator_ must be set" in message and "(no options, as the test wants)" in message, message
    assert str(snapshots.paths["native"]) in message, message
    status, stdout, stderr = _run_cli(["dump", str(snapshots.paths["native"]), "--operator", lm.LISTS_UID,
                                       "--state", lm.LIST_STATE])
    assert status == 1 and stdout == "" and stderr.startswith("flinkstate: error: ") and \
        "merge_operator_ must be set" in stderr and len(stderr.splitlines()) == 1, (status, stderr)


def test_a_changed_window_size_is_a_finding_from_the_two_jars(snapshots: Snapshots, tmp_path: Path) -> None:
    """The savepoint does not record the window: the two versions' jars do (issue 23). A DataStream window holds its
    bounds, so a new size is a finding (open windows fire at their old end), not a refusal; the same size, none."""
    (tmp_path / "audit").mkdir()

    def version(window_ms: int) -> Manifest:
        return manifest_of_jar(inspect_jar(snapshots.jar, entry_class=lm.ENTRY_CLASS, program_args=[
            "--keys", str(SHAPE.keys), "--window-ms", str(window_ms), "--audit-dir", str(tmp_path / "audit")]))

    old, new = version(SHAPE.window_ms), version(2 * SHAPE.window_ms)
    assert old.operators[lm.WINDOWS_UID].window == (f"window:TumblingEventTimeWindows(globalOffset=0, "
                                                    f"size={SHAPE.window_ms}, windowStagger=ALIGNED)")
    assert new.operators[lm.WINDOWS_UID].window == old.operators[lm.WINDOWS_UID].window.replace(
        f"size={SHAPE.window_ms}", f"size={2 * SHAPE.window_ms}")
    assert old.operators[lm.LISTS_UID].window is None  # a process function assigns no window
    report = check(snapshots.paths["canonical"], new, previous=old)
    findings = [f for row in report.rows for f in row.findings if f.code == "WINDOW_CHANGED"]
    assert [(f.operator, f.silent_misread) for f in findings] == [(lm.WINDOWS_UID, False)]
    assert report.exit_code == 0
    same = check(snapshots.paths["canonical"], old, previous=old)
    assert not any(f.code == "WINDOW_CHANGED" for row in same.rows for f in row.findings)


#: Flink's refusal of a timer queue whose timer serializer is incompatible (RocksDBPriorityQueueSetFactory).
QUEUE_REFUSED = ("org.apache.flink.util.StateMigrationException: The new priority queue serializer must not be "
                 "incompatible.")


def test_count_windows_fail_the_time_windows_timers_on_flink_and_in_the_trial(
        flink_cluster: LocalFlinkCluster, snapshots: Snapshots, tmp_path: Path) -> None:
    """Issue 25, ``check --trial`` on timer queues that Flink fails: the next version counts elements per key
    (``countWindow``, a GlobalWindow) where the savepoint's ``windows`` operator held tumbling time windows. The
    keyed restore passes (same key), then its timer service's queues, whose timer serializer's namespace was a
    TimeWindow, are refused when the operator opens: on the cluster, and in the trial, each queue with Flink's
    exception; the check agrees (no disagreement, exit 4)."""
    count_windows = ["--count-window", "10"]
    canonical = snapshots.paths["canonical"]
    with pytest.raises(FlinkJobFailed) as failed:  # the ground truth: real Flink, the savepoint, the new version
        lm.submit(flink_cluster.client, snapshots.jar, tmp_path / "audit", SHAPE, rate=RATE, lag_ms=0,
                  savepoint_path=canonical, extra_args=count_windows)
    for job in flink_cluster.client.find_jobs("list-merge"):  # it restarts in a loop until cancelled
        flink_cluster.client.cancel(job["jid"])
    assert QUEUE_REFUSED.split(": ", 1)[1] in str(failed.value), failed.value

    args = ["--keys", str(SHAPE.keys), *count_windows, "--set", "state.backend.type=rocksdb"]
    trial = trial_restore(snapshots.jar, canonical, entry_class=lm.ENTRY_CLASS, program_args=args)
    outcomes = {op.uid: {state.name: (state.outcome, state.error) for state in op.states}
                for op in trial.operators if op.uid in (lm.LISTS_UID, lm.WINDOWS_UID)}
    contents = outcomes[lm.WINDOWS_UID].pop(lm.WINDOW_STATE)
    assert contents[0] == "FAILED" and contents[1] is not None and contents[1].startswith(
        "org.apache.flink.util.StateMigrationException: The new namespace serializer (org.apache.flink.streaming."
        "api.windowing.windows.GlobalWindow$Serializer@"), contents
    assert outcomes == {
        lm.WINDOWS_UID: dict.fromkeys([lm.PROCESSING_WINDOW_TIMERS, lm.WINDOW_TIMERS], ("FAILED", QUEUE_REFUSED)),
        lm.LISTS_UID: dict.fromkeys([lm.LIST_STATE, "_timer_state/processing_user-timers",
                                     "_timer_state/event_user-timers"], ("AS_IS", None))}, outcomes
    report = check(canonical, manifest_of_jar(inspect_jar(snapshots.jar, entry_class=lm.ENTRY_CLASS,
                                                          program_args=args)))
    assert apply_trial(report, trial) == 0 and report.exit_code == 4, report.render_markdown()
    timer_rows = {row.state: (row.verdict.name, row.trial) for row in report.rows if row.operator == lm.WINDOWS_UID
                  and row.state in (lm.PROCESSING_WINDOW_TIMERS, lm.WINDOW_TIMERS)}
    assert timer_rows == dict.fromkeys([lm.PROCESSING_WINDOW_TIMERS, lm.WINDOW_TIMERS],
                                       ("INCOMPATIBLE", f"FAILED: {QUEUE_REFUSED}")), timer_rows
