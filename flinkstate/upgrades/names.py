"""Deployment and run names as folder and file names (the journal's, the run folders beside the savepoints): one
name, one folder, always under the savepoint base."""

from __future__ import annotations

import hashlib

from flinkstate.errors import FlinkStateError


class NameRefused(FlinkStateError):
    """A deployment or run name that cannot name a folder."""


#: Characters a deployment or run name keeps in its folder name (a leading ``.`` excepted).
_PLAIN_NAME_CHARACTERS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-.")
#: The longest folder name a deployment or run name gets: with ``.json``, the journal's lock and its partial copy
#: (``.NAME.json.<id>.inprogress``) it stays under the 255 bytes file systems allow.
MAX_FOLDER_NAME = 200
#: What the savepoint base itself holds beside the deployments' folders (the journal folder, the registry): a
#: deployment of that name must not get it as its folder.
RESERVED_NAMES = frozenset({"journal", "deployments.json"})


def safe_name(text: str) -> str:
    """A deployment or run name as one folder or file name, one-to-one, so that different names never share a
    journal or a run folder and none leaves the savepoint base. Letters, digits, ``_``, ``-`` and ``.`` stay (a name
    made of them is its own folder: existing deployments keep theirs); every other character is written ``~XX`` for
    each byte of its UTF-8 (``~`` too, so the encoding is reversible), and so is a leading ``.`` (no ``.``, no ``..``,
    no hidden name) and the first character of the base's own entries (:data:`RESERVED_NAMES`). A result longer
    than :data:`MAX_FOLDER_NAME` is cut and ends in ``~h`` and 32 hex digits of the name's SHA-256 (``~h`` never
    occurs in an encoded name). An empty name is refused."""
    if not text:
        raise NameRefused("a deployment or run name is empty: it cannot name a folder")
    encoded = "".join(ch if ch in _PLAIN_NAME_CHARACTERS and not (i == 0 and ch == ".") else
                      "".join(f"~{byte:02X}" for byte in ch.encode("utf-8", "surrogatepass"))
                      for i, ch in enumerate(text))
    if encoded in RESERVED_NAMES:  # the base's own entries: its first character is written ~XX
        encoded = f"~{ord(encoded[0]):02X}{encoded[1:]}"
    if len(encoded) <= MAX_FOLDER_NAME:
        return encoded
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    kept = encoded[:MAX_FOLDER_NAME - 2 - len(digest)]
    cut = kept.rfind("~", len(kept) - 2)  # not in the middle of a ~XX
    return f"{kept[:cut] if cut >= 0 else kept}~h{digest}"


__all__ = ["MAX_FOLDER_NAME", "RESERVED_NAMES", "NameRefused", "safe_name"]
