"""The sample job (examples/sample-job) seen from the tests: what its state must be, and how to run it.

The job keys an ordered sequence 0, 1, 2, ... by ``key-(seq % keys)``; after a key's n-th event its state is a pure
function of (key, n), given by :func:`expected_state`. The first event a key sees in a run (sequence number s) says
what n must have been restored: ``n = (s - key_index) // keys``.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flinkstate.engine.rest import FlinkRestClient
from flinkstate.jsonify import to_json
from flinkstate.savepoint import Savepoint

ROOT = Path(__file__).resolve().parents[2]
JOB_DIR = ROOT / "examples" / "sample-job"
ENTRY_CLASS = "sample.KeyedStatsJob"
OPERATOR_UID = "stats"
SOURCE_UID = "sequence-source"
RECENT = 3
BUCKETS = 4


def jar(version: str, build_dir: Path | None = None) -> Path:
    path = (build_dir or JOB_DIR / "build") / f"sample-job-{version}.jar"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run 'make setup' to build the sample jobs")
    return path


def renamed_state_jar(folder: Path) -> Path:
    """The sample job's v1 with its ListState ``recent`` renamed ``recent-tx`` (issue 25's first user mistake: a
    manifest, otherwise right, that keeps the old name), built into ``folder``."""
    import shutil

    from tests.support.java_build import build_jar

    sources = folder / "src"
    for part in ("common", "v1"):
        shutil.copytree(JOB_DIR / "src" / part, sources, dirs_exist_ok=True)
    job = sources / "sample" / "KeyedStatsJob.java"
    text = job.read_text()
    assert text.count('"recent", new TypeHint') == 1
    job.write_text(text.replace('"recent", new TypeHint', '"recent-tx", new TypeHint'))
    return build_jar(sources, folder / "sample-job-v1-renamed.jar", ENTRY_CLASS)


def key_name(index: int) -> str:
    return f"key-{index}"


def key_index(key: str) -> int:
    return int(key.rsplit("-", 1)[1])


def expected_count(key: str, first_seq: int, keys: int) -> int:
    """How many events ``key`` had seen before the event with sequence number ``first_seq``."""
    return (first_seq - key_index(key)) // keys


def counts_for_position(position: int, keys: int) -> dict[str, int]:
    """The count of every key once the source has emitted events 0 .. position-1."""
    return {key_name(k): len(range(k, position, keys)) for k in range(keys)}


def states_by_key(sp: Savepoint, operator: str = "stats") -> dict[str, dict[str, Any]]:
    """Every key's states as read from a savepoint of the job, in the shape of :func:`expected_state` (JSON values;
    the MAP state ``buckets`` as user key -> value)."""
    values: dict[str, dict[str, Any]] = {}
    for state in ("stats", "count", "recent"):
        for key, _, value in sp.iter_entries(operator, state):
            values.setdefault(key, {})[state] = to_json(value)
    for key, _, user_key, value in sp.iter_entries(operator, "buckets"):
        values.setdefault(key, {}).setdefault("buckets", {})[user_key] = to_json(value)
    return values


def expected_state(key: str, n: int, version: str = "v1") -> dict[str, Any]:
    """Every state of the ``stats`` operator for ``key`` after its n-th event (n >= 1), in flinkstate's JSON
    encoding: POJO as an object, Tuple and Row as arrays by position, MapState as {user_key: value}."""
    stats: dict[str, Any] = {"key": key, "count": n if version != "v3" else str(n), "total": n * (n + 1) // 2}
    if version in ("v2", "v3"):
        stats["label"] = f"label-{key}"
    return {
        "stats": stats,
        "count": n,
        "recent": [[m, f"{key}#{m}"] for m in range(max(1, n - RECENT + 1), n + 1)],
        "buckets": {f"b{m % BUCKETS}": [m, f"{key}#{m}", m / 8.0] for m in range(max(1, n - BUCKETS + 1), n + 1)},
    }


def read_audit(audit_dir: Path, version: str | None = None) -> list[dict[str, Any]]:
    """All audit lines the job wrote to ``audit_dir`` (optionally of one version)."""
    lines: list[dict[str, Any]] = []
    for path in sorted(Path(audit_dir).glob("audit-*.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip():
                record = json.loads(line)
                if version is None or record["version"] == version:
                    lines.append(record)
    return lines


def check_audit_record(record: dict[str, Any], restored_version: str) -> int:
    """Asserts that what the job found for a key at its first event is exactly the state written by
    ``restored_version`` after the count the sequence number implies; returns that count."""
    key, keys = record["key"], record["keys"]
    n = expected_count(key, record["seq"], keys)
    if n == 0:
        assert record["count"] is None and record["stats"] is None, record
        assert record["recent"] == [] and record["buckets"] == {}, record
        return 0
    expected = expected_state(key, n, restored_version)
    assert record["count"] == n, (record, n)
    found_stats = dict(record["stats"])
    want_stats = dict(expected["stats"])
    # A field the restoring version added reads back as null (Flink's POJO migration); compare the rest.
    for added in set(found_stats) - set(want_stats):
        assert found_stats.pop(added) is None, (record, added)
    assert found_stats == want_stats, (record, want_stats)
    assert record["recent"] == expected["recent"], record
    assert record["buckets"] == expected["buckets"], record
    return n


@dataclass
class SampleJobRun:
    """One submitted run of the sample job."""

    client: FlinkRestClient
    job_id: str
    version: str
    audit_dir: Path
    keys: int
    program_args: list[str] = field(default_factory=list)

    def audit(self) -> list[dict[str, Any]]:
        return read_audit(self.audit_dir, self.version)

    def wait_for_keys(self, timeout: float = 60.0) -> list[dict[str, Any]]:
        """Waits until every key has been seen at least once in this run; returns the audit records."""
        return wait_for_all_keys(self.audit, self.keys, self.audit_dir, timeout)


def wait_for_all_keys(audit: Callable[[], list[dict[str, Any]]], keys: int, where: Path,
                      timeout: float = 60.0) -> list[dict[str, Any]]:
    """Polls a job's audit records (``audit()``) until ``keys`` distinct keys have reported; returns them."""
    deadline = time.monotonic() + timeout
    while True:
        records = audit()
        if len({r["key"] for r in records}) >= keys:
            return records
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {len({r['key'] for r in records})} of {keys} keys seen in {where}")
        time.sleep(0.3)


def submit(
    client: FlinkRestClient,
    version: str,
    audit_dir: Path,
    *,
    keys: int = 10,
    rate: float = 200,
    parallelism: int = 1,
    state_backend: str = "hashmap",
    compression: bool = False,
    savepoint_path: str | os.PathLike[str] | None = None,
    allow_non_restored_state: bool = False,
    extra_conf: dict[str, str] | None = None,
    extra_args: Sequence[str] = (),
    build_dir: Path | None = None,
    wait: bool = True,
) -> SampleJobRun:
    """Submits one version of the sample job and (by default) waits until all its tasks run."""
    conf = {"state.backend.type": state_backend,
            "execution.checkpointing.snapshot-compression": str(compression).lower()}
    conf.update(extra_conf or {})
    args = ["--keys", str(keys), "--rate", str(rate), "--audit-dir", str(audit_dir)]
    for key, value in conf.items():
        args += ["--set", f"{key}={value}"]
    args += list(extra_args)
    job_id = client.submit_jar(jar(version, build_dir), entry_class=ENTRY_CLASS, program_args=args,
                               parallelism=parallelism,
                               savepoint_path=os.fspath(savepoint_path) if savepoint_path else None,
                               allow_non_restored_state=allow_non_restored_state)
    run = SampleJobRun(client, job_id, version, Path(audit_dir), keys, args)
    if wait:
        client.wait_until_running(job_id, timeout=120)
    return run


def restore_audit(client: FlinkRestClient, version: str, savepoint: str | os.PathLike[str], audit_dir: Path, *,
                  keys: int, state_backend: str = "hashmap", parallelism: int = 2) -> list[dict[str, Any]]:
    """Starts ``version`` from ``savepoint``, waits until every key has reported the state it found, cancels the
    job and returns those audit records (one per key)."""
    run = submit(client, version, audit_dir, keys=keys, rate=200, parallelism=parallelism,
                 state_backend=state_backend, savepoint_path=savepoint)
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
