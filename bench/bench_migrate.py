"""Migration benchmark, in one run on the same 10^6-entry savepoint (bench_reader's cached one):

1. ``cp -r`` of the savepoint directory: the floor;
2. our migration v1 -> v2 (POJO field added with a default), single process, including the re-read verification;
3. Flink's own restore-time migration of the same savepoint by v2 on HashMap, timed from submit to the first
   completed checkpoint (which is when the migrated state is durable again).

    .venv/bin/python bench/bench_migrate.py [--keys 200000]

Figures are printed, not asserted.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_reader import WORK, copy_time, directory_bytes, write_savepoint  # noqa: E402
from flinkstate.engine import LocalFlinkCluster  # noqa: E402
from flinkstate.migration import OperatorTarget, StateTarget, migrate_savepoint, parse_migration  # noqa: E402
from flinkstate.serializers.pojo import PojoSnapshot  # noqa: E402
from flinkstate.serializers.primitives import simple  # noqa: E402
from flinkstate.writer import open_output  # noqa: E402
from tests.support import sample_job  # noqa: E402


def v2_target() -> OperatorTarget:
    stats = PojoSnapshot.create("sample.Stats", [("count", simple("Long")), ("key", simple("String")),
                                                 ("label", simple("String")), ("total", simple("Long"))])
    return OperatorTarget("stats", states=[StateTarget(
        "stats", value=stats, migration=parse_migration({"fields": {"label": {"default": "n/a"}}}))])


def flink_restore_seconds(cluster: LocalFlinkCluster, savepoint: Path, keys: int) -> float:
    """Submit v2 from ``savepoint`` (HashMap) and wait for its first completed checkpoint."""
    client = cluster.client
    audit = WORK / "audit-migrate-v2"
    shutil.rmtree(audit, ignore_errors=True)
    start = time.perf_counter()
    run = sample_job.submit(client, "v2", audit, keys=keys, rate=100, parallelism=1, state_backend="hashmap",
                            savepoint_path=savepoint, extra_args=["--checkpoint-interval-ms", "1000"], wait=False)
    try:
        deadline = time.monotonic() + 900
        while client.checkpoints(run.job_id).completed < 1:
            if time.monotonic() > deadline:
                raise TimeoutError("no completed checkpoint within 15 minutes")
            time.sleep(0.2)
        return time.perf_counter() - start
    finally:
        client.cancel(run.job_id)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=200_000)
    args = parser.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    with LocalFlinkCluster(WORK / "cluster", slots=2) as cluster:
        savepoint = write_savepoint(cluster, args.keys, "hashmap")
        copy_seconds = copy_time(savepoint)
        with tempfile.TemporaryDirectory(dir=WORK) as tmp:
            start = time.perf_counter()
            report = migrate_savepoint(str(savepoint), [v2_target()], open_output(Path(tmp) / "migrated"))
            ours = time.perf_counter() - start
        flink = flink_restore_seconds(cluster, savepoint, args.keys)
    entries = sum(c.read for states in report.counts.values() for c in states.values())
    print(f"\nsavepoint {savepoint.name}: {entries:,} keyed entries, {directory_bytes(savepoint) / 1e6:.1f} MB")
    print(f"{'':<46}{'seconds':>9}{'entries/s':>13}{'x cp -r':>9}")
    rows = [("cp -r (floor)", copy_seconds),
            ("flinkstate migrate v1->v2 (1 process, incl. verify)", ours),
            ("Flink v2 restore to 1st checkpoint (HashMap)", flink)]
    for label, seconds in rows:
        print(f"{label:<46}{seconds:>9.2f}{entries / seconds:>13,.0f}{seconds / copy_seconds:>9.1f}")
    print(f"  ours: migrate {report.seconds['migrate']:.2f} s + verify {report.seconds['verify']:.2f} s; "
          f"ours / Flink = {ours / flink:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
