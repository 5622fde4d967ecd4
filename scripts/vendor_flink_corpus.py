#!/usr/bin/env python3
"""Vendors a lean, representative selection of Apache Flink's own savepoint test resources into the repository.

    python scripts/vendor_flink_corpus.py /path/to/flink-test-corpus/savepoints [--dest tests/corpus/savepoints]
    python scripts/vendor_flink_corpus.py SRC --list     # print the selection (and sizes), copy nothing

``SRC`` holds Flink's resource directories at their repository paths and a ``dirs.txt`` listing them (one
directory holding a ``_metadata`` per line). Every directory is described by (test family, Flink version, state
backend, snapshot kind: canonical savepoint / native savepoint / checkpoint, ``_metadata`` version), and the
selection keeps a few of each combination rather than all 489 (see ``select``). The result is deterministic: the
same input gives the same selection, copied byte for byte (``shutil.copyfile``), and ``DEST`` is replaced whole, so
a file that is no longer selected does not linger. Flink's relative paths are kept, so each vendored directory says
where it came from.
"""

from __future__ import annotations

import argparse
import re
import shutil
import struct
import sys
from dataclasses import dataclass
from pathlib import Path

#: Directories larger than this are only taken once per (backend, kind, metadata version): the large ones are RocksDB
#: native savepoints and incremental checkpoints (SST files), which are refused from ``_metadata`` alone, so more of
#: them would add megabytes and no coverage.
LARGE_DIR_BYTES = 100 * 1024
#: A directory holding a file larger than this is skipped unless it is the only example of its combination.
LARGE_FILE_BYTES = 1024 * 1024

#: Taken whatever the rules say, each the only example of something the rules cannot see from the path.
ALWAYS = {
    # The only changelog-state-backend checkpoint (CHANGELOG_HANDLE_V2 in _metadata).
    "flink-tests/src/test/resources/new-stateful-udf-migration-itcase-flink1.17-hashmap-checkpoint",
    # RocksDB native savepoints and retained checkpoints that hold entries (the broadcast job's hold none), of the
    # oldest and the newest Flink, beside the canonical savepoints of the same job: tests/test_rocksdb_native.py
    # compares their entries value for value.
    *(f"flink-tests/src/test/resources/new-stateful-udf-migration-itcase-flink{version}-rocksdb-{kind}"
      for version in ("1.16", "2.3") for kind in ("checkpoint", "savepoint-native")),
    # The Table runtime's sorted serializers (flinkstate/serializers/sorted.py): SortedMap (a Top-N with the
    # retract strategy) and SortedLong (a process table function's sort buffer), their only examples.
    "flink-table/flink-table-planner/src/test/resources/restore-tests/stream-exec-rank_1/rank-test-retract-strategy/"
    "savepoint",
    "flink-table/flink-table-planner/src/test/resources/restore-tests/stream-exec-process-table-function_1/"
    "process-order-by-restore/savepoint",
}

_FAMILIES = (
    (re.compile(r"/new-stateful-udf-migration-itcase-"), "datastream-udf-migration"),
    (re.compile(r"/new-stateful-broadcast-udf-migration-itcase-"), "broadcast-state-migration"),
    (re.compile(r"/type-serializer-snapshot-migration-itcase-"), "type-serializer-snapshot-migration"),
    (re.compile(r"/operatorstate/complexKeyed-"), "operatorstate-complex-keyed"),
    (re.compile(r"/operatorstate/nonKeyed-"), "operatorstate-non-keyed"),
    (re.compile(r"/legacy-raw-state-heap-timers-"), "legacy-raw-state-timers"),
    (re.compile(r"/unified-sink-migration-test/"), "unified-sink-migration"),
    (re.compile(r"^flink-end-to-end-tests/flink-state-evolution-test/"), "state-evolution-e2e"),
)


@dataclass(frozen=True)
class CorpusDir:
    path: str  # relative to the corpus root, as in Flink's repository
    family: str
    flink_version: tuple[int, int] | None
    backend: str
    kind: str
    metadata_version: int
    size: int
    largest_file: int

    @property
    def group(self) -> tuple[str, str, str, int]:
        return self.family, self.backend, self.kind, self.metadata_version

    @property
    def sort_key(self) -> tuple[tuple[int, int], str]:
        return self.flink_version or (0, 0), self.path


def classify(root: Path, path: str) -> CorpusDir:
    family = next((name for pattern, name in _FAMILIES if pattern.search(path)), None)
    if family is None and "/restore-tests/" in path:
        # One family per SQL exec node (stream-exec-join_1, ...): each has its own operators and state layout.
        family = "table-restore/" + path.split("/restore-tests/")[1].split("/")[0]
    elif family is None and "flink-state-processing-api" in path:
        family = "state-processor-api/" + path.rsplit("/", 1)[1]  # table-state, -avro, -nulls: distinct types
    elif family is None:
        family = "other/" + path
    match = (re.search(r"flink(\d+)\.(\d+)", path) or re.search(r"-(\d+)\.(\d+)$", path)
             or re.search(r"savepoints/(\d+)\.(\d+)$", path))
    version = (int(match.group(1)), int(match.group(2))) if match else None
    name = path.rsplit("/", 1)[1]
    backend = ("rocksdb" if re.search(r"rocks-?db", name) else "hashmap" if "hashmap" in name
               else "default" if "/restore-tests/" not in path else "table-test-harness")
    kind = "native-savepoint" if "savepoint-native" in name else "checkpoint" if "checkpoint" in name else "savepoint"
    directory = root / path
    with open(directory / "_metadata", "rb") as f:
        _, metadata_version = struct.unpack(">ii", f.read(8))
    files = [p for p in sorted(directory.rglob("*")) if p.is_file()]
    sizes = [p.stat().st_size for p in files]
    return CorpusDir(path, family, version, backend, kind, metadata_version, sum(sizes), max(sizes, default=0))


def select(dirs: list[CorpusDir]) -> list[CorpusDir]:
    """The selection rules, in order:

    1. per (family, backend, kind, metadata version): the oldest and the newest Flink version (table restore tests:
       the first by path, per exec node and metadata version);
    2. per (family, Flink version) not yet covered: the smallest directory, so every Flink version of every
       versioned family is there;
    3. large directories (> ``LARGE_DIR_BYTES``) only once per (backend, kind, metadata version), the smallest;
    4. directories with a file > ``LARGE_FILE_BYTES`` only if the only one of their group;
    5. plus ``ALWAYS``.
    """
    groups: dict[tuple[str, str, str, int], list[CorpusDir]] = {}
    for d in sorted(dirs, key=lambda d: d.sort_key):
        groups.setdefault(d.group, []).append(d)
    chosen: dict[str, CorpusDir] = {}
    for members in groups.values():
        usable = [d for d in members if d.largest_file <= LARGE_FILE_BYTES] or members[:1]
        picks = usable[:1] if members[0].family.startswith("table-restore/") else [usable[0], usable[-1]]
        for d in picks:
            chosen[d.path] = d
    by_version: dict[tuple[str, tuple[int, int]], list[CorpusDir]] = {}
    for d in dirs:
        if d.flink_version is not None and d.largest_file <= LARGE_FILE_BYTES:
            by_version.setdefault((d.family, d.flink_version), []).append(d)
    covered = {(d.family, d.flink_version) for d in chosen.values()}
    for key, members in sorted(by_version.items()):
        if key not in covered:
            smallest = min(members, key=lambda d: (d.size, d.path))
            chosen[smallest.path] = smallest
    large: dict[tuple[str, str, int], CorpusDir] = {}
    for d in sorted(dirs, key=lambda d: (d.size, d.path)):
        if d.size > LARGE_DIR_BYTES:
            large.setdefault((d.backend, d.kind, d.metadata_version), d)
    keep_large = {d.path for d in large.values()}
    selection = {p: d for p, d in chosen.items() if d.size <= LARGE_DIR_BYTES or p in keep_large}
    for d in large.values():  # the one large example of its combination, even if rule 1 picked a sibling
        selection[d.path] = d
    for d in dirs:
        if d.path in ALWAYS:
            selection[d.path] = d
    return sorted(selection.values(), key=lambda d: d.path)


def copy_selection(root: Path, dest: Path, selection: list[CorpusDir]) -> None:
    if dest.exists():
        shutil.rmtree(dest)
    for d in selection:
        for source in sorted((root / d.path).rglob("*")):
            if source.is_file():
                target = dest / d.path / source.relative_to(root / d.path)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, target)
    (dest / "dirs.txt").write_text("".join(f"{d.path}\n" for d in selection), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpus", type=Path, help="the corpus's savepoints/ folder (with dirs.txt)")
    parser.add_argument("--dest", type=Path, default=Path(__file__).resolve().parent.parent / "tests" / "corpus"
                        / "savepoints", help="where to copy the selection (replaced whole)")
    parser.add_argument("--list", action="store_true", help="print the selection, copy nothing")
    args = parser.parse_args(argv)
    listing = args.corpus / "dirs.txt"
    if not listing.is_file():
        print(f"vendor_flink_corpus: {listing}: no such file (give the corpus's savepoints/ folder)", file=sys.stderr)
        return 1
    paths = sorted(line.strip() for line in listing.read_text(encoding="utf-8").splitlines() if line.strip())
    dirs = [classify(args.corpus, p) for p in paths]
    selection = select(dirs)
    total = sum(d.size for d in selection)
    for d in selection:
        version = ".".join(map(str, d.flink_version)) if d.flink_version else "-"
        print(f"{d.size:>8} v{d.metadata_version} {version:>5} {d.backend:<18} {d.kind:<16} {d.path}")
    print(f"{len(selection)} of {len(dirs)} directories, {total} bytes", file=sys.stderr)
    if not args.list:
        copy_selection(args.corpus, args.dest, selection)
    return 0


if __name__ == "__main__":
    sys.exit(main())
