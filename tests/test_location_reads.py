"""Ranged reads of a local savepoint through descriptors kept open (``LocalSavepointLocation.read_range``).

A state file's name is resolved and checked when the file is first read; later reads of it go through the
descriptor opened then. These tests hold the reads to the file's bytes, show that a path swapped after the check
(for a symbolic link out of the savepoint, or for other bytes) is never read, and that the open descriptors are
bounded and released.
"""

from __future__ import annotations

import gc
import os
import pickle
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flinkstate.storage.locations import HandleRefused, LocalSavepointLocation

CONTENT = bytes(range(256)) * 40  # 10,240 bytes
CANARY = b"CANARY-outside-the-savepoint\n" * 8


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def directory(tmp_path: Path) -> Path:
    savepoint = tmp_path / "savepoint"
    savepoint.mkdir()
    (savepoint / "state").write_bytes(CONTENT)
    (tmp_path / "outside").write_bytes(CANARY)
    return savepoint


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(offset=st.integers(0, len(CONTENT) + 64), length=st.integers(0, len(CONTENT) + 64),
       recorded=st.sampled_from([None, len(CONTENT)]))
def test_a_ranged_read_is_the_files_bytes(directory: Path, offset: int, length: int, recorded: int | None) -> None:
    location = LocalSavepointLocation(directory)
    if recorded is not None:
        location.expect_sizes({"state": recorded})
    assert location.read_range("state", offset, length) == CONTENT[offset:offset + length]
    assert location.read_range("state", 0, 16) == CONTENT[:16]  # the kept descriptor's position is not used


def test_reads_are_bounded_by_the_recorded_size(directory: Path) -> None:
    location = LocalSavepointLocation(directory)
    location.expect_sizes({"state": 100})
    assert location.read_range("state", 90, 50) == CONTENT[90:100]
    assert location.read_range("state", 200, 50) == b""


def test_a_path_swapped_for_a_link_out_of_the_savepoint_after_the_check_is_never_read(directory: Path) -> None:
    location = LocalSavepointLocation(directory)
    assert location.read_range("state", 0, 64) == CONTENT[:64]
    (directory / "state").unlink()
    (directory / "state").symlink_to(directory.parent / "outside")
    assert location.read_range("state", 0, len(CONTENT)) == CONTENT  # the file that was checked, still open
    # A location that has not read the file yet checks the path as it is now: the link is refused.
    with pytest.raises(HandleRefused, match="leaves the savepoint directory"):
        LocalSavepointLocation(directory).read_range("state", 0, 64)


def test_a_file_rewritten_in_place_is_read_as_it_now_is(directory: Path) -> None:
    """The descriptor is the checked file, not a copy of its bytes: the same inode's new content is read (Flink's
    files are written once; this pins what the cache does and does not promise)."""
    location = LocalSavepointLocation(directory)
    assert location.read_range("state", 0, 4) == CONTENT[:4]
    with open(directory / "state", "r+b") as rewrite:
        rewrite.write(b"ABCD")
    assert location.read_range("state", 0, 4) == b"ABCD"


def test_open_descriptors_are_bounded_and_released(directory: Path) -> None:
    names = [f"file-{index}" for index in range(LocalSavepointLocation.OPEN_FILES * 3)]
    for index, name in enumerate(names):
        (directory / name).write_bytes(index.to_bytes(4, "big") * 4)
    before = open_descriptors()
    location = LocalSavepointLocation(directory)
    for round_ in range(2):
        for index, name in enumerate(names):
            assert location.read_range(name, 4 * round_, 4) == index.to_bytes(4, "big")
            assert open_descriptors() - before <= LocalSavepointLocation.OPEN_FILES
    assert open_descriptors() - before == LocalSavepointLocation.OPEN_FILES
    location.close()
    assert open_descriptors() == before
    assert location.read_range(names[0], 0, 4) == (0).to_bytes(4, "big")  # reopened on demand after close
    del location
    gc.collect()
    assert open_descriptors() == before  # released when the location is collected


def test_a_pickled_location_opens_its_own_descriptors(directory: Path) -> None:
    location = LocalSavepointLocation(directory)
    assert location.read_range("state", 0, 8) == CONTENT[:8]
    copy = pickle.loads(pickle.dumps(location))
    location.close()
    assert copy.read_range("state", 8, 8) == CONTENT[8:16]
    copy.close()
