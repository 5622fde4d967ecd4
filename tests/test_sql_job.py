"""A SQL job of our own (tests/support/sql_job/), written by the real Flink 2.3 cluster of the test run, read value
by value: the Table runtime's RowData family on state the planner wrote for a GROUP BY aggregate (BIGINT, DECIMAL
in its compact and non-compact forms, TIMESTAMP(3), TIMESTAMP(6), TIMESTAMP(9), TIMESTAMP_LTZ(3) accumulators under
a STRING key), a deduplication (whole rows under an INT key) and a regular join (MapState of RowData rows -> count,
both sides).

The job processed the sequence prefix 0..N-1 before its stop-with-savepoint; N is taken from the state itself (the
sum of the counts) and then every key of every state is compared with what Python recomputes from N, exactly
(types, Decimal scales and nanoseconds included). The same savepoint then passes ``check`` against its own manifest,
is refused against a manifest whose accumulator type changed the way a changed query changes it, and, migrated to
its own schema with every entry decoded and re-encoded, is restored by Flink, which keeps counting from N.
"""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from flinkstate.cli import main
from flinkstate.compatibility import INCOMPATIBLE
from flinkstate.engine import LocalFlinkCluster
from flinkstate.jsonify import to_json
from flinkstate.migration.plan import OperatorTarget
from flinkstate.migration.runner import migrate_savepoint
from flinkstate.resolution import check
from flinkstate.savepoint import Savepoint
from flinkstate.storage.uri import open_output
from tests.support import sql_job
from tests.support.sql_job import (
    AGG_SCALED_UID,
    AGG_STATE,
    AGG_UID,
    BITMAPS_UID,
    DEDUP_STATE,
    DEDUP_UID,
    JOIN_STATES,
    JOIN_UID,
)

BACKENDS = ("hashmap", "rocksdb")
#: Seconds each job runs before its savepoint (400 rows/s): enough for every key to hold many rows.
RUN_SECONDS = 3.0
MIN_ROWS = 100

AGG_TYPE = ("ROW<`f0` BIGINT, `f1` BIGINT, `f2` BIGINT, `f3` BIGINT, `f4` DECIMAL(38, {s}), `f5` DECIMAL({p}, {s}), "
            "`f6` TIMESTAMP(3), `f7` TIMESTAMP(3), `f8` TIMESTAMP(6), `f9` TIMESTAMP_LTZ(3), `f10` TIMESTAMP(9)>")
DEDUP_TYPE = ("ROW<`f0` BIGINT NOT NULL, `f1` TIMESTAMP_LTZ(3) *PROCTIME* NOT NULL, `f2` STRING NOT NULL, "
              "`f3` INT NOT NULL, `f4` DECIMAL(10, 2) NOT NULL, `f5` TIMESTAMP_LTZ(3), `f6` TIMESTAMP(3)>")


@pytest.fixture(scope="module")
def jar() -> Path:
    return sql_job.build()


@pytest.fixture(scope="module")
def savepoints(flink_cluster: LocalFlinkCluster, jar: Path,
               tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """backend -> a canonical savepoint of the SQL job; both jobs run side by side (one slot each) to save time."""
    root = tmp_path_factory.mktemp("sql-job")
    client = flink_cluster.client
    jobs = {backend: sql_job.submit(client, jar, state_backend=backend) for backend in BACKENDS}
    time.sleep(RUN_SECONDS)
    return {backend: sql_job.stop_with_savepoint(client, job_id, root / backend) for backend, job_id in jobs.items()}


def _entries(savepoint: Path, uid: str, state: str) -> dict[Any, Any]:
    """key -> value of every entry of one keyed state, through the Python API."""
    sp = Savepoint.open(savepoint)
    found: dict[Any, Any] = {}
    for key, namespace, value in sp.iter_entries(uid, state):
        assert namespace is None and key not in found, (uid, state, key)
        found[key] = value
    return found


def _map_entries(savepoint: Path, uid: str, state: str) -> dict[Any, dict[Any, Any]]:
    """key -> {user key: value} of every entry of one MAP state."""
    found: dict[Any, dict[Any, Any]] = {}
    for key, namespace, user_key, value in Savepoint.open(savepoint).iter_entries(uid, state):
        assert namespace is None and user_key not in found.get(key, {}), (uid, state, key, user_key)
        found.setdefault(key, {})[user_key] = value
    return found


def _exact(found: dict[Any, Any], expected: dict[Any, Any], what: str) -> None:
    """Equal keys and values, compared by repr as well: Decimal('1.50') == Decimal('1.5') in Python, but the scale
    is part of the value Flink stored, and so are the Python types."""
    assert sorted(found, key=repr) == sorted(expected, key=repr), what
    for key, value in expected.items():
        assert found[key] == value and repr(found[key]) == repr(value), f"{what} {key}: {found[key]!r} != {value!r}"


def rows_processed(savepoint: Path) -> int:
    """N: the sum of the aggregate's counts (every row of the prefix counts once in exactly one group)."""
    return sum(value[0] for value in _entries(savepoint, AGG_UID, AGG_STATE).values())


def check_every_value(savepoint: Path) -> int:
    """Compares every key and value of the three SQL states with the values recomputed from N; returns N."""
    n = rows_processed(savepoint)
    assert n >= MIN_ROWS, f"{savepoint}: only {n} rows processed"
    _exact(_entries(savepoint, AGG_UID, AGG_STATE), sql_job.expected_accumulators(n, 2), f"{savepoint} agg")
    _exact(_entries(savepoint, AGG_SCALED_UID, AGG_STATE), sql_job.expected_accumulators(n, 3),
           f"{savepoint} agg_scaled")
    _exact(_entries(savepoint, DEDUP_UID, DEDUP_STATE), sql_job.expected_dedup(n), f"{savepoint} dedup")
    for state, expected in sql_job.expected_pairs(n).items():
        _exact(_map_entries(savepoint, JOIN_UID, state), expected, f"{savepoint} pairs {state}")
    _exact(_entries(savepoint, BITMAPS_UID, AGG_STATE), sql_job.expected_bitmaps(n), f"{savepoint} bitmaps")
    # The source's operator state: the sequence values still to emit, N onwards (what a restored job continues with).
    sp = Savepoint.open(savepoint)
    remaining = [element.value for _, element in sp.iter_operator_state(sql_job.SOURCE_UID, "id-sequence-state")]
    assert remaining == list(range(n, sql_job.DEFAULT_END + 1)), f"{savepoint}: source state"
    return n


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_accumulator_and_row_is_recomputed_from_n(savepoints: dict[str, Path], backend: str) -> None:
    check_every_value(savepoints[backend])


def test_describe_and_schema_show_the_sql_states(savepoints: dict[str, Path], tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    savepoint = savepoints["hashmap"]
    assert main(["describe", str(savepoint)]) == 0
    out = capsys.readouterr().out
    for uid, state, key, value in [
        (AGG_UID, AGG_STATE, "ROW<`f0` STRING NOT NULL>", AGG_TYPE.format(p=10, s=2)),
        (AGG_SCALED_UID, AGG_STATE, "ROW<`f0` STRING NOT NULL>", AGG_TYPE.format(p=12, s=3)),
        (DEDUP_UID, DEDUP_STATE, "ROW<`f0` INT NOT NULL>", DEDUP_TYPE),
        (JOIN_UID, "left-records", "ROW<`f0` BIGINT NOT NULL>",
         "user key ROW<`f0` BIGINT NOT NULL, `f1` STRING NOT NULL>\n    value Integer"),
        (JOIN_UID, "right-records", "ROW<`f0` BIGINT NOT NULL>",
         "user key ROW<`f0` BIGINT NOT NULL, `f1` TIMESTAMP_LTZ(3), `f2` BIGINT NOT NULL>\n    value Integer"),
    ]:
        section = out[out.index(f"(uid {uid},"):]
        end = section.find("\noperator ")
        section = section if end < 0 else section[:end + 1]
        kind, value = ("MAP", value) if value.startswith("user key") else ("VALUE", f"value {value}")
        assert f"keyed state {state}: {kind}\n    key {key}, namespace VoidNamespace\n    {value}\n" in section
    manifest = tmp_path / "v1.yaml"
    assert main(["schema", str(savepoint), "-o", str(manifest)]) == 0
    operators = yaml.safe_load(manifest.read_text())["operators"]
    assert operators[AGG_UID]["key"]["table"] == "ROW<`f0` STRING NOT NULL>"
    assert operators[AGG_UID]["states"][AGG_STATE]["value"]["table"] == AGG_TYPE.format(p=10, s=2)
    assert operators[DEDUP_UID]["states"][DEDUP_STATE]["value"]["table"] == DEDUP_TYPE


def test_dump_prints_every_accumulator(savepoints: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    """`flinkstate dump` of the aggregate: one JSON line per key, exactly the recomputed accumulators."""
    savepoint = savepoints["rocksdb"]
    n = rows_processed(savepoint)
    assert main(["dump", str(savepoint), "--operator", AGG_UID, "--state", AGG_STATE]) == 0
    lines = [yaml.safe_load(line) for line in capsys.readouterr().out.splitlines()]
    expected = sql_job.expected_accumulators(n, 2)
    assert sorted(lines, key=lambda line: line["key"]) == [
        {"key": to_json(key), "namespace": None, "value": to_json(value)} for key, value in sorted(expected.items())]
    # the text itself: Decimal scales and 9 fraction digits, the instant with Z
    k1 = next(line for line in lines if line["key"] == ["k1"])["value"]
    last = max(range(1, n, sql_job.GROUPS))
    assert k1[5] == f"{last // 4}.{last % 4 * 25:02d}"
    assert k1[9].endswith("Z") and len(k1[9]) == len("2023-11-14T22:13:20.000000000Z")


def _manifest(savepoint: Path, path: Path) -> dict[str, Any]:
    assert main(["schema", str(savepoint), "-o", str(path)]) == 0
    data: dict[str, Any] = yaml.safe_load(path.read_text())
    return data


@pytest.mark.parametrize("backend", BACKENDS)
def test_check_against_its_own_manifest_restores(savepoints: dict[str, Path], tmp_path: Path, backend: str) -> None:
    manifest = tmp_path / "v1.yaml"
    _manifest(savepoints[backend], manifest)
    assert main(["check", str(savepoints[backend]), "--schema", str(manifest)]) == 0
    report = check(savepoints[backend], manifest)
    assert report.outcome == "restore", report.render_markdown()


def test_check_refuses_a_changed_accumulator_type(savepoints: dict[str, Path], tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """The next version sums the amount as DECIMAL(12, 3): its accumulators become DECIMAL(38, 3) / DECIMAL(12, 3).
    The manifest is edited as that query's `schema` would write it: agg's accState takes agg_scaled's type (the
    job runs that very query), and Flink's RowDataSerializer rule (equal logical types only) refuses it."""
    savepoint = savepoints["hashmap"]
    data = _manifest(savepoint, tmp_path / "v1.yaml")
    states = data["operators"][AGG_UID]["states"]
    states[AGG_STATE]["value"] = copy.deepcopy(data["operators"][AGG_SCALED_UID]["states"][AGG_STATE]["value"])
    assert states[AGG_STATE]["value"]["table"] == AGG_TYPE.format(p=12, s=3)
    changed = tmp_path / "v2.yaml"
    changed.write_text(yaml.safe_dump(data, sort_keys=False))
    capsys.readouterr()
    assert main(["check", str(savepoint), "--schema", str(changed)]) == 4
    report = check(savepoint, changed)
    assert report.verdict is INCOMPATIBLE and report.outcome != "restore"
    refused = [(row.operator, row.state) for row in report.rows if row.verdict is INCOMPATIBLE]
    assert len(refused) == 1 and refused[0][1] == AGG_STATE and AGG_UID in str(refused[0][0]), refused
    assert [f.code for f in report.findings if f.code.startswith("ROWDATA")] == ["ROWDATA_TYPE_CHANGED"]


def test_check_refuses_a_changed_grouping_key(savepoints: dict[str, Path], tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """The next version groups the aggregate by d (INT) instead of k (STRING): the key serializer's logical type
    changes, which Flink's RowDataSerializer rule refuses (the keys' bytes and key groups would be read wrongly)."""
    savepoint = savepoints["hashmap"]
    data = _manifest(savepoint, tmp_path / "v1.yaml")
    data["operators"][AGG_UID]["key"] = copy.deepcopy(data["operators"][DEDUP_UID]["key"])
    assert data["operators"][AGG_UID]["key"]["table"] == "ROW<`f0` INT NOT NULL>"
    changed = tmp_path / "v2.yaml"
    changed.write_text(yaml.safe_dump(data, sort_keys=False))
    capsys.readouterr()
    assert main(["check", str(savepoint), "--schema", str(changed)]) == 4
    report = check(savepoint, changed)
    refused = [f for f in report.findings if f.verdict is INCOMPATIBLE]
    assert refused and all(AGG_UID in str(f.operator) for f in refused), [(f.code, f.operator) for f in refused]
    assert any(f.path.startswith("key") for f in refused), [(f.code, f.path) for f in refused]


def test_reencoded_savepoint_restores_and_keeps_counting(flink_cluster: LocalFlinkCluster, jar: Path,
                                                         savepoints: dict[str, Path], tmp_path: Path) -> None:
    """Every entry of the three SQL states decoded and re-encoded (an identity migration): the bytes are Flink's,
    Flink restores the result, and the restored job's own savepoint holds the longer prefix, every value exact."""
    source = savepoints["hashmap"]
    n = rows_processed(source)
    migrated = tmp_path / "migrated"
    uids = (AGG_UID, AGG_SCALED_UID, DEDUP_UID, JOIN_UID, BITMAPS_UID)
    report = migrate_savepoint(str(source), [OperatorTarget(uid) for uid in uids], open_output(migrated),
                               reencode=True)
    assert report.counts[AGG_UID][AGG_STATE].written == sql_job.GROUPS
    assert report.counts[DEDUP_UID][DEDUP_STATE].written == sql_job.DEDUP_KEYS
    assert [report.counts[JOIN_UID][state].written for state in JOIN_STATES] == [n, n]
    rewritten = sorted(p.name for p in migrated.glob("keyed-*"))
    assert len(rewritten) == len(uids), rewritten
    assert report.counts[BITMAPS_UID][AGG_STATE].written == sql_job.DEDUP_KEYS
    for uid, state in [(AGG_UID, AGG_STATE), (AGG_SCALED_UID, AGG_STATE), (DEDUP_UID, DEDUP_STATE),
                       (JOIN_UID, JOIN_STATES[0]), (JOIN_UID, JOIN_STATES[1]), (BITMAPS_UID, AGG_STATE)]:
        assert _raw(migrated, uid, state) == _raw(source, uid, state), (uid, state)

    client = flink_cluster.client
    job_id = sql_job.submit(client, jar, savepoint_path=migrated)
    time.sleep(RUN_SECONDS)
    restored_from = client.checkpoints(job_id).restored_from
    after = sql_job.stop_with_savepoint(client, job_id, tmp_path / "after")
    assert restored_from is not None and Path(restored_from.removeprefix("file:")) == migrated, restored_from
    grown = check_every_value(after)
    assert grown > n, (n, grown)


def _raw(savepoint: Path, uid: str, state: str) -> dict[bytes, bytes]:
    from tests.support.edge_job import raw_values

    return raw_values(savepoint, state, uid)


def test_a_variant_column_reads_and_reencodes_to_flinks_bytes(flink_cluster: LocalFlinkCluster, jar: Path,
                                                              tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """Flink 2.x's VARIANT in a RowData: the VARIANT job keeps the last row per d with PARSE_JSON of
    {"id": id, "k": k}. Every row is the recomputed one, `dump` shows the document, and decoding and re-encoding
    every entry (an identity migration) gives back Flink's bytes."""
    client = flink_cluster.client
    job_id = sql_job.submit(client, jar, job="variant")
    time.sleep(RUN_SECONDS)
    savepoint = sql_job.stop_with_savepoint(client, job_id, tmp_path / "variant")
    sp = Savepoint.open(savepoint)
    [op] = [op for op in sp.operators if op.name and op.name.startswith("Deduplicate")]
    rows = _entries(savepoint, op.uid or op.operator_id, DEDUP_STATE)
    assert sorted(rows) == [(d,) for d in range(sql_job.DEDUP_KEYS)]
    n = max(row[0] for row in rows.values()) + 1
    assert n >= MIN_ROWS
    for (d,), row in rows.items():  # the input row: id, d, doc, and the PROCTIME column (stored as null)
        last = n - 1 - (n - 1 - d) % sql_job.DEDUP_KEYS
        assert row == (last, d, sql_job.variant_doc(last), None), (d, row)
        assert getattr(row, "kind", 0) == 2, row  # the last row per key is kept as the update it was emitted as

    capsys.readouterr()
    assert main(["dump", str(savepoint), "--operator", op.uid or op.operator_id, "--state", DEDUP_STATE]) == 0
    dumped = {tuple(line["key"]): line["value"] for line in map(yaml.safe_load, capsys.readouterr().out.splitlines())}
    last = rows[(0,)][0]
    assert dumped[(0,)] == {"row_kind": "+U",
                            "fields": [last, 0, {"variant": {"id": last, "k": f"k{last % sql_job.GROUPS}"}}, None]}

    migrated = tmp_path / "migrated"
    report = migrate_savepoint(str(savepoint), [OperatorTarget(op.uid or op.operator_id)], open_output(migrated),
                               reencode=True)
    assert report.counts[op.uid or op.operator_id][DEDUP_STATE].written == sql_job.DEDUP_KEYS
    uid = op.uid or op.operator_id
    assert _raw(migrated, uid, DEDUP_STATE) == _raw(savepoint, uid, DEDUP_STATE)
