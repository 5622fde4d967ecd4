"""Test jobs compiled with javac against a Flink distribution's lib/ (as examples/*/build.sh do), each into one jar
rebuilt only when a source is newer than it."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from flinkstate.engine.local import find_flink_home


def build_jar(source_dir: Path, jar: Path, entry_class: str, flink_home: Path | None = None,
              before_packing: Callable[[Path, str], None] | None = None) -> Path:
    """Compiles every ``*.java`` under ``source_dir`` into ``jar`` (main class ``entry_class``).
    ``before_packing(classes, classpath)`` may add files to the compiled classes before they are packed."""
    sources = sorted(source_dir.rglob("*.java"))
    if jar.exists() and all(s.stat().st_mtime <= jar.stat().st_mtime for s in sources):
        return jar
    home = find_flink_home(flink_home)
    jar.parent.mkdir(parents=True, exist_ok=True)
    classes = Path(tempfile.mkdtemp(prefix="classes-", dir=jar.parent))  # private: parallel test runs may build too
    classpath = f"{home / 'lib'}/*"
    subprocess.run(["javac", "-nowarn", "--release", "17", "-encoding", "UTF-8", "-cp", classpath,
                    "-d", str(classes), *map(str, sources)], check=True)
    if before_packing is not None:
        before_packing(classes, classpath)
    staged = classes.with_suffix(".jar")
    subprocess.run(["jar", "--create", "--file", str(staged), "--main-class", entry_class, "-C", str(classes), "."],
                   check=True)
    os.replace(staged, jar)
    shutil.rmtree(classes)
    return jar
