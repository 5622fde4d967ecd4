"""A new savepoint under an ``s3://`` prefix (:class:`S3SavepointOutput`): objects are staged under a hidden
prefix, a conditional-PUT lock with a heartbeat keeps a second writer out, and publishing is a server-side copy
with ``_metadata`` last, so a reader never sees a partial savepoint.
"""

from __future__ import annotations

import io
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import replace
from typing import Any, BinaryIO

from flinkstate.errors import WriteError
from flinkstate.storage import settings
from flinkstate.storage.locations import METADATA_FILE, SavepointLocation
from flinkstate.storage.outputs import (
    OWNER_MARKER,
    RESERVED_NAMES,
    S3_LOCK_HEARTBEAT_SECONDS,
    S3_LOCK_STALE_SECONDS,
    STAGED_METADATA,
    Owner,
    SavepointOutput,
    staged_name,
)
from flinkstate.storage.s3 import S3SavepointLocation, s3_client, split_s3_uri
from flinkstate.storage.settings import S3Options


class _UploadOnClose(io.BufferedRandom):
    """A writable file that is spooled to an anonymous local temporary file and handed to ``upload`` when closed
    without error. Keyed streams can be gigabytes: they go to disk, never to memory, and boto3's managed upload sends
    them in parts. A ``with`` block that raises discards the file, so a half-written stream is never uploaded."""

    def __init__(self, upload: Callable[[BinaryIO], None]) -> None:
        fd, path = tempfile.mkstemp(prefix="flinkstate-upload-")
        os.unlink(path)  # anonymous: the space is freed on close, even when the process dies
        super().__init__(io.FileIO(fd, "w+"))
        self._upload = upload
        self._discard = False

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self._discard = exc_type is not None
        super().__exit__(exc_type, exc, tb)

    def close(self) -> None:
        if self.closed:
            return
        try:
            if not self._discard:
                self.flush()
                self.seek(0)
                # boto3 closes the file it uploads: give it a duplicate descriptor, not this object (whose close is
                # what uploads). The duplicate shares the file offset, now at 0.
                with io.FileIO(os.dup(self.fileno()), "r") as reader:
                    self._upload(reader)
        finally:
            super().close()


class S3SavepointOutput(SavepointOutput):
    """A savepoint directory under ``s3://bucket/prefix/``, staged under the sibling prefix
    ``s3://bucket/.../.NAME.inprogress/``.

    S3 has no rename, so :meth:`publish` copies every staged object to the final prefix server-side, ``_metadata``
    last, and then deletes the staging objects. A crash in the middle of publishing leaves the final prefix without
    ``_metadata``, which neither Flink nor flinkstate takes for a finished savepoint, and leaves the staging objects
    in place; running the same migration again recognises that pair (final prefix without ``_metadata`` + staging
    objects) and removes both before starting over. An error (rather than a crash) while publishing removes the
    partial copy itself.

    Concurrent runs: a lock object ``.NAME.lock`` beside the output is created only if absent (a conditional PUT)
    and refreshed by a heartbeat while the run lives; a second run fails naming its holder, and a lock whose
    heartbeat stopped for :data:`S3_LOCK_STALE_SECONDS` (by the S3 server's clock) is taken over. The staging area
    carries an owner marker; leftovers without one are not ours and are refused, not deleted. ``_metadata`` is
    staged as ``_metadata.unverified`` and copied to ``_metadata`` last, after verification.

    The object is pickled to Spark's Python workers: it carries the bucket, the prefixes and the S3 options, and
    builds its boto3 client lazily, once per process (clients neither pickle nor survive a fork). Server-side copies
    assume the source savepoint is reachable through the same endpoint and credentials as the output."""

    def __init__(self, uri: str, options: S3Options | None = None) -> None:
        self.bucket, self.prefix = split_s3_uri(uri)
        if not self.prefix:
            raise WriteError(f"{uri}: name a prefix inside the bucket for the new savepoint")
        parent, _, name = self.prefix.rpartition("/")
        self.staging_prefix = f"{parent}/.{name}.inprogress" if parent else f".{name}.inprogress"
        self.uri = f"s3://{self.bucket}/{self.prefix}"
        # Captured now, from the CLI's --s3-* flags if any: Spark workers only see what is pickled with this object.
        self.options = replace(options or settings.s3_options)
        self._client: Any = None
        self._client_pid: int | None = None
        self.owner = Owner.current()
        self.lock_key = f"{parent}/.{name}.lock" if parent else f".{name}.lock"
        self._heartbeat: threading.Event | None = None
        self._lock()
        try:
            self._clear_leftovers()
            self._put(self._staged_key(OWNER_MARKER), self.owner.to_json())
        except BaseException:
            self._release()
            raise

    def __getstate__(self) -> dict[str, Any]:
        # Spark tasks only write staged files: the lock and its heartbeat stay with the driver.
        return {**self.__dict__, "_client": None, "_client_pid": None, "_heartbeat": None}

    def _put(self, key: str, body: bytes, **conditions: str) -> None:
        with self._s3("upload", f"s3://{self.bucket}/{key}"):
            self.client.put_object(Bucket=self.bucket, Key=key, Body=body, **conditions)

    def _lock(self) -> None:
        """Creates the lock object if absent; takes over a stale one; else one line naming the holder."""
        from botocore.exceptions import ClientError

        where = f"s3://{self.bucket}/{self.lock_key}"
        for _ in range(3):
            try:
                with self._s3("lock", where):
                    try:
                        self.client.put_object(Bucket=self.bucket, Key=self.lock_key, Body=self.owner.to_json(),
                                               IfNoneMatch="*")
                        break
                    except ClientError as exc:
                        if exc.response.get("Error", {}).get("Code") not in ("PreconditionFailed",
                                                                              "ConditionalRequestConflict"):
                            raise
                    response = self.client.get_object(Bucket=self.bucket, Key=self.lock_key)
                    holder = Owner.from_json(response["Body"].read())
                    server_now = _http_date(response["ResponseMetadata"].get("HTTPHeaders", {}).get("date"))
                    age = (server_now or time.time()) - response["LastModified"].timestamp()
                    if age < S3_LOCK_STALE_SECONDS and not (holder is not None and holder.pid != os.getpid()
                                                            and holder.is_over()):
                        raise WriteError(f"{self.uri}: another migration is writing this output (lock {where} held "
                                         f"by {holder.describe() if holder else 'another process'}, refreshed "
                                         f"{int(age)} s ago)")
                    # Stale (no heartbeat) or its owner is provably gone: take it over, if nobody else did.
                    self.client.delete_object(Bucket=self.bucket, Key=self.lock_key, IfMatch=response["ETag"])
            except WriteError as exc:
                if "PreconditionFailed" in str(exc):  # another run took the stale lock first: look again
                    continue
                raise
        else:
            raise WriteError(f"{self.uri}: could not take the lock {where}: other runs keep taking it")
        stop = threading.Event()
        self._heartbeat = stop
        threading.Thread(target=self._beat, args=(stop,), name="flinkstate-s3-lock", daemon=True).start()

    def _beat(self, stop: threading.Event) -> None:
        """Refreshes the lock object while the run lives (its LastModified is the heartbeat)."""
        while not stop.wait(S3_LOCK_HEARTBEAT_SECONDS):
            with suppress(Exception):  # a missed beat only makes the lock look older; the next one retries
                self.client.put_object(Bucket=self.bucket, Key=self.lock_key, Body=self.owner.to_json())

    def _release(self) -> None:
        if self._heartbeat is None:
            return
        self._heartbeat.set()
        self._heartbeat = None
        with suppress(Exception):  # only our own lock is removed; a failure leaves it to go stale
            response = self.client.get_object(Bucket=self.bucket, Key=self.lock_key)
            holder = Owner.from_json(response["Body"].read())
            if holder is not None and holder.id == self.owner.id:
                self.client.delete_object(Bucket=self.bucket, Key=self.lock_key)

    @property
    def client(self) -> Any:
        if self._client is None or self._client_pid != os.getpid():
            self._client = s3_client(self.options)
            self._client_pid = os.getpid()
        return self._client

    def _staged_key(self, name: str) -> str:
        return f"{self.staging_prefix}/{name}"

    @contextmanager
    def _s3(self, action: str, where: str) -> Iterator[None]:
        """botocore's errors as one-line :class:`WriteError`s naming the object."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            yield
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code == "NoSuchBucket":
                raise WriteError(f"s3://{self.bucket}: no such bucket") from None
            raise WriteError(f"{where}: S3 {action} failed: {code or exc}") from None
        except BotoCoreError as exc:
            raise WriteError(f"{where}: S3 {action} failed: {exc}") from None

    def _keys(self, prefix: str) -> list[str]:
        """Every object key under ``prefix/``, nested ones included (anything there means the name is taken)."""
        keys: list[str] = []
        with self._s3("list", f"s3://{self.bucket}/{prefix}/"):
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket,
                                                                            Prefix=f"{prefix}/"):
                keys.extend(item["Key"] for item in page.get("Contents", []))
        return keys

    def _delete(self, keys: list[str]) -> None:
        for start in range(0, len(keys), 1000):  # DeleteObjects takes at most 1000 keys
            batch = keys[start:start + 1000]
            with self._s3("delete", f"s3://{self.bucket}/{batch[0]}"):
                response = self.client.delete_objects(
                    Bucket=self.bucket, Delete={"Objects": [{"Key": key} for key in batch], "Quiet": True})
            if response.get("Errors"):
                error = response["Errors"][0]
                raise WriteError(f"s3://{self.bucket}/{error['Key']}: S3 delete failed: {error.get('Code')}")

    def _clear_leftovers(self) -> None:
        """Called holding the lock: a staging area with an owner marker belongs to a run that no longer holds it
        (over, or its heartbeat stopped), and is removed with the partial copy of a publish it crashed in; objects
        without the marker are someone else's and refused."""
        final, staged = self._keys(self.prefix), self._keys(self.staging_prefix)
        ours = self._staged_key(OWNER_MARKER) in staged
        if staged and not ours:
            raise WriteError(f"s3://{self.bucket}/{self.staging_prefix}/: a staging area without flinkstate's owner "
                             f"marker (not ours); remove it if nothing needs it")
        if final:
            if f"{self.prefix}/{METADATA_FILE}" in final or not staged:
                raise WriteError(f"{self.uri}: output already exists")
            self._delete(final)  # a publish of ours that crashed: it never had _metadata, so it never looked finished
        self._delete(staged)  # a run of ours that crashed before publishing

    def open(self, name: str) -> BinaryIO:
        key = self._staged_key(staged_name(name))

        def upload(body: BinaryIO) -> None:
            with self._s3("upload", f"s3://{self.bucket}/{key}"):
                self.client.upload_fileobj(body, self.bucket, key)

        return _UploadOnClose(upload)

    def copy_from(self, source: SavepointLocation, name: str, target: str) -> int:
        key = self._staged_key(staged_name(target))
        size = source.size(name)
        with self._s3("copy", f"{source.describe(name)} -> s3://{self.bucket}/{key}"):
            if isinstance(source, S3SavepointLocation):
                source_bucket, source_key = split_s3_uri(source.describe(name))
                self.client.copy({"Bucket": source_bucket, "Key": source_key}, self.bucket, key)  # server-side
            else:
                with source.bounded_stream(name) as stream:
                    self.client.upload_fileobj(stream, self.bucket, key)
        return size

    def staged(self) -> SavepointLocation:
        return _StagedS3Location(self.bucket, self.staging_prefix, self.client)

    def publish(self) -> None:
        """Verified: every staged file is copied to the final prefix, the staged metadata last as ``_metadata``
        (the commit point), then the staging area and the lock go."""
        staged = self._keys(self.staging_prefix)
        names = [key[len(self.staging_prefix) + 1:] for key in staged]
        if STAGED_METADATA not in names:
            raise WriteError(f"s3://{self.bucket}/{self.staging_prefix}: nothing to publish (no {METADATA_FILE})")
        if self._keys(self.prefix):
            raise WriteError(f"{self.uri}: output appeared while migrating")
        copied: list[str] = []
        try:
            files = sorted(n for n in names if n not in RESERVED_NAMES)
            for staged_name, name in [*((n, n) for n in files), (STAGED_METADATA, METADATA_FILE)]:
                key = f"{self.prefix}/{name}"
                source_key = self._staged_key(staged_name)
                with self._s3("copy", f"s3://{self.bucket}/{source_key} -> s3://{self.bucket}/{key}"):
                    self.client.copy({"Bucket": self.bucket, "Key": source_key}, self.bucket, key)
                copied.append(key)
        except BaseException:
            with suppress(WriteError):  # the copy's error is the one to report
                self._delete(copied)
            raise
        self._delete(staged)
        self._release()

    def abort(self) -> None:
        # abort runs while another error propagates: failing here would hide that error, and whatever stays behind
        # is removed by the next run (see _clear_leftovers).
        try:
            with suppress(WriteError):
                self._delete(self._keys(self.staging_prefix))
        finally:
            self._release()


class _StagedS3Location(S3SavepointLocation):
    """The staging prefix read as a savepoint: ``_metadata`` is the staged, not yet verified one."""

    def _resolve(self, name: str) -> str:
        return super()._resolve(STAGED_METADATA if name == METADATA_FILE else name)


def _http_date(value: str | None) -> float | None:
    """An HTTP ``Date`` header as a timestamp: the S3 server's clock, so a lock's age needs no synchronized
    clocks."""
    from email.utils import parsedate_to_datetime

    try:
        return parsedate_to_datetime(value).timestamp() if value else None
    except (TypeError, ValueError):
        return None


__all__ = ["S3SavepointOutput"]
