"""A deadline for code under test that might hang (a FIFO opened for reading, a read that never ends)."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from typing import Any


class Hang(BaseException):  # a BaseException, so that the CLI's last guard cannot swallow it as an internal error
    """A run outlived its deadline."""


@contextlib.contextmanager
def deadline(seconds: int) -> Iterator[None]:
    """Raises :class:`Hang` in the main thread when the block runs longer than ``seconds``."""

    def expire(*_: Any) -> None:
        raise Hang(f"still running after {seconds}s (blocked on a FIFO or a device?)")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
