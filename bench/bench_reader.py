"""Reader benchmark: `describe` (header only) and a full decode, beside a plain copy of the same files; the decode
both ways, side by side: the pure-Python reference (FLINKSTATE_PURE_PYTHON=1) and the compiled fast path
(flinkstate/_speedups), against the goal of 1,000,000 entries/s on one core.

Real Flink writes the savepoints: the sample job runs until every one of K keys has seen one event, then stops
with a savepoint. Each key then holds five entries (stats, count, recent, one buckets map entry, one timer), so
K = 200,000 gives 10^6 entries; a second, small savepoint (2,000 keys = 10^4 entries) shows that `describe` does
not grow with the number of entries. Savepoints are cached under .work/bench/ (delete it to write them anew).

    .venv/bin/python bench/bench_reader.py [--keys 200000] [--small-keys 2000] [--backend rocksdb] [--native-only]

With --backend rocksdb, the same job also stops with a native savepoint (formatType NATIVE: RocksDB's own files),
whose full decode is printed beside the canonical one's, against the same goal (issue 28); --native-only prints
just that.

The dump section times `flinkstate dump`'s work per state of the large savepoint (decode with the compiled path,
JSON Lines written to /dev/null): with the reference writer (json.dumps of to_json, line by line) and with the
compiled one (flinkstate/_speedups/_cjson.c, the same bytes), against the goal of 500,000 entries/s (issue 28).

The corpus section decodes the POJO and RowData states of Flink's own test savepoints (tests/corpus/savepoints;
a handful of entries each, so their blocks are decoded from memory, repeatedly, with the state's decoder built
once). Each figure is the best of --repeat runs, printed with the load average (the machine may be shared).
Everything runs on one core (one Python thread); figures are printed, not asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from flinkstate import _speedups  # noqa: E402
from flinkstate.cli.dump import _json_line, _write_entries  # noqa: E402
from flinkstate.engine import LocalFlinkCluster  # noqa: E402
from flinkstate.format.keyed_entries import make_entry_decoder  # noqa: E402
from flinkstate.savepoint import Savepoint  # noqa: E402
from tests.support import sample_job  # noqa: E402

WORK = ROOT / ".work" / "bench"
CORPUS = ROOT / "tests" / "corpus" / "savepoints"
GOAL = 1_000_000  # entries/s on one core (issue 16)
DUMP_GOAL = 500_000  # entries/s written by dump, on one core (issue 28)
MODES = ("pure", "compiled")
STATES = ("stats", "count", "recent", "buckets", "_timer_state/processing_user-timers")  # the sample job's keyed states


@contextlib.contextmanager
def mode(name: str) -> Iterator[None]:
    """Decoders built inside use the pure-Python reference ("pure") or the compiled fast path ("compiled")."""
    before = os.environ.get(_speedups.PURE_PYTHON_VARIABLE)
    os.environ[_speedups.PURE_PYTHON_VARIABLE] = "1" if name == "pure" else "0"
    try:
        if name == "compiled" and not _speedups.enabled():
            raise SystemExit(f"the compiled fast path is not built: {_speedups.BUILD_ERROR}")
        yield
    finally:
        if before is None:
            del os.environ[_speedups.PURE_PYTHON_VARIABLE]
        else:
            os.environ[_speedups.PURE_PYTHON_VARIABLE] = before


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def write_savepoint(cluster: LocalFlinkCluster, keys: int, backend: str, parallelism: int = 1,
                    format_type: str = "CANONICAL") -> Path:
    """A savepoint of the sample job after every key saw exactly one event (cached, per keys, backend, parallelism
    and format). ``parallelism`` is the keyed operator's: that many keyed-state streams, one per subtask;
    ``format_type`` NATIVE (RocksDB only) writes RocksDB's own files instead of canonical key-group blocks."""
    suffix = "" if parallelism == 1 else f"-p{parallelism}"  # parallelism 1 keeps the cache names it always had
    if format_type != "CANONICAL":
        suffix += f"-{format_type.lower()}"
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
    trigger = cluster.client.trigger_stop_with_savepoint(run.job_id, str(WORK / "raw"), format_type=format_type)
    location = cluster.client.wait_for_savepoint(run.job_id, trigger, timeout=300)
    cluster.client.wait_for_job_state(run.job_id, {"FINISHED", "CANCELED"}, timeout=300)
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


def dump_state(savepoint: Path, state: str, writer: str) -> int:
    """What ``flinkstate dump`` does for one state, JSON Lines to /dev/null, with the "reference" writer or the
    "compiled" one (the decode is the compiled path's either way); returns the number of entries."""
    opened = Savepoint.open(savepoint)
    is_map = opened.state_info(sample_job.OPERATOR_UID, state).kind == "MAP"
    groups = opened.iter_key_groups(sample_job.OPERATOR_UID, state)
    dumps = partial(json.dumps, allow_nan=False)
    with open(os.devnull, "w", encoding="utf-8") as sink:
        if writer == "compiled":
            return _write_entries(groups, is_map, sink.write, dumps)
        written = 0
        for _, entries in groups:
            for entry in entries:
                sink.write(_json_line(entry, is_map, dumps))
                written += 1
        return written


def print_dump_rates(savepoint: Path, repeat: int) -> None:
    print(f"\ndump per state of the large savepoint, JSON Lines to /dev/null (one core; goal {DUMP_GOAL:,} entries/s):")
    print(f"  {'state':<40}{'entries':>10}{'reference/s':>13}{'compiled/s':>12}{'speedup':>8}{'x goal':>8}")
    total = {"reference": 0.0, "compiled": 0.0}
    entries = 0
    with mode("compiled"):
        for state in STATES:
            rates = {}
            for writer in total:
                secs, n = timed(lambda s=state, w=writer: dump_state(savepoint, s, w), repeat=repeat)
                rates[writer] = n / secs  # type: ignore[operator]
                total[writer] += secs
            entries += n  # type: ignore[operator]
            print(f"  {state:<40}{n:>10,}{rates['reference']:>13,.0f}{rates['compiled']:>12,.0f}"
                  f"{rates['compiled'] / rates['reference']:>7.1f}x{rates['compiled'] / DUMP_GOAL:>7.2f}x")
    reference, compiled = entries / total["reference"], entries / total["compiled"]
    print(f"  {'all five states':<40}{entries:>10,}{reference:>13,.0f}{compiled:>12,.0f}"
          f"{compiled / reference:>7.1f}x{compiled / DUMP_GOAL:>7.2f}x")


Blocks = list[tuple[bytes, int, int, int]]  # (data, key group, block offset, state index)


def corpus_states() -> dict[str, list[tuple[Blocks, Any, Any]]]:
    """(blocks, stream, state) of every readable POJO and RowData keyed state of the savepoint corpus, by family."""
    from flinkstate.serializers.pojo import PojoSnapshot
    from flinkstate.serializers.rowdata import RowDataSnapshot

    found: dict[str, list[tuple[Blocks, Any, Any]]] = {"POJO": [], "RowData": []}
    for path in (CORPUS / "dirs.txt").read_text(encoding="utf-8").split():
        try:
            sp = Savepoint.open(CORPUS / path)
            streams = [stream for op in sp.operators for _, stream in sp.keyed_streams(op)]
            for stream in streams:
                header = stream.header()
                if stream.heap_format:
                    continue
                for index, state in enumerate(header.states):
                    family = {PojoSnapshot: "POJO", RowDataSnapshot: "RowData"}.get(type(state.value_serializer))
                    if family is None or not sum(len(e) for _, e in stream.iter_blocks(state.name)):
                        continue
                    blocks = [(stream.read_block(kg, start, end), kg, start, index) for kg, start, end in stream.blocks]
                    found[family].append((blocks, stream, state))
        except Exception:  # savepoints the reader refuses (by design) are not benchmarked
            continue
    return found


def corpus_rate(states: list[tuple[Blocks, Any, Any]], name: str, repeat: int) -> tuple[float, int]:
    """Entries per second decoding the states' blocks (decoders built once, outside the timing), and the number of
    entries of one pass."""
    with mode(name):
        prepared = [(blocks, stream, state, make_entry_decoder(state, stream._key_layout(stream.header(), state)))
                    for blocks, stream, state in states]

    def run() -> int:
        n = 0
        for _ in range(200):
            for blocks, stream, state, decoder in prepared:
                for data, key_group, start, index in blocks:
                    n += len(stream._decode_block(data, key_group, index, decoder, start, state.name))
        return n

    seconds, n = timed(run, repeat=repeat)
    return n / seconds, n // 200  # type: ignore[operator]


def print_native_rates(canonical: Path, native: Path, repeat: int) -> None:
    """Full decode of the native RocksDB savepoint beside the canonical one of the same job on RocksDB (issue 28)."""
    print(f"\nfull decode, native RocksDB savepoint beside the canonical one (RocksDB backend, one core; "
          f"goal {GOAL:,} entries/s):")
    print(f"  {'savepoint':<40}{'entries':>10}{'MB':>7}{'pure s':>8}{'pure/s':>11}{'compiled s':>11}"
          f"{'compiled/s':>12}{'x goal':>8}")
    for savepoint in (canonical, native):
        seconds: dict[str, float] = {}
        for name in MODES:
            with mode(name):
                seconds[name], counts = timed(lambda sp=savepoint: decode_all(sp), repeat=repeat)
        entries = sum(counts.values())  # type: ignore[union-attr]
        print(f"  {savepoint.name:<40}{entries:>10,}{directory_bytes(savepoint) / 1e6:>7.1f}{seconds['pure']:>8.2f}"
              f"{entries / seconds['pure']:>11,.0f}{seconds['compiled']:>11.2f}{entries / seconds['compiled']:>12,.0f}"
              f"{entries / seconds['compiled'] / GOAL:>7.2f}x")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=200_000)
    parser.add_argument("--small-keys", type=int, default=2_000)
    parser.add_argument("--backend", default="hashmap", choices=["hashmap", "rocksdb"])
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure; the best is printed")
    parser.add_argument("--native-only", action="store_true",
                        help="only the native RocksDB savepoint's decode beside the canonical one (RocksDB backend)")
    args = parser.parse_args()
    if args.native_only:
        args.backend = "rocksdb"

    WORK.mkdir(parents=True, exist_ok=True)
    with LocalFlinkCluster(WORK / "cluster", slots=2) as cluster:
        print(f"writing savepoints on real Flink ({args.backend}); cached in {WORK}", flush=True)
        small = write_savepoint(cluster, args.small_keys, args.backend)
        large = write_savepoint(cluster, args.keys, args.backend)
        # a RocksDB job's savepoint can also be RocksDB's own files (formatType NATIVE): decoded beside the canonical
        native = write_savepoint(cluster, args.keys, args.backend, format_type="NATIVE") \
            if args.backend == "rocksdb" else None

    print(f"\nload average {load_average()}; best of {args.repeat} runs per figure")
    if native is not None:
        print_native_rates(large, native, args.repeat)
        if args.native_only:
            return 0
    print(f"\n{'savepoint':<30}{'entries':>10}{'MB':>7}{'cp -r s':>9}{'cat s':>8}{'describe s':>11}"
          f"{'pure s':>8}{'pure/s':>11}{'compiled s':>11}{'compiled/s':>12}{'speedup':>8}{'x goal':>8}")
    for savepoint in (small, large):
        describe_seconds, _ = timed(lambda sp=savepoint: describe(sp), repeat=3)
        seconds: dict[str, float] = {}
        for name in MODES:
            with mode(name):
                seconds[name], counts = timed(lambda sp=savepoint: decode_all(sp), repeat=args.repeat)
        entries = sum(counts.values())  # type: ignore[union-attr]
        pure, compiled = entries / seconds["pure"], entries / seconds["compiled"]
        print(f"{savepoint.name:<30}{entries:>10,}{directory_bytes(savepoint) / 1e6:>7.1f}"
              f"{copy_time(savepoint):>9.3f}{cat_time(savepoint):>8.3f}{describe_seconds:>11.4f}"
              f"{seconds['pure']:>8.2f}{pure:>11,.0f}{seconds['compiled']:>11.2f}{compiled:>12,.0f}"
              f"{compiled / pure:>7.1f}x{compiled / GOAL:>7.2f}x")

    print(f"\nfull decode per state of the large savepoint (one core; goal {GOAL:,} entries/s):")
    print(f"  {'state':<40}{'entries':>10}{'pure/s':>12}{'compiled/s':>12}{'speedup':>8}{'x goal':>8}")
    for state in STATES:
        rates = {}
        for name in MODES:
            with mode(name):
                secs, n = timed(lambda s=state: decode_state(large, s), repeat=args.repeat)
            rates[name] = n / secs  # type: ignore[operator]
        print(f"  {state:<40}{n:>10,}{rates['pure']:>12,.0f}{rates['compiled']:>12,.0f}"
              f"{rates['compiled'] / rates['pure']:>7.1f}x{rates['compiled'] / GOAL:>7.2f}x")

    print_dump_rates(large, args.repeat)

    print("\nPOJO and RowData states of Flink's test savepoints (tests/corpus/savepoints), blocks in memory:")
    print(f"  {'family':<10}{'states':>7}{'entries':>9}{'pure/s':>12}{'compiled/s':>12}{'speedup':>8}{'x goal':>8}")
    for family, states in corpus_states().items():
        measured = {name: corpus_rate(states, name, args.repeat) for name in MODES}
        rates = {name: rate for name, (rate, _) in measured.items()}
        print(f"  {family:<10}{len(states):>7}{measured['pure'][1]:>9}{rates['pure']:>12,.0f}"
              f"{rates['compiled']:>12,.0f}{rates['compiled'] / rates['pure']:>7.1f}x{rates['compiled'] / GOAL:>7.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
