"""The edge-types job (examples/edge-job) seen from the tests: its expected state, and how to run it.

Like the sample job, the edge job keys an ordered sequence 0, 1, 2, ... by ``key-(seq % keys)``; after a key's n-th
event each of its states is a pure function of (key index k, n), recomputed here exactly as
``examples/edge-job/src/common/edge/Values.java`` computes it (keep the two in step). The first event a key sees in a
run (sequence number s) says what n must have been restored: ``n = (s - k) // keys``.

Times are rendered the way the job's audit prints them and the way ``flinkstate dump`` must print them: ISO-8601
with exactly 9 fractional digits; Instant and java.sql.Timestamp in UTC with ``Z``; years past 9999 with a ``+``
sign, as ``java.time`` prints them. Python's datetime stops at year 9999, so the calendar arithmetic is done here.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from flinkstate.engine import LocalFlinkCluster
from flinkstate.engine.rest import FlinkRestClient
from flinkstate.format.keyed_stream import iter_raw_entries, raw_key
from flinkstate.savepoint import Savepoint
from tests.support.sample_job import SampleJobRun, expected_count, key_index

ROOT = Path(__file__).resolve().parents[2]
JOB_DIR = ROOT / "examples" / "edge-job"
ENTRY_CLASS = "edge.EdgeJob"
OPERATOR_UID = "edge"
SOURCE_UID = "sequence-source"
RECENT = 3
SLOTS = 3
NANOS = (999_999_999, 1, 123_456_789, 0, 500_000_001)
YEAR_10000 = 253_402_300_800  # seconds of 10000-01-01T00:00:00Z

#: The keyed states of the ``edge`` operator (besides ``count``), by kind.
TIME_STATES = ("instant", "local_date_time", "local_time", "sql_timestamp")
POJO_STATES = ("event", "stamped", "shape")
KRYO_STATES = ("opaque",)
VALUE_STATES = ("count", *TIME_STATES, *POJO_STATES, *KRYO_STATES)
ALL_STATES = (*VALUE_STATES, "recent", "slots")
#: The Java class behind each Kryo value (the GenericType state, and the Kryo field of ``stamped``).
OPAQUE_CLASS = "edge.Opaque"
STAMPED_KRYO_FIELD = ("seen", "java.time.LocalDateTime")


def jar(version: str, build_dir: Path | None = None) -> Path:
    path = (build_dir or JOB_DIR / "build") / f"edge-job-{version}.jar"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run 'make setup' to build the edge job")
    return path


# -- the values, as Values.java computes them ---------------------------------------------------------------------


def seconds(k: int, n: int) -> int:
    case = (n + k) % 4
    if case == 0:
        return -1_000_000_000 - k * 86_400 - n  # 1938
    if case == 1:
        return 1_714_558_500 + k * 3_600 + n  # 2024-05-01
    if case == 2:
        return YEAR_10000 + k * 86_400 + n  # year 10000
    return n * 1_000 + k  # near the epoch


def nanos(k: int, n: int, shift: int) -> int:
    return NANOS[(n + k + shift) % len(NANOS)]


def _civil(days: int) -> tuple[int, int, int]:
    """(year, month, day) of a day count since 1970-01-01 in the proleptic Gregorian calendar, any year (Howard
    Hinnant's days_from_civil inverse, the same arithmetic java.time uses)."""
    days += 719_468
    era = days // 146_097
    doe = days - era * 146_097
    yoe = (doe - doe // 1_460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    return yoe + era * 400 + (month <= 2), month, day


def _year(year: int) -> str:
    # java.time: four digits within 0..9999, else a sign (the tests use no year before 1).
    return f"{year:04d}" if 0 <= year <= 9999 else f"{'+' if year > 0 else '-'}{abs(year):04d}"


def iso_local(epoch_second: int, nano: int) -> str:
    """The LocalDateTime at ``epoch_second`` (as UTC) + ``nano``: ``uuuu-MM-ddTHH:mm:ss.SSSSSSSSS``."""
    days, second_of_day = divmod(epoch_second, 86_400)
    year, month, day = _civil(days)
    return f"{_year(year)}-{month:02d}-{day:02d}T{iso_time(second_of_day, nano)}"


def iso_time(second_of_day: int, nano: int) -> str:
    hour, rest = divmod(second_of_day, 3_600)
    minute, second = divmod(rest, 60)
    return f"{hour:02d}:{minute:02d}:{second:02d}.{nano:09d}"


def instant(k: int, n: int) -> str:
    return iso_local(seconds(k, n), nanos(k, n, 0)) + "Z"


def local_date_time(k: int, n: int) -> str:
    return iso_local(seconds(k, n + 1) + 7 * 3_600 + 17, nanos(k, n, 1))


def local_time(k: int, n: int) -> str:
    return iso_time(((n + k) * 3_607 + k * 11) % 86_400, nanos(k, n, 2))


def sql_timestamp(k: int, n: int) -> str:
    return iso_local(seconds(k, n + 2), nanos(k, n, 3)) + "Z"


def expected_state(key: str, n: int, version: str = "v1", *, shape_by_key: bool = False) -> dict[str, Any]:
    """Every state of the ``edge`` operator for ``key`` after its n-th event (n >= 1), as the job's audit prints it
    and as ``flinkstate dump`` must print it (a decoded Kryo value there is ``{"type", "class", "value"}``, with this
    value; the opaque Kryo state is ``{"type", "base64"}``). ``shape_by_key``: the job ran with ``--shape-by-key
    true`` (each key keeps one Shape subclass)."""
    k = key_index(key)
    event: dict[str, Any] = {"key": key, "n": n, "at": instant(k, n + 1)}
    if version == "v2":
        event.update(added=n * 10, boxedAdded=-n)
    shape: dict[str, Any] = {"key": key, "n": n}
    if ((0 if shape_by_key else n) + k) % 2 == 0:
        shape.update({"@class": "edge.Circle", "radius": n / 4.0})
    else:
        shape.update({"@class": "edge.Square", "side": n * n})
    kept = range(max(1, n - RECENT + 1), n + 1)
    return {
        "count": n,
        "instant": instant(k, n),
        "local_date_time": local_date_time(k, n),
        "local_time": local_time(k, n),
        "sql_timestamp": sql_timestamp(k, n),
        "event": event,
        "stamped": {"key": key, "n": n, "seen": local_date_time(k, n + 2), "tag": f"t{n}"},
        "opaque": {"key": key, "n": n, "ratio": n / 8.0},
        "shape": shape,
        "recent": [instant(k, m + 3) for m in kept],
        "slots": {f"s{m % SLOTS}": local_date_time(k, m + 3) for m in range(max(1, n - SLOTS + 1), n + 1)},
    }


EMPTY: dict[str, Any] = {name: None for name in VALUE_STATES} | {"recent": [], "slots": {}}


# -- audit lines ----------------------------------------------------------------------------------------------------


def check_audit_record(record: dict[str, Any], restored_version: str = "v1", *,
                       event_added: dict[str, Any] | None = None, shape_by_key: bool = False) -> int:
    """Asserts that every state the job found for a key at its first event is exactly the state
    ``restored_version`` wrote after the count the sequence number implies; returns that count.

    ``event_added``: the values the v2 job must find in the fields v2 added to ``event`` (Flink's own migration
    gives Java's defaults: ``{"added": 0, "boxedAdded": None}``)."""
    key, keys = record["key"], record["keys"]
    n = expected_count(key, record["seq"], keys)
    found = {name: record[name] for name in ALL_STATES}
    if n == 0:
        assert found == EMPTY, record
        return 0
    want = expected_state(key, n, restored_version, shape_by_key=shape_by_key)
    if event_added is not None:
        want["event"] = {**want["event"], **event_added}
    for name in ALL_STATES:
        assert found[name] == want[name], f"{key}: state {name}: found {found[name]!r}, expected {want[name]!r}"
    return n


# -- running the job ----------------------------------------------------------------------------------------------


class EdgeJobRun(SampleJobRun):
    """One submitted run of the edge job: the sample job's run, with more time to see every key (more state)."""

    def wait_for_keys(self, timeout: float = 90.0) -> list[dict[str, Any]]:
        return super().wait_for_keys(timeout)


def submit(client: FlinkRestClient, version: str, audit_dir: Path, *, keys: int = 20, rate: float = 200,
           parallelism: int = 1, state_backend: str = "hashmap",
           savepoint_path: str | os.PathLike[str] | None = None, extra_args: Sequence[str] = (),
           wait: bool = True, build_dir: Path | None = None) -> EdgeJobRun:
    """Submits one version of the edge job and (by default) waits until all its tasks run."""
    args = ["--keys", str(keys), "--rate", str(rate), "--audit-dir", str(audit_dir),
            "--set", f"state.backend.type={state_backend}", *extra_args]
    job_id = client.submit_jar(jar(version, build_dir), entry_class=ENTRY_CLASS, program_args=args,
                               parallelism=parallelism,
                               savepoint_path=os.fspath(savepoint_path) if savepoint_path else None)
    run = EdgeJobRun(client, job_id, version, Path(audit_dir), keys, args)
    if wait:
        client.wait_until_running(job_id, timeout=120)
    return run


def write_savepoint(cluster: LocalFlinkCluster, root: Path, *, backend: str, keys: int = 20,
                    parallelism: int = 2, extra_args: Sequence[str] = (), build_dir: Path | None = None) -> Path:
    """Runs v1 until every key has seen a few events, stops it with a savepoint and moves that to root/savepoint."""
    run = submit(cluster.client, "v1", root / "audit", keys=keys, rate=400, parallelism=parallelism,
                 state_backend=backend, extra_args=extra_args, build_dir=build_dir)
    run.wait_for_keys()
    time.sleep(1.0)  # several events per key, so that lists and maps hold more than one entry
    location = cluster.client.stop_with_savepoint(run.job_id, str(root))
    target = root / "savepoint"
    shutil.move(location.removeprefix("file:"), target)
    return target


def restore_audit(client: FlinkRestClient, version: str, savepoint: str | os.PathLike[str], audit_dir: Path, *,
                  keys: int, state_backend: str = "hashmap", parallelism: int = 2,
                  extra_args: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Starts ``version`` from ``savepoint``, waits until every key has reported the state it found, cancels the
    job and returns those audit records (one per key, sorted by key)."""
    run = submit(client, version, audit_dir, keys=keys, rate=200, parallelism=parallelism,
                 state_backend=state_backend, savepoint_path=savepoint, extra_args=extra_args)
    try:
        records = run.wait_for_keys()
        restored_from = client.checkpoints(run.job_id).restored_from
    finally:
        client.cancel(run.job_id)
    assert restored_from is not None and Path(restored_from.removeprefix("file:")) == Path(savepoint), restored_from
    first: dict[str, dict[str, Any]] = {}
    for record in records:
        first.setdefault(record["key"], record)
    return [first[key] for key in sorted(first)]


# -- file-level facts -----------------------------------------------------------------------------------------------


def raw_values(savepoint: str | os.PathLike[str], state: str, operator: str = OPERATOR_UID) -> dict[bytes, bytes]:
    """Serialized key (key-group prefix + key + namespace, [+ user key]) -> the value's bytes exactly as stored, for
    every entry of one keyed state; nothing is decoded, so this compares what a migration wrote byte for byte."""
    sp = Savepoint.open(savepoint)
    values: dict[bytes, bytes] = {}
    for _, stream in sp.keyed_streams(operator):
        index = stream.header().state_index(state)
        assert index is not None, f"{savepoint}: operator {operator} has no state {state}"
        for key_group, start, end in stream.blocks:
            data = stream.read_block(key_group, start, end, state)
            for state_id, ks, ke, vs, ve in iter_raw_entries(data):
                if state_id == index:
                    values[raw_key(data, ks, ke)] = bytes(data[vs:ve])
    return values
