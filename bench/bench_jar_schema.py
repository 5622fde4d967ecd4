"""`flinkstate schema --jar` benchmark (issue 25: "a jar's schema in seconds, one JVM start"): per job jar, the time
of its schema with a cold JVM (the inspector run: main() builds the job, every operator opened and snapshotted;
`seconds` is the JVM's wall time, `call` the whole inspect_jar call around it: the jar's hash and the inspector's
up-to-date check) and from the cache (by the jar's hash: no JVM). Jars: the sample job (v1), the compatibility
matrix's base version, the edge job (v1), the SQL job (the planner's operators; the table planner's start
dominates), and the sample job built for Flink 1.20.3 on 1.20.3. Nothing runs on a cluster.

    .venv/bin/python bench/bench_jar_schema.py [--runs 3]

Figures are printed, not asserted (best and median of the runs).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from flinkstate.engine.jar_schema import inspect_jar  # noqa: E402
from tests.support import compat_matrix, edge_job, sample_job, sql_job  # noqa: E402

#: name -> (jar, entry class, program arguments, Flink home: None for the default 2.3)
JARS: dict[str, tuple[Path, str | None, Sequence[str], Path | None]] = {
    "sample-job v1": (sample_job.jar("v1"), None, ["--keys", "5"], None),
    "compat-matrix base": (compat_matrix.jar("base"), None, ["--variant", "base"], None),
    "edge-job v1": (edge_job.jar("v1"), None, ["--keys", "20"], None),
    "sql-job": (sql_job.BUILD_DIR / "sql-job.jar", sql_job.ENTRY_CLASS, [], None),
    "sample-job v1 (1.20.3)": (sample_job.jar("v1", sample_job.JOB_DIR / "build" / "flink-1.20.3"), None,
                               ["--keys", "5"], ROOT / ".flink-dists" / "1.20.3" / "pyflink"),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} cores, {args.runs} runs each")
    print(f"{'jar':<26}{'operators':>10}{'stateful':>9}{'JVM s best':>12}{'median':>8}{'call s':>8}"
          f"{'cached ms':>11}")
    with tempfile.TemporaryDirectory(prefix="bench-jar-schema-") as work:
        for name, (jar, entry_class, program_args, flink_home) in JARS.items():
            jvm, calls, cached = [], [], []
            schema = None
            for _ in range(args.runs):
                started = time.perf_counter()
                schema = inspect_jar(jar, entry_class=entry_class, program_args=program_args, flink_home=flink_home,
                                     cache_dir=work, use_cache=False)  # a cold JVM (the cache is rewritten)
                calls.append(time.perf_counter() - started)
                jvm.append(schema.seconds)
                started = time.perf_counter()
                again = inspect_jar(jar, entry_class=entry_class, program_args=program_args, flink_home=flink_home,
                                    cache_dir=work)
                cached.append(time.perf_counter() - started)
                assert again.cached
            assert schema is not None
            stateful = sum(1 for op in schema.operators if op.keyed or op.operator)
            print(f"{name:<26}{len(schema.operators):>10}{stateful:>9}{min(jvm):>12.2f}"
                  f"{statistics.median(jvm):>8.2f}{min(calls):>8.2f}{min(cached) * 1000:>11.0f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
