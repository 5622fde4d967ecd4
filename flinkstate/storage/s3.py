"""S3 access: the client (from :mod:`flinkstate.storage.settings`), ``s3://bucket/prefix`` URIs and the
savepoint location read through ranged GETs. Containment for S3 keys is the same policy as for local files
(:mod:`flinkstate.storage.locations`).
"""

from __future__ import annotations

import os
import threading
from typing import Any, BinaryIO
from urllib.parse import unquote, urlparse

from flinkstate.storage import settings
from flinkstate.storage.locations import (
    METADATA_FILE,
    OPT_IN_HINT,
    URI_PATTERN,
    SavepointLocation,
    StorageError,
    refused,
)
from flinkstate.storage.settings import S3Options


class S3SavepointLocation(SavepointLocation):
    """A savepoint directory under ``s3://bucket/prefix/``. Reads are ranged GETs, so one key-group block is fetched
    without the rest of its file (what lets Spark tasks split a savepoint by key-group range)."""

    def __init__(self, bucket: str, prefix: str, client: Any, allow_external_handles: bool | None = None) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.client = client
        self.uri = f"s3://{bucket}/{self.prefix}"
        self.allow_external_handles = (settings.handle_policy.allow_external_handles if allow_external_handles is None
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
            raise refused(uri, name, "is empty or contains a NUL character")
        base = f"{self.prefix}/" if self.prefix else ""
        relative: str | None = None
        if URI_PATTERN.match(name) or name.startswith("/"):
            parsed = urlparse(name)
            key = unquote(parsed.path).lstrip("/")
            if parsed.scheme in ("s3", "s3a") and parsed.netloc == self.bucket and key.startswith(base):
                relative = key[len(base):]
            elif not self.allow_external_handles:
                raise refused(uri, name, f"points outside the savepoint prefix ({OPT_IN_HINT})")
            else:
                relative = name.rstrip("/").rsplit("/", 1)[-1]
        else:
            relative = name
        parts = relative.split("/")
        if ".." in parts:
            raise refused(uri, name, "contains '..': relative handles name objects under the savepoint prefix")
        if any(part in ("", ".") for part in parts):
            raise refused(uri, name, "has an empty or '.' path component")
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


#: One boto3 client per process, options and AWS_* environment: building one loads the service model (about
#: 0.3 s each, and a journal write, a registry read or a history listing each asked for one). Clients are safe to
#: share between threads; building them is not, hence the lock.
_clients: dict[tuple[Any, ...], Any] = {}
_clients_lock = threading.Lock()


def s3_client(options: S3Options | None = None) -> Any:
    """A boto3 S3 client from ``options`` (default: the process-wide :data:`s3_options`), built once per process
    for the same options and AWS_* variables."""
    import boto3  # imported here: local savepoints need no AWS libraries loaded

    options = options or settings.s3_options
    key = (options.endpoint_url, options.region, options.profile, os.getpid(),
           tuple(sorted((name, value) for name, value in os.environ.items() if name.startswith("AWS_"))))
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            session = boto3.session.Session(profile_name=options.profile) if options.profile else \
                boto3.session.Session()
            client = _clients[key] = session.client("s3", endpoint_url=options.endpoint_url,
                                                    region_name=options.region)
    return client


def split_s3_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/some/prefix`` -> (bucket, "some/prefix")."""
    parsed = urlparse(uri)
    if parsed.scheme not in ("s3", "s3a") or not parsed.netloc:
        raise StorageError(f"{uri}: not an s3://bucket/prefix URI")
    return parsed.netloc, parsed.path.strip("/")


__all__ = ["S3SavepointLocation", "s3_client", "split_s3_uri"]
