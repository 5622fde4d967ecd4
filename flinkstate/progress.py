"""Progress of long work (``dump``, ``migrate``) on stderr, with tqdm: shown only when stderr is a terminal and the
user did not ask for quiet, so pipes, logs and CI stay clean."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator
from typing import TypeVar

from tqdm import tqdm

T = TypeVar("T")

#: Set by the CLI (``--quiet``, ``--progress``): None follows the terminal, False never, True always.
enabled: bool | None = None


def showing() -> bool:
    return sys.stderr.isatty() if enabled is None else enabled


def track(items: Iterable[T], *, total: int | None, description: str, unit: str) -> Iterator[T]:
    """``items``, with a progress bar counting ``unit`` while they are consumed."""
    if not showing():
        yield from items
        return
    columns, lines = _size()
    with tqdm(items, total=total, desc=description, unit=f" {unit}", file=sys.stderr, leave=False,
              ncols=columns, nrows=lines) as bar:
        yield from bar


def _size() -> tuple[int, int]:
    """The terminal's size; 80x24 where it reports none (a terminal whose size was never set says 0x0, and tqdm
    hides every bar below the last line of a screen of 0 lines)."""
    try:
        size = os.get_terminal_size(sys.stderr.fileno())
        columns, lines = size.columns, size.lines
    except (OSError, ValueError):
        columns, lines = 0, 0
    return (columns if columns > 0 else 80), (lines if lines > 0 else 24)
