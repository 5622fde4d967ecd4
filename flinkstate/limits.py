"""Bounds on what decoding may build from hostile bytes, and the one error that says a bound was reached.

A savepoint's bytes are small compared to what they can make a reader build: a serializer snapshot nested thousands
of levels deep, a Kryo or Java-serialized value whose shared references expand exponentially when written out, a
snappy block that decompresses twenty times larger. Each is bounded here, generously (Flink's own data stays far
below), and each bound is an environment variable, read when the bound is checked, so that a genuine savepoint
beyond it can still be read by raising it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from flinkstate.format_errors import SavepointFormatError


@dataclass(frozen=True)
class Limit:
    """One bound: what it bounds (for the message), its environment variable and its default."""

    what: str
    variable: str
    default: int

    def value(self) -> int:
        """The bound in force: the environment variable when it is set to a positive integer, else the default (a
        malformed setting must not silently lift the bound)."""
        raw = os.environ.get(self.variable, "").strip().replace("_", "")
        return int(raw) if raw.isdigit() and int(raw) > 0 else self.default

    def exceeded(self, found: str, path: str | None = None, offset: int | None = None) -> LimitExceeded:
        """The error for data beyond this bound: ``found`` says what was met (e.g. "snapshot nested too deeply")."""
        return LimitExceeded(f"{found}: over the limit of {self.value():,} {self.what} (raise it with the "
                             f"environment variable {self.variable})", path, offset)


class LimitExceeded(SavepointFormatError):
    """The data asks for more than a bound allows (depth, expanded nodes, decompressed bytes). Not necessarily
    corrupt: the message names the bound and how to raise it."""


#: Serializer snapshots nest one level per composite type (a Map of Lists of Tuples is three); Flink's and the Table
#: planner's types stay within a dozen or so.
SNAPSHOT_DEPTH = Limit("levels of serializer snapshot nesting", "FLINKSTATE_MAX_SNAPSHOT_DEPTH", 64)
#: The nodes (objects, elements, map entries) one stored value may expand to when written out: Kryo back-references
#: and Java serialization handles let a few hundred bytes name the same list 10^8 times.
VALUE_NODES = Limit("nodes per value", "FLINKSTATE_MAX_VALUE_NODES", 1_000_000)
#: Bytes one snappy-compressed block or stream may decompress to (snappy expands up to ~21x; the block is held in
#: memory whole, and decoded its values take several times more).
DECOMPRESSED_BYTES = Limit("decompressed bytes per block", "FLINKSTATE_MAX_DECOMPRESSED_BYTES", 256 * 1024 * 1024)

ALL_LIMITS = (SNAPSHOT_DEPTH, VALUE_NODES, DECOMPRESSED_BYTES)
