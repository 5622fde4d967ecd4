"""s3:// savepoints against a real S3 endpoint on loopback (moto's server): the same entries as on local disk, ranged
reads, copies both ways, and one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import boto3
import pytest

from flinkstate.binary import KeyGroupRange, assign_key_group, java_string_hash
from flinkstate.cli import main
from flinkstate.savepoint import Savepoint
from flinkstate.storage import settings
from flinkstate.storage.locations import StorageError
from flinkstate.storage.uri import copy_savepoint, open_location
from tests.support.sample_job import OPERATOR_UID

STATES = ("stats", "count", "recent", "buckets", "_timer_state/processing_user-timers")


@pytest.fixture(scope="module")
def bucket(s3_endpoint: str) -> str:
    boto3.client("s3").create_bucket(Bucket="savepoints")
    return "savepoints"


@pytest.fixture(scope="module")
def s3_savepoint(bucket: str, flink_savepoints: dict[str, Path]) -> str:
    return copy_savepoint(flink_savepoints["rocksdb-p2-snappy"], f"s3://{bucket}/job-a/savepoint-1")


def _entries(path: str | Path) -> dict[str, list[tuple]]:
    opened = Savepoint.open(path)
    return {state: sorted(map(repr, opened.iter_entries(OPERATOR_UID, state))) for state in STATES}


def test_s3_savepoint_reads_exactly_like_the_local_one(s3_savepoint: str, flink_savepoints: dict[str, Path]):
    local = flink_savepoints["rocksdb-p2-snappy"]
    assert _entries(s3_savepoint) == _entries(local)
    assert _entries(s3_savepoint + "/_metadata") == _entries(local)
    assert Savepoint.open(s3_savepoint).describe()["operators"] == Savepoint.open(local).describe()["operators"]


def test_reading_a_key_group_range_fetches_only_its_blocks(s3_savepoint: str):
    location = open_location(s3_savepoint)
    opened = Savepoint(location)
    streams = dict(opened.keyed_streams(OPERATOR_UID))
    _, subtask_range = opened.key_group_ranges(OPERATOR_UID)[1]
    with_data = [kg for kg, _ in streams[1].iter_blocks("stats")]
    wanted = KeyGroupRange(with_data[0], with_data[2])  # three key groups of subtask 1
    assert wanted.start in subtask_range and wanted.end in subtask_range

    requests: list[tuple[str, str]] = []
    location.client.meta.events.register(
        "before-call.s3.GetObject",
        lambda params, **_: requests.append((params["url_path"].rsplit("/", 1)[-1],
                                             params["headers"].get("Range", "whole"))))
    entries = list(Savepoint(location).iter_entries(OPERATOR_UID, "stats", key_group_range=wanted))
    assert {assign_key_group(java_string_hash(key), 128) for key, _, _ in entries} <= set(wanted)
    assert entries

    assert all(r != "whole" for name, r in requests if name != "_metadata"), requests
    ranges = [(name, tuple(map(int, r.removeprefix("bytes=").split("-")))) for name, r in requests
              if name != "_metadata"]
    file_of_subtask = {index: stream.handle.delegate.relative_path for index, stream in streams.items()}
    fetched = sum(end - start + 1 for name, (start, end) in ranges if name == file_of_subtask[1])
    assert 0 < fetched < location.size(file_of_subtask[1]), "only the wanted blocks (and the header) are read"
    # Subtask 0 holds none of the wanted key groups: at most its header is read, never its blocks.
    header_end = min(off for off in streams[0].handle.offsets.offsets if off)
    assert all(start < header_end for name, (start, _) in ranges if name == file_of_subtask[0]), ranges


def test_cli_describe_and_dump_from_s3(s3_savepoint: str, capsys: pytest.CaptureFixture[str]):
    assert main(["describe", s3_savepoint, "--json"]) == 0
    described = json.loads(capsys.readouterr().out)
    assert described["metadata_version"] == 6
    assert main(["dump", s3_savepoint, "--operator", OPERATOR_UID, "--state", "count"]) == 0
    counts = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(counts) == 20 and all(isinstance(c["value"], int) for c in counts)


def test_explicit_endpoint_option_wins_over_the_environment(
    s3_savepoint: str, s3_endpoint: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens there
    try:
        assert main(["--s3-endpoint-url", s3_endpoint, "describe", s3_savepoint]) == 0
        assert "metadata version 6" in capsys.readouterr().out
        assert main(["describe", s3_savepoint]) == 1
        error = capsys.readouterr().err.strip()
        assert error.startswith("flinkstate: error: s3://savepoints/job-a/savepoint-1/_metadata: S3 head_object")
        assert "\n" not in error
    finally:
        settings.s3_options = settings.S3Options()


def test_copy_back_to_local_restores_byte_for_byte(s3_savepoint: str, flink_savepoints: dict[str, Path],
                                                   tmp_path: Path):
    local = Path(copy_savepoint(s3_savepoint, tmp_path / "copy"))
    original = flink_savepoints["rocksdb-p2-snappy"]
    assert sorted(p.name for p in local.iterdir()) == sorted(p.name for p in original.iterdir())
    for path in original.iterdir():
        assert (local / path.name).read_bytes() == path.read_bytes()
    with pytest.raises(StorageError, match="already exists"):
        copy_savepoint(s3_savepoint, local)
    with pytest.raises(StorageError, match="already exists"):
        copy_savepoint(original, s3_savepoint)


@pytest.mark.parametrize("uri, message", [
    ("s3://savepoints/no-such-prefix", "s3://savepoints/no-such-prefix/_metadata: no such object"),
    ("s3://no-such-bucket/x", "s3://no-such-bucket: no such bucket"),
])
def test_missing_s3_savepoints_are_one_line_errors(bucket: str, uri: str, message: str,
                                                   capsys: pytest.CaptureFixture[str]):
    assert main(["describe", uri]) == 1
    assert capsys.readouterr().err.strip() == f"flinkstate: error: {message}"
