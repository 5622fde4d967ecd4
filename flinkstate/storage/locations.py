"""Where savepoint bytes come from. The reader only talks to :class:`SavepointLocation`, so a savepoint may live
on a local disk or in S3 (``s3://bucket/prefix``, through boto3): ``open_location`` dispatches on the URI scheme.

A location is the savepoint *directory* (the exclusive checkpoint dir that holds ``_metadata``); relative state
handles name files in it. Reads are ranged so that a reader can fetch one key-group block at a time.

Containment. ``_metadata`` comes from whoever wrote the savepoint, so the file names in its state handles are
untrusted. Every name a handle carries is resolved here, in one place (``LocalSavepointLocation._resolve``,
``S3SavepointLocation._resolve``), for every command and both storages: it must resolve to a regular file inside the
savepoint directory (or under the S3 prefix). ``..`` components, absolute paths and ``file:`` URIs outside the
directory, other schemes, symlinks leaving the directory and anything but a regular file (``/dev/zero``, a FIFO, a
directory) are refused with a one-line :class:`HandleRefused` that names the handle (``repr``-escaped: it comes from
a file). Legacy non-relocatable savepoints, whose handles are absolute paths elsewhere, need an explicit opt-in:
``allow_external_handles=True`` (``Savepoint.open(path, allow_external_handles=True)``, or process-wide
:data:`handle_policy`); it admits absolute handles and symlinks outside the directory, still only regular files,
and never ``..`` in a relative handle.

Bounded reads. :meth:`SavepointLocation.expect_sizes` records the size the metadata gives each file handle; from then
on ``size`` refuses a file that is smaller or larger than recorded, ``read_range`` never reads past the recorded
size and ``open_stream`` yields exactly the recorded number of bytes (and fails if the file has a different length).
"""

from __future__ import annotations

import io
import os
import re
import stat
import threading
import weakref
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Iterable
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import unquote, urlparse

from flinkstate.errors import FlinkStateError, printable
from flinkstate.storage import settings

METADATA_FILE = "_metadata"


class StorageError(FlinkStateError):
    """A savepoint file is missing or unreadable."""


class HandleRefused(StorageError):
    """A state handle names something other than a regular file inside the savepoint (see the module docstring)."""


URI_PATTERN = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
OPT_IN_HINT = (
    "handles to files elsewhere (legacy savepoints, the shared/ files of retained incremental RocksDB checkpoints, "
    "changelog files) need the opt-in --allow-external-handles")


def refused(uri: str, name: str, why: str) -> HandleRefused:
    return HandleRefused(f"{uri}: state handle {name!r} {why}")


class SavepointLocation(ABC):
    """A savepoint directory. Names are the file names carried by state handles, resolved against it under the
    containment rules of the module docstring."""

    uri: str
    allow_external_handles: bool = False
    #: handle name -> the size the metadata records for it (see :meth:`expect_sizes`).
    recorded_sizes: dict[str, int]

    def expect_sizes(self, sizes: dict[str, int]) -> None:
        """Records the size the metadata gives each file handle; reads and copies are then bounded by it."""
        self.recorded_sizes = dict(sizes)

    def check_handles(self, handles: Iterable[tuple[str, str, int | None]]) -> None:
        """Resolves every ``(where, file name, recorded size)`` of a savepoint's metadata up front, so that a
        handle outside the savepoint fails every command (not only those that read its state), and records the
        sizes (:meth:`expect_sizes`). Two handles naming one file must agree on its size. A size of None is not
        the file's length (a changelog file's) and is not recorded."""
        sizes: dict[str, int] = {}
        for where, name, size in handles:
            try:
                self.resolve(name)
            except HandleRefused as exc:  # say whose state the handle holds
                message = str(exc)
                prefix = f"{self.uri}: "
                raise HandleRefused(f"{prefix}{printable(where)}: {message.removeprefix(prefix)}") from None
            if size is None:
                continue
            if sizes.setdefault(name, size) != size:
                raise HandleRefused(f"{self.uri}: {where}: state handle {name!r} records {size} bytes, another "
                                    f"handle of the same file {sizes[name]}")
        self.expect_sizes(sizes)

    @abstractmethod
    def resolve(self, name: str) -> str:
        """Where the file a handle names is (a path or an object key), or :class:`HandleRefused`."""

    def _recorded(self, name: str) -> int | None:
        return getattr(self, "recorded_sizes", {}).get(name)

    def _check_size(self, name: str, actual: int) -> int:
        recorded = self._recorded(name)
        if recorded is None or actual == recorded:
            return actual
        from flinkstate.format_errors import SavepointFormatError

        if actual < recorded:
            raise SavepointFormatError(f"state file is truncated: {actual} bytes, the metadata records {recorded}",
                                       self.describe(name), actual)
        raise SavepointFormatError(f"state file has {actual} bytes, more than the {recorded} the metadata records",
                                   self.describe(name), recorded)

    def bounded_stream(self, name: str) -> BinaryIO:
        """The file ``name`` as a stream of exactly its recorded size (for copies): fails when the file turns out
        shorter or longer while it is read."""
        recorded = self._recorded(name)
        stream = self.open_stream(name)
        if recorded is None:
            return stream
        return _BoundedStream(stream, recorded, self.describe(name))  # type: ignore[return-value]

    @abstractmethod
    def read_metadata(self) -> bytes:
        """The whole ``_metadata`` file (it is small: state lives in other files or is inlined)."""

    @abstractmethod
    def read_range(self, name: str, offset: int, length: int) -> bytes:
        """``length`` bytes of file ``name`` from ``offset`` (fewer only at end of file)."""

    @abstractmethod
    def open_stream(self, name: str) -> BinaryIO:
        """The whole file ``name`` as a readable binary stream (for copies: never loads a file into memory)."""

    @abstractmethod
    def size(self, name: str) -> int:
        """Size in bytes of file ``name``."""

    @abstractmethod
    def list(self) -> list[str]:
        """Names of the files in the savepoint directory."""

    @abstractmethod
    def describe(self, name: str) -> str:
        """A path or URI for messages."""


class _BoundedStream(io.RawIOBase):
    """Exactly ``size`` bytes of ``inner``: a shorter file is an error at its end, a longer one when the recorded
    size has been read and one more byte is there."""

    def __init__(self, inner: BinaryIO, size: int, where: str) -> None:
        self.inner = inner
        self.left = size
        self.size = size
        self.where = where

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        if self.left == 0:
            if self.inner.read(1):
                raise StorageError(f"{self.where}: the file is longer than the {self.size} bytes the metadata "
                                   f"records")
            return 0
        data = self.inner.read(min(len(view), self.left))
        if not data:
            raise StorageError(f"{self.where}: the file ends after {self.size - self.left} bytes, the metadata "
                               f"records {self.size}")
        view[:len(data)] = data
        self.left -= len(data)
        return len(data)

    def close(self) -> None:
        self.inner.close()
        super().close()


class LocalSavepointLocation(SavepointLocation):
    """A savepoint directory on a local disk. Ranged reads go through file descriptors kept open per state file
    (at most :attr:`OPEN_FILES`, least recently used closed first): a file's name is resolved and checked once,
    when it is opened, not on every read (a small verification spent most of its time resolving the same paths
    again), and every read of it then sees the very file that was checked, even if the path is swapped later."""

    #: State files kept open for ranged reads; bounded because a savepoint may hold thousands of files.
    OPEN_FILES = 64

    def __init__(self, directory: Path, allow_external_handles: bool | None = None) -> None:
        self.directory = directory
        self.uri = str(directory)
        self.allow_external_handles = (settings.handle_policy.allow_external_handles if allow_external_handles is None
                                       else allow_external_handles)
        self._real_directory = Path(os.path.realpath(directory))
        self._start_reads()

    def _start_reads(self) -> None:
        self._reads: OrderedDict[str, tuple[Path, int]] = OrderedDict()  # handle name -> (path, open descriptor)
        self._reads_lock = threading.Lock()  # a descriptor is never closed while another thread reads through it
        weakref.finalize(self, _close_descriptors, self._reads)

    def close(self) -> None:
        """Closes the files kept open for reads (they are also closed when the location is collected); a later
        read opens its file again."""
        with self._reads_lock:
            _close_descriptors(self._reads)

    def __getstate__(self) -> dict[str, Any]:
        # Descriptors belong to this process: a copy opens its own.
        return {key: value for key, value in self.__dict__.items() if not key.startswith("_reads")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._start_reads()

    def _inside(self, real: Path) -> bool:
        return real == self._real_directory or self._real_directory in real.parents

    def _resolve(self, name: str) -> Path:
        """The real path of the file a handle names, or :class:`HandleRefused` (containment rules: module docstring).
        Absolute handles (code 2) carry the path where Flink wrote the file: inside this directory they are read
        like relative ones; elsewhere only with the opt-in, which also finds the file of a moved legacy savepoint by
        its name in this directory (what Flink itself cannot do)."""
        uri = self.uri
        if not name or "\x00" in name:
            raise refused(uri, name, "is empty or contains a NUL character")
        text = name
        if text.startswith("file:"):
            text = local_path(text)
            if not text.startswith("/"):
                raise refused(uri, name, "is a file: URI without an absolute path")
        elif URI_PATTERN.match(text):
            raise refused(uri, name, f"names a {text.split(':', 1)[0]}: location; a local savepoint reads only "
                                     f"files inside its directory")
        # ``path`` is what is opened and shown in messages; ``real`` (symlinks resolved) is what containment checks.
        if text.startswith("/"):
            path = Path(os.path.normpath(text))
            real = Path(os.path.realpath(path))
            if not self._inside(real):
                if not self.allow_external_handles:
                    raise refused(uri, name, f"points outside the savepoint directory ({OPT_IN_HINT})")
                if not os.path.lexists(path):  # a moved legacy savepoint: its file is beside _metadata
                    path = self.directory / path.name
                    real = Path(os.path.realpath(path))
        else:
            if ".." in Path(text).parts:
                raise refused(uri, name, "contains '..': relative handles name files inside the savepoint directory")
            path = self.directory / text
            real = Path(os.path.realpath(path))
            if not self._inside(real) and not self.allow_external_handles:
                raise refused(uri, name, f"is a symbolic link that leaves the savepoint directory ({OPT_IN_HINT})")
        try:
            mode = os.stat(real).st_mode
        except FileNotFoundError:
            return path  # reported by the read, as a missing state file
        except OSError as exc:
            raise StorageError(f"{path}: cannot read state file: {exc.strerror or exc}") from None
        if not stat.S_ISREG(mode):
            raise refused(uri, name, f"is not a regular file ({_file_kind(mode)})")
        return path

    def _open_descriptor(self, name: str) -> tuple[Path, int]:
        path = self._resolve(name)
        try:
            # O_NONBLOCK: a FIFO swapped in after _resolve must not block the open; fstat below refuses it.
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        except OSError as exc:
            raise StorageError(f"{path}: cannot read state file: {exc.strerror or exc}") from None
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            os.close(fd)
            raise refused(self.uri, name, f"is not a regular file ({_file_kind(mode)})")
        os.set_blocking(fd, True)
        return path, fd

    def _open(self, name: str) -> tuple[Path, BinaryIO]:
        path, fd = self._open_descriptor(name)
        return path, open(fd, "rb")

    def read_metadata(self) -> bytes:
        # The same rules as for state files: a _metadata that is a symlink out of the directory, a FIFO or a device
        # is refused (without blocking on the FIFO).
        path = self.directory / METADATA_FILE
        if not self._inside(Path(os.path.realpath(path))) and not self.allow_external_handles:
            raise StorageError(f"{path}: a symbolic link that leaves the savepoint directory")
        try:
            _, handle = self._open(METADATA_FILE)
            with handle:
                return handle.read()
        except OSError as exc:
            raise StorageError(f"{path}: cannot read savepoint metadata: {exc.strerror or exc}") from None

    def read_range(self, name: str, offset: int, length: int) -> bytes:
        recorded = self._recorded(name)
        if recorded is not None:
            length = max(0, min(length, recorded - offset))
        with self._reads_lock:
            path, fd = self._read_descriptor(name)
            try:
                data = os.pread(fd, length, offset)
                while 0 < len(data) < length:  # pread may return less than asked before the end of the file
                    more = os.pread(fd, length - len(data), offset + len(data))
                    if not more:
                        break
                    data += more
                return data
            except OSError as exc:
                raise StorageError(f"{path}: cannot read state file: {exc.strerror or exc}") from None

    def _read_descriptor(self, name: str) -> tuple[Path, int]:
        """The open descriptor of ``name`` for ranged reads (opened and checked on first use); the caller holds
        the reads lock."""
        opened = self._reads.get(name)
        if opened is not None:
            self._reads.move_to_end(name)
            return opened
        opened = self._reads[name] = self._open_descriptor(name)
        while len(self._reads) > self.OPEN_FILES:
            os.close(self._reads.popitem(last=False)[1][1])
        return opened

    def open_stream(self, name: str) -> BinaryIO:
        return self._open(name)[1]

    def size(self, name: str) -> int:
        path = self._resolve(name)
        try:
            actual = path.stat().st_size
        except OSError as exc:
            raise StorageError(f"{path}: cannot read state file: {exc.strerror or exc}") from None
        return self._check_size(name, actual)

    def list(self) -> list[str]:
        # Only regular files that are really here: a symlink out of the directory is not part of the savepoint.
        return sorted(p.name for p in self.directory.iterdir()
                      if p.is_file() and self._inside(Path(os.path.realpath(p))))

    def describe(self, name: str) -> str:
        return str(self._resolve(name))

    def resolve(self, name: str) -> str:
        return str(self._resolve(name))


def _close_descriptors(reads: OrderedDict[str, tuple[Path, int]]) -> None:
    while reads:
        os.close(reads.popitem()[1][1])


def _file_kind(mode: int) -> str:
    for test, kind in ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return "not a regular file"


def local_path(uri: str) -> str:
    parsed = urlparse(uri)
    return unquote(parsed.path)


__all__ = ["METADATA_FILE", "HandleRefused", "LocalSavepointLocation", "SavepointLocation", "StorageError"]
