"""Compatibility-check benchmark: the verdict reads only `_metadata` and one keyed-state header per operator, so its
time must not grow with the number of entries. Beside it, the data-level dry run of the Spark check job
(`spark_jobs/check_compatibility.py --dry-run always`: every entry decoded and migrated, nothing written) on
local[1] and local[2], as entries/s from the report's own `dry_run.seconds` (Spark tasks by key-group range, JVM
start excluded) and the spark-submit wall time.

The savepoints are bench_reader.py's (real Flink, the sample job after every key saw one event: five entries per
key), cached under .work/bench/; a cluster is started only to write a missing one. The check runs against the
sample job's v2 manifest (the `stats` POJO gains a field: COMPATIBLE_AFTER_MIGRATION), derived from the savepoint.

    .venv/bin/python bench/bench_check.py [--keys 200000] [--small-keys 2000] [--backend hashmap]

Figures are printed, not asserted.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_migrate import SPARK_MASTERS, spark_submit, v2_manifest  # noqa: E402
from bench.bench_reader import WORK, decode_all, directory_bytes, timed, write_savepoint  # noqa: E402
from flinkstate import check  # noqa: E402
from flinkstate.engine import LocalFlinkCluster  # noqa: E402


def savepoints(keys: list[int], backend: str) -> list[Path]:
    cached = [WORK / f"savepoint-{backend}-{k}" for k in keys]
    if all((path / "_metadata").exists() for path in cached):
        return cached
    WORK.mkdir(parents=True, exist_ok=True)
    with LocalFlinkCluster(WORK / "cluster", slots=2) as cluster:
        return [write_savepoint(cluster, k, backend) for k in keys]


def dry_runs(paths: list[Path], manifest: Path, directory: Path) -> None:
    print("\ndry run (spark_jobs/check_compatibility.py --dry-run always)")
    print(f"{'savepoint':<34}{'master':>10}{'tasks':>7}{'entries':>11}{'dry run s':>11}{'entries/s':>11}"
          f"{'spark-submit s':>16}")
    for path in paths:
        for master in SPARK_MASTERS:
            report_dir = directory / f"{path.name}-{master}"
            wall = spark_submit("check_compatibility.py", master, path, "--schema", manifest, "--report-dir",
                                report_dir, "--dry-run", "always")
            dry = json.loads((report_dir / "check-report.json").read_text())["dry_run"]
            print(f"{path.name:<34}{master:>10}{dry['tasks']:>7}{dry['entries']:>11,}{dry['seconds']:>11.2f}"
                  f"{dry['entries'] / dry['seconds']:>11,.0f}{wall:>16.1f}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=200_000)
    parser.add_argument("--small-keys", type=int, default=2_000)
    parser.add_argument("--backend", default="hashmap", choices=["hashmap", "rocksdb"])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    paths = savepoints([args.small_keys, args.keys], args.backend)
    print(f"{'savepoint':<34}{'entries':>11}{'MB':>8}{'check s (best of ' + str(args.repeat) + ')':>24}"
          f"{'verdict':>28}")
    with tempfile.TemporaryDirectory() as tmp:
        manifest = v2_manifest(paths[0], Path(tmp))
        for path in paths:
            seconds, report = timed(lambda p=path: check(p, manifest), repeat=args.repeat)
            entries = sum(decode_all(path).values())  # counted, every state of the savepoint decoded
            print(f"{path.name:<34}{entries:>11,}{directory_bytes(path) / 1e6:>8.1f}"
                  f"{seconds:>24.4f}{report.flink_verdict.name:>28}")  # type: ignore[union-attr]
        dry_runs(paths, manifest, Path(tmp))
    return 0


if __name__ == "__main__":
    sys.exit(main())
