"""One state whose serializer snapshot differs between subtasks (issue 23): the edge job (examples/edge-job) on
RocksDB at parallelism 3 with ``--shape-by-key true``, so that each key keeps one subclass of ``edge.Shape`` and the
subtasks meet different ones. Each subtask's PojoSerializer caches the non-registered subclasses it met, and its
snapshot lists them: the subtasks' snapshots of ``shape`` differ (Circle and Square; Square only; Circle only).

Flink restores such a savepoint (each subtask restores its own snapshot). flinkstate reads each subtask with its own
header, shows the operator with the caches merged (their union), judges it as Flink does, and a migration keeps each
subtask's own snapshot of a state it does not change: every value is compared with the value recomputed from
(key, n), as read here and as the job finds it after real Flink restores the migrated savepoint. Snapshots that
differ in anything but those caches are refused in one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from flinkstate.compatibility import Verdict
from flinkstate.engine import LocalFlinkCluster
from flinkstate.format.keyed_header import state_meta_bytes
from flinkstate.format_errors import SavepointFormatError
from flinkstate.jsonify import to_json
from flinkstate.manifest import load_manifest
from flinkstate.migration.plan import OperatorTarget
from flinkstate.migration.runner import migrate_savepoint
from flinkstate.savepoint import Savepoint
from flinkstate.serializers.pojo import PojoSnapshot, merge_subtask_snapshots
from flinkstate.serializers.registry import snapshot_bytes
from flinkstate.storage.uri import open_output
from flinkstate.typenotation import to_snapshot
from tests.support import edge_job
from tests.support.edge_job import ALL_STATES, OPERATOR_UID, check_audit_record, expected_state
from tests.test_edge_types import (
    DECODED_STATES,
    JAVA_DEFAULTS,
    V2_MANIFEST,
    dump_state,
    flinkstate,
    migrate,
    read_state,
    unchanged_bytes,
)

#: key-0 .. key-4 at parallelism 3 (max parallelism 128): subtask 0 holds keys 0, 3, 4, subtask 1 key 1, subtask 2
#: key 2; with a Circle for an even key, a Square for an odd one, the three caches differ and two are disjoint.
KEYS = 5
PARALLELISM = 3
SHAPE_BY_KEY = ("--shape-by-key", "true")
CIRCLE, SQUARE = "edge.Circle", "edge.Square"


@pytest.fixture(scope="module")
def savepoint(flink_cluster: LocalFlinkCluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A v1 savepoint of the edge job, RocksDB, parallelism 3, each key keeping one Shape subclass."""
    return edge_job.write_savepoint(flink_cluster, tmp_path_factory.mktemp("edge-subtasks"), backend="rocksdb",
                                    keys=KEYS, parallelism=PARALLELISM, extra_args=SHAPE_BY_KEY)


def counts(savepoint: Path) -> dict[str, int]:
    found = {key: n for key, _, n in Savepoint.open(savepoint).iter_entries(OPERATOR_UID, "count")}
    assert len(found) == KEYS and all(n > 0 for n in found.values()), found
    return found


def expected(key: str, n: int, state: str, version: str = "v1") -> Any:
    return expected_state(key, n, version, shape_by_key=True)[state]


def own_metas(savepoint: Path, state: str) -> dict[int, bytes]:
    """subtask -> the state's meta info exactly as that subtask's stream header holds it."""
    sp = Savepoint.open(savepoint)
    metas = {}
    for index, stream in sp.keyed_streams(OPERATOR_UID):
        header = stream.header()
        position = header.state_index(state)
        assert position is not None, (index, state)
        metas[index] = state_meta_bytes(header.states[position])
    return metas


def own_shape_snapshots(savepoint: Path) -> dict[int, PojoSnapshot]:
    sp = Savepoint.open(savepoint)
    snapshots = {}
    for index, stream in sp.keyed_streams(OPERATOR_UID):
        header = stream.header()
        meta = header.states[header.state_index("shape")]  # type: ignore[index]
        assert isinstance(meta.value_serializer, PojoSnapshot)
        snapshots[index] = meta.value_serializer
    return snapshots


def restored_counts(records: list[dict[str, Any]], version: str,
                    event_added: dict[str, Any] | None = None) -> dict[str, int]:
    """Every key's audit record checked exactly (each state as the job found it after the restore)."""
    assert len(records) == KEYS and all(r["version"] == version for r in records), records
    return {r["key"]: check_audit_record(r, "v1" if version == "v1" else "v2", event_added=event_added,
                                         shape_by_key=True) for r in records}


# -- the merge itself (no Flink) -------------------------------------------------------------------------------------


def _shapes(cached: dict[str, Any], key: str = "String") -> Any:
    """``List<a.Shape>`` whose POJO serializer had cached ``cached`` (the POJO inside another type)."""
    shape: dict[str, Any] = {"pojo": "a.Shape", "fields": {"key": key}}
    if cached:
        shape["nonregistered_subclasses"] = cached
    return to_snapshot({"list": shape})


CIRCLE_TYPE = {"pojo": "a.Circle", "fields": {"key": "String", "radius": "Double"},
               "declaring_classes": {"key": "a.Shape"}}
SQUARE_TYPE = {"pojo": "a.Square", "fields": {"key": "String", "side": "Long"}, "declaring_classes": {"key": "a.Shape"}}


def test_caches_merge_into_their_union_wherever_the_pojo_sits():
    """Two subtasks' snapshots of a ``List<Shape>``, one having met only Squares, the other only Circles: the merge
    lists both (in Java String order whichever comes first), leaves its inputs alone, and its codecs are built from
    the union (the inputs' cached codecs know one subclass each)."""
    squares, circles = _shapes({"a.Square": SQUARE_TYPE}), _shapes({"a.Circle": CIRCLE_TYPE})
    square_bytes = squares.encode([{"@class": "a.Square", "key": "k", "side": 4}])
    with pytest.raises(SavepointFormatError, match=r"subclass a\.Square"):
        circles.decode(square_bytes)  # and now the input's decoder is built and cached
    merged = merge_subtask_snapshots(circles, squares)
    assert merged is not None and snapshot_bytes(merged) == snapshot_bytes(merge_subtask_snapshots(squares, circles))
    assert [e.name for e in merged.nested[0].nonregistered_subclasses] == ["a.Circle", "a.Square"]
    assert merged.decode(square_bytes) == [{"@class": "a.Square", "key": "k", "side": 4}]
    values = [{"@class": "a.Circle", "key": "c", "radius": 0.5}, {"@class": "a.Square", "key": "s", "side": 9}]
    assert merged.decode(merged.encode(values)) == values
    assert [e.name for e in circles.nested[0].nonregistered_subclasses] == ["a.Circle"]
    assert merge_subtask_snapshots(squares, _shapes({"a.Square": SQUARE_TYPE})) is squares


def test_snapshots_differing_beyond_the_caches_do_not_merge():
    squares = _shapes({"a.Square": SQUARE_TYPE})
    assert merge_subtask_snapshots(squares, _shapes({}, key="Long")) is None  # a field's type
    other_square = {**SQUARE_TYPE, "fields": {"key": "String", "side": "Integer"}}
    assert merge_subtask_snapshots(squares, _shapes({"a.Square": other_square})) is None  # one class, two layouts
    assert merge_subtask_snapshots(squares, to_snapshot({"list": "Long"})) is None


# -- what Flink wrote ------------------------------------------------------------------------------------------------


def test_the_subtasks_snapshots_of_shape_differ_by_the_subclasses_they_met(savepoint: Path):
    """The case at hand, asserted on Flink's bytes: each subtask's snapshot of ``shape`` caches exactly the
    subclasses of its own keys' values; no two are alike and two are disjoint (a union, not a superset, merges
    them). Every other state's meta info is the same in every subtask."""
    sp = Savepoint.open(savepoint)
    met: dict[int, set[str]] = {}
    for index, stream in sp.keyed_streams(OPERATOR_UID):
        for _, entries in stream.iter_blocks("count"):
            for key, _, _ in entries:
                met.setdefault(index, set()).add(expected(key, 1, "shape")["@class"])
    cached = {index: {e.name for e in snapshot.nonregistered_subclasses}
              for index, snapshot in own_shape_snapshots(savepoint).items()}
    assert cached == met and len(cached) == PARALLELISM, (cached, met)
    assert sorted(map(sorted, cached.values())) == [[CIRCLE], [CIRCLE, SQUARE], [SQUARE]], cached
    assert len(set(own_metas(savepoint, "shape").values())) == PARALLELISM
    for state in ALL_STATES:
        if state != "shape":
            assert len(set(own_metas(savepoint, state).values())) == 1, state
    # The operator's view: one snapshot whose cache is the union, in Java String order of the class names, each
    # subclass's snapshot the one the subtasks that met it wrote.
    merged = sp.state_info(OPERATOR_UID, "shape")
    header = sp.keyed_header(OPERATOR_UID)
    assert header is not None and merged.value_type.startswith("POJO edge.Shape")
    shape = header.states[header.state_index("shape")].value_serializer  # type: ignore[index]
    assert isinstance(shape, PojoSnapshot)
    assert [e.name for e in shape.nonregistered_subclasses] == [CIRCLE, SQUARE]
    for entry in shape.nonregistered_subclasses:
        written = {snapshot_bytes(e.value) for s in own_shape_snapshots(savepoint).values()
                   for e in s.nonregistered_subclasses if e.name == entry.name}
        assert written == {snapshot_bytes(entry.value)}, entry.name


# -- reading ---------------------------------------------------------------------------------------------------------


def test_every_value_reads_exactly(savepoint: Path):
    """The Python API reads every state of every subtask with that subtask's own snapshot; ``dump`` prints the
    subclass values and the other states of the operator (all refused before) exactly; ``describe`` shows them."""
    ns = counts(savepoint)
    for state in DECODED_STATES:
        values = read_state(savepoint, state)
        assert {key: to_json(value) for key, value in values.items()} == \
            {key: expected(key, n, state) for key, n in ns.items()}, state
    for state in ("shape", "event"):
        assert dump_state(savepoint, state) == {key: expected(key, n, state) for key, n in ns.items()}, state
    result = flinkstate("describe", savepoint, "--json")
    assert result.returncode == 0, result.stderr
    (edge,) = [op for op in json.loads(result.stdout)["operators"] if op["uid"] == OPERATOR_UID]
    assert "error" not in edge, edge["error"]
    assert set(ALL_STATES) <= {s["name"] for s in edge["keyed_states"]}


def test_schema_and_check_judge_every_subtask(savepoint: Path, tmp_path: Path):
    """``schema`` writes the merged view (both subclasses); ``check`` of the savepoint against it says restore, and
    its verdict on ``shape`` is the worst of the verdicts on the subtasks' own snapshots (each subtask restores its
    own: a cache makes Flink reconfigure the serializer)."""
    manifest_path = tmp_path / "m.yaml"
    result = flinkstate("schema", savepoint, "-o", manifest_path)
    assert result.returncode == 0, result.stderr
    state = load_manifest(manifest_path).operators[OPERATOR_UID].states["shape"]
    assert isinstance(state.value, PojoSnapshot)
    assert [e.name for e in state.value.nonregistered_subclasses] == [CIRCLE, SQUARE]
    result = flinkstate("check", savepoint, "--schema", manifest_path, "--format", "json")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["outcome"] == "restore"
    (row,) = [r for r in report["states"] if r["operator"] == OPERATOR_UID and r["state"] == "shape"]
    per_subtask = max(state.value.resolve_compatibility(own, "value").verdict
                      for own in own_shape_snapshots(savepoint).values())
    assert row["flink_verdict"] == per_subtask.name == Verdict.COMPATIBLE_WITH_RECONFIGURED_SERIALIZER.name, row


def test_snapshots_differing_beyond_the_subclass_cache_are_refused(savepoint: Path, tmp_path: Path):
    """A subtask whose ``edge.Shape`` itself differs (its field ``n`` a DateSerializer: same length, so the stream
    stays well-formed) is no cache difference: refused in one line naming the file, operator, state and subtasks,
    by the API and by the CLI alike."""
    copy = tmp_path / "savepoint"
    shutil.copytree(savepoint, copy)
    sp = Savepoint.open(copy)
    (index, stream), = [(i, s) for i, s in sp.keyed_streams(OPERATOR_UID)
                        if {e.name for e in own_shape_snapshots(savepoint)[i].nonregistered_subclasses} == {CIRCLE}]
    header = stream.header()
    shape_at = len(header.write()) - sum(len(state_meta_bytes(m)) for m in header.states[header.state_index("shape"):])
    long_snapshot = b"LongSerializer$LongSerializerSnapshot"
    date_snapshot = b"DateSerializer$DateSerializerSnapshot"
    header_bytes = header.write()
    patched_header = header_bytes[:shape_at] + header_bytes[shape_at:].replace(long_snapshot, date_snapshot, 1)
    patched = [f for f in copy.rglob("*") if f.is_file() and header_bytes in f.read_bytes()]
    assert len(patched) == 1, patched  # the stream: a state file, or inline in _metadata
    patched[0].write_bytes(patched[0].read_bytes().replace(header_bytes, patched_header))
    with pytest.raises(SavepointFormatError) as refused:
        Savepoint.open(copy).keyed_states(OPERATOR_UID)
    message = str(refused.value)
    assert "\n" not in message and str(patched[0].name) in message and "operator edge" in message, message
    assert "state shape" in message and f"subtasks 0 and {index} " in message, message
    result = flinkstate("dump", copy, "--operator", OPERATOR_UID, "--state", "count")
    assert result.returncode == 1 and result.stderr.strip().count("\n") == 0, result.stderr
    assert "state shape" in result.stderr and "Traceback" not in result.stderr, result.stderr


# -- migrations, restored by real Flink ------------------------------------------------------------------------------


def test_identity_migration_keeps_each_subtasks_snapshot_and_restores(flink_cluster: LocalFlinkCluster,
                                                                      savepoint: Path, tmp_path: Path):
    """Every entry decoded with its subtask's own snapshot and re-encoded: the same bytes, each subtask's header
    exactly its own (what Flink restores it with: a subtask given a cache listing a subclass it never met would
    write that subclass with the restored serializer, not a new one), and Flink 2.3 restores every value."""
    out = tmp_path / "out"
    migrate_savepoint(str(savepoint), [OperatorTarget(OPERATOR_UID)], open_output(out), reencode=True)
    for state in ALL_STATES:
        assert own_metas(out, state) == own_metas(savepoint, state), state
    unchanged_bytes(savepoint, out, ALL_STATES)
    records = edge_job.restore_audit(flink_cluster.client, "v1", out, tmp_path / "audit", keys=KEYS,
                                     state_backend="rocksdb", parallelism=PARALLELISM, extra_args=SHAPE_BY_KEY)
    assert restored_counts(records, "v1") == counts(savepoint)


def test_v1_migrated_for_v2_restores_every_value(flink_cluster: LocalFlinkCluster, savepoint: Path, tmp_path: Path):
    """The v2 manifest (``event`` gains two fields; ``shape`` as the merged view): ``event`` gets v2's snapshot in
    every subtask, ``shape`` keeps each subtask's own, and v2 finds every value."""
    out = tmp_path / "out"
    migrate(savepoint, V2_MANIFEST, out)
    assert own_metas(out, "shape") == own_metas(savepoint, "shape")
    assert len(set(own_metas(out, "event").values())) == 1
    unchanged_bytes(savepoint, out, tuple(s for s in ALL_STATES if s != "event"))
    ns = counts(savepoint)
    assert {key: to_json(value) for key, value in read_state(out, "event").items()} == \
        {key: {**expected(key, n, "event"), **JAVA_DEFAULTS} for key, n in ns.items()}
    records = edge_job.restore_audit(flink_cluster.client, "v2", out, tmp_path / "audit", keys=KEYS,
                                     state_backend="rocksdb", parallelism=PARALLELISM, extra_args=SHAPE_BY_KEY)
    assert restored_counts(records, "v2", event_added=JAVA_DEFAULTS) == ns
