"""Waiting for what a job of ours writes when it reaches a point (its marker files), bounded."""

from __future__ import annotations

import time
from pathlib import Path


def wait_for_path(path: Path, timeout: float = 60.0) -> None:
    """Returns once ``path`` exists; TimeoutError naming it after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear")
        time.sleep(0.2)
