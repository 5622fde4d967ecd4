"""The SQL job (tests/support/sql_job/sqljob/SqlJob.java) seen from the tests: how to build and run it, and every
value its state must hold after it processed the sequence prefix 0..N-1.

The job reads ``datagen``'s sequence 0, 1, 2, ... at parallelism 1 and derives every column from ``id``:
``k = 'k' || id % 7``, ``d = id % 5``, ``amount = id / 4`` (DECIMAL(10, 2)), ``ltz = 1700000000000 + id * 1001`` ms
(TIMESTAMP_LTZ(3)), ``ts`` / ``ts6`` the same instant as TIMESTAMP(3) / TIMESTAMP(6) in UTC, ``ts9`` 2024-01-01T00:00
plus ``id`` nanoseconds (TIMESTAMP(9)). Keep this module in step with the Java source.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

from flinkstate.engine import LocalFlinkCluster
from flinkstate.engine.rest import FlinkRestClient
from flinkstate.serializers.times import Instant, LocalDate, LocalDateTime, LocalTime
from tests.support.java_build import build_jar

#: The operators' uids (table.exec.uid.generation = ALWAYS: "<exec node id>_<transformation>"; the ids are fixed by
#: the job's plan) and their keyed states.
AGG_UID = "4_group-aggregate"
AGG_SCALED_UID = "9_group-aggregate"
DEDUP_UID = "14_deduplicate"
JOIN_UID = "21_join"
BITMAPS_UID = "26_group-aggregate"
SOURCE_UID = "1_source"
LATEST_UID = "30_deduplicate"
RETRACTING_UID = "33_group-aggregate"
RECENT_UID = "37_over-aggregate"
AGG_STATE = "accState"
DEDUP_STATE = "deduplicate-state"
JOIN_STATES = ("left-records", "right-records")
#: retracting's data views, each a keyed state of its own named "agg<i>$<field>" after the i-th aggregate's field:
#: MAX(id) and MIN(k) keep value -> count; FIRST_VALUE(ts) and LAST_VALUE(amount) value -> [orders] and
#: order -> [values] (an order is the wall-clock millisecond the value came); the two LISTAGGs their lists.
MAX_MAP, MIN_MAP = "agg0$map", "agg1$map"
FIRST_VALUE_ORDERS, FIRST_ORDER_VALUES = "agg2$valueToOrderMap", "agg2$orderToValueMap"
LAST_VALUE_ORDERS, LAST_ORDER_VALUES = "agg3$valueToOrderMap", "agg3$orderToValueMap"
LISTAGG_LISTS = ("agg4$list", "agg4$retractList")
LISTAGG_WS_LISTS = ("agg5$list", "agg5$retractList")
#: recent's states besides its accumulator (its MAX keeps the window's values in agg0$map): the window's rows under
#: the processing-time millisecond they came in, how many rows it holds, and the smallest of those milliseconds.
RECENT_ROWS_STATE, RECENT_COUNT_STATE, RECENT_SMALLEST_STATE = "inputState", "processedCountState", "smallestTSState"

SOURCE_DIR = Path(__file__).resolve().parent / "sql_job"
BUILD_DIR = SOURCE_DIR / "build"
ENTRY_CLASS = "sqljob.SqlJob"
GROUPS = 7
DEDUP_KEYS = 5
LATEST_KEYS = 20
PARITIES = 2
RECENT_ROWS = 6
EPOCH_MS = 1_700_000_000_000
STEP_MS = 1_001
#: The last id the source emits (its operator state holds every id still to come: keep it small).
DEFAULT_END = 29_999
#: Rows per second the source emits (compiled into the plan, like DEFAULT_END). The sequence lasts 150 s: the upgrade
#: DAG's run (checks, savepoints, restore) must end before it does, or the restored job finishes at once.
RATE = 200


# -- the values ------------------------------------------------------------------------------------------------------


def millis(id_: int) -> int:
    return EPOCH_MS + id_ * STEP_MS


def instant(id_: int) -> Instant:
    """``ltz``: TIMESTAMP_LTZ(3) reads as an Instant."""
    return Instant.of_epoch_nanos(millis(id_) * 1_000_000)


def local(id_: int) -> LocalDateTime:
    """``ts`` / ``ts6``: the same instant as a TIMESTAMP in UTC (the job's table.local-time-zone)."""
    days, ms = divmod(millis(id_), 86_400_000)
    return LocalDateTime.of(LocalDate.of_epoch_day(days),
                            LocalTime(ms // 3_600_000, ms // 60_000 % 60, ms // 1000 % 60, ms % 1000 * 1_000_000))


def nanos(id_: int) -> LocalDateTime:
    """``ts9``: 2024-01-01T00:00 plus ``id`` nanoseconds (TIMESTAMP(9))."""
    return LocalDateTime(2024, 1, 1, nano=id_)


def amount(id_: int, scale: int = 2) -> Decimal:
    """``amount = id / 4`` at ``scale`` digits (DECIMAL(10, 2), or DECIMAL(12, 3) in agg_scaled)."""
    return decimal_units(id_ * 25 * 10 ** (scale - 2), scale)


def decimal_units(unscaled: int, scale: int) -> Decimal:
    """A Decimal with exactly ``scale`` fraction digits, as BigDecimal(unscaled, scale)."""
    return Decimal(unscaled).scaleb(-scale)


def group_key(j: int) -> tuple[str]:
    return (f"k{j}",)


def expected_accumulators(n: int, scale: int = 2) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    """agg's (and, with scale 3, agg_scaled's) accState after the prefix 0..n-1: per group key, the accumulator row
    COUNT(*), SUM(id), MAX(id), MIN(id), SUM(amount), MAX(amount), MAX(ts), MIN(ts), MAX(ts6), MAX(ltz), MAX(ts9)
    (AVG(id) is SUM / COUNT: the planner reuses those two)."""
    expected: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    for j in range(min(n, GROUPS)):
        ids = range(j, n, GROUPS)
        total = sum(ids)
        total_amount = decimal_units(total * 25 * 10 ** (scale - 2), scale)
        expected[group_key(j)] = (len(ids), total, ids[-1], ids[0], total_amount, amount(ids[-1], scale),
                                  local(ids[-1]), local(ids[0]), local(ids[-1]), instant(ids[-1]), nanos(ids[-1]))
    return expected


def expected_dedup(n: int) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    """dedup's deduplicate-state after the prefix 0..n-1: per d, the last row (id, proc, k, d, amount, ltz, ts); the
    PROCTIME column is stored as null (the planner materializes it only when read)."""
    expected: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    for d in range(min(n, DEDUP_KEYS)):
        last = n - 1 - (n - 1 - d) % DEDUP_KEYS
        expected[(d,)] = (last, None, f"k{last % GROUPS}", d, amount(last), instant(last), local(last))
    return expected


def expected_pairs(n: int) -> dict[str, dict[tuple[Any, ...], dict[tuple[Any, ...], int]]]:
    """pairs' join state after the prefix 0..n-1, per side: join key -> {projected row: how many times it came}.
    Left rows (id, k) under id; right rows (id, ltz, id + 1) under id + 1 (the planner projects the join key in)."""
    return {
        "left-records": {(i,): {(i, f"k{i % GROUPS}"): 1} for i in range(n)},
        "right-records": {(i + 1,): {(i, instant(i), i + 1): 1} for i in range(n)},
    }


def expected_bitmaps(n: int) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    """bitmaps' accState after the prefix 0..n-1: per d, BITMAP_BUILD_AGG's accumulator, the bitmap of the ids."""
    return {(d,): (list(range(d, n, DEDUP_KEYS)),) for d in range(min(n, DEDUP_KEYS))}


def latest_ids(n: int) -> dict[int, int]:
    """latest's rows after the prefix 0..n-1: r -> the last id with id % LATEST_KEYS == r."""
    return {r: n - 1 - (n - 1 - r) % LATEST_KEYS for r in range(min(n, LATEST_KEYS))}


def expected_latest(n: int) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    """latest's deduplicate-state: per r, the last row (id, k, ts, amount, r, proc); PROCTIME is stored as null."""
    return {(r,): (i, f"k{i % GROUPS}", local(i), amount(i), r, None) for r, i in latest_ids(n).items()}


def current_ids(n: int, p: int) -> list[int]:
    """The ids retracting's group p holds after the prefix 0..n-1 (the last row of each r with r % 2 == p; r and
    id have the same parity), oldest first: the order they came in."""
    return sorted(i for r, i in latest_ids(n).items() if r % PARITIES == p)


def _list_after_retractions(n: int, p: int, value: Any) -> list[Any]:
    """A retracting LISTAGG's list for group p: each row appends its value after its r's previous row (LATEST_KEYS
    ids before) retracted its own, which removes the first equal value (ListView.remove, i.e. List.remove)."""
    values: list[Any] = []
    for i in range(p, n, PARITIES):
        if i >= LATEST_KEYS:
            values.remove(value(i - LATEST_KEYS))
        values.append(value(i))
    return values


def expected_retracting(n: int) -> dict[str, dict[tuple[Any, ...], Any]]:
    """retracting's states after the prefix 0..n-1, per group key (p,): state name -> key -> value (a MAP state's
    value: {user key: value}). Two things are not functions of n and are left out: the orders (wall-clock
    milliseconds) of FIRST_VALUE / LAST_VALUE, which are None in accState here and absent from their views
    (FIRST_VALUE_ORDERS / LAST_VALUE_ORDERS are checked apart), and ARRAY_AGG's two LinkedLists, which accState holds
    as RAW bytes: here they are the lists of ids the bytes must decode to.

    accState, per aggregate (a view field holds NullSerializer's one 0 byte: the view lives in its own state):
    MAX (max, distinct values, view), MIN (min, distinct values, view), FIRST_VALUE (value, order, two views),
    LAST_VALUE (value, order, two views), LISTAGG (two views), LISTAGG with ';' (two views, the separator),
    ARRAY_AGG (list, retract list), then the row count."""
    view = b"\x00"
    states: dict[str, dict[tuple[Any, ...], Any]] = {
        AGG_STATE: {}, MAX_MAP: {}, MIN_MAP: {}, FIRST_ORDER_VALUES: {}, LAST_ORDER_VALUES: {},
        **{name: {} for name in (*LISTAGG_LISTS, *LISTAGG_WS_LISTS)},
    }
    for p in range(min(n, PARITIES)):
        ids = current_ids(n, p)
        ks = {f"k{i % GROUPS}": 0 for i in ids}
        for i in ids:
            ks[f"k{i % GROUPS}"] += 1
        key = (p,)
        states[AGG_STATE][key] = (
            (ids[-1], len(ids), view), (min(ks), len(ks), view), (local(ids[0]), None, view, view),
            (amount(ids[-1]), None, view, view), (view, view), (view, view, ";"), (ids, []), len(ids))
        states[MAX_MAP][key] = {i: 1 for i in ids}
        states[MIN_MAP][key] = ks
        states[FIRST_ORDER_VALUES][key] = [local(i) for i in ids]
        states[LAST_ORDER_VALUES][key] = [amount(i) for i in ids]
        states[LISTAGG_LISTS[0]][key] = _list_after_retractions(n, p, str)
        states[LISTAGG_WS_LISTS[0]][key] = _list_after_retractions(n, p, lambda i: f"k{i % GROUPS}")
    return states


def recent_ids(n: int, d: int) -> list[int]:
    """The ids in recent's window of key d after the prefix 0..n-1: the last RECENT_ROWS with id % 5 == d."""
    return list(range(d, n, DEDUP_KEYS))[-RECENT_ROWS:]


def expected_recent(n: int) -> dict[str, dict[tuple[Any, ...], Any]]:
    """recent's states after the prefix 0..n-1, per d: accState (MAX's (max, distinct values, view), the row count),
    MAX's view (id -> 1), the row count, and the window's rows (id, d, proc: PROCTIME stored as null) in the order
    they came (inputState keys them by processing-time millisecond: those are checked apart)."""
    states: dict[str, dict[tuple[Any, ...], Any]] = {AGG_STATE: {}, MAX_MAP: {}, RECENT_COUNT_STATE: {},
                                                      RECENT_ROWS_STATE: {}}
    for d in range(min(n, DEDUP_KEYS)):
        ids = recent_ids(n, d)
        states[AGG_STATE][(d,)] = ((ids[-1], len(ids), b"\x00"), len(ids))
        states[MAX_MAP][(d,)] = {i: 1 for i in ids}
        states[RECENT_COUNT_STATE][(d,)] = len(ids)
        states[RECENT_ROWS_STATE][(d,)] = [(i, d, None) for i in ids]
    return states


def variant_doc(id_: int) -> dict[str, Any]:
    """The VARIANT job's ``doc`` column: PARSE_JSON of {"id": id, "k": k}, as the Variant codecs view it."""
    return {"variant": {"id": id_, "k": f"k{id_ % GROUPS}"}}


def build(flink_home: Path | None = None, out_dir: Path = BUILD_DIR) -> Path:
    """The job's jar, compiled with javac against the Flink distribution's lib/ when a source is newer than it."""

    def compile_plan(classes: Path, classpath: str) -> None:
        # The plan, compiled in a fresh JVM (node ids, hence uids, from 1), goes into the jar (see SqlJob.java).
        subprocess.run(["java", "-cp", f"{classes}{os.pathsep}{classpath}", ENTRY_CLASS, "--compile",
                        str(classes / "sqljob" / "plan.json"), "--rate", str(RATE), "--end", str(DEFAULT_END)],
                       check=True, capture_output=True)

    return build_jar(SOURCE_DIR, out_dir / "sql-job.jar", ENTRY_CLASS, flink_home, compile_plan)


def submit(client: FlinkRestClient, jar: Path, *, state_backend: str = "hashmap",
           savepoint_path: str | os.PathLike[str] | None = None, job: str | None = None,
           job_args: Sequence[str] = ()) -> str:
    """Submits the job (parallelism 1; ``job="variant"``: the VARIANT job instead, ``"window"``: the window TVF job,
    with ``job_args`` ``--window-seconds S``) and waits until its tasks run; returns the job id."""
    args = ["--set", f"state.backend.type={state_backend}", *(["--job", job] if job else []), *job_args]
    job_id = client.submit_jar(jar, entry_class=ENTRY_CLASS, program_args=args, parallelism=1,
                               savepoint_path=os.fspath(savepoint_path) if savepoint_path else None)
    client.wait_until_running(job_id, timeout=120)
    return job_id


def stop_with_savepoint(client: FlinkRestClient, job_id: str, target: Path) -> Path:
    """Stops the job with a canonical savepoint and moves it to ``target``."""
    location = client.stop_with_savepoint(job_id, str(target.parent / f"{target.name}.tmp"))
    shutil.move(location.removeprefix("file:"), target)
    return target


def write_savepoint(cluster: LocalFlinkCluster, jar: Path, target: Path, *, seconds: float,
                    state_backend: str = "hashmap", savepoint_path: Path | None = None) -> Path:
    """Runs the job for ``seconds`` (from ``savepoint_path`` if given) and stops it with a savepoint at ``target``."""
    job_id = submit(cluster.client, jar, state_backend=state_backend, savepoint_path=savepoint_path)
    time.sleep(seconds)
    return stop_with_savepoint(cluster.client, job_id, target)
