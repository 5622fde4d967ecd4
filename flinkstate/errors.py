"""The exceptions flinkstate raises. Each carries a one-line message meant for a person: it names the thing (file,
job, state) and what is wrong, so the CLI can print it as it is instead of a traceback."""

from __future__ import annotations


class FlinkStateError(Exception):
    """Base class: every error the CLI reports as a one-line message with a non-zero exit."""


class EnvironmentProblem(FlinkStateError):
    """The machine lacks something flinkstate needs (Java, a Flink distribution)."""
