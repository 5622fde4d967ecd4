"""Compatibility-check benchmark: the verdict reads only `_metadata` and one keyed-state header per operator, so its
time must not grow with the number of entries.

The savepoints are bench_reader.py's (real Flink, the sample job after every key saw one event: five entries per
key), cached under .work/bench/; a cluster is started only to write a missing one. The check runs against the
sample job's v2 manifest (the `stats` POJO gains a field: COMPATIBLE_AFTER_MIGRATION), derived from the savepoint.

    .venv/bin/python bench/bench_check.py [--keys 200000] [--small-keys 2000] [--backend hashmap]

Figures are printed, not asserted.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_reader import WORK, directory_bytes, timed, write_savepoint  # noqa: E402
from flinkstate.engine import LocalFlinkCluster  # noqa: E402
from flinkstate.manifest import manifest_from_savepoint  # noqa: E402
from flinkstate.resolution import check  # noqa: E402
from flinkstate.savepoint import Savepoint  # noqa: E402

ENTRIES_PER_KEY = 5  # stats, count, recent, one buckets entry, one timer


def savepoints(keys: list[int], backend: str) -> list[Path]:
    cached = [WORK / f"savepoint-{backend}-{k}" for k in keys]
    if all((path / "_metadata").exists() for path in cached):
        return cached
    WORK.mkdir(parents=True, exist_ok=True)
    with LocalFlinkCluster(WORK / "cluster", slots=2) as cluster:
        return [write_savepoint(cluster, k, backend) for k in keys]


def v2_manifest(savepoint: Path, directory: Path) -> Path:
    text = manifest_from_savepoint(Savepoint.open(savepoint), "keyed-stats").dump()
    path = directory / "v2.yaml"
    path.write_text(text.replace("            total: Long\n", "            total: Long\n            label: String\n"))
    return path


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
        for path, keys in zip(paths, (args.small_keys, args.keys), strict=True):
            seconds, report = timed(lambda p=path: check(p, manifest), repeat=args.repeat)
            print(f"{path.name:<34}{keys * ENTRIES_PER_KEY:>11,}{directory_bytes(path) / 1e6:>8.1f}"
                  f"{seconds:>24.4f}{report.flink_verdict.name:>28}")  # type: ignore[union-attr]
    return 0


if __name__ == "__main__":
    sys.exit(main())
