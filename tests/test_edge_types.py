"""The types savepoint tools get wrong, on savepoints real Flink 2.3 writes in this test run (examples/edge-job):
Instant / LocalDateTime / LocalTime / java.sql.Timestamp with nanoseconds and years before 1970 and after 9999, a POJO
that gains a primitive ``long`` and a boxed ``Long``, Kryo values (a GenericType, and a POJO one of whose fields Flink
stores with Kryo), and POJO subclass values under a base-class state.

Every value is recomputed from (key, n) (tests/support/edge_job.py) and compared exactly: as read by the Python API,
as printed by ``flinkstate dump``, and as the job itself finds it after real Flink restores a migrated savepoint
(its audit line). Migrations are also checked at the byte level: what a migration does not change must be copied
byte for byte (the Kryo values above all, which flinkstate cannot re-encode)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from flinkstate.engine import LocalFlinkCluster
from flinkstate.engine.jar_schema import inspect_jar
from flinkstate.format.keyed_header import state_meta_bytes
from flinkstate.jsonify import to_json
from flinkstate.savepoint import Savepoint
from flinkstate.serializers.kryo import OpaqueValue
from tests.support import edge_job
from tests.support.edge_job import (
    ALL_STATES,
    KRYO_STATES,
    OPAQUE_CLASS,
    OPERATOR_UID,
    STAMPED_KRYO_FIELD,
    TIME_STATES,
    check_audit_record,
    expected_state,
    raw_values,
)
from tests.support.jar_truth import differences
from tests.support.one_verdict import assert_one_verdict

pytestmark = pytest.mark.flink

KEYS = 20
BACKENDS = ("hashmap", "rocksdb")
V1_MANIFEST = edge_job.JOB_DIR / "manifests" / "v1.yaml"
V2_MANIFEST = edge_job.JOB_DIR / "manifests" / "v2.yaml"
#: What Flink's own POJO migration leaves in the fields v2 adds to edge.Event: Java's defaults.
JAVA_DEFAULTS = {"added": 0, "boxedAdded": None}
#: States whose values flinkstate decodes completely (``stamped`` has a Kryo field in the middle of its record and
#: ``opaque`` is a Kryo value: both are checked on their own below).
DECODED_STATES = tuple(s for s in ALL_STATES if s not in ("stamped", *KRYO_STATES))
FLINK_SERIALIZERS = "org.apache.flink.api.common.typeutils.base."


def refused_for_want_of_a_subclass_layout(backend: str, state: str, error: str) -> bool:
    """The one refusal these reads accept. The HashMap backend writes a state's serializer snapshot from the
    serializer registered with the state, which never serialized anything (the heap keeps objects), so the snapshot
    of ``shape`` lists no subclass at all: a Circle's or Square's fields are nowhere in the savepoint. Such values can
    only be refused, in one line naming the state and the subclass; any other error, or a wrong value, fails."""
    return (backend == "hashmap" and state == "shape" and "\n" not in error.strip() and "state shape" in error
            and ("edge.Circle" in error or "edge.Square" in error) and "Traceback" not in error)


@pytest.fixture(scope="module")
def edge_savepoints(flink_cluster: LocalFlinkCluster, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """backend -> a v1 savepoint of the edge job (parallelism 2, stop-with-savepoint), written in this run."""
    root = tmp_path_factory.mktemp("edge-savepoints")
    return {backend: edge_job.write_savepoint(flink_cluster, root / backend, backend=backend, keys=KEYS)
            for backend in BACKENDS}


def flinkstate(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """The CLI as a user runs it (its own process)."""
    return subprocess.run([sys.executable, "-m", "flinkstate", *map(str, args)], capture_output=True, text=True,
                          timeout=300)


def counts(savepoint: Path) -> dict[str, int]:
    """key -> n, read from the plain ``count`` state (a Long, which every reader gets right)."""
    found = {key: n for key, _, n in Savepoint.open(savepoint).iter_entries(OPERATOR_UID, "count")}
    assert len(found) == KEYS and all(n > 0 for n in found.values()), found
    return found


def read_state(savepoint: Path, state: str) -> dict[str, Any]:
    """key -> value of one state through the Python API (MapState as {user_key: value})."""
    sp = Savepoint.open(savepoint)
    values: dict[str, Any] = {}
    for entry in sp.iter_entries(OPERATOR_UID, state):
        if state == "slots":
            key, _, user_key, value = entry
            values.setdefault(key, {})[user_key] = value
        else:
            key, _, value = entry
            values[key] = value
    return values


class DumpFailed(Exception):
    """``flinkstate dump`` exited non-zero; the message carries its whole stderr."""


def dump_state(savepoint: Path, state: str) -> dict[str, Any]:
    """key -> value of one state as ``flinkstate dump`` prints it; the command must succeed."""
    result = flinkstate("dump", savepoint, "--operator", OPERATOR_UID, "--state", state)
    if result.returncode != 0:
        raise DumpFailed(f"dump of {state} failed (exit {result.returncode}): {result.stderr.strip()}")
    values: dict[str, Any] = {}
    for line in result.stdout.splitlines():
        record = json.loads(line)
        assert record["namespace"] is None, record
        if state == "slots":
            values.setdefault(record["key"], {})[record["user_key"]] = record["value"]
        else:
            assert record["key"] not in values, f"{state}: key {record['key']} twice"
            values[record["key"]] = record["value"]
    return values


def restored(records: list[dict[str, Any]], version: str, restored_version: str = "v1",
             event_added: dict[str, Any] | None = None) -> list[int]:
    """Checks every key's audit record exactly; returns the restored counts."""
    assert len(records) == KEYS and all(r["version"] == version for r in records), records
    ns = [check_audit_record(r, restored_version, event_added=event_added) for r in records]
    assert all(n > 0 for n in ns), "every key must have found restored state"
    return ns


# -- what Flink wrote ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_savepoint_holds_the_edge_serializers(edge_savepoints: dict[str, Path], backend: str):
    """The job exercises what this file claims: Flink's own serializer snapshots, read from its savepoint."""
    header = Savepoint.open(edge_savepoints[backend]).keyed_header(OPERATOR_UID)
    assert header is not None
    serializers = {s.name: s.value_serializer for s in header.states}
    assert set(ALL_STATES) <= set(serializers), sorted(serializers)
    kinds = {"instant": "InstantSerializer$InstantSerializerSnapshot",
             "local_date_time": "LocalDateTimeSerializer$LocalDateTimeSerializerSnapshot",
             "local_time": "LocalTimeSerializer$LocalTimeSerializerSnapshot",
             "sql_timestamp": "SqlTimestampSerializer$SqlTimestampSerializerSnapshot"}
    for state, snapshot in kinds.items():
        assert serializers[state].class_name == FLINK_SERIALIZERS + snapshot, (state, serializers[state].class_name)
    kryo = "org.apache.flink.api.java.typeutils.runtime.kryo.KryoSerializerSnapshot"
    assert serializers["opaque"].class_name == kryo and serializers["opaque"].type_class == OPAQUE_CLASS
    # LocalDateTime inside a POJO: not a basic or SQL time type for Flink's type extractor, so a GenericType (Kryo).
    stamped = {f.name: f.snapshot for f in serializers["stamped"].fields}
    assert list(stamped) == ["key", "n", "seen", "tag"]  # the Kryo field is not the record's last
    assert stamped["seen"].class_name == kryo and stamped["seen"].type_class == STAMPED_KRYO_FIELD[1]
    assert serializers["shape"].pojo_class == "edge.Shape"


def test_the_jar_gives_the_schema_of_the_savepoints_it_writes(edge_savepoints: dict[str, Path], tmp_path: Path):
    """Issue 25: ``schema --jar`` of edge-job v1 (its main() run with the arguments the cluster got, no audit) is
    ``schema`` of the savepoint it wrote on HashMap, every state's meta info the same bytes (Kryo registrations,
    java.time, POJOs). On RocksDB the POJO state ``shape`` also lists the subclasses its serializer met while the
    job ran (RocksDB snapshots the serializer that wrote the values): that cache, which no jar can know, is the
    only difference."""
    schema = inspect_jar(edge_job.jar("v1"), cache_dir=tmp_path, parallelism=2,
                         program_args=["--keys", str(KEYS), "--rate", "400"])
    assert differences(schema, edge_savepoints["hashmap"]) == []
    found = differences(schema, edge_savepoints["rocksdb"])
    assert len(found) == 2 and found[0].startswith("edge: jar ") and "nonregistered_subclasses" in found[0], found
    assert found[1] == "edge, state shape: meta info bytes"
    header = Savepoint.open(edge_savepoints["rocksdb"]).keyed_header(OPERATOR_UID)
    [inspected] = [op for op in schema.operators if op.label == OPERATOR_UID]
    assert header is not None and inspected.keyed is not None
    [saved_shape] = [meta for meta in header.states if meta.name == "shape"]
    [jar_shape] = [meta for meta in inspected.keyed.states if meta.name == "shape"]
    # in the order the job met them, which the run decides
    assert sorted(entry.name for entry in saved_shape.value_serializer.nonregistered_subclasses) == [
        "edge.Circle", "edge.Square"]
    saved_shape.value_serializer.nonregistered_subclasses = []
    assert state_meta_bytes(saved_shape) == state_meta_bytes(jar_shape)


# -- reading ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_python_api_reads_every_value_exactly(edge_savepoints: dict[str, Path], backend: str):
    savepoint = edge_savepoints[backend]
    ns = counts(savepoint)
    failures: list[str] = []
    for state in DECODED_STATES:
        try:
            values = read_state(savepoint, state)
        except Exception as exc:  # collect every state's verdict, then fail once with all of them
            if not refused_for_want_of_a_subclass_layout(backend, state, str(exc)):
                failures.append(f"{state}: {type(exc).__name__}: {exc}")
            continue
        assert set(values) == set(ns), state
        for key, value in values.items():
            want = expected_state(key, ns[key])[state]
            if to_json(value) != want:
                failures.append(f"{state} {key}: read {to_json(value)!r}, expected {want!r}")
                break
            if state in TIME_STATES and str(value) != want:  # the value model's own text is ISO with 9 digits
                failures.append(f"{state} {key}: str() gives {value}, expected {want}")
                break
    assert not failures, "; ".join(failures)


@pytest.mark.parametrize("backend", BACKENDS)
def test_dump_prints_every_value_exactly(edge_savepoints: dict[str, Path], backend: str):
    savepoint = edge_savepoints[backend]
    ns = counts(savepoint)
    failures: list[str] = []
    for state in DECODED_STATES:
        try:
            values = dump_state(savepoint, state)
        except DumpFailed as exc:
            if not refused_for_want_of_a_subclass_layout(backend, state, str(exc)):
                failures.append(str(exc))
            continue
        wrong = {key: (value, expected_state(key, ns[key])[state]) for key, value in values.items()
                 if value != expected_state(key, ns[key])[state]}
        if set(values) != set(ns) or wrong:
            failures.append(f"{state}: {len(wrong)} of {len(values)} keys differ, e.g. {next(iter(wrong.items()))}"
                            if wrong else f"{state}: keys {sorted(values)}")
    assert not failures, "; ".join(failures)


@pytest.mark.parametrize("backend", BACKENDS)
def test_kryo_values_read_whole(edge_savepoints: dict[str, Path], backend: str):
    """A GenericType value cannot be decoded without Kryo, but it can be handed over whole, and dumped as such."""
    savepoint = edge_savepoints[backend]
    values = read_state(savepoint, "opaque")
    raw = raw_values(savepoint, "opaque")
    assert len(values) == len(raw) == KEYS
    for value in values.values():
        assert isinstance(value, OpaqueValue) and OPAQUE_CLASS in value.type_name, value
    # The whole stored value, nothing dropped or added: the bytes read are the bytes Flink wrote.
    assert sorted(v.data for v in values.values()) == sorted(raw.values())
    dumped = dump_state(savepoint, "opaque")
    assert {key: v["type"] for key, v in dumped.items()} == {key: v.type_name for key, v in values.items()}


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_pojo_with_a_kryo_field_in_the_middle_reads_exactly(edge_savepoints: dict[str, Path], backend: str):
    """edge.Stamped{key, n, seen: LocalDateTime (Kryo), tag}: a Kryo record carries no length, but Kryo 5's
    LocalDateTime record decodes, which delimits it, so the fields after it are found. `dump` shows the Kryo value
    with its class; every field equals what the job wrote."""
    values = dump_state(edge_savepoints[backend], "stamped")
    assert len(values) == KEYS
    for key, value in values.items():
        seen = value["seen"]
        assert seen["type"] == f"Kryo<{STAMPED_KRYO_FIELD[1]}>" and seen["class"] == STAMPED_KRYO_FIELD[1], seen
        assert {**value, "seen": seen["value"]} == expected_state(key, value["n"])["stamped"], key


# -- migrations, restored by real Flink ------------------------------------------------------------------------------


def migrate(savepoint: Path, manifest: Path, out: Path) -> None:
    result = flinkstate("migrate", savepoint, "--schema", manifest, "--output", out)
    assert result.returncode == 0, f"migrate failed: {result.stderr.strip()}"


def unchanged_bytes(source: Path, out: Path, states: tuple[str, ...]) -> None:
    """Every entry of ``states`` in ``out`` is byte for byte the one in ``source`` (same serialized keys too)."""
    for state in states:
        before, after = raw_values(source, state), raw_values(out, state)
        assert before and after == before, f"state {state}: {len(before)} entries before, {len(after)} after, " \
                                           f"{sum(after.get(k) != v for k, v in before.items())} differ"


@pytest.mark.parametrize("backend", BACKENDS)
def test_identity_migration_restores_every_value(flink_cluster: LocalFlinkCluster, edge_savepoints: dict[str, Path],
                                                 tmp_path: Path, backend: str):
    source = edge_savepoints[backend]
    result = flinkstate("schema", source, "-o", tmp_path / "m.yaml")
    assert result.returncode == 0, result.stderr
    out = tmp_path / "out"
    migrate(source, tmp_path / "m.yaml", out)
    unchanged_bytes(source, out, ALL_STATES)
    records = edge_job.restore_audit(flink_cluster.client, "v1", out, tmp_path / "audit", keys=KEYS,
                                     state_backend=backend)
    assert restored(records, "v1") == [counts(source)[r["key"]] for r in records]


@pytest.mark.parametrize("backend", BACKENDS)
def test_identity_migration_with_the_other_backends_schema(edge_savepoints: dict[str, Path], tmp_path: Path,
                                                           backend: str):
    """The snapshot of ``shape`` lists the subclasses met so far: Circle and Square in RocksDB's, none in the HashMap
    backend's (see refused_for_want_of_a_subclass_layout). That list is a cache, not a schema: a manifest written from
    either backend's savepoint describes the same job, and migrating with it changes no byte of any state."""
    source = edge_savepoints[backend]
    other = edge_savepoints["rocksdb" if backend == "hashmap" else "hashmap"]
    result = flinkstate("schema", other, "-o", tmp_path / "m.yaml")
    assert result.returncode == 0, result.stderr
    assert ("nonregistered_subclasses" in (tmp_path / "m.yaml").read_text()) == (backend == "hashmap")
    out = tmp_path / "out"
    migrate(source, tmp_path / "m.yaml", out)
    unchanged_bytes(source, out, ALL_STATES)


@pytest.mark.parametrize("backend", BACKENDS)
def test_flink_itself_restores_v2_from_v1(flink_cluster: LocalFlinkCluster, edge_savepoints: dict[str, Path],
                                          tmp_path: Path, backend: str):
    """The baseline a migration must match: Flink's own POJO migration leaves the added fields at 0 and null, and
    every other value (Kryo ones included) exactly as v1 wrote it."""
    source = edge_savepoints[backend]
    records = edge_job.restore_audit(flink_cluster.client, "v2", source, tmp_path / "audit", keys=KEYS,
                                     state_backend=backend)
    assert restored(records, "v2", event_added=JAVA_DEFAULTS) == [counts(source)[r["key"]] for r in records]


@pytest.mark.parametrize("backend", BACKENDS)
def test_v1_migrated_for_v2_with_the_manifest(flink_cluster: LocalFlinkCluster, edge_savepoints: dict[str, Path],
                                             tmp_path: Path, backend: str):
    """``added: long`` (primitive) and ``boxedAdded: java.lang.Long`` (boxed) added by ``flinkstate migrate``: the
    same result as Flink's own migration (0 and null), with everything but ``event`` copied byte for byte."""
    source = edge_savepoints[backend]
    out = tmp_path / "out"
    migrate(source, V2_MANIFEST, out)
    unchanged_bytes(source, out, tuple(s for s in ALL_STATES if s != "event"))
    ns = counts(source)
    for key, value in read_state(out, "event").items():
        assert to_json(value) == {**expected_state(key, ns[key])["event"], **JAVA_DEFAULTS}, (key, value)
    records = edge_job.restore_audit(flink_cluster.client, "v2", out, tmp_path / "audit", keys=KEYS,
                                     state_backend=backend)
    assert restored(records, "v2", event_added=JAVA_DEFAULTS) == [ns[r["key"]] for r in records]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_pojo_migrated_beside_kryo_states(flink_cluster: LocalFlinkCluster, edge_savepoints: dict[str, Path],
                                            tmp_path: Path, backend: str):
    """Filling the added fields with values of our own changes ``event`` only: the Kryo value (``opaque``), the POJO
    with a Kryo field (``stamped``), the subclass values (``shape``) and the times pass through byte for byte."""
    source = edge_savepoints[backend]
    manifest = V2_MANIFEST.read_text()
    anchor = "            boxedAdded: java.lang.Long\n            key: String\n            n: Long\n"
    assert anchor in manifest
    manifest = manifest.replace(anchor, anchor + "        migration:\n          fields:\n"
                                                 "            added: {default: 42}\n"
                                                 "            boxedAdded: {default: 43}\n")
    (tmp_path / "v2-defaults.yaml").write_text(manifest)
    out = tmp_path / "out"
    migrate(source, tmp_path / "v2-defaults.yaml", out)
    unchanged_bytes(source, out, tuple(s for s in ALL_STATES if s != "event"))
    assert raw_values(out, "event").keys() == raw_values(source, "event").keys()
    records = edge_job.restore_audit(flink_cluster.client, "v2", out, tmp_path / "audit", keys=KEYS,
                                     state_backend=backend)
    ns = counts(source)
    assert restored(records, "v2", event_added={"added": 42, "boxedAdded": 43}) == [ns[r["key"]] for r in records]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("manifest", ["v1", "v2", "v2-kind-changed", "v2-event-to-string"])
def test_check_is_the_plan_migrate_runs(edge_savepoints: dict[str, Path], tmp_path: Path, backend: str,
                                        manifest: str):
    """One verdict on the edge job's upgrade cases (issue 23): check's exit status is what migrate does, on both
    backends: v1 (0: every header kept), v2 (3: published, the output checks 0), and two changes migrate refuses
    (4: the state's kind, and the POJO made a String without a conversion)."""
    document = yaml.safe_load((V1_MANIFEST if manifest == "v1" else V2_MANIFEST).read_text())
    states = next(op for op in document["operators"].values() if "event" in op.get("states", {}))["states"]
    if manifest == "v2-kind-changed":
        states["count"]["kind"] = "LIST"
    elif manifest == "v2-event-to-string":
        states["event"]["value"] = "String"
    path = tmp_path / f"{manifest}.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    report = assert_one_verdict(edge_savepoints[backend], path, tmp_path / "out")
    assert report.exit_code == {"v1": 0, "v2": 3}.get(manifest, 4), report.render_markdown()
