"""Assembling the migrated savepoint's ``_metadata``: the source's metadata with each rewritten subtask's
new keyed-state handle, and every other file the new savepoint needs copied into it once
(:func:`copy_stream_handle`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from flinkstate.errors import WriteError
from flinkstate.format.handles import (
    ByteStreamStateHandle,
    FileStateHandle,
    RelativeFileStateHandle,
    StreamStateHandle,
)
from flinkstate.storage.locations import METADATA_FILE, SavepointLocation
from flinkstate.storage.outputs import SavepointOutput


@dataclass(frozen=True)
class CopiedFile:
    source_name: str
    target_name: str
    size: int


def copy_stream_handle(handle: StreamStateHandle | None, source: SavepointLocation, output: SavepointOutput,
                       copied: dict[str, CopiedFile]) -> StreamStateHandle | None:
    """The handle of the same bytes in the output: inline handles stay inline, file handles are copied byte for
    byte and become relative (absolute ones too, which makes the output self-contained). ``copied`` dedups files
    shared by several handles."""
    if handle is None or isinstance(handle, ByteStreamStateHandle):
        return handle
    if isinstance(handle, RelativeFileStateHandle):
        name = handle.relative_path
    elif isinstance(handle, FileStateHandle):
        name = handle.path
    else:
        raise WriteError(f"cannot copy stream handle {type(handle).__name__}")
    if name not in copied:
        target = Path(unquote(urlparse(name).path) if name.startswith("file:") else name).name
        if target == METADATA_FILE or any(c.target_name == target for c in copied.values()):
            raise WriteError(f"cannot copy {name}: its file name {target} is already used in the output")
        copied[name] = CopiedFile(name, target, output.copy_from(source, name, target))
    entry = copied[name]
    return RelativeFileStateHandle(handle.size, entry.target_name)


__all__ = ["CopiedFile", "copy_stream_handle"]
