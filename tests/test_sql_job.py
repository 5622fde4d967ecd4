"""A SQL job of our own (tests/support/sql_job/), written by the real Flink 2.3 cluster of the test run, read value
by value: the Table runtime's RowData family on state the planner wrote for a GROUP BY aggregate (BIGINT, DECIMAL
in its compact and non-compact forms, TIMESTAMP(3), TIMESTAMP(6), TIMESTAMP(9), TIMESTAMP_LTZ(3) accumulators under
a STRING key), a deduplication (whole rows under an INT key), a regular join (MapState of RowData rows -> count,
both sides), and retracting accumulators, whose logical types hold ``List.of(...)`` (Java-serialized as
``java.util.CollSer``): MAX, MIN, FIRST_VALUE, LAST_VALUE, LISTAGG and ARRAY_AGG in a GROUP BY over an updating input
and MAX in an OVER window, with their MapViews and ListViews in states of their own.

The job processed the sequence prefix 0..N-1 before its stop-with-savepoint; N is taken from the state itself (the
sum of the counts) and then every key of every state is compared with what Python recomputes from N, exactly
(types, Decimal scales and nanoseconds included). The same savepoint then passes ``check`` against its own manifest,
is refused against a manifest whose accumulator type changed the way a changed query changes it, and, migrated to
its own schema with every entry decoded and re-encoded, is restored by Flink, which keeps counting from N.
"""

from __future__ import annotations

import base64
import copy
import shutil
import struct
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from flinkstate import check
from flinkstate.cli import main
from flinkstate.compatibility import AS_IS, INCOMPATIBLE
from flinkstate.engine import LocalFlinkCluster
from flinkstate.engine.jar_schema import inspect_jar
from flinkstate.jsonify import to_json
from flinkstate.manifest import load_manifest
from flinkstate.manifest_overlay import manifest_of_jar
from flinkstate.migration.job import MigrationJob
from flinkstate.migration.plan import MigrationError, OperatorTarget
from flinkstate.migration.runner import migrate_savepoint
from flinkstate.savepoint import Savepoint
from flinkstate.serializers.registry import snapshot_bytes
from flinkstate.serializers.rowdata import RowDataSnapshot
from flinkstate.storage.uri import open_output
from tests.support import sql_job
from tests.support.jar_truth import differences
from tests.support.one_verdict import assert_one_verdict
from tests.support.sql_job import (
    AGG_SCALED_UID,
    AGG_STATE,
    AGG_UID,
    BITMAPS_UID,
    DEDUP_STATE,
    DEDUP_UID,
    FIRST_ORDER_VALUES,
    FIRST_VALUE_ORDERS,
    JOIN_STATES,
    JOIN_UID,
    LAST_ORDER_VALUES,
    LAST_VALUE_ORDERS,
    LATEST_UID,
    LISTAGG_LISTS,
    LISTAGG_WS_LISTS,
    MAX_MAP,
    MIN_MAP,
    RECENT_COUNT_STATE,
    RECENT_ROWS_STATE,
    RECENT_SMALLEST_STATE,
    RECENT_UID,
    RETRACTING_UID,
)

BACKENDS = ("hashmap", "rocksdb")
#: Seconds each job runs before its savepoint (200 rows/s): enough for every key to hold many rows.
RUN_SECONDS = 3.0
MIN_ROWS = 100

AGG_TYPE = ("ROW<`f0` BIGINT, `f1` BIGINT, `f2` BIGINT, `f3` BIGINT, `f4` DECIMAL(38, {s}), `f5` DECIMAL({p}, {s}), "
            "`f6` TIMESTAMP(3), `f7` TIMESTAMP(3), `f8` TIMESTAMP(6), `f9` TIMESTAMP_LTZ(3), `f10` TIMESTAMP(9)>")
#: The accumulator types of the retracting aggregates: STRUCTURED types (their attributes a List.of) with RAW fields
#: for the data views (NullSerializer: the views live in states of their own) and ARRAY_AGG's LinkedLists.
_AGGREGATES = "org.apache.flink.table.runtime.functions.aggregate."
_MAP_VIEW, _LIST_VIEW = "RAW('org.apache.flink.table.api.dataview.MapView', '...')", \
    "RAW('org.apache.flink.table.api.dataview.ListView', '...')"
_MAX_ACC = (f"STRUCTURED<'{_AGGREGATES}MaxWithRetractAggFunction$MaxWithRetractAccumulator', `max` BIGINT, "
            f"`mapSize` BIGINT, `map` {_MAP_VIEW}>")
RECENT_ACC_TYPE = f"ROW<`f0` {_MAX_ACC}, `f1` BIGINT>"
RETRACTING_ACC_TYPE = (
    f"ROW<`f0` {_MAX_ACC}, "
    f"`f1` STRUCTURED<'{_AGGREGATES}MinWithRetractAggFunction$MinWithRetractAccumulator', `min` STRING, "
    f"`mapSize` BIGINT, `map` {_MAP_VIEW}>, "
    f"`f2` STRUCTURED<'{_AGGREGATES}FirstValueWithRetractAggFunction$FirstValueWithRetractAccumulator', "
    f"`firstValue` TIMESTAMP(3), `firstOrder` BIGINT, `valueToOrderMap` {_MAP_VIEW}, `orderToValueMap` {_MAP_VIEW}>, "
    f"`f3` STRUCTURED<'{_AGGREGATES}LastValueWithRetractAggFunction$LastValueWithRetractAccumulator', "
    f"`lastValue` DECIMAL(10, 2), `lastOrder` BIGINT, `valueToOrderMap` {_MAP_VIEW}, `orderToValueMap` {_MAP_VIEW}>, "
    f"`f4` STRUCTURED<'{_AGGREGATES}ListAggWithRetractAggFunction$ListAggWithRetractAccumulator', "
    f"`list` {_LIST_VIEW}, `retractList` {_LIST_VIEW}>, "
    f"`f5` STRUCTURED<'{_AGGREGATES}ListAggWsWithRetractAggFunction$ListAggWsWithRetractAccumulator', "
    f"`list` {_LIST_VIEW}, `retractList` {_LIST_VIEW}, `delimiter` STRING>, "
    f"`f6` STRUCTURED<'{_AGGREGATES}ArrayAggFunction$ArrayAggAccumulator', "
    "`list` RAW('java.util.LinkedList', '...'), `retractList` RAW('java.util.LinkedList', '...')>, `f7` BIGINT>")
#: Every keyed state of the three operators over updating inputs (timers aside), which describe lists.
RETRACTING_STATES = (AGG_STATE, MAX_MAP, MIN_MAP, FIRST_VALUE_ORDERS, FIRST_ORDER_VALUES, LAST_VALUE_ORDERS,
                     LAST_ORDER_VALUES, *LISTAGG_LISTS, *LISTAGG_WS_LISTS)
RECENT_STATES = (AGG_STATE, MAX_MAP, RECENT_ROWS_STATE, RECENT_COUNT_STATE, RECENT_SMALLEST_STATE)
NEW_OPERATOR_STATES = {LATEST_UID: (DEDUP_STATE,), RETRACTING_UID: RETRACTING_STATES, RECENT_UID: RECENT_STATES}
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


def _exact_maps(found: dict[Any, dict[Any, Any]], expected: dict[Any, dict[Any, Any]], what: str) -> None:
    """_exact for MAP states: each key's {user key: value} compared as its sorted items (a dict's repr follows the
    order of insertion, which is the backend's iteration order)."""
    def items(maps: dict[Any, dict[Any, Any]]) -> dict[Any, list[tuple[Any, Any]]]:
        return {key: sorted(m.items(), key=repr) for key, m in maps.items()}

    _exact(items(found), items(expected), what)


def _array_agg_lists(savepoint: Path) -> Any:
    """Decodes ARRAY_AGG's RAW fields (LinkedList<Long>, as RAW bytes in the accumulator row) with the very
    serializer snapshot the savepoint records for them: accState's field 6, the RAW's inner LinkedList serializer."""
    header = Savepoint.open(savepoint).keyed_header(RETRACTING_UID)
    assert header is not None
    [accumulators] = [state.value_serializer for state in header.states if state.name == AGG_STATE]
    linked_list = accumulators.nested[6].nested[0].nested[0]
    assert linked_list.type_name() == "LinkedList<Long>", linked_list.type_name()
    decode = linked_list.decoder()

    def decoded(data: bytes) -> Any:
        value, end = decode(data, 0)
        assert end == len(data), (data.hex(), end)
        return value

    return decoded


def _concatenated(maps: dict[Any, dict[int, list[Any]]]) -> dict[Any, list[Any]]:
    """key -> the values of a map of millisecond -> [values], in the order of the milliseconds."""
    return {key: [value for ms in sorted(m) for value in m[ms]] for key, m in maps.items()}


def check_retracting(savepoint: Path, n: int) -> None:
    """latest's rows, and retracting's accumulators and every one of their views, recomputed from N. The orders of
    FIRST_VALUE / LAST_VALUE are wall-clock milliseconds: the values they order must come in the order the rows
    came, each under one order, the accumulator's first order the smallest and its last order the largest."""
    _exact(_entries(savepoint, LATEST_UID, DEDUP_STATE), sql_job.expected_latest(n), f"{savepoint} latest")
    expected = sql_job.expected_retracting(n)
    lists = _array_agg_lists(savepoint)
    found, orders = {}, {}
    for key, acc in _entries(savepoint, RETRACTING_UID, AGG_STATE).items():
        first, last = acc[2], acc[3]
        orders[key] = (first[1], last[1])
        found[key] = (*acc[:2], (first[0], None, *first[2:]), (last[0], None, *last[2:]), *acc[4:6],
                      tuple(lists(data) for data in acc[6]), acc[7])
    _exact(found, expected[AGG_STATE], f"{savepoint} retracting accumulators")
    for state in (MAX_MAP, MIN_MAP):
        _exact_maps(_map_entries(savepoint, RETRACTING_UID, state), expected[state], f"{savepoint} {state}")
    for state in (*LISTAGG_LISTS, *LISTAGG_WS_LISTS):
        _exact(_entries(savepoint, RETRACTING_UID, state), expected[state], f"{savepoint} {state}")
    for position, (by_value, by_order) in enumerate([(FIRST_VALUE_ORDERS, FIRST_ORDER_VALUES),
                                                     (LAST_VALUE_ORDERS, LAST_ORDER_VALUES)]):
        order_values = _map_entries(savepoint, RETRACTING_UID, by_order)
        _exact(_concatenated(order_values), expected[by_order], f"{savepoint} {by_order}")
        inverse = {key: {value: [ms] for ms, values in m.items() for value in values}
                   for key, m in order_values.items()}
        _exact_maps(_map_entries(savepoint, RETRACTING_UID, by_value), inverse, f"{savepoint} {by_value}")
        ends = {key: (min(m), max(m))[position] for key, m in order_values.items()}
        assert {key: pair[position] for key, pair in orders.items()} == ends, (by_order, orders, ends)


def check_recent(savepoint: Path, n: int) -> None:
    """recent's accumulator, its MAX's view and the window's rows, recomputed from N (the rows' processing-time
    milliseconds only in their order, the smallest one recorded apart)."""
    expected = sql_job.expected_recent(n)
    _exact(_entries(savepoint, RECENT_UID, AGG_STATE), expected[AGG_STATE], f"{savepoint} recent accumulators")
    _exact_maps(_map_entries(savepoint, RECENT_UID, MAX_MAP), expected[MAX_MAP], f"{savepoint} recent {MAX_MAP}")
    _exact(_entries(savepoint, RECENT_UID, RECENT_COUNT_STATE), expected[RECENT_COUNT_STATE], f"{savepoint} count")
    rows = _map_entries(savepoint, RECENT_UID, RECENT_ROWS_STATE)
    _exact(_concatenated(rows), expected[RECENT_ROWS_STATE], f"{savepoint} recent rows")
    _exact(_entries(savepoint, RECENT_UID, RECENT_SMALLEST_STATE), {key: min(m) for key, m in rows.items()},
           f"{savepoint} recent smallest millisecond")


def rows_processed(savepoint: Path) -> int:
    """N: the sum of the aggregate's counts (every row of the prefix counts once in exactly one group)."""
    return sum(value[0] for value in _entries(savepoint, AGG_UID, AGG_STATE).values())


def check_every_value(savepoint: Path) -> int:
    """Compares every key and value of the SQL states with the values recomputed from N; returns N."""
    n = rows_processed(savepoint)
    assert n >= MIN_ROWS, f"{savepoint}: only {n} rows processed"
    _exact(_entries(savepoint, AGG_UID, AGG_STATE), sql_job.expected_accumulators(n, 2), f"{savepoint} agg")
    _exact(_entries(savepoint, AGG_SCALED_UID, AGG_STATE), sql_job.expected_accumulators(n, 3),
           f"{savepoint} agg_scaled")
    _exact(_entries(savepoint, DEDUP_UID, DEDUP_STATE), sql_job.expected_dedup(n), f"{savepoint} dedup")
    for state, expected in sql_job.expected_pairs(n).items():
        _exact(_map_entries(savepoint, JOIN_UID, state), expected, f"{savepoint} pairs {state}")
    _exact(_entries(savepoint, BITMAPS_UID, AGG_STATE), sql_job.expected_bitmaps(n), f"{savepoint} bitmaps")
    check_retracting(savepoint, n)
    check_recent(savepoint, n)
    # The source's operator state: the sequence values still to emit, N onwards (what a restored job continues with).
    sp = Savepoint.open(savepoint)
    remaining = [element.value for _, element in sp.iter_operator_state(sql_job.SOURCE_UID, "id-sequence-state")]
    assert remaining == list(range(n, sql_job.DEFAULT_END + 1)), f"{savepoint}: source state"
    return n


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_accumulator_and_row_is_recomputed_from_n(savepoints: dict[str, Path], backend: str) -> None:
    check_every_value(savepoints[backend])


def test_the_jar_gives_the_schema_of_the_savepoints_it_writes(savepoints: dict[str, Path], jar: Path,
                                                              tmp_path: Path) -> None:
    """Issue 25: ``schema --jar`` of the SQL job (main() builds the planner's operators from the compiled plan; each
    opened with empty state registers its RowData states) is ``schema`` of the savepoints it wrote on HashMap and
    RocksDB, every operator with its planner uid, every state's meta info the same bytes."""
    schema = inspect_jar(jar, entry_class=sql_job.ENTRY_CLASS, cache_dir=tmp_path)
    keyed = {op.label: [meta.name for meta in op.keyed.states] for op in schema.operators if op.keyed}
    assert set(keyed) == {AGG_UID, AGG_SCALED_UID, DEDUP_UID, JOIN_UID, BITMAPS_UID, LATEST_UID, RETRACTING_UID,
                          RECENT_UID}
    assert set(RETRACTING_STATES) <= set(keyed[RETRACTING_UID]) and set(RECENT_STATES) <= set(keyed[RECENT_UID])
    assert [op.label for op in schema.operators if op.operator] == [sql_job.SOURCE_UID]
    for backend, savepoint in savepoints.items():
        assert differences(schema, savepoint) == [], backend


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
    # The operators over updating inputs: every state listed (the accumulators' STRUCTURED types hold List.of)
    for uid, states in NEW_OPERATOR_STATES.items():
        section = out[out.index(f"(uid {uid},"):]
        section = section[:section.find("\noperator ") + 1 or None]
        listed = [line.split(": ")[0].removeprefix("  keyed state ") for line in section.splitlines()
                  if line.startswith("  keyed state ") and "_timer_state/" not in line]
        assert sorted(listed) == sorted(states), (uid, listed)
    for uid, value in [(RETRACTING_UID, RETRACTING_ACC_TYPE), (RECENT_UID, RECENT_ACC_TYPE)]:
        assert (f"keyed state {AGG_STATE}: VALUE\n    key ROW<`f0` INT NOT NULL>, namespace VoidNamespace\n"
                f"    value {value}\n") in out[out.index(f"(uid {uid},"):], uid
    assert ("keyed state agg1$map: MAP\n    key ROW<`f0` INT NOT NULL>, namespace VoidNamespace\n"
            "    user key External<STRING>\n    value External<Long>\n") in out[out.index(f"(uid {RETRACTING_UID},"):]
    manifest = tmp_path / "v1.yaml"
    assert main(["schema", str(savepoint), "-o", str(manifest)]) == 0
    operators = yaml.safe_load(manifest.read_text())["operators"]
    assert operators[AGG_UID]["key"]["table"] == "ROW<`f0` STRING NOT NULL>"
    assert operators[AGG_UID]["states"][AGG_STATE]["value"]["table"] == AGG_TYPE.format(p=10, s=2)
    assert operators[DEDUP_UID]["states"][DEDUP_STATE]["value"]["table"] == DEDUP_TYPE
    assert operators[RETRACTING_UID]["states"][AGG_STATE]["value"]["table"] == RETRACTING_ACC_TYPE
    assert operators[RECENT_UID]["states"][AGG_STATE]["value"]["table"] == RECENT_ACC_TYPE
    for uid, states in NEW_OPERATOR_STATES.items():
        assert set(states) <= set(operators[uid]["states"]), (uid, sorted(operators[uid]["states"]))


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


def test_dump_prints_the_retracting_accumulators_and_views(savepoints: dict[str, Path],
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """`flinkstate dump` of the OVER window's accumulators and of retracting's MIN view (value -> count) and
    LISTAGG(k, ';') list: one JSON line per entry, exactly the recomputed values."""
    savepoint = savepoints["rocksdb"]
    n = rows_processed(savepoint)
    recent, retracting = sql_job.expected_recent(n), sql_job.expected_retracting(n)
    capsys.readouterr()
    for uid, state, expected in [(RECENT_UID, AGG_STATE, recent[AGG_STATE]),
                                 (RETRACTING_UID, LISTAGG_WS_LISTS[0], retracting[LISTAGG_WS_LISTS[0]])]:
        assert main(["dump", str(savepoint), "--operator", uid, "--state", state]) == 0
        lines = [yaml.safe_load(line) for line in capsys.readouterr().out.splitlines()]
        assert sorted(lines, key=lambda line: line["key"]) == [
            {"key": to_json(key), "namespace": None, "value": to_json(value)}
            for key, value in sorted(expected.items())], (uid, state)
    assert main(["dump", str(savepoint), "--operator", RETRACTING_UID, "--state", MIN_MAP]) == 0
    lines = [yaml.safe_load(line) for line in capsys.readouterr().out.splitlines()]
    assert sorted(lines, key=lambda line: (line["key"], line["user_key"])) == [
        {"key": to_json(key), "namespace": None, "user_key": k, "value": count}
        for key, counts in sorted(retracting[MIN_MAP].items()) for k, count in sorted(counts.items())]
    assert any(line["value"] == 2 for line in lines)  # some k came twice among a group's rows


def test_a_list_of_no_jdk_writes_is_refused_in_one_line(savepoints: dict[str, Path], tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """The OVER window's accumulator type with its attributes' List.of (java.util.CollSer) given a tag no JDK
    writes: describe names the file, the operator, the state and what is wrong, in one line."""
    corrupted = tmp_path / "corrupted"
    shutil.copytree(savepoints["hashmap"], corrupted)
    [(_, stream)] = Savepoint.open(corrupted).keyed_streams(RECENT_UID)
    path = Path(stream.source.path)
    data = path.read_bytes()
    tag = data.index(b"xp", data.index(b"java.util.CollSer")) + 2  # after CollSer's class descriptor: its tag
    path.write_bytes(data[:tag] + struct.pack(">i", 9) + data[tag + 4:])
    capsys.readouterr()
    assert main(["describe", str(corrupted)]) == 1
    err = capsys.readouterr().err
    [line] = [line for line in err.splitlines() if RECENT_UID in line]
    assert "Traceback" not in err and path.name in line and f"state {AGG_STATE}" in line, err
    assert "not a LogicalType (java.util.CollSer with tag 0x9" in line, line


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
    """Every entry of the SQL states decoded and re-encoded (an identity migration): the bytes are Flink's,
    Flink restores the result, and the restored job's own savepoint holds the longer prefix, every value exact."""
    source = savepoints["hashmap"]
    n = rows_processed(source)
    migrated = tmp_path / "migrated"
    uids = (AGG_UID, AGG_SCALED_UID, DEDUP_UID, JOIN_UID, BITMAPS_UID, *NEW_OPERATOR_STATES)
    report = migrate_savepoint(str(source), [OperatorTarget(uid) for uid in uids], open_output(migrated),
                               reencode=True)
    assert report.counts[AGG_UID][AGG_STATE].written == sql_job.GROUPS
    assert report.counts[DEDUP_UID][DEDUP_STATE].written == sql_job.DEDUP_KEYS
    assert [report.counts[JOIN_UID][state].written for state in JOIN_STATES] == [n, n]
    rewritten = sorted(p.name for p in migrated.glob("keyed-*"))
    assert len(rewritten) == len(uids), rewritten
    assert report.counts[BITMAPS_UID][AGG_STATE].written == sql_job.DEDUP_KEYS
    for uid, state in [(AGG_UID, AGG_STATE), (AGG_SCALED_UID, AGG_STATE), (DEDUP_UID, DEDUP_STATE),
                       (JOIN_UID, JOIN_STATES[0]), (JOIN_UID, JOIN_STATES[1]), (BITMAPS_UID, AGG_STATE),
                       *((uid, state) for uid, states in NEW_OPERATOR_STATES.items() for state in states)]:
        assert _raw(migrated, uid, state) == _raw(source, uid, state), (uid, state)
    assert report.counts[RETRACTING_UID][MIN_MAP].written == sum(
        map(len, sql_job.expected_retracting(n)[MIN_MAP].values()))
    # The headers, whose serializer snapshots hold the List.of forms, are written back byte for byte.
    for uid in NEW_OPERATOR_STATES:
        [(_, before)] = Savepoint.open(source).keyed_streams(uid)
        [(_, after)] = Savepoint.open(migrated).keyed_streams(uid)
        header = before.header()
        assert header.write() == before.source.read(0, header.length) == after.source.read(0, header.length), uid

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
                                                              tmp_path: Path, savepoints: dict[str, Path],
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

    # Issue 25: the jar's schema of this uid-less SQL job (the operators' ids the hashes Flink generates from the
    # graph) is its savepoint's; the savepoint of the other job of the same jar differs from it
    variant_schema = inspect_jar(jar, entry_class=sql_job.ENTRY_CLASS, program_args=["--job", "variant"],
                                 cache_dir=tmp_path)
    assert op.uid is None and variant_schema.manifest().find(op.operator_id) is not None
    assert differences(variant_schema, savepoint) == []
    assert differences(variant_schema, savepoints["hashmap"])[0].startswith("operators: ")


@pytest.mark.parametrize("change", ["none", "accumulator-type", "grouping-key", "accumulator-field-added"])
def test_check_is_the_plan_migrate_runs(savepoints: dict[str, Path], tmp_path: Path, change: str) -> None:
    """One verdict on the SQL job's upgrade cases (issue 23): its own manifest (0, every header kept), a changed
    accumulator type and a changed grouping key (4: migrate refuses them too), and an accumulator gaining a field
    named as describe shows it, with its value declared (3: published, its output checks 0)."""
    savepoint = savepoints["rocksdb"]
    data = _manifest(savepoint, tmp_path / "v1.yaml")
    if change == "accumulator-type":
        data["operators"][AGG_UID]["states"][AGG_STATE]["value"] = copy.deepcopy(
            data["operators"][AGG_SCALED_UID]["states"][AGG_STATE]["value"])
    elif change == "grouping-key":
        data["operators"][AGG_UID]["key"] = copy.deepcopy(data["operators"][DEDUP_UID]["key"])
    elif change == "accumulator-field-added":
        state = data["operators"][AGG_UID]["states"][AGG_STATE]
        accumulator = Savepoint.open(savepoint).keyed_header(AGG_UID)
        assert accumulator is not None
        old = next(s for s in accumulator.states if s.name == AGG_STATE).value_serializer
        assert isinstance(old, RowDataSnapshot)
        grown = RowDataSnapshot(old.class_name, old.version, [*old.types, old.types[0]],
                                [*old.raw_types, old.raw_types[0]], [*old.nested, old.nested[0]], None)
        name = f"f{len(old.types)}"
        state["value"] = {"table": grown.type_name(), "snapshot": base64.b64encode(snapshot_bytes(grown)).decode()}
        state["migration"] = {"fields": {name: {"default": 0}}}
    manifest = tmp_path / f"{change}.yaml"
    manifest.write_text(yaml.safe_dump(data, sort_keys=False))
    report = assert_one_verdict(savepoint, manifest, tmp_path / "out")
    expected = {"none": 0, "accumulator-field-added": 3}.get(change, 4)
    assert report.exit_code == expected, report.render_markdown()


def test_a_changed_tumble_window_is_refused_where_flink_would_misread_it(flink_cluster: LocalFlinkCluster, jar: Path,
                                                                         tmp_path: Path) -> None:
    """Issue 23: the window TVF job (COUNT per k over a 30 s processing-time TUMBLE) restored as 60 s is
    COMPATIBLE_AS_IS for Flink, which then reads the 30 s slices as 60 s windows. The savepoint does not record the
    size; the two jars do: check calls it incompatible (WINDOW_CHANGED), migrate refuses it, the same size passes."""
    client = flink_cluster.client
    job_id = sql_job.submit(client, jar, job="window", job_args=["--window-seconds", "30"])
    time.sleep(RUN_SECONDS)
    savepoint = sql_job.stop_with_savepoint(client, job_id, tmp_path / "window")
    [op] = [op for op in Savepoint.open(savepoint).operators if op.name and op.name.startswith("WindowAggregate")]

    def version(seconds: int) -> Path:
        path = tmp_path / f"window-{seconds}.yaml"
        path.write_text(manifest_of_jar(inspect_jar(jar, entry_class=sql_job.ENTRY_CLASS, cache_dir=tmp_path,
                                                    program_args=["--job", "window", "--window-seconds",
                                                                  str(seconds)])).dump())
        return path

    old, new = version(30), version(60)
    window = load_manifest(old).find(op.operator_id)
    assert window is not None and window.window == ("slice:SliceAssigners$TumblingSliceAssigner(isEventTime=false, "
                                                    "offset=0, shiftTimeZone=UTC, size=30000)")
    report = check(savepoint, new, previous=old)
    rows = [row for row in report.rows if row.operator == (op.uid or op.operator_id)]
    assert rows and all(row.verdict is INCOMPATIBLE and row.flink_verdict is AS_IS for row in rows)
    assert rows[0].findings[0].code == "WINDOW_CHANGED" and "size=60000" in rows[0].findings[0].message
    assert report.exit_code == 4
    with pytest.raises(MigrationError, match=r"would misread the state \(WINDOW_CHANGED"):
        MigrationJob(str(savepoint), str(new), str(tmp_path / "out"), old_schema=str(old)).run()
    assert not (tmp_path / "out").exists()
    assert check(savepoint, old, previous=old).exit_code == 0
