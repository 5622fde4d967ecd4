"""One entry per operation on a local path or an ``s3://`` URI: open a savepoint location or a new output,
copy a savepoint, read, write or test a single file. Each dispatches on the scheme to
:mod:`flinkstate.storage.locations`, :mod:`flinkstate.storage.s3` or :mod:`flinkstate.storage.outputs`.
"""

from __future__ import annotations

import errno
import os
import shutil
import uuid
from contextlib import suppress
from pathlib import Path
from urllib.parse import unquote, urlparse

from flinkstate.errors import WriteError, os_error_line
from flinkstate.storage.locations import (
    METADATA_FILE,
    LocalSavepointLocation,
    SavepointLocation,
    StorageError,
    local_path,
)
from flinkstate.storage.outputs import NEW_FILE_FLAGS, LocalSavepointOutput, SavepointOutput
from flinkstate.storage.s3 import S3SavepointLocation, s3_client, split_s3_uri
from flinkstate.storage.s3_output import S3SavepointOutput


def open_output(uri: str | os.PathLike[str]) -> SavepointOutput:
    """The output for a savepoint directory URI: a local path, a ``file:`` URI or ``s3://bucket/prefix``."""
    text = os.fspath(uri)
    scheme = urlparse(text).scheme
    if scheme in ("s3", "s3a"):
        return S3SavepointOutput(text)
    if scheme == "file":
        text = unquote(urlparse(text).path)
    elif scheme and len(scheme) > 1:
        raise WriteError(f"{text}: unsupported output scheme {scheme!r}")
    return LocalSavepointOutput(Path(text).absolute())


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
        text = local_path(text)
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
    local = Path(local_path(target_text) if target_text.startswith("file:") else target_text)
    if local.exists():
        raise StorageError(f"{local}: already exists; refusing to overwrite a savepoint")
    local.mkdir(parents=True)
    for name in names:
        with src.open_stream(name) as stream, open(local / name, "xb") as out:  # new, never through a link
            shutil.copyfileobj(stream, out, 1 << 20)
    return str(local)


def write_file(uri: str | os.PathLike[str], data: bytes, *, durable: bool = False) -> str:
    """Writes one file (a report, say) to a local path or ``s3://bucket/key``, creating local folders as needed;
    returns where it went. Local files appear whole: written to a new file beside (a name of its own, created
    exclusively, never through a symbolic link), then renamed over the target, which replaces the target's directory
    entry: a link at the target is replaced, never followed, and a file hard-linked to it keeps its bytes.
    ``durable``: the file and the rename are fsync'ed, so a crash leaves the old or the new content. An ``s3://``
    object is one PUT, which S3 applies whole."""
    text = os.fspath(uri)
    if urlparse(text).scheme in ("s3", "s3a"):
        bucket, key = split_s3_uri(text)
        s3_client().put_object(Bucket=bucket, Key=key, Body=data)
        return f"s3://{bucket}/{key}"
    path = Path(local_path(text) if text.startswith("file:") else text)
    partial = path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}.inprogress")
    created = False
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(partial, NEW_FILE_FLAGS, 0o644)
        created = True
        try:
            written = 0
            while written < len(data):  # os.write may write less (a filling device): the rest, or its error
                count = os.write(fd, data[written:])
                if count == 0:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                written += count
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(partial, path)
        if durable:
            folder = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(folder)
            finally:
                os.close(folder)
    except OSError as exc:
        if created:
            with suppress(OSError):  # a full disk must not also keep the half-written copy
                partial.unlink()
        # The reason without the file the error names: the partial one, gone now; ``path`` is the one to name.
        reason = os_error_line(OSError(exc.errno, exc.strerror) if exc.errno else exc)
        # The cause is kept: whether it was a full disk decides whether a recovery may go on (upgrades/recovery.py).
        raise StorageError(f"{path}: cannot write: {reason}") from exc
    return str(path)


def location_parts(location: str, *, savepoint: bool = False) -> tuple[str, ...]:
    """A location as path parts for containment tests: ``("s3", bucket, *key parts)``, or ``("file", *parts)`` of
    the local path resolved (every symbolic link on the way followed, to a file or a folder, so that a path through
    a link into the source is seen as inside the source). ``savepoint``: a trailing ``_metadata`` names its
    folder."""
    if urlparse(location).scheme in ("s3", "s3a"):
        parts: tuple[str, ...] = ("s3", *(p for p in location.split("://", 1)[1].split("/") if p))
    else:
        parts = ("file", *Path(local_path(location) if location.startswith("file:") else location).resolve().parts)
    return parts[:-1] if savepoint and parts[-1] == METADATA_FILE else parts


def is_within(inner: tuple[str, ...], outer: tuple[str, ...]) -> bool:
    """Whether location parts ``inner`` are ``outer`` or below it."""
    return len(inner) >= len(outer) and inner[:len(outer)] == outer


def refuse_output_in_source(output: str, source: str, option: str, *, report_folder: bool = False) -> None:
    """The one check of every path a command writes (``-o`` of each command, ``migrate``'s output and report):
    refused in one line, before anything is written, when it is the source savepoint (a folder or its
    ``_metadata``), inside it, or contains it, also when it gets there through symbolic links. ``option`` names
    the option in the message. ``report_folder``: ``output`` is a folder the command writes its own named report
    files into, never replaced as a whole, so it may contain the source (the upgrade's ``preflight/`` folder holds
    the preflight savepoint and, beside it, the check's report)."""
    target, folder = location_parts(output), location_parts(source, savepoint=True)
    if is_within(target, folder) or (is_within(folder, target) and not report_folder):
        raise WriteError(f"{option} {output} is inside the source savepoint {source} (or contains it): the source "
                         f"is never written to")


def read_file(uri: str | os.PathLike[str]) -> bytes:
    """Reads one whole (small) file from a local path or ``s3://bucket/key``."""
    text = os.fspath(uri)
    if urlparse(text).scheme in ("s3", "s3a"):
        bucket, key = split_s3_uri(text)
        location = S3SavepointLocation(bucket, key.rsplit("/", 1)[0] if "/" in key else "", s3_client())
        return bytes(location.open_stream(key.rsplit("/", 1)[-1]).read())
    path = Path(local_path(text) if text.startswith("file:") else text)
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
    return Path(local_path(text) if text.startswith("file:") else text).exists()


__all__ = ["copy_savepoint", "exists", "is_within", "location_parts", "open_location", "open_output", "read_file",
           "refuse_output_in_source", "write_file"]
