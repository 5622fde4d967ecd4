"""Reader benchmark: `describe` (header only) and a full decode, beside a plain copy of the same files.

Real Flink writes the savepoints: the sample job runs until every one of K keys has seen one event, then stops
with a savepoint. Each key then holds five entries (stats, count, recent, one buckets map entry, one timer), so
K = 200,000 gives 10^6 entries; a second, small savepoint (2,000 keys = 10^4 entries) shows that `describe` does
not grow with the number of entries. Savepoints are cached under .work/bench/ (delete it to write them anew).

    .venv/bin/python bench/bench_reader.py [--keys 200000] [--small-keys 2000]

Everything runs on one core (one Python thread); figures are printed, not asserted.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from flinkstate.engine import LocalFlinkCluster  # noqa: E402
from flinkstate.savepoint import Savepoint  # noqa: E402
from tests.support import sample_job  # noqa: E402

WORK = ROOT / ".work" / "bench"


def write_savepoint(cluster: LocalFlinkCluster, keys: int, backend: str, parallelism: int = 1) -> Path:
    """A savepoint of the sample job after every key saw exactly one event (cached, per keys, backend and
    parallelism). ``parallelism`` is the keyed operator's: that many keyed-state streams, one per subtask."""
    suffix = "" if parallelism == 1 else f"-p{parallelism}"  # parallelism 1 keeps the cache names it always had
    target = WORK / f"savepoint-{backend}-{keys}{suffix}"
    if (target / "_metadata").exists():
        return target
    audit = WORK / f"audit-{backend}-{keys}{suffix}"
    shutil.rmtree(audit, ignore_errors=True)
    run = sample_job.submit(cluster.client, "v1", audit, keys=keys, rate=max(keys // 4, 100), parallelism=parallelism,
                            state_backend=backend)
    deadline = time.monotonic() + 600
    while sum(1 for path in audit.glob("*.jsonl") for _ in path.open()) < keys:
        if time.monotonic() > deadline:
            raise TimeoutError(f"the job did not reach {keys} keys in 10 minutes")
        time.sleep(0.5)
    # Stop as soon as every key has been seen once, so every key holds the same five entries.
    location = cluster.client.stop_with_savepoint(run.job_id, str(WORK / "raw"))
    shutil.move(location.removeprefix("file:"), target)
    return target


def timed(action: Callable[[], object], repeat: int = 1) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        result = action()
        best = min(best, time.perf_counter() - start)
    return best, result


def directory_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.iterdir())


def copy_time(savepoint: Path) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        seconds, _ = timed(lambda: subprocess.run(["cp", "-r", str(savepoint), f"{tmp}/copy"], check=True))
    return seconds


def cat_time(savepoint: Path) -> float:
    files = [str(p) for p in savepoint.iterdir()]
    seconds, _ = timed(lambda: subprocess.run(["cat", *files], stdout=subprocess.DEVNULL, check=True), repeat=3)
    return seconds


def describe(savepoint: Path) -> object:
    return Savepoint.open(savepoint).describe()


def decode_all(savepoint: Path) -> dict[str, int]:
    opened = Savepoint.open(savepoint)
    counts: dict[str, int] = {}
    for info in opened.keyed_states(sample_job.OPERATOR_UID):
        n = 0
        for _ in opened.iter_entries(sample_job.OPERATOR_UID, info.name):
            n += 1
        counts[info.name] = n
    return counts


def decode_state(savepoint: Path, state: str) -> int:
    opened = Savepoint.open(savepoint)
    return sum(1 for _ in opened.iter_entries(sample_job.OPERATOR_UID, state))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=200_000)
    parser.add_argument("--small-keys", type=int, default=2_000)
    parser.add_argument("--backend", default="hashmap", choices=["hashmap", "rocksdb"])
    args = parser.parse_args()

    WORK.mkdir(parents=True, exist_ok=True)
    with LocalFlinkCluster(WORK / "cluster", slots=2) as cluster:
        print(f"writing savepoints on real Flink ({args.backend}); cached in {WORK}", flush=True)
        small = write_savepoint(cluster, args.small_keys, args.backend)
        large = write_savepoint(cluster, args.keys, args.backend)

    print(f"\n{'savepoint':<34}{'entries':>10}{'MB':>8}{'cp -r s':>9}{'cat s':>8}{'describe s':>12}"
          f"{'decode s':>10}{'entries/s':>11}")
    for savepoint in (small, large):
        describe_seconds, _ = timed(lambda sp=savepoint: describe(sp), repeat=3)
        decode_seconds, counts = timed(lambda sp=savepoint: decode_all(sp))
        entries = sum(counts.values())  # type: ignore[union-attr]
        print(f"{savepoint.name:<34}{entries:>10,}{directory_bytes(savepoint) / 1e6:>8.1f}"
              f"{copy_time(savepoint):>9.3f}{cat_time(savepoint):>8.3f}{describe_seconds:>12.4f}"
              f"{decode_seconds:>10.2f}{entries / decode_seconds:>11,.0f}")

    print("\nfull decode per state of the large savepoint (one core):")
    for state in ("stats", "count", "recent", "buckets", "_timer_state/processing_user-timers"):
        seconds, n = timed(lambda s=state: decode_state(large, s))
        print(f"  {state:<40}{n:>10,} entries {seconds:>7.2f} s {n / seconds:>11,.0f} entries/s")  # type: ignore[operator]
    return 0


if __name__ == "__main__":
    sys.exit(main())
