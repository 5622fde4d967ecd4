#!/usr/bin/env python3
"""Copies the part of Flink's serializer upgrade corpus that flinkstate can read into ``tests/corpus/serializers``.

Flink's ``TypeSerializerUpgradeTestBase`` commits, per serializer and Flink version, a folder
``<name>-serializer-<version>/`` holding ``serializer-snapshot`` (the versioned snapshot as written into a savepoint)
and ``test-data`` (one value written by that serializer). A folder is vendored when the class of its top-level
snapshot is one the registry knows (nested unknown classes then fail the tests, which is the point); all Flink
versions are kept, the files being small. ``SOURCES.txt`` maps each vendored folder to its path in Flink's repository.

Usage: ``.venv/bin/python scripts/vendor_serializer_corpus.py [SOURCE_DIR]``; SOURCE_DIR defaults to
``/work/shared/flink-test-corpus/serializers`` (a copy of Flink's test resources, with ``dirs.txt`` listing them).
Re-running replaces every vendored folder, so the result depends only on the source; folders whose name
starts with ``_`` are flinkstate's own additions and are kept.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from flinkstate.binary import Reader
from flinkstate.serializers.registry import lookup

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "tests" / "corpus" / "serializers"
DEFAULT_SOURCE = Path("/work/shared/flink-test-corpus/serializers")
FILES = ("serializer-snapshot", "test-data")


def top_level_class(snapshot: bytes) -> str:
    reader = Reader(snapshot)
    reader.i32()  # snapshot proxy version
    return reader.utf()


def main(argv: list[str]) -> int:
    source = Path(argv[1]) if len(argv) > 1 else DEFAULT_SOURCE
    listing = source / "dirs.txt"
    if not listing.is_file():
        print(f"error: {listing} not found (expected Flink's serializer corpus with its dirs.txt)", file=sys.stderr)
        return 1
    TARGET.mkdir(parents=True, exist_ok=True)
    for old in TARGET.iterdir():  # folders starting with "_" are flinkstate's own (e.g. _flink-edge-values)
        if old.is_dir() and not old.name.startswith("_"):
            shutil.rmtree(old)
    sources, skipped, size = [], {}, 0
    for relative in sorted(line.strip() for line in listing.read_text().splitlines() if line.strip()):
        folder = source / relative
        class_name = top_level_class((folder / "serializer-snapshot").read_bytes())
        if lookup(class_name) is None:
            skipped[class_name] = skipped.get(class_name, 0) + 1
            continue
        name = Path(relative).name
        if (TARGET / name).exists():
            print(f"error: two corpus folders are named {name}", file=sys.stderr)
            return 1
        (TARGET / name).mkdir()
        for file in FILES:
            shutil.copyfile(folder / file, TARGET / name / file)
            size += (folder / file).stat().st_size
        sources.append(f"{name}\t{relative}")
    (TARGET / "SOURCES.txt").write_text(
        "# vendored folder <TAB> its path in the Apache Flink repository (master, 2026-11); written by\n"
        "# scripts/vendor_serializer_corpus.py\n" + "\n".join(sources) + "\n")
    print(f"vendored {len(sources)} folders ({size / 1024:.0f} KiB) into {TARGET.relative_to(ROOT)}; skipped "
          f"{sum(skipped.values())} of {len(skipped)} snapshot classes flinkstate does not know")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
