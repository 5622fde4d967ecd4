"""Where a new savepoint is written: :class:`SavepointOutput`, a staging area that is only published (renamed
to the final name) once the result was re-read and verified, so a failed run leaves nothing that looks finished.
One writer at a time holds an output (a lock with an owner marker naming host, pid and start time; a stale owner's
leftovers are cleared). Local directories here (publish is a rename); ``s3://`` prefixes in
:mod:`flinkstate.storage.s3_output`.
"""

from __future__ import annotations

import errno
import fcntl
import io
import json
import os
import shutil
import socket
import stat
import time
import uuid
from abc import ABC, abstractmethod
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from flinkstate.errors import WriteError, os_error_line, printable
from flinkstate.storage.locations import METADATA_FILE, LocalSavepointLocation, SavepointLocation

# --------------------------------------------------------------------------------------------------------------------
# Output locations and atomic publish
# --------------------------------------------------------------------------------------------------------------------


class SavepointOutput(ABC):
    """Where a new savepoint directory is written. Files go to a staging area; :meth:`publish` makes the savepoint
    appear under its final name in one step, :meth:`abort` removes every trace."""

    uri: str

    @abstractmethod
    def open(self, name: str) -> BinaryIO:
        """A new file ``name`` in the staging area, opened for writing."""

    def write_bytes(self, name: str, data: bytes) -> None:
        with self.open(name) as sink:
            sink.write(data)

    @abstractmethod
    def copy_from(self, source: SavepointLocation, name: str, target: str) -> int:
        """Copies file ``name`` of ``source`` to ``target`` byte for byte; returns its size."""

    @abstractmethod
    def staged(self) -> SavepointLocation:
        """The staging area as a readable savepoint location (to verify before publishing)."""

    @abstractmethod
    def publish(self) -> None:
        """Moves the staged savepoint to its final location."""

    @abstractmethod
    def abort(self) -> None:
        """Removes the staging area."""


#: While staged, ``_metadata`` is written under this name: a staging area never holds a ``_metadata`` before the
#: verifier passed it, so a killed run leaves nothing that looks like a finished savepoint (see :meth:`publish`).
STAGED_METADATA = "_metadata.unverified"
#: The owner marker inside a staging area: which run made it (pid, host, start time, random id).
OWNER_MARKER = ".flinkstate-owner.json"
RESERVED_NAMES = {STAGED_METADATA, OWNER_MARKER}
#: An S3 lock whose heartbeat (the lock object's LastModified) is older than this is taken over.
S3_LOCK_STALE_SECONDS = 300.0
S3_LOCK_HEARTBEAT_SECONDS = 30.0


@dataclass(frozen=True)
class Owner:
    """Who writes an output: enough to tell a live run from a dead one on the same host (pid and the process's
    start time, so a reused pid is not taken for the owner) and to name it in a message."""

    id: str
    host: str
    pid: int
    started: float  # wall clock, for people
    process_start: str | None  # /proc/PID/stat start ticks (Linux), for liveness

    @classmethod
    def current(cls) -> Owner:
        return cls(uuid.uuid4().hex, socket.gethostname(), os.getpid(), time.time(), _process_start(os.getpid()))

    def to_json(self) -> bytes:
        return json.dumps(self.__dict__, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Owner | None:
        try:
            raw = json.loads(data)
            return cls(str(raw["id"]), str(raw["host"]), int(raw["pid"]), float(raw["started"]),
                       None if raw.get("process_start") is None else str(raw["process_start"]))
        except (ValueError, KeyError, TypeError):
            return None

    def is_over(self) -> bool:
        """Provably not writing any more: on this host, and either this very process (whose earlier run released
        the lock we now hold) or no process with that pid and start time exists. Another host's run cannot be
        proved over."""
        if self.host != socket.gethostname():
            return False
        if self.pid == os.getpid():
            return True
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            pass  # a process of another user has that pid
        # A live pid that started at another time is a reused pid: the owner is gone.
        current = _process_start(self.pid)
        return self.process_start is not None and current is not None and current != self.process_start

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.started))
        return f"run {self.id[:12]} (pid {self.pid} on {printable(self.host)}, started {when})"


def _process_start(pid: int) -> str | None:
    """The start time of ``pid`` in clock ticks since boot (field 22 of /proc/PID/stat), None where unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat_file:
            text = stat_file.read().decode(errors="replace")
    except OSError:
        return None
    fields = text.rpartition(")")[2].split()  # the command name may contain spaces and parentheses
    return fields[19] if len(fields) > 19 else None


def staged_name(name: str) -> str:
    if name in RESERVED_NAMES:
        raise WriteError(f"cannot write a file named {name}: the name is reserved for the staging area")
    return STAGED_METADATA if name == METADATA_FILE else name


class _StagedLocalLocation(LocalSavepointLocation):
    """The staging directory read as a savepoint: ``_metadata`` is the staged, not yet verified one."""

    def _resolve(self, name: str) -> Path:
        return super()._resolve(STAGED_METADATA if name == METADATA_FILE else name)


#: A file the tool creates: new (``O_EXCL``: an existing file, or a symbolic link, even a dangling one, is an error,
#: never opened), and never through a link (``O_NOFOLLOW``, said again for the reader).
NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


class _OutputLock:
    """An exclusive ``flock`` on ``.NAME.lock`` beside a local output: a second run to the same output fails at
    once, naming the holder. The lock file is removed on release; acquiring checks that the locked file is still
    the one at the path (a run that opened it just before it was removed would otherwise lock a deleted file).

    The lock file is created exclusively and only that new file is written. One that exists already is never
    written: it is a run's that holds it (refused, naming the holder), or one left by a run that died (the kernel
    released its lock, the file stays), which is removed and created anew; anything else at that path (a symbolic
    link, a file with other hard links, not a regular file, not an owner record: planted to make us write through
    it) is refused in one line."""

    def __init__(self, path: Path, owner: Owner, output: Path) -> None:
        self.path = path
        self._fd: int | None = None
        while True:
            fd, created = self._open(path, output)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = Owner.from_json(os.pread(fd, 4096, 0))
                os.close(fd)
                raise WriteError(f"{output}: another migration is writing this output (lock {path} held by "
                                 f"{holder.describe() if holder else 'another process'})") from None
            try:
                same = os.path.samestat(os.fstat(fd), os.lstat(path))
            except FileNotFoundError:
                same = False
            if same and created:
                break
            if same:  # locked by nobody: left by a run that is over, if it is ours at all
                try:
                    self._refuse_unless_left_by_a_run(fd, path)
                    os.unlink(path)  # while locked: a run that opened it meanwhile sees it gone, and starts again
                finally:
                    os.close(fd)
                continue
            os.close(fd)  # the file was removed by its previous holder between our open and our lock: again
        try:
            os.pwrite(fd, owner.to_json(), 0)
        except OSError as exc:  # a full disk: its error names no file, a person must learn which one
            with suppress(OSError):
                os.unlink(path)  # ours: created and locked above
            os.close(fd)
            raise WriteError(f"{path}: cannot write: {os_error_line(exc)}") from None
        self._fd = fd

    @staticmethod
    def _open(path: Path, output: Path) -> tuple[int, bool]:
        """The lock file: created (and True), or the existing one opened to lock and read only (and False)."""
        while True:
            try:
                return os.open(path, (NEW_FILE_FLAGS & ~os.O_WRONLY) | os.O_RDWR, 0o644), True
            except FileExistsError:
                pass
            except OSError as exc:  # e.g. a parent that root may not write either (a read-only file system)
                raise WriteError(f"{output}: cannot create the output: {path.parent} is not writable "
                                 f"({exc.strerror or exc})") from None
            try:  # O_NONBLOCK: a FIFO planted there must not hang the run
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
            except FileNotFoundError:
                continue  # removed meanwhile: create it
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise _not_our_lock(path, "a symbolic link") from None
                raise WriteError(f"{output}: cannot lock the output: {os_error_line(exc, path)}") from None
            status = os.fstat(fd)
            if stat.S_ISDIR(status.st_mode):
                os.close(fd)
                raise WriteError(f"{output}: cannot lock the output: {path} is a directory")
            if not stat.S_ISREG(status.st_mode):
                os.close(fd)
                raise _not_our_lock(path, "not a regular file")
            return fd, False

    @staticmethod
    def _refuse_unless_left_by_a_run(fd: int, path: Path) -> None:
        """A lock file nobody holds is removed only when it is one a run of flinkstate left: a file of its own (one
        link) holding an owner record, or empty (a run killed between creating and writing it)."""
        status = os.fstat(fd)
        if status.st_nlink != 1:
            raise _not_our_lock(path, f"a file with {status.st_nlink} hard links")
        content = os.pread(fd, 4096, 0)
        if content and Owner.from_json(content) is None:
            raise _not_our_lock(path, "a file without flinkstate's owner record")

    def release(self) -> None:
        if self._fd is None:
            return
        with suppress(OSError):
            os.unlink(self.path)  # while still locked: a waiting run then sees a new file, never this one
        os.close(self._fd)
        self._fd = None


def _not_our_lock(path: Path, what: str) -> WriteError:
    return WriteError(f"{path}: {what}, not the lock flinkstate keeps beside the output: nothing was written; remove "
                      f"it if nothing needs it")


class LocalSavepointOutput(SavepointOutput):
    """A local directory. Staging is a hidden sibling (``.NAME.inprogress``) on the same file system, so that
    publishing is one ``rename``.

    Safe against other runs and against crashes: an exclusive lock (``.NAME.lock`` beside the output, held from
    here until :meth:`publish` or :meth:`abort`, released by the kernel if the process dies) makes a second run to
    the same output fail at once; the staging directory carries an owner marker, and a leftover staging directory
    is removed only when its owner is provably dead (same host, no such process) or is this process; ``_metadata``
    is staged as ``_metadata.unverified`` and takes its name only after verification."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.uri = str(directory)
        self.owner = Owner.current()
        parent = directory.parent
        _prepare_parent(parent, directory)
        self.staging = parent / f".{directory.name}.inprogress"
        self._lock: _OutputLock | None = _OutputLock(parent / f".{directory.name}.lock", self.owner, directory)
        try:
            if os.path.lexists(directory):
                raise WriteError(f"{directory}: output already exists")
            self._clear_leftovers()
            try:
                self.staging.mkdir()
            except OSError as exc:
                raise WriteError(f"{self.staging}: cannot create the staging directory: "
                                 f"{exc.strerror or exc}") from None
            with io.BufferedWriter(_StagedFile(self.staging / OWNER_MARKER)) as marker:  # new, in our new folder
                marker.write(self.owner.to_json())
        except OSError as exc:  # a full disk: its error names no file, a person must learn which one
            self._release()
            raise WriteError(f"{self.staging / OWNER_MARKER}: cannot write: {os_error_line(exc)}") from None
        except BaseException:
            self._release()
            raise

    def __getstate__(self) -> dict[str, Any]:
        # Pickled to Spark tasks, which only write files: the lock stays with the driver.
        return {**self.__dict__, "_lock": None}

    def _release(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def _clear_leftovers(self) -> None:
        """A staging area left by an earlier run: removed if it is ours to remove, refused in one line otherwise."""
        staging = self.staging
        if not os.path.lexists(staging):
            return
        if staging.is_symlink() or not staging.is_dir():
            kind = "a symbolic link" if staging.is_symlink() else "a file"
            raise WriteError(f"{staging}: the staging path is {kind}, not a staging directory of flinkstate; "
                             f"remove it if nothing needs it")
        try:
            owner = Owner.from_json((staging / OWNER_MARKER).read_bytes())
        except OSError:
            owner = None
        if owner is None:
            raise WriteError(f"{staging}: a staging directory without flinkstate's owner marker (not ours); remove "
                             f"it if nothing needs it")
        if not owner.is_over():
            raise WriteError(f"{staging}: left by {owner.describe()}, which may still be running; remove it if "
                             f"that run is over")
        shutil.rmtree(staging)  # a crashed run of ours: its _metadata was never there, nothing looked finished

    def open(self, name: str) -> BinaryIO:
        return io.BufferedWriter(_StagedFile(self.staging / staged_name(name)))

    def copy_from(self, source: SavepointLocation, name: str, target: str) -> int:
        from flinkstate.storage.locations import LocalSavepointLocation

        if isinstance(source, LocalSavepointLocation):
            # Through the source's resolution (contained, regular file) and bounded by the recorded size: never
            # shutil.copyfile of whatever path a handle names.
            size = source.size(name)
            with source.bounded_stream(name) as stream, self.open(target) as sink:
                shutil.copyfileobj(stream, sink, 1 << 20)
            return size
        size = source.size(name)
        chunk = 8 << 20
        with self.open(target) as sink:
            for offset in range(0, size, chunk):
                sink.write(source.read_range(name, offset, min(chunk, size - offset)))
        return size

    def staged(self) -> SavepointLocation:
        return _StagedLocalLocation(self.staging)

    def publish(self) -> None:
        """Verified: ``_metadata`` takes its name inside the staging directory, the directory takes the output's
        name (one rename), and the owner marker goes. A crash in between leaves a hidden staging directory whose
        ``_metadata`` was verified, or a published savepoint with a stray marker file; never an unverified one."""
        if os.path.lexists(self.directory):
            raise WriteError(f"{self.directory}: output appeared while migrating; the result stays in {self.staging}")
        if not (self.staging / STAGED_METADATA).is_file():
            raise WriteError(f"{self.staging}: nothing to publish (no {METADATA_FILE})")
        try:
            os.rename(self.staging / STAGED_METADATA, self.staging / METADATA_FILE)
            os.rename(self.staging, self.directory)
        except OSError as exc:
            raise WriteError(f"{self.directory}: cannot publish the savepoint: {exc.strerror or exc}") from None
        with suppress(OSError):
            os.unlink(self.directory / OWNER_MARKER)
        self._release()

    def abort(self) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)
        self._release()


class _StagedFile(io.FileIO):
    """A new file in a staging area whose write errors name it: the operating system's (a full disk's ENOSPC)
    carry no file name, and a person must learn which file system to free."""

    def __init__(self, path: Path) -> None:
        try:
            super().__init__(path, "xb")
        except OSError as exc:
            raise WriteError(os_error_line(exc, path)) from None

    def write(self, data: Any) -> int:
        try:
            return super().write(data)
        except OSError as exc:
            raise WriteError(f"{self.name}: cannot write: {os_error_line(exc)}") from None


def _prepare_parent(parent: Path, directory: Path) -> None:
    """The output's parent folder, created if missing; one line when that cannot be (a file on the way, no
    permission)."""
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        blocker = next((p for p in (parent, *parent.parents) if os.path.lexists(p) and not p.is_dir()), parent)
        raise WriteError(f"{directory}: cannot create the output: {blocker} is a file, not a directory") from None
    except OSError as exc:
        raise WriteError(f"{directory}: cannot create the output's folder {parent}: {exc.strerror or exc}") from None
    if not os.access(parent, os.W_OK | os.X_OK):
        raise WriteError(f"{directory}: cannot create the output: {parent} is not writable (permission denied)")


__all__ = ["NEW_FILE_FLAGS", "OWNER_MARKER", "S3_LOCK_HEARTBEAT_SECONDS", "S3_LOCK_STALE_SECONDS", "STAGED_METADATA",
           "LocalSavepointOutput", "Owner", "SavepointOutput"]
