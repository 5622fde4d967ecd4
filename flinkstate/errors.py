"""The exceptions flinkstate raises. Each carries a one-line message meant for a person: it names the thing (file,
job, state) and what is wrong, so the CLI can print it as it is instead of a traceback."""

from __future__ import annotations

import errno
import reprlib
from typing import Any


class FlinkStateError(Exception):
    """Base class: every error the CLI reports as a one-line message with a non-zero exit."""


class EnvironmentProblem(FlinkStateError):
    """The machine lacks something flinkstate needs (Java, a Flink distribution)."""


class WriteError(FlinkStateError):
    """A savepoint could not be written."""


def printable(text: object) -> str:
    """``text`` as one printable line: control characters (newlines, ANSI escapes, ...) and other unprintable code
    points become backslash escapes. Names read from savepoints and manifests (uids, state and class names) pass
    through here before they are printed, so a crafted name cannot forge output lines or drive the terminal."""
    value = str(text)
    if value.isprintable():
        return value
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in value)


_SHORT_REPR = reprlib.Repr()
_SHORT_REPR.maxlevel, _SHORT_REPR.maxstring, _SHORT_REPR.maxother = 2, 40, 40


def shown(value: Any) -> str:
    """A value read from a file (a manifest's, say) for an error line: printable and at most 60 characters."""
    # reprlib bounds the work as well as the text: a huge value is never rendered whole only to be cut.
    text = printable(_SHORT_REPR.repr(value))
    return text if len(text) <= 60 else text[:57] + "..."


#: errno values that mean the storage is full: no space left on the device, or the user's quota used up.
OUT_OF_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def is_out_of_space(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in OUT_OF_SPACE_ERRNOS


def os_error_line(exc: OSError, path: object = None) -> str:
    """An operating system's error as one line naming the file (the exception's, else ``path``): a full disk says
    so ("out of space"), for it is the storage to free, not a bug to report."""
    where = exc.filename if exc.filename is not None else path
    reason = printable(exc.strerror or exc)
    if is_out_of_space(exc):
        reason = f"out of space ({reason})"
    return f"{printable(where)}: {reason}" if where is not None else reason
