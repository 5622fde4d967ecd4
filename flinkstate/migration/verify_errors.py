"""The verifier's error, in a module of its own so that the verifier's helpers (:mod:`flinkstate.migration
.verify_native`) raise it without importing :mod:`flinkstate.migration.verify`, which imports them."""

from __future__ import annotations

from flinkstate.errors import FlinkStateError


class VerificationError(FlinkStateError):
    """The migrated savepoint is not what the manifest declares."""


__all__ = ["VerificationError"]
