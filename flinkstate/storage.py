"""Where savepoint bytes come from. The reader only talks to :class:`SavepointLocation`, so a savepoint may live
on a local disk or (later) in S3: ``open_location`` dispatches on the URI scheme.

A location is the savepoint *directory* (the exclusive checkpoint dir that holds ``_metadata``); relative state
handles name files in it. Reads are ranged so that a reader can fetch one key-group block at a time.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from pathlib import Path
from urllib.parse import unquote, urlparse

from flinkstate.errors import FlinkStateError

METADATA_FILE = "_metadata"


class StorageError(FlinkStateError):
    """A savepoint file is missing or unreadable."""


class SavepointLocation(ABC):
    """A savepoint directory. Names are relative to it; absolute paths (from absolute file handles) are allowed
    where the implementation can resolve them."""

    uri: str

    @abstractmethod
    def read_metadata(self) -> bytes:
        """The whole ``_metadata`` file (it is small: state lives in other files or is inlined)."""

    @abstractmethod
    def read_range(self, name: str, offset: int, length: int) -> bytes:
        """``length`` bytes of file ``name`` from ``offset`` (fewer only at end of file)."""

    @abstractmethod
    def size(self, name: str) -> int:
        """Size in bytes of file ``name``."""

    @abstractmethod
    def list(self) -> list[str]:
        """Names of the files in the savepoint directory."""

    @abstractmethod
    def describe(self, name: str) -> str:
        """A path or URI for messages."""


class LocalSavepointLocation(SavepointLocation):
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.uri = str(directory)

    def _path(self, name: str) -> Path:
        # Absolute file handles (code 2) carry the path where Flink wrote the file. If the savepoint was moved, the
        # file is found by its name in this directory, which is what Flink itself cannot do.
        if name.startswith("file:"):
            name = _local_path(name)
        path = Path(name)
        if path.is_absolute():
            return path if path.exists() else self.directory / path.name
        return self.directory / name

    def read_metadata(self) -> bytes:
        path = self.directory / METADATA_FILE
        try:
            return path.read_bytes()
        except OSError as exc:
            raise StorageError(f"{path}: cannot read savepoint metadata: {exc.strerror or exc}") from None

    def read_range(self, name: str, offset: int, length: int) -> bytes:
        path = self._path(name)
        try:
            with open(path, "rb") as handle:
                handle.seek(offset)
                return handle.read(length)
        except OSError as exc:
            raise StorageError(f"{path}: cannot read state file: {exc.strerror or exc}") from None

    def size(self, name: str) -> int:
        path = self._path(name)
        try:
            return path.stat().st_size
        except OSError as exc:
            raise StorageError(f"{path}: cannot read state file: {exc.strerror or exc}") from None

    def list(self) -> list[str]:
        return sorted(p.name for p in self.directory.iterdir() if p.is_file())

    def describe(self, name: str) -> str:
        return str(self._path(name))


def _local_path(uri: str) -> str:
    parsed = urlparse(uri)
    return unquote(parsed.path)


def open_location(path: str | os.PathLike[str]) -> SavepointLocation:
    """The savepoint at ``path``: a directory or its ``_metadata`` file, as a local path or ``file:`` URI."""
    text = os.fspath(path)
    scheme = urlparse(text).scheme
    if scheme == "s3" or scheme.startswith("s3"):
        # Planned: an S3SavepointLocation over boto3 (get_object with Range for read_range).
        raise StorageError(f"{text}: s3:// savepoints are not supported yet")
    if scheme == "file":
        text = _local_path(text)
    elif scheme and len(scheme) > 1:
        raise StorageError(f"{text}: unsupported savepoint location scheme {scheme!r}")
    local = Path(text)
    if local.is_dir():
        if not (local / METADATA_FILE).is_file():
            raise StorageError(f"{local}: not a savepoint directory (no {METADATA_FILE})")
        return LocalSavepointLocation(local)
    if local.is_file():
        return LocalSavepointLocation(local.parent)
    raise StorageError(f"{local}: no such savepoint directory or _metadata file")
