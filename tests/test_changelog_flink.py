"""Changelog state backend checkpoints written by the Flink 2.3 of this test run (issue 15): the sample job v1
(parallelism 2, 12 keys) with ``state.changelog.enabled`` and the ``filesystem`` changelog storage (the DSTL writes
the log into files under ``state.changelog.dstl.dfs.base-path``), on HashMap and RocksDB, in two shapes:

* ``log``: periodic materialization off, so the checkpoint is the log alone (``materialized`` empty, every entry is
  replayed from DSTL files);
* ``materialized``: materialization every second, so the checkpoint is the wrapped backend's own snapshot (HashMap
  key groups, or RocksDB's native incremental snapshot) plus the changes logged since; chosen so that the log leaves
  some keys out (they come from the materialized part alone) and changes others;

with plain DSTL files, and with Snappy-compressed ones for two of them (``-snappy``).

tests/test_changelog.py reads the only changelog checkpoint of Flink's corpus (1.17, in-memory log, nothing
materialized); these are the other shapes. Checked: the handles are what the variant claims; ``describe`` runs
clean; every key's four states equal the values the job derives from the key's count, and all counts are one
consistent cut of the source's sequence; a canonical savepoint taken right after agrees (same keys, key groups and
state types, counts moved on); bytes corrupted in a copy of a DSTL file are refused in one line naming that file,
or (a state's name) read as what they now say; ``migrate`` v1 -> v2 writes a self-contained canonical savepoint
with every key's values, which v2 restores on Flink.

Why a cluster of its own: the changelog *storage* is the TaskManager's (Flink 2.3's ``TaskExecutor`` hands its own
configuration to ``TaskExecutorStateChangelogStoragesManager.stateChangelogStorageForJob``, with a "TODO: Pass
config value from user program"), so ``state.changelog.storage`` and ``state.changelog.dstl.dfs.base-path`` set on
a job are ignored; enabling the backend and the materialization interval are per job (``ExecutionConfig``). The
changelog backend and the DSTL are inside ``flink-dist-2.3.0.jar`` (``org.apache.flink.state.changelog``,
``org.apache.flink.changelog.fs``): nothing to add to lib/.

A retained checkpoint's handles point outside its ``chk-N`` folder (the DSTL files, and the materialized part in
``shared/`` or ``taskowned/``), so reading it needs ``allow_external_handles``.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cramjam
import pytest

import flinkstate
from flinkstate.binary import assign_key_group, operator_id_from_uid
from flinkstate.engine import LocalFlinkCluster
from flinkstate.engine.jar_schema import inspect_jar
from flinkstate.errors import FlinkStateError
from flinkstate.format.changelog import ChangelogStream
from flinkstate.format.changelog_handles import ChangelogBackendHandle, ChangelogStreamHandle
from flinkstate.format.handles import (
    META_KEY_GROUP,
    SAVEPOINT_KEY_GROUPS,
    FileStateHandle,
    IncrementalKeyedStateHandle,
    KeyGroupsStateHandle,
    RelativeFileStateHandle,
)
from flinkstate.format.metadata import read_metadata
from flinkstate.format.rocksdb_native import NativeRocksDBStream
from flinkstate.format.sst_walk import column_family_tables
from flinkstate.migration.runner import migrate_savepoint
from flinkstate.savepoint import Savepoint
from flinkstate.storage import settings
from flinkstate.storage.uri import open_output
from tests.support import list_merge_job as lm
from tests.support import sample_job
from tests.support.jar_truth import differences
from tests.test_list_merge import _old_reader
from tests.test_migration import LABEL_DEFAULT, check_record, target_for

pytestmark = pytest.mark.flink

KEYS = 12
#: name -> (state backend, periodic materialization on, DSTL files Snappy-compressed)
VARIANTS: dict[str, tuple[str, bool, bool]] = {
    "hashmap-log": ("hashmap", False, False),
    "hashmap-materialized": ("hashmap", True, False),
    "rocksdb-log": ("rocksdb", False, False),
    "rocksdb-materialized": ("rocksdb", True, False),
    "hashmap-log-snappy": ("hashmap", False, True),
    "rocksdb-materialized-snappy": ("rocksdb", True, True),
}
#: A checkpoint this far in has logged several checkpoints' worth of changes (and, materializing every second, has
#: materialized at least once).
MIN_CHECKPOINT_ID = 4
#: The list-merge job's shape here (issue 23): 8 keys, 40 ms windows.
LIST_MERGE_SHAPE = lm.Shape(keys=8, window_ms=40)


@dataclass(frozen=True)
class Written:
    """One variant's retained checkpoint and the canonical savepoint taken right after it, while the job ran."""

    checkpoint: Path
    checkpoint_id: int
    savepoint: Path
    backend: str
    materialized: bool
    compressed: bool
    #: where this job's DSTL files are (``<base-path>/<job id>/dstl``)
    dstl: Path


def dstl_cluster(work_dir: Path, root: Path, *, compressed: bool) -> LocalFlinkCluster:
    """A Flink 2.3 cluster whose TaskManager logs state changes to files under <root>/dstl (Snappy-framed or not:
    ``state.changelog.dstl.dfs.compression.enabled`` is the TaskManager's too)."""
    return LocalFlinkCluster(work_dir, slots=8, options={
        "state.changelog.storage": "filesystem",
        "state.changelog.dstl.dfs.base-path": (root / "dstl").as_uri(),
        "state.changelog.dstl.dfs.compression.enabled": str(compressed).lower(),
        # Every completed checkpoint stays, so the one whose handles were checked is the one the tests read.
        "execution.checkpointing.num-retained": 100,
    })


@pytest.fixture(scope="module")
def changelog_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalFlinkCluster, Path]]:
    """The uncompressed-DSTL cluster, also the one the migrated savepoints are restored on; and the root folder."""
    root = tmp_path_factory.mktemp("changelog")
    with dstl_cluster(root / "cluster", root, compressed=False) as cluster:
        yield cluster, root


def keyed_handles(checkpoint: Path) -> list[Any]:
    """The managed keyed state handle of every subtask of the ``stats`` operator (the job's only keyed one)."""
    metadata = read_metadata((checkpoint / "_metadata").read_bytes(), str(checkpoint / "_metadata"))
    (op,) = [op for op in metadata.operators if any(s.managed_keyed_state for s in op.subtasks.values())]
    return [op.subtasks[index].managed_keyed_state for index in sorted(op.subtasks)]


def shape(checkpoint: Path) -> str | None:
    """``log`` or ``materialized`` when every subtask's handle is a changelog handle with DSTL files and nothing /
    something materialized; None for anything else (e.g. a subtask that has not materialized yet)."""
    handles = keyed_handles(checkpoint)
    if len(handles) != 2 or not all(isinstance(h, ChangelogBackendHandle) for h in handles):
        return None
    if not all(h.non_materialized and all(isinstance(p, ChangelogStreamHandle) and p.handles_and_offsets
                                          for p in h.non_materialized) for h in handles):
        return None
    if all(not h.materialized for h in handles):
        return "log"
    if all(h.materialized for h in handles):
        return "materialized"
    return None


def key_group_of(key: str, max_parallelism: int) -> int:
    """The key group Flink assigns a String key (``String.hashCode``, then ``KeyGroupRangeAssignment``)."""
    code = 0
    for char in key:
        code = (31 * code + ord(char)) & 0xFFFFFFFF
    return assign_key_group(code - (1 << 32) if code >= 1 << 31 else code, max_parallelism)


def logged_key_groups(checkpoint: Path) -> list[set[int]]:
    """Per subtask, the key groups that the log since the last materialization changes (data changes, not the
    states' registrations), read from the DSTL files here and not by flinkstate: ``StateChangeFormat``, after the
    file's compression flag (Snappy-framed or not), per change set: i32 key groups, per group i32 changes, i32 key
    group, changes as (i32 length, bytes)."""
    found: list[set[int]] = []
    for handle in keyed_handles(checkpoint):
        groups: set[int] = set()
        for part in handle.non_materialized:
            for file, offset in part.handles_and_offsets:
                raw = _path(file).read_bytes()
                log = bytes(cramjam.snappy.decompress(raw[1:])) if raw[0] else raw[1:]
                (count,), pos = struct.unpack_from(">i", log, offset), offset + 4
                for _ in range(count):
                    changes, key_group = struct.unpack_from(">ii", log, pos)
                    pos += 8
                    for _ in range(changes):
                        pos += 4 + struct.unpack_from(">i", log, pos)[0]
                    if changes and key_group != META_KEY_GROUP:
                        groups.add(key_group)
        found.append(groups)
    return found


def keys_from_the_log(checkpoint: Path) -> set[str]:
    """The keys whose key group the log changes (all of them when nothing is materialized)."""
    handles = keyed_handles(checkpoint)
    max_parallelism = handles[-1].key_group_range.end + 1
    logged = set().union(*logged_key_groups(checkpoint))
    return {key for key in map(sample_job.key_name, range(KEYS)) if key_group_of(key, max_parallelism) in logged}


def _submit(cluster: LocalFlinkCluster, root: Path, name: str) -> sample_job.SampleJobRun:
    backend, materialize, _ = VARIANTS[name]
    conf = {
        "state.changelog.enabled": "true",
        "state.changelog.periodic-materialize.enabled": str(materialize).lower(),
        "state.changelog.periodic-materialize.interval": "1s",
        "execution.checkpointing.externalized-checkpoint-retention": "RETAIN_ON_CANCELLATION",
        "execution.checkpointing.dir": (root / name / "checkpoints").as_uri(),
    }
    # Materializing: about one event per key and second, so that the log since the last materialization (about a
    # second) leaves some keys out.
    return sample_job.submit(cluster.client, "v1", root / name / "audit", keys=KEYS, rate=12 if materialize else 100,
                             parallelism=2, state_backend=backend, extra_conf=conf,
                             extra_args=["--checkpoint-interval-ms", "1000"])


def _take(cluster: LocalFlinkCluster, root: Path, name: str, run: sample_job.SampleJobRun) -> Written:
    """The first retained checkpoint of the running job that has the variant's shape, and a savepoint right after."""
    backend, materialize, compressed = VARIANTS[name]
    client = cluster.client
    run.wait_for_keys()
    wanted = "materialized" if materialize else "log"
    deadline = time.monotonic() + 90
    while True:
        stats = client.checkpoints(run.job_id)
        if stats.latest_completed_id is not None and stats.latest_completed_id >= MIN_CHECKPOINT_ID:
            assert stats.latest_completed_path is not None
            checkpoint = Path(stats.latest_completed_path.removeprefix("file:"))
            # "materialized": some keys only in the materialized part (else the log alone, which SETs whole
            # values and lists, could make up the state), some changed by the log, on every subtask.
            if shape(checkpoint) == wanted and (
                    not materialize or (all(logged_key_groups(checkpoint))
                                        and 0 < len(keys_from_the_log(checkpoint)) < KEYS)):
                checkpoint_id = stats.latest_completed_id
                break
        assert time.monotonic() < deadline, f"{name}: no {wanted} checkpoint in 90 s ({stats})"
        time.sleep(0.5)
    savepoint = Path(client.savepoint(run.job_id, str(root / name / "savepoints")).removeprefix("file:"))
    return Written(checkpoint, checkpoint_id, savepoint, backend, materialize, compressed,
                   root / "dstl" / run.job_id / "dstl")


@pytest.fixture(scope="module")
def changelog_checkpoints(changelog_cluster: tuple[LocalFlinkCluster, Path]) -> dict[str, Written]:
    """Every variant's job runs at once (compression is the TaskManager's: those on a second cluster); each
    checkpoint is taken as soon as its job has one of its shape, then every job is cancelled."""
    cluster, root = changelog_cluster
    with dstl_cluster(root / "cluster-snappy", root, compressed=True) as snappy:
        on = {name: snappy if VARIANTS[name][2] else cluster for name in VARIANTS}
        runs: dict[str, sample_job.SampleJobRun] = {}
        try:
            for name in VARIANTS:
                runs[name] = _submit(on[name], root, name)
            return {name: _take(on[name], root, name, run) for name, run in runs.items()}
        finally:
            for name, run in runs.items():
                on[name].client.cancel(run.job_id)


def open_checkpoint(path: Path) -> Savepoint:
    return Savepoint.open(path, allow_external_handles=True)


def check_every_key(sp: Savepoint) -> int:
    """Every key's four states are the job's values for its count, and the counts are those of one position of the
    source's sequence (a consistent cut: the source has parallelism 1); returns that position."""
    values = sample_job.states_by_key(sp)
    assert sorted(values) == sorted(sample_job.key_name(k) for k in range(KEYS))
    for key, states in values.items():
        assert states == sample_job.expected_state(key, states["count"]), key
    counts = {key: states["count"] for key, states in values.items()}
    position = sum(counts.values())
    assert counts == sample_job.counts_for_position(position, KEYS)
    return position


def _path(handle: Any) -> Path:
    if isinstance(handle, RelativeFileStateHandle):
        raise AssertionError(f"a DSTL file handle is relative: {handle.relative_path}")
    assert isinstance(handle, FileStateHandle), handle
    return Path(handle.path.removeprefix("file:"))


# --------------------------------------------------------------------------------------------------------------------
# What each checkpoint is
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", VARIANTS)
def test_the_checkpoint_has_the_handles_of_its_variant(changelog_checkpoints: dict[str, Written], name: str) -> None:
    written = changelog_checkpoints[name]
    handles = keyed_handles(written.checkpoint)
    assert shape(written.checkpoint) == ("materialized" if written.materialized else "log")
    files: set[Path] = set()
    for handle in handles:
        assert isinstance(handle, ChangelogBackendHandle) and handle.code == 14  # ChangelogStateBackendHandleImpl
        for materialized in handle.materialized:
            assert isinstance(materialized, IncrementalKeyedStateHandle if written.backend == "rocksdb"
                              else KeyGroupsStateHandle), materialized
        assert handle.checkpoint_id == written.checkpoint_id
        if written.materialized:  # the id of the materialization this checkpoint builds on
            assert handle.materialization_id > 0
        for logged in handle.non_materialized:
            assert isinstance(logged, ChangelogStreamHandle) and logged.storage_identifier == "filesystem"
            files |= {_path(file) for file, _ in logged.handles_and_offsets}
    # The log is in the DSTL's files of this job, outside the checkpoint folder, each starting with its compression
    # flag (then Snappy's framing format, or the changes as they are).
    assert files and all(path.parent == written.dstl and path.is_file() for path in files), files
    for path in files:
        data = path.read_bytes()
        assert data[0] == written.compressed and (data[1:11] == b"\xff\x06\x00\x00sNaPpY") == written.compressed


@pytest.mark.parametrize("name", VARIANTS)
def test_the_log_holds_data_changes(changelog_checkpoints: dict[str, Written], name: str) -> None:
    """Changes beyond the states' registrations, on every subtask: the log is not empty (for ``materialized``,
    what happened after the last materialization)."""
    written = changelog_checkpoints[name]
    sp = open_checkpoint(written.checkpoint)
    streams = sp.keyed_streams("stats")
    assert len(streams) == 2
    for (_, stream), groups in zip(streams, logged_key_groups(written.checkpoint), strict=True):
        assert isinstance(stream, ChangelogStream)
        assert {key_group for key_group, _, _ in stream.iter_changes() if key_group != META_KEY_GROUP} == groups
        assert groups
    # With a materialized part, some keys come from it alone (and are read right: test_every_key_as_the_job_wrote_it)
    from_the_log = keys_from_the_log(written.checkpoint)
    assert 0 < len(from_the_log) < KEYS if written.materialized else len(from_the_log) == KEYS


# --------------------------------------------------------------------------------------------------------------------
# Reading it
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", VARIANTS)
def test_describe(changelog_checkpoints: dict[str, Written], name: str) -> None:
    result = subprocess.run([sys.executable, "-m", "flinkstate", "--allow-external-handles", "describe",
                             str(changelog_checkpoints[name].checkpoint)], capture_output=True, text=True)
    assert (result.returncode, result.stderr) == (0, "")
    for state in ("stats", "count", "recent", "buckets"):
        assert f"keyed state {state}: " in result.stdout, result.stdout


EVENT_TIMERS = "_timer_state/event_user-timers"


def test_the_jar_gives_the_schema_of_every_changelog_checkpoint(changelog_checkpoints: dict[str, Written],
                                                                tmp_path: Path) -> None:
    """Issue 25's ground truth for the changelog jobs: the sample job v1's jar schema (``schema --jar``) is every
    materialized variant's checkpoint's, HashMap or RocksDB, operator by operator and byte by byte. A log-only
    checkpoint records a state's meta info with its first change: the event-time timer queue, which the job never
    uses (its timers are processing-time ones), is registered by the jar and absent from the log (Flink registers it
    again, empty, on restore); every other state is the jar's, byte for byte."""
    v1 = inspect_jar(sample_job.jar("v1"), cache_dir=tmp_path)
    registered = {meta.name for op in v1.operators if op.label == "stats" and op.keyed for meta in op.keyed.states}
    assert EVENT_TIMERS in registered
    for name, written in changelog_checkpoints.items():
        found = differences(v1, written.checkpoint, allow_external_handles=True)
        if VARIANTS[name][1]:  # materialized
            assert found == [], name
            continue
        checkpoint = open_checkpoint(written.checkpoint)
        header = checkpoint.keyed_header(checkpoint.operator("stats"))
        assert header is not None and {meta.name for meta in header.states} == registered - {EVENT_TIMERS}, name
        assert [line for line in found if not line.startswith("stats: jar ")] == [
            f"stats, state {EVENT_TIMERS}: meta info bytes"], (name, found)


@pytest.mark.parametrize("name", VARIANTS)
def test_every_key_as_the_job_wrote_it(changelog_checkpoints: dict[str, Written], name: str) -> None:
    position = check_every_key(open_checkpoint(changelog_checkpoints[name].checkpoint))
    assert position > KEYS  # every key has seen events, most of them several


@pytest.mark.parametrize("name", VARIANTS)
def test_the_canonical_savepoint_taken_after_agrees(changelog_checkpoints: dict[str, Written], name: str) -> None:
    """Same keys in the same key groups, same state types; the counts moved on (the job kept running), each side a
    consistent cut on its own."""
    written = changelog_checkpoints[name]
    checkpoint, savepoint = open_checkpoint(written.checkpoint), Savepoint.open(written.savepoint)
    assert check_every_key(savepoint) >= check_every_key(checkpoint)
    for state in ("stats", "count", "recent", "buckets"):
        assert checkpoint.state_info("stats", state) == savepoint.state_info("stats", state), state
    groups = [{entry[0]: key_group for key_group, entries in sp.iter_key_groups("stats", "count") for entry in entries}
              for sp in (checkpoint, savepoint)]
    assert groups[0] == groups[1] and len(groups[0]) == KEYS


# --------------------------------------------------------------------------------------------------------------------
# A corrupted DSTL file
# --------------------------------------------------------------------------------------------------------------------


def _copy(written: Written) -> tuple[Path, Path, int]:
    """A copy of the checkpoint and of the DSTL files it names, in a folder whose path has the length of the
    original's, so that replacing the paths in ``_metadata`` keeps every length prefix right. Returns the copy and
    where subtask 0's first change set is (the first thing read): the file, and its position in it."""
    root = written.dstl.parents[2]  # <root>/dstl/<job id>/dstl
    copy_root = root.with_name(("X" if root.name[0] != "X" else "Y") + root.name[1:])
    assert len(str(copy_root)) == len(str(root))
    if copy_root.exists():
        shutil.rmtree(copy_root)
    checkpoint = copy_root / written.checkpoint.relative_to(root)
    shutil.copytree(written.checkpoint.parent, checkpoint.parent)  # chk-N with the job's shared/ and taskowned/
    shutil.copytree(written.dstl, copy_root / written.dstl.relative_to(root))
    metadata = (checkpoint / "_metadata").read_bytes()
    assert str(root).encode() in metadata
    (checkpoint / "_metadata").write_bytes(metadata.replace(str(root).encode(), str(copy_root).encode()))
    handles = keyed_handles(checkpoint)
    files = [_path(file) for handle in handles for part in handle.non_materialized
             for file, _ in part.handles_and_offsets]
    assert files and all(copy_root in path.parents for path in files)
    # A DSTL file holds the change sets of both subtasks (one uploader per TaskManager); the handle's offsets count
    # in the stream after the file's compression flag.
    first, offset = handles[0].non_materialized[0].handles_and_offsets[0]
    return checkpoint, _path(first), 1 + offset


def _corrupt(written: Written, where: Callable[[bytes, int], int], value: int) -> tuple[Path, Path]:
    """A copy of ``written`` with one byte of the file of subtask 0's first change set set to ``value``: the byte
    at ``where(file bytes, position of that change set)``; returns (checkpoint, that file)."""
    checkpoint, corrupted, start = _copy(written)
    data = bytearray(corrupted.read_bytes())
    assert data[0] == 0  # uncompressed (state.changelog.dstl.dfs.compression.enabled is off by default)
    data[where(bytes(data), start)] = value
    corrupted.write_bytes(bytes(data))
    return checkpoint, corrupted


#: StateChangeFormat: u8 compressed, then per change set: i32 key groups, per group i32 changes, i32 key group (the
#: first group is -1, the states' registrations), changes. Positions relative to subtask 0's first change set, except
#: the file's flag.
@pytest.mark.parametrize(("offset", "value", "expected"), [
    (lambda _, start: 0, 0x07, "changelog file starts with compression flag 7"),
    (lambda _, start: start, 0x7F, "implausible number of key groups"),
    # key group -1 (the registrations) becomes -129, which is no key group at all. (A valid key group outside the
    # subtask's range is not an error: ChangelogBackendLogApplier skips it, as a log read after rescaling has them.)
    # Read silently today: the subtask then has no state registered, and its keys vanish.
    (lambda _, start: start + 11, 0x7F, "key group -129"),
], ids=["compression-flag", "group-count", "key-group-outside-the-range"])
def test_a_corrupted_changelog_file_is_refused_in_one_line(changelog_checkpoints: dict[str, Written],
                                                           offset: Callable[[bytes, int], int], value: int,
                                                           expected: str) -> None:
    checkpoint, corrupted = _corrupt(changelog_checkpoints["hashmap-log"], offset, value)
    try:
        with pytest.raises(FlinkStateError) as refused:
            sample_job.states_by_key(open_checkpoint(checkpoint))
        message = str(refused.value)
        assert "\n" not in message and str(corrupted) in message and expected in message, message
        result = subprocess.run([sys.executable, "-m", "flinkstate", "--allow-external-handles", "dump",
                                 str(checkpoint), "--operator", "stats", "--state", "count"],
                                capture_output=True, text=True)
        assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1 and str(corrupted) in result.stderr, result.stderr
    finally:
        shutil.rmtree(checkpoint.parents[3])


def test_a_corrupted_state_name_in_the_log_reads_as_another_state(changelog_checkpoints: dict[str, Written]) -> None:
    """The DSTL has no checksums: a byte of a registration's state name changed ("recent" -> "secent") still
    parses. Subtask 0 then has a state ``secent`` and no ``recent`` (Flink would restore it so as well: the job's
    ``recent`` starts empty there); subtask 1 is untouched. What a reader sees: ``recent`` missing for subtask 0's
    keys, every other value exact."""
    checkpoint, _ = _corrupt(changelog_checkpoints["hashmap-log"],
                             lambda data, start: data.index(b"\x06recent", start) + 1, ord("s"))
    try:
        sp = open_checkpoint(checkpoint)
        (_, first), (_, second) = sp.keyed_streams("stats")
        names = [[s.name for s in stream.header().states] for stream in (first, second)]
        assert "secent" in names[0] and "recent" not in names[0] and "recent" in names[1]
        values = sample_job.states_by_key(sp)
        assert len(values) == KEYS
        lost = {key for key, states in values.items() if "recent" not in states}
        subtask_0 = {entry[0] for _, entries in sp.iter_key_groups("stats", "count", first.key_group_range)
                     for entry in entries}
        assert lost == subtask_0 and 0 < len(lost) < KEYS
        for key, states in values.items():
            want = sample_job.expected_state(key, states["count"])
            if key in lost:
                del want["recent"]
            assert states == want, key
    finally:
        shutil.rmtree(checkpoint.parents[3])


# --------------------------------------------------------------------------------------------------------------------
# migrate v1 -> v2: a canonical savepoint that v2 restores
# --------------------------------------------------------------------------------------------------------------------


@pytest.fixture()
def external_handles_allowed() -> Iterator[None]:
    """``migrate_savepoint`` opens its source with the process-wide policy (the CLI's --allow-external-handles)."""
    saved = settings.handle_policy
    flinkstate.configure(allow_external_handles=True)
    try:
        yield
    finally:
        settings.handle_policy = saved


@pytest.mark.parametrize("name", VARIANTS)
def test_migrated_for_v2_restores_on_flink(changelog_cluster: tuple[LocalFlinkCluster, Path],
                                           changelog_checkpoints: dict[str, Written], external_handles_allowed: None,
                                           tmp_path: Path, name: str) -> None:
    written = changelog_checkpoints[name]
    counts = {key: states["count"] for key, states in
              sample_job.states_by_key(open_checkpoint(written.checkpoint)).items()}
    out = tmp_path / "migrated"
    report = migrate_savepoint(str(written.checkpoint), [target_for("v2")], open_output(out))
    assert report.entries_written > 0
    assert all(c.read == c.written for states in report.counts.values() for c in states.values()), report.counts
    # Canonical and self-contained: savepoint key-group handles (code 7) in files of ``out``, which opens and reads
    # without the opt-in and names nothing of the checkpoint's folders.
    migrated = Savepoint.open(out, allow_external_handles=False)
    subtasks = migrated.operator("stats").subtasks.values()
    assert len(subtasks) == 2 and all(isinstance(s.managed_keyed_state, KeyGroupsStateHandle)
                                      and s.managed_keyed_state.code == SAVEPOINT_KEY_GROUPS for s in subtasks)
    root = written.dstl.parents[2]
    assert str(root).encode() not in b"".join(p.read_bytes() for p in out.iterdir())
    values = sample_job.states_by_key(migrated)
    assert {key: states["count"] for key, states in values.items()} == counts and len(counts) == KEYS
    for key, states in values.items():
        want = sample_job.expected_state(key, states["count"])
        assert states == {**want, "stats": {**want["stats"], "label": LABEL_DEFAULT}}, key
    cluster, _ = changelog_cluster
    records = sample_job.restore_audit(cluster.client, "v2", out, tmp_path / "audit", keys=KEYS,
                                       state_backend=written.backend)
    assert len(records) == KEYS and all(r["version"] == "v2" for r in records)
    for record in records:
        assert check_record(record, stats="v2", label=LABEL_DEFAULT) == counts[record["key"]]


# --------------------------------------------------------------------------------------------------------------------
# Issue 23: list state filled with add() (RocksDB merge operands) under the changelog backend
# --------------------------------------------------------------------------------------------------------------------


def _changelog_parts(checkpoint: Path, uid: str) -> list[tuple[bool, bool]]:
    """Per subtask of the operator: (something materialized, something logged since)."""
    metadata = read_metadata((checkpoint / "_metadata").read_bytes(), str(checkpoint / "_metadata"))
    (op,) = [op for op in metadata.operators if op.operator_id == operator_id_from_uid(uid)]
    handles = [op.subtasks[index].managed_keyed_state for index in sorted(op.subtasks)]
    return [(bool(h.materialized), bool(h.non_materialized)) if isinstance(h, ChangelogBackendHandle)
            else (False, False) for h in handles]


def test_list_state_added_to_reads_exactly_from_a_rocksdb_changelog_checkpoint(
        changelog_cluster: tuple[LocalFlinkCluster, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """The list-merge job (``ListState.add()`` and windows with a ProcessWindowFunction) on RocksDB with the changelog
    backend, materializing every second: a retained checkpoint whose lists and windows come from RocksDB's
    materialized snapshot (merge operands) and the log since (ADD_ELEMENT changes) holds every list, window and
    window timer that the source's position N says, as tests/test_list_merge.py checks the native savepoint; the
    reader as it was before issue 23 (no merge operator, iterator errors ignored) reads it wrong."""
    cluster, root = changelog_cluster
    work = root / "list-merge"
    conf = {"state.changelog.enabled": "true",
            "state.changelog.periodic-materialize.enabled": "true",
            "state.changelog.periodic-materialize.interval": "1s",
            "execution.checkpointing.externalized-checkpoint-retention": "RETAIN_ON_CANCELLATION",
            "execution.checkpointing.dir": (work / "checkpoints").as_uri()}
    job = lm.submit(cluster.client, lm.build(), work / "audit", LIST_MERGE_SHAPE, rate=400,
                    lag_ms=lm.NO_FIRING_LAG_MS, conf=conf, checkpoint_interval_ms=500)
    try:
        deadline = time.monotonic() + 90
        while True:
            stats = cluster.client.checkpoints(job)
            if stats.latest_completed_path is not None and (stats.latest_completed_id or 0) >= MIN_CHECKPOINT_ID:
                checkpoint = Path(stats.latest_completed_path.removeprefix("file:"))
                parts = _changelog_parts(checkpoint, lm.LISTS_UID) + _changelog_parts(checkpoint, lm.WINDOWS_UID)
                if all(materialized and logged for materialized, logged in parts):
                    break
            assert time.monotonic() < deadline, f"no checkpoint both materialized and logged in 90 s ({stats})"
            time.sleep(0.5)
    finally:
        cluster.client.cancel(job)
    sp = open_checkpoint(checkpoint)
    n = lm.source_position(sp)
    want, state = lm.expected_state(n, LIST_MERGE_SHAPE), lm.read_state(sp)
    assert n > 500 and len(state.windows) > 50, (n, len(state.windows))
    assert state.lists == want.lists
    assert state.windows == want.windows
    assert state.timers == want.timers
    # the materialized part holds merge operands of both list states (else the old reader's loss is not tested)
    for uid, name in ((lm.LISTS_UID, lm.LIST_STATE), (lm.WINDOWS_UID, lm.WINDOW_STATE)):
        ssts = [f for _, stream in sp.keyed_streams(uid) if isinstance(stream, ChangelogStream)
                for part in stream.materialized if isinstance(part, NativeRocksDBStream) for f in part.sst_files()]
        assert sum(t.number("rocksdb.merge.operands") for t in column_family_tables(ssts).get(name, [])) > 0, uid
    _old_reader(monkeypatch)
    assert lm.read_state(open_checkpoint(checkpoint)).lists != want.lists
