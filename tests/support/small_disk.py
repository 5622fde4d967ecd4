"""A small file system of a test's own, to fill up: a tmpfs (mounting needs root, as CI runs)."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def small_disk(mount: Path, size: str = "20m") -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``mount`` (created), unmounted afterwards."""
    mount.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)],
                             capture_output=True, text=True, check=False)
    assert mounted.returncode == 0, f"cannot mount a tmpfs at {mount} (root needed): {mounted.stderr.strip()}"
    try:
        yield mount
    finally:
        subprocess.run(["umount", "--lazy", str(mount)], check=False)


def fill(disk: Path, leave: int = 0) -> Path:
    """Writes a file until ``disk`` has no more than ``leave`` bytes free; returns it (delete it to free them)."""
    filler = disk / "filler"
    free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
    with open(filler, "wb", buffering=0) as out, contextlib.suppress(OSError):
        out.write(b"\0" * max(free - leave, 0))
        while not leave and out.write(b"\0" * 4096):
            pass
    assert os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize <= leave
    return filler
