"""The exceptions flinkstate raises. Each carries a one-line message meant for a person: it names the thing (file,
job, state) and what is wrong, so the CLI can print it as it is instead of a traceback."""

from __future__ import annotations


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
