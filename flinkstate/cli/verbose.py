"""``-v/--verbose``: what the command does, on stderr, through :mod:`logging` (files opened, the plan per operator,
how long each phase took). Off by default, and then nothing changes: the ``flinkstate`` logger gets a handler only
for the command's run, and stdout is never written to.

Everything under the ``flinkstate`` logger is shown, so a library module that logs (``logging.getLogger(__name__)``)
appears here without more wiring. Lines look like ``flinkstate [+0.012s] opened /sp/_metadata: ...``.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

from flinkstate import printable

log = logging.getLogger("flinkstate.cli")


class _Elapsed(logging.Formatter):
    """``flinkstate [+SECONDS] message``: seconds since the command started, so phases can be read off."""

    def __init__(self, start: float) -> None:
        super().__init__()
        self.start = start

    def format(self, record: logging.LogRecord) -> str:
        # One printable line whatever the record carries (names from savepoints and manifests): no escape sequence
        # reaches the terminal and no name forges a line of its own, as in every other output of the CLI.
        return f"flinkstate [+{record.created - self.start:.3f}s] {printable(record.getMessage())}"


@contextmanager
def logging_to_stderr(enabled: bool) -> Iterator[None]:
    """While the command runs: with ``enabled``, every ``flinkstate.*`` record at DEBUG and above goes to stderr
    (through tqdm's writer while a progress bar is drawn, so neither garbles the other). The handler is removed
    afterwards, so that calls of :func:`flinkstate.cli.main` in one process (tests, embedding) do not add up."""
    if not enabled:
        yield
        return
    from tqdm.contrib.logging import logging_redirect_tqdm

    root = logging.getLogger("flinkstate")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Elapsed(time.time()))
    saved = root.level, root.propagate
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    root.propagate = False  # shown once, here, whatever the embedding application configured
    try:
        # logging_redirect_tqdm swaps console handlers for ones writing through tqdm, keeping their formatter.
        with logging_redirect_tqdm([root]) if _progress_shown() else nullcontext():
            yield
    finally:
        root.removeHandler(handler)
        root.setLevel(saved[0])
        root.propagate = saved[1]


def _progress_shown() -> bool:
    from flinkstate import progress_shown

    return progress_shown()


@contextmanager
def phase(name: str) -> Iterator[None]:
    """Logs the start of a phase and how long it took (also when it failed)."""
    log.info("%s ...", name)
    start = time.perf_counter()
    outcome = "failed"
    try:
        yield
        outcome = "done"
    finally:
        log.info("%s: %s in %.3f s", name, outcome, time.perf_counter() - start)


def savepoint_opened(savepoint: Any, operator: Any | None = None) -> None:
    """The ``_metadata`` read and the state files the savepoint's handles name (those of ``operator`` only when
    given: the files the command goes on to open)."""
    if not log.isEnabledFor(logging.INFO):
        return
    metadata, location = savepoint.metadata, savepoint.location
    log.info("opened %s: _metadata version %s, checkpoint %s, %d operators", location.describe("_metadata"),
             metadata.version, metadata.checkpoint_id, len(metadata.operators))
    label = None if operator is None else f"operator {operator.uid or operator.name or operator.operator_id},"
    for where, handle in metadata.file_handles():
        if label is not None and not where.startswith(label):
            continue
        name = getattr(handle, "relative_path", None) or getattr(handle, "path", "?")
        log.info("  %s: %s (%s bytes)", where, location.describe(name), getattr(handle, "size", "?"))
