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
import shutil
import stat
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import unquote, urlparse

from flinkstate.errors import FlinkStateError

METADATA_FILE = "_metadata"


class StorageError(FlinkStateError):
    """A savepoint file is missing or unreadable."""


class HandleRefused(StorageError):
    """A state handle names something other than a regular file inside the savepoint (see the module docstring)."""


@dataclass
class HandlePolicy:
    """What state handles may name. ``allow_external_handles``: legacy savepoints whose absolute handles point
    outside the savepoint directory (off by default: such a ``_metadata`` could make flinkstate read and copy any
    file the user can read)."""

    allow_external_handles: bool = False


#: Process-wide default (the CLI's opt-in flag sets it); ``open_location(..., allow_external_handles=...)`` overrides.
handle_policy = HandlePolicy()

_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_OPT_IN_HINT = "legacy savepoints with absolute handles need the opt-in --allow-external-handles"


def _refuse(uri: str, name: str, why: str) -> HandleRefused:
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

    def check_handles(self, handles: Iterable[tuple[str, str, int]]) -> None:
        """Resolves every ``(where, file name, recorded size)`` of a savepoint's metadata up front, so that a
        handle outside the savepoint fails every command (not only those that read its state), and records the
        sizes (:meth:`expect_sizes`). Two handles naming one file must agree on its size."""
        sizes: dict[str, int] = {}
        for where, name, size in handles:
            self.resolve(name)
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
    def __init__(self, directory: Path, allow_external_handles: bool | None = None) -> None:
        self.directory = directory
        self.uri = str(directory)
        self.allow_external_handles = (handle_policy.allow_external_handles if allow_external_handles is None
                                       else allow_external_handles)
        self._real_directory = Path(os.path.realpath(directory))

    def _inside(self, real: Path) -> bool:
        return real == self._real_directory or self._real_directory in real.parents

    def _resolve(self, name: str) -> Path:
        """The real path of the file a handle names, or :class:`HandleRefused` (containment rules: module docstring).
        Absolute handles (code 2) carry the path where Flink wrote the file: inside this directory they are read
        like relative ones; elsewhere only with the opt-in, which also finds the file of a moved legacy savepoint by
        its name in this directory (what Flink itself cannot do)."""
        uri = self.uri
        if not name or "\x00" in name:
            raise _refuse(uri, name, "is empty or contains a NUL character")
        text = name
        if text.startswith("file:"):
            text = _local_path(text)
            if not text.startswith("/"):
                raise _refuse(uri, name, "is a file: URI without an absolute path")
        elif _URI.match(text):
            raise _refuse(uri, name, f"names a {text.split(':', 1)[0]}: location; a local savepoint reads only "
                                     f"files inside its directory")
        # ``path`` is what is opened and shown in messages; ``real`` (symlinks resolved) is what containment checks.
        if text.startswith("/"):
            path = Path(os.path.normpath(text))
            real = Path(os.path.realpath(path))
            if not self._inside(real):
                if not self.allow_external_handles:
                    raise _refuse(uri, name, f"points outside the savepoint directory ({_OPT_IN_HINT})")
                if not os.path.lexists(path):  # a moved legacy savepoint: its file is beside _metadata
                    path = self.directory / path.name
                    real = Path(os.path.realpath(path))
        else:
            if ".." in Path(text).parts:
                raise _refuse(uri, name, "contains '..': relative handles name files inside the savepoint directory")
            path = self.directory / text
            real = Path(os.path.realpath(path))
            if not self._inside(real) and not self.allow_external_handles:
                raise _refuse(uri, name, f"is a symbolic link that leaves the savepoint directory ({_OPT_IN_HINT})")
        try:
            mode = os.stat(real).st_mode
        except FileNotFoundError:
            return path  # reported by the read, as a missing state file
        except OSError as exc:
            raise StorageError(f"{path}: cannot read state file: {exc.strerror or exc}") from None
        if not stat.S_ISREG(mode):
            raise _refuse(uri, name, f"is not a regular file ({_file_kind(mode)})")
        return path

    def _open(self, name: str) -> tuple[Path, BinaryIO]:
        path = self._resolve(name)
        try:
            # O_NONBLOCK: a FIFO swapped in after _resolve must not block the open; fstat below refuses it.
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        except OSError as exc:
            raise StorageError(f"{path}: cannot read state file: {exc.strerror or exc}") from None
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            os.close(fd)
            raise _refuse(self.uri, name, f"is not a regular file ({_file_kind(mode)})")
        os.set_blocking(fd, True)
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
        path, handle = self._open(name)
        try:
            with handle:
                handle.seek(offset)
                return handle.read(length)
        except OSError as exc:
            raise StorageError(f"{path}: cannot read state file: {exc.strerror or exc}") from None

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


def _file_kind(mode: int) -> str:
    for test, kind in ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return "not a regular file"


def _local_path(uri: str) -> str:
    parsed = urlparse(uri)
    return unquote(parsed.path)


class S3SavepointLocation(SavepointLocation):
    """A savepoint directory under ``s3://bucket/prefix/``. Reads are ranged GETs, so one key-group block is fetched
    without the rest of its file (what lets Spark tasks split a savepoint by key-group range)."""

    def __init__(self, bucket: str, prefix: str, client: Any, allow_external_handles: bool | None = None) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.client = client
        self.uri = f"s3://{bucket}/{self.prefix}"
        self.allow_external_handles = (handle_policy.allow_external_handles if allow_external_handles is None
                                       else allow_external_handles)

    def _key(self, name: str) -> str:
        return self._resolve(name)

    def resolve(self, name: str) -> str:
        return self._resolve(name)

    def _resolve(self, name: str) -> str:
        """The object key a handle names, or :class:`HandleRefused` (containment rules: module docstring). A handle
        that is an ``s3://`` URI of an object under this prefix is read; other absolute handles (where a legacy
        savepoint was first written) only with the opt-in, which looks for the file by its name beside
        ``_metadata`` (a relocated savepoint), never elsewhere."""
        uri = self.uri
        if not name or "\x00" in name:
            raise _refuse(uri, name, "is empty or contains a NUL character")
        base = f"{self.prefix}/" if self.prefix else ""
        relative: str | None = None
        if _URI.match(name) or name.startswith("/"):
            parsed = urlparse(name)
            key = unquote(parsed.path).lstrip("/")
            if parsed.scheme in ("s3", "s3a") and parsed.netloc == self.bucket and key.startswith(base):
                relative = key[len(base):]
            elif not self.allow_external_handles:
                raise _refuse(uri, name, f"points outside the savepoint prefix ({_OPT_IN_HINT})")
            else:
                relative = name.rstrip("/").rsplit("/", 1)[-1]
        else:
            relative = name
        parts = relative.split("/")
        if ".." in parts:
            raise _refuse(uri, name, "contains '..': relative handles name objects under the savepoint prefix")
        if any(part in ("", ".") for part in parts):
            raise _refuse(uri, name, "has an empty or '.' path component")
        return base + relative

    def describe(self, name: str) -> str:
        return f"s3://{self.bucket}/{self._key(name)}"

    def _call(self, name: str, action: str, **kwargs: Any) -> Any:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return getattr(self.client, action)(Bucket=self.bucket, **kwargs)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in ("NoSuchKey", "404", "NotFound"):
                # HEAD answers carry no error body: a missing bucket looks like a missing object until asked.
                if code != "NoSuchKey" and not self._bucket_exists():
                    raise StorageError(f"s3://{self.bucket}: no such bucket") from None
                raise StorageError(f"{self.describe(name)}: no such object") from None
            if code == "NoSuchBucket":
                raise StorageError(f"s3://{self.bucket}: no such bucket") from None
            raise StorageError(f"{self.describe(name)}: S3 {action} failed: {code or exc}") from None
        except BotoCoreError as exc:
            raise StorageError(f"{self.describe(name)}: S3 {action} failed: {exc}") from None

    def _bucket_exists(self) -> bool:
        from botocore.exceptions import ClientError

        try:
            self.client.head_bucket(Bucket=self.bucket)
        except ClientError:
            return False
        return True

    def read_metadata(self) -> bytes:
        body = self._call(METADATA_FILE, "get_object", Key=self._key(METADATA_FILE))["Body"]
        return bytes(body.read())

    def read_range(self, name: str, offset: int, length: int) -> bytes:
        recorded = self._recorded(name)
        if recorded is not None:
            length = min(length, recorded - offset)
        if length <= 0:
            return b""
        try:
            response = self._call(name, "get_object", Key=self._key(name),
                                  Range=f"bytes={offset}-{offset + length - 1}")
        except StorageError as exc:
            if "InvalidRange" in str(exc):  # reading at or past the end of the object
                return b""
            raise
        return bytes(response["Body"].read())

    def open_stream(self, name: str) -> BinaryIO:
        return self._call(name, "get_object", Key=self._key(name))["Body"]  # type: ignore[no-any-return]

    def size(self, name: str) -> int:
        return self._check_size(name, int(self._call(name, "head_object", Key=self._key(name))["ContentLength"]))

    def list(self) -> list[str]:
        names: list[str] = []
        prefix = f"{self.prefix}/" if self.prefix else ""
        token: dict[str, str] = {}
        while True:
            page = self._call("", "list_objects_v2", Prefix=prefix, Delimiter="/", **token)
            names.extend(item["Key"][len(prefix):] for item in page.get("Contents", []))
            if not page.get("IsTruncated"):
                return sorted(names)
            token = {"ContinuationToken": page["NextContinuationToken"]}


@dataclass
class S3Options:
    """How to reach S3. Unset fields fall back to boto3's usual sources: AWS_ENDPOINT_URL(_S3), AWS_REGION /
    AWS_DEFAULT_REGION, AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, AWS_PROFILE, ~/.aws/."""

    endpoint_url: str | None = None
    region: str | None = None
    profile: str | None = None


#: Process-wide S3 settings (the CLI's --s3-endpoint-url and --s3-region set them).
s3_options = S3Options()


def s3_client(options: S3Options | None = None) -> Any:
    """A boto3 S3 client from ``options`` (default: the process-wide :data:`s3_options`)."""
    import boto3  # imported here: local savepoints need no AWS libraries loaded

    options = options or s3_options
    session = boto3.session.Session(profile_name=options.profile) if options.profile else boto3.session.Session()
    return session.client("s3", endpoint_url=options.endpoint_url, region_name=options.region)


def split_s3_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/some/prefix`` -> (bucket, "some/prefix")."""
    parsed = urlparse(uri)
    if parsed.scheme not in ("s3", "s3a") or not parsed.netloc:
        raise StorageError(f"{uri}: not an s3://bucket/prefix URI")
    return parsed.netloc, parsed.path.strip("/")


def open_location(path: str | os.PathLike[str], allow_external_handles: bool | None = None) -> SavepointLocation:
    """The savepoint at ``path``: a directory or its ``_metadata`` file, as a local path, ``file:`` or ``s3://`` URI.
    ``allow_external_handles`` (default: :data:`handle_policy`) admits state handles outside the savepoint, for
    legacy savepoints with absolute handles (see the module docstring)."""
    text = os.fspath(path)
    scheme = urlparse(text).scheme
    if scheme in ("s3", "s3a"):
        bucket, prefix = split_s3_uri(text)
        if prefix == METADATA_FILE or prefix.endswith("/" + METADATA_FILE):
            prefix = prefix[: -len(METADATA_FILE)].rstrip("/")
        location = S3SavepointLocation(bucket, prefix, s3_client(), allow_external_handles)
        location.size(METADATA_FILE)  # fail here, with the path, if there is no savepoint
        return location
    if scheme == "file":
        text = _local_path(text)
    elif scheme and len(scheme) > 1:
        raise StorageError(f"{text}: unsupported savepoint location scheme {scheme!r}")
    local = Path(text)
    if local.is_dir():
        if not (local / METADATA_FILE).is_file():
            raise StorageError(f"{local}: not a savepoint directory (no {METADATA_FILE})")
        return LocalSavepointLocation(local, allow_external_handles)
    if local.is_file():
        return LocalSavepointLocation(local.parent, allow_external_handles)
    raise StorageError(f"{local}: no such savepoint directory or _metadata file")


def copy_savepoint(source: str | os.PathLike[str], target: str | os.PathLike[str]) -> str:
    """Copies a savepoint directory between local disk and S3 (either way, or local to local); returns the target.

    The pipeline needs this because Flink on these machines has no S3 file system: savepoints are written locally
    and kept on S3, or fetched from S3 before a restore. A relocated copy restores because its handles are relative.
    Files are streamed (S3 uploads are multipart). The target must not exist yet (nothing is overwritten), and
    ``_metadata`` is written last, so an interrupted copy does not look like a finished savepoint.
    """
    src = open_location(source)
    names = [n for n in src.list() if n != METADATA_FILE] + [METADATA_FILE]
    target_text = os.fspath(target)
    if urlparse(target_text).scheme in ("s3", "s3a"):
        bucket, prefix = split_s3_uri(target_text)
        client = s3_client()
        if client.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/", MaxKeys=1).get("KeyCount", 0):
            raise StorageError(f"{target_text}: already exists; refusing to overwrite a savepoint")
        for name in names:
            with src.open_stream(name) as stream:
                client.upload_fileobj(stream, bucket, f"{prefix}/{name}")
        return f"s3://{bucket}/{prefix}"
    local = Path(_local_path(target_text) if target_text.startswith("file:") else target_text)
    if local.exists():
        raise StorageError(f"{local}: already exists; refusing to overwrite a savepoint")
    local.mkdir(parents=True)
    for name in names:
        with src.open_stream(name) as stream, open(local / name, "wb") as out:
            shutil.copyfileobj(stream, out, 1 << 20)
    return str(local)


def write_file(uri: str | os.PathLike[str], data: bytes) -> str:
    """Writes one file (a report, say) to a local path or ``s3://bucket/key``, creating local folders as needed;
    returns where it went. Local files appear whole: written beside, then renamed."""
    text = os.fspath(uri)
    if urlparse(text).scheme in ("s3", "s3a"):
        bucket, key = split_s3_uri(text)
        s3_client().put_object(Bucket=bucket, Key=key, Body=data)
        return f"s3://{bucket}/{key}"
    path = Path(_local_path(text) if text.startswith("file:") else text)
    partial = path.with_name(f".{path.name}.inprogress")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial.write_bytes(data)
        os.replace(partial, path)
    except OSError as exc:
        if partial.is_file():
            partial.unlink()
        raise StorageError(f"{text}: cannot write: {exc.strerror or exc}") from None
    return str(path)


def read_file(uri: str | os.PathLike[str]) -> bytes:
    """Reads one whole (small) file from a local path or ``s3://bucket/key``."""
    text = os.fspath(uri)
    if urlparse(text).scheme in ("s3", "s3a"):
        bucket, key = split_s3_uri(text)
        location = S3SavepointLocation(bucket, key.rsplit("/", 1)[0] if "/" in key else "", s3_client())
        return bytes(location.open_stream(key.rsplit("/", 1)[-1]).read())
    path = Path(_local_path(text) if text.startswith("file:") else text)
    try:
        return path.read_bytes()
    except OSError as exc:
        raise StorageError(f"{path}: cannot read: {exc.strerror or exc}") from None


def exists(uri: str | os.PathLike[str]) -> bool:
    """Whether a local file or folder, or an s3:// object, exists."""
    text = os.fspath(uri)
    if urlparse(text).scheme in ("s3", "s3a"):
        from botocore.exceptions import ClientError

        bucket, key = split_s3_uri(text)
        try:
            s3_client().head_object(Bucket=bucket, Key=key)
        except ClientError:
            return False
        return True
    return Path(_local_path(text) if text.startswith("file:") else text).exists()
