"""Operator identity: the one notion schema, check, migrate and the writer share.

Flink maps state to operators by ``OperatorID`` (16 bytes, shown as 32 hex digits). A user-set uid is hashed to
it (Murmur3-128, :func:`flinkstate.binary.operator_id_from_uid`); an operator without a uid gets an id Flink
derives from the job graph, and a ``_metadata`` of version 4 or older records no uid at all. So an operator is
named either by its uid or by its 32-hex id, and the two must never be confused: hashing a 32-hex id as if it were
a uid gives another operator (the state is lost on restore).

In a manifest and on the command line a name of exactly 32 hex digits is an operator id, anything else a uid
(``{id: ...}`` in a manifest names an id under another label).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from flinkstate.binary import operator_id_from_uid

_HEX_ID = re.compile(r"^[0-9a-fA-F]{32}$")


def is_operator_id(text: str) -> bool:
    """Whether ``text`` is written as an operator id (32 hex digits) rather than a uid."""
    return bool(_HEX_ID.match(text))


@dataclass(frozen=True)
class OperatorRef:
    """An operator as a user names it: ``operator_id`` always, ``uid`` when the name was a uid."""

    operator_id: str
    uid: str | None = None

    @classmethod
    def parse(cls, name: str) -> OperatorRef:
        """A uid, or a 32-hex operator id (never hashed)."""
        if is_operator_id(name):
            return cls(name.lower(), None)
        return cls(operator_id_from_uid(name), name)

    @classmethod
    def of(cls, operator_id: str, uid: str | None) -> OperatorRef:
        return cls(operator_id.lower(), uid)

    @property
    def label(self) -> str:
        return self.uid if self.uid is not None else self.operator_id

    def __str__(self) -> str:
        return self.label


__all__ = ["OperatorRef", "is_operator_id", "operator_id_from_uid"]
