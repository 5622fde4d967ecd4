"""Where savepoint bytes come from. The reader only talks to :class:`SavepointLocation`, so a savepoint may live
on a local disk or in S3 (``s3://bucket/prefix``, through boto3): ``open_location`` dispatches on the URI scheme.

A location is the savepoint *directory* (the exclusive checkpoint dir that holds ``_metadata``); relative state
handles name files in it. Reads are ranged so that a reader can fetch one key-group block at a time.
"""

from __future__ import annotations

import os
import shutil
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO
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

    def open_stream(self, name: str) -> BinaryIO:
        path = self._path(name)
        try:
            return open(path, "rb")
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


class S3SavepointLocation(SavepointLocation):
    """A savepoint directory under ``s3://bucket/prefix/``. Reads are ranged GETs, so one key-group block is fetched
    without the rest of its file (what lets Spark tasks split a savepoint by key-group range)."""

    def __init__(self, bucket: str, prefix: str, client: Any) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.client = client
        self.uri = f"s3://{bucket}/{self.prefix}"

    def _key(self, name: str) -> str:
        # Absolute handles name the file where Flink wrote it; a relocated savepoint has it beside _metadata.
        if "/" in name:
            name = name.rstrip("/").rsplit("/", 1)[-1]
        return f"{self.prefix}/{name}" if self.prefix else name

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
        return int(self._call(name, "head_object", Key=self._key(name))["ContentLength"])

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


def open_location(path: str | os.PathLike[str]) -> SavepointLocation:
    """The savepoint at ``path``: a directory or its ``_metadata`` file, as a local path, ``file:`` or ``s3://`` URI."""
    text = os.fspath(path)
    scheme = urlparse(text).scheme
    if scheme in ("s3", "s3a"):
        bucket, prefix = split_s3_uri(text)
        if prefix == METADATA_FILE or prefix.endswith("/" + METADATA_FILE):
            prefix = prefix[: -len(METADATA_FILE)].rstrip("/")
        location = S3SavepointLocation(bucket, prefix, s3_client())
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
        return LocalSavepointLocation(local)
    if local.is_file():
        return LocalSavepointLocation(local.parent)
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
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.inprogress")
    partial.write_bytes(data)
    os.replace(partial, path)
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
