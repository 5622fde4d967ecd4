"""Untrusted savepoints: state handles that point outside the savepoint, and a corrupted CheckpointProperties trailer.

Every case starts from a savepoint that real Flink wrote in this test run (the ``flink_savepoints`` fixture), copied,
with its ``_metadata`` re-written by flinkstate's own ``write_metadata`` so that one state handle names something it
must not: an absolute path, a ``file://`` URI, ``..``, a sibling directory, a symlink, ``/dev/zero``, a FIFO. Each
of ``describe``, ``dump``, ``schema``, ``check`` and ``migrate`` must exit 1 with one line naming the handle, print
nothing of the file it names (a canary), and publish nothing.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from flinkstate.cli import main
from flinkstate.errors import WriteError
from flinkstate.format.checkpoint_properties import (
    CheckpointProperties,
    CheckpointType,
    SavepointType,
    parse_trailer,
    serialize_properties,
)
from flinkstate.format.handles import FileStateHandle, RelativeFileStateHandle, StreamStateHandle
from flinkstate.format.metadata import CheckpointMetadata, read_metadata, write_metadata
from flinkstate.format_errors import SavepointFormatError
from flinkstate.savepoint import Savepoint
from flinkstate.storage import settings
from flinkstate.storage.locations import HandleRefused
from tests.support.deadline import deadline

SOURCE = "heap-p2"  # parallelism 2: an operator-state file handle (sequence-source) and two keyed-state files (stats)
CANARY = b"CANARY-7f3a9c-must-never-be-read\n"
COMMANDS = ("describe", "dump", "schema", "check", "migrate")

# ------------------------------------------------------------------------------------------------------------------
# Helpers
# ------------------------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Case:
    work: Path
    savepoint: Path
    manifest: Path
    canary: Path

    def output(self) -> Path:
        return self.work / "migrated"

    def argv(self, command: str) -> list[str]:
        sp = str(self.savepoint)
        return {
            "describe": ["describe", sp],
            "dump": ["dump", sp, "--operator", "stats", "--state", "count"],
            "schema": ["schema", sp, "-o", str(self.work / "schema.yaml")],
            "check": ["check", sp, "--schema", str(self.manifest)],
            "migrate": ["migrate", sp, "--schema", str(self.manifest), "--output", str(self.output())],
        }[command]


@pytest.fixture
def case(flink_savepoints: dict[str, Path], tmp_path: Path) -> Case:
    work = tmp_path / "work"
    work.mkdir()
    savepoint = work / "savepoint"
    shutil.copytree(flink_savepoints[SOURCE], savepoint)
    manifest = work / "manifest.yaml"
    assert main(["schema", str(savepoint), "-o", str(manifest)]) == 0  # the job's own schema: check passes as-is
    outside = tmp_path / "outside"
    outside.mkdir()
    canary = outside / "canary"
    canary.write_bytes(CANARY)
    return Case(work, savepoint, manifest, canary)


def _file_handles(metadata: CheckpointMetadata) -> dict[str, StreamStateHandle]:
    return {where: handle for where, handle in metadata.file_handles()}


def rewrite_handle(savepoint: Path, where: str, make: Callable[[StreamStateHandle], StreamStateHandle]) -> None:
    """Re-writes ``_metadata`` (with flinkstate's writer) with the file handle at ``where`` replaced."""
    path = savepoint / "_metadata"
    metadata = read_metadata(path.read_bytes())
    found = False
    for op in metadata.operators:
        for index, sub in op.subtasks.items():
            label = f"operator {op.uid or op.name or op.operator_id}, subtask {index}"
            for field, what in (("managed_operator_state", "managed operator state"),
                                ("managed_keyed_state", "managed keyed state")):
                handle = getattr(sub, field)
                if handle is not None and f"{label}: {what}" == where:
                    setattr(sub, field, dataclasses.replace(handle, delegate=make(handle.delegate)))
                    found = True
    assert found, where
    path.write_bytes(write_metadata(metadata))


OPERATOR_STATE = "operator sequence-source, subtask 0: managed operator state"
KEYED_STATE = "operator stats, subtask 0: managed keyed state"


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with deadline(60):
        status = main(argv)
    out, err = capsys.readouterr()
    return status, out, err


def assert_refused(case: Case, command: str, capsys: pytest.CaptureFixture[str], *needles: str,
                   secret: bytes = CANARY) -> str:
    before = _regular_files(case.work)
    status, out, err = run_cli(case.argv(command), capsys)
    assert status == 1, (command, status, out, err)
    assert err.count("\n") == 1 and err.startswith("flinkstate: error: ") and "Traceback" not in err, (command, err)
    for needle in needles:
        assert needle in err, (command, needle, err)
    text = secret.decode(errors="replace").strip()
    assert text not in out and text not in err, (command, "the file outside was read")
    # Nothing published, nothing staged left behind, and the secret in no file the command wrote.
    assert not case.output().exists(), command
    assert not (case.work / f".{case.output().name}.inprogress").exists(), command
    for file, stamp in _regular_files(case.work).items():
        if before.get(file) != stamp:
            assert secret.strip() not in file.read_bytes(), (command, file)
    return err


def _regular_files(root: Path) -> dict[Path, tuple[int, int]]:
    """Regular files under ``root`` (never FIFOs, devices or symlinks: reading those is what is being tested)."""
    found = {}
    for file in root.rglob("*"):
        if not file.is_symlink() and file.is_file():
            info = file.stat()
            found[file] = (info.st_mtime_ns, info.st_size)
    return found


# ------------------------------------------------------------------------------------------------------------------
# Handles pointing outside the savepoint
# ------------------------------------------------------------------------------------------------------------------


def _absolute(target: Callable[[Case], str]) -> Callable[[Case, StreamStateHandle], StreamStateHandle]:
    def make(case: Case, handle: StreamStateHandle) -> StreamStateHandle:
        return FileStateHandle(len(CANARY), target(case))
    return make


def _relative(target: Callable[[Case], str]) -> Callable[[Case, StreamStateHandle], StreamStateHandle]:
    def make(case: Case, handle: StreamStateHandle) -> StreamStateHandle:
        return RelativeFileStateHandle(len(CANARY), target(case))
    return make


def _symlink(case: Case) -> str:
    (case.savepoint / "innocent-looking").symlink_to(case.canary)
    return "innocent-looking"


def _sibling(case: Case) -> str:
    # A directory whose name starts with the savepoint's: a prefix comparison of path strings would let it in.
    sibling = case.savepoint.parent / (case.savepoint.name + "-sibling")
    sibling.mkdir()
    shutil.copy(case.canary, sibling / "state")
    return str(sibling / "state")


def _fifo(case: Case) -> str:
    os.mkfifo(case.savepoint / "pipe")
    return "pipe"


ATTACKS: dict[str, tuple[Callable[[Case, StreamStateHandle], StreamStateHandle], str]] = {
    # name -> (handle maker, a fragment of the refusal)
    "absolute": (_absolute(lambda c: str(c.canary)), "outside the savepoint directory"),
    "file-uri": (_absolute(lambda c: c.canary.as_uri()), "outside the savepoint directory"),
    "dot-dot": (_relative(lambda c: "../../outside/canary"), "contains '..'"),
    "dot-dot-etc": (_relative(lambda c: "../../../../etc/hostname"), "contains '..'"),
    "sibling": (_absolute(_sibling), "outside the savepoint directory"),
    "symlink": (_relative(_symlink), "symbolic link that leaves the savepoint directory"),
    "dev-zero": (_absolute(lambda c: "/dev/zero"), "outside the savepoint directory"),
    "fifo": (_relative(_fifo), "is not a regular file (a FIFO)"),
}


@pytest.mark.parametrize("where", [KEYED_STATE, OPERATOR_STATE], ids=["keyed", "operator-state"])
@pytest.mark.parametrize("attack", list(ATTACKS))
def test_every_command_refuses_a_handle_outside_the_savepoint(
        attack: str, where: str, case: Case, capsys: pytest.CaptureFixture[str]) -> None:
    make, fragment = ATTACKS[attack]
    names: list[str] = []

    def replace(handle: StreamStateHandle) -> StreamStateHandle:
        new = make(case, handle)
        names.append(new.path if isinstance(new, FileStateHandle) else new.relative_path)  # type: ignore[attr-defined]
        return new

    rewrite_handle(case.savepoint, where, replace)
    (name,) = names
    for command in COMMANDS:
        assert_refused(case, command, capsys, f"state handle {name!r}", fragment, str(case.savepoint))
    with pytest.raises(HandleRefused, match="state handle"):
        Savepoint.open(case.savepoint)


def test_a_metadata_symlink_leaving_the_directory_is_refused(case: Case, capsys: pytest.CaptureFixture[str]) -> None:
    elsewhere = case.canary.parent / "_metadata"
    shutil.move(case.savepoint / "_metadata", elsewhere)
    (case.savepoint / "_metadata").symlink_to(elsewhere)
    for command in COMMANDS:
        assert_refused(case, command, capsys, f"{case.savepoint / '_metadata'}: a symbolic link that leaves")


def test_etc_passwd_is_never_published(case: Case, capsys: pytest.CaptureFixture[str]) -> None:
    """The report's case: an operator-state handle naming /etc/passwd made migrate publish it and say verified."""
    passwd = Path("/etc/passwd").read_bytes()
    rewrite_handle(case.savepoint, OPERATOR_STATE, lambda h: FileStateHandle(len(passwd), "/etc/passwd"))
    first_line = passwd.split(b"\n")[0]
    for command in COMMANDS:
        assert_refused(case, command, capsys, "'/etc/passwd'", secret=first_line)
    rewrite_handle(case.savepoint, OPERATOR_STATE, lambda h: FileStateHandle(len(passwd), "file:///etc/passwd"))
    assert_refused(case, "migrate", capsys, "'file:///etc/passwd'", secret=first_line)


def test_handle_names_are_escaped_in_messages(case: Case, capsys: pytest.CaptureFixture[str]) -> None:
    name = "../x\n\x1b[2Jflinkstate: verified"
    rewrite_handle(case.savepoint, KEYED_STATE, lambda h: RelativeFileStateHandle(10, name))
    err = assert_refused(case, "dump", capsys, repr(name))
    assert "\x1b" not in err


def test_opt_in_reads_a_legacy_absolute_handle_but_nothing_else(
        case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A non-relocatable savepoint: the keyed file lives elsewhere, named by an absolute path."""
    expected = sorted(map(repr, Savepoint.open(case.savepoint).iter_entries("stats", "count")))
    metadata = read_metadata((case.savepoint / "_metadata").read_bytes())
    old = _file_handles(metadata)[KEYED_STATE]
    assert isinstance(old, RelativeFileStateHandle)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.move(case.savepoint / old.relative_path, elsewhere / "keyed")
    rewrite_handle(case.savepoint, KEYED_STATE, lambda h: FileStateHandle(old.size, str(elsewhere / "keyed")))

    with pytest.raises(HandleRefused, match="outside the savepoint directory"):
        Savepoint.open(case.savepoint)
    legacy = Savepoint.open(case.savepoint, allow_external_handles=True)
    assert sorted(map(repr, legacy.iter_entries("stats", "count"))) == expected
    assert len(expected) > 0
    # The same on the command line, where the opt-in is a global option.
    assert main(["dump", str(case.savepoint), "--operator", "stats", "--state", "count"]) == 1
    assert "outside the savepoint directory" in capsys.readouterr().err
    assert main(["--allow-external-handles", "dump", str(case.savepoint), "--operator", "stats",
                 "--state", "count"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == len(expected)
    settings.handle_policy = settings.HandlePolicy()  # main() set it for the process: back to the default

    # The opt-in admits files elsewhere, still only regular ones and never '..' in a relative handle.
    rewrite_handle(case.savepoint, KEYED_STATE, lambda h: FileStateHandle(1 << 20, "/dev/zero"))
    with pytest.raises(HandleRefused, match=r"'/dev/zero' is not a regular file \(a character device\)"):
        Savepoint.open(case.savepoint, allow_external_handles=True)
    rewrite_handle(case.savepoint, KEYED_STATE, lambda h: RelativeFileStateHandle(len(CANARY), "../outside/x"))
    with pytest.raises(HandleRefused, match=re.escape("contains '..'")):
        Savepoint.open(case.savepoint, allow_external_handles=True)


def test_opt_in_finds_a_moved_legacy_savepoints_files_beside_metadata(case: Case) -> None:
    metadata = read_metadata((case.savepoint / "_metadata").read_bytes())
    old = _file_handles(metadata)[KEYED_STATE]
    assert isinstance(old, RelativeFileStateHandle)
    expected = sorted(map(repr, Savepoint.open(case.savepoint).iter_entries("stats", "count")))
    # Where Flink wrote it before the savepoint was moved: that path no longer exists.
    rewrite_handle(case.savepoint, KEYED_STATE,
                   lambda h: FileStateHandle(old.size, f"/gone/savepoint-1/{old.relative_path}"))
    with pytest.raises(HandleRefused, match="outside the savepoint directory"):
        Savepoint.open(case.savepoint)
    moved = Savepoint.open(case.savepoint, allow_external_handles=True)
    assert sorted(map(repr, moved.iter_entries("stats", "count"))) == expected


def test_absolute_handle_inside_the_savepoint_is_read(case: Case) -> None:
    metadata = read_metadata((case.savepoint / "_metadata").read_bytes())
    old = _file_handles(metadata)[KEYED_STATE]
    assert isinstance(old, RelativeFileStateHandle)
    expected = sorted(map(repr, Savepoint.open(case.savepoint).iter_entries("stats", "count")))
    inside = case.savepoint / old.relative_path
    rewrite_handle(case.savepoint, KEYED_STATE, lambda h: FileStateHandle(old.size, inside.as_uri()))
    assert sorted(map(repr, Savepoint.open(case.savepoint).iter_entries("stats", "count"))) == expected


# ------------------------------------------------------------------------------------------------------------------
# Reads bounded by the recorded size
# ------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("where", [KEYED_STATE, OPERATOR_STATE], ids=["keyed", "operator-state"])
def test_a_file_longer_than_recorded_is_refused(where: str, case: Case, capsys: pytest.CaptureFixture[str]) -> None:
    metadata = read_metadata((case.savepoint / "_metadata").read_bytes())
    handle = _file_handles(metadata)[where]
    assert isinstance(handle, RelativeFileStateHandle)
    file = case.savepoint / handle.relative_path
    with open(file, "ab") as out:
        out.write(CANARY)
    commands = ("dump", "migrate") if where == KEYED_STATE else ("migrate",)
    for command in commands:
        assert_refused(case, command, capsys, str(file), f"{handle.size + len(CANARY)} bytes, more than the "
                       f"{handle.size} the metadata records")


def test_two_handles_disagreeing_on_a_files_size_are_refused(case: Case, capsys: pytest.CaptureFixture[str]) -> None:
    metadata = read_metadata((case.savepoint / "_metadata").read_bytes())
    keyed = _file_handles(metadata)[KEYED_STATE]
    assert isinstance(keyed, RelativeFileStateHandle)
    rewrite_handle(case.savepoint, OPERATOR_STATE, lambda h: RelativeFileStateHandle(5, keyed.relative_path))
    assert_refused(case, "describe", capsys, repr(keyed.relative_path), "bytes, another handle of the same file")


# ------------------------------------------------------------------------------------------------------------------
# The CheckpointProperties trailer
# ------------------------------------------------------------------------------------------------------------------


def _trailer_start(data: bytes) -> int:
    start = data.rfind(b"\xac\xed\x00\x05")
    assert start > 0
    return start


def test_flink_written_trailers_parse_and_rewrite_byte_identically(flink_savepoints: dict[str, Path]) -> None:
    for name, path in flink_savepoints.items():
        data = (path / "_metadata").read_bytes()
        metadata = read_metadata(data)
        # Stop-with-savepoint on a job without unaligned checkpoints: forSyncSavepoint(forced=true, terminate=false).
        assert metadata.properties == CheckpointProperties(
            SavepointType("Suspend Savepoint", "SUSPEND", "CANONICAL"), True, False, False, False, False, False,
            False), name
        trailer = data[_trailer_start(data):]
        assert len(trailer) == 756
        assert serialize_properties(metadata.properties) == trailer
        assert metadata.trailer == trailer
        assert write_metadata(metadata) == data, name
        for version in (4, 5):  # the trailer is the same in every V4+ version
            assert write_metadata(metadata, version).endswith(trailer)


def test_the_other_shapes_flink_writes_round_trip() -> None:
    shapes = [
        CheckpointProperties(SavepointType("Savepoint", "NONE", "NATIVE"), False, *[False] * 6),
        CheckpointProperties(SavepointType("Terminate Savepoint", "TERMINATE", "CANONICAL"), True, *[False] * 6),
        CheckpointProperties(SavepointType("Savepoint", "NONE", "CANONICAL"), False, *[False] * 5, True),
        CheckpointProperties(CheckpointType("Checkpoint", "FORWARD_BACKWARD"), False, True, True, True, True, True,
                             False),
        CheckpointProperties(CheckpointType("Full Checkpoint", "FORWARD"), False, True, True, False, False, False,
                             False),
    ]
    for shape in shapes:
        assert parse_trailer(serialize_properties(shape)) == shape
    assert parse_trailer(bytes.fromhex("aced000570")) is None


def test_properties_flink_never_writes_are_refused() -> None:
    savepoint = SavepointType("Savepoint", "NONE", "CANONICAL")
    bad = [
        (CheckpointProperties(savepoint, True, True, *[False] * 5), "discard flags"),
        (CheckpointProperties(SavepointType("Savepoint", "SUSPEND", "CANONICAL"), True, *[False] * 6), "none of"),
        (CheckpointProperties(CheckpointType("Checkpoint", "FORWARD"), False, *[True] * 5, False), "none of"),
        (CheckpointProperties(CheckpointType("Checkpoint", "FORWARD_BACKWARD"), False, True, False, True, True,
                              True, False), "no checkpoint retention policy"),
        (CheckpointProperties(savepoint, True, *[False] * 5, True), "unclaimed"),
    ]
    for properties, fragment in bad:
        with pytest.raises(SavepointFormatError, match=re.escape(fragment)):
            parse_trailer(serialize_properties(properties), "_metadata", 1000)


def test_every_truncation_and_flip_of_the_trailer_is_refused(flink_savepoints: dict[str, Path]) -> None:
    data = (flink_savepoints[SOURCE] / "_metadata").read_bytes()
    start = _trailer_start(data)
    for end in range(start, len(data)):
        with pytest.raises(SavepointFormatError, match="trailer"):
            read_metadata(data[:end], "_metadata")
    accepted = []
    for position in range(start, len(data)):
        for bit in range(8):
            flipped = bytearray(data)
            flipped[position] ^= 1 << bit
            try:
                metadata = read_metadata(bytes(flipped), "_metadata")
            except SavepointFormatError as exc:
                assert "\n" not in str(exc) and "CheckpointProperties trailer" in str(exc)
                continue
            accepted.append((position - start, bit, metadata.properties))
    # The one flip Flink could have written itself: a savepoint's ``forced`` flag (7th boolean, trailer byte 263),
    # which Flink writes both ways and reads only when triggering.
    assert accepted == [(263, 0, CheckpointProperties(SavepointType("Suspend Savepoint", "SUSPEND", "CANONICAL"),
                                                      False, *[False] * 6))]
    with pytest.raises(SavepointFormatError, match="unexpected bytes after the serialized object"):
        read_metadata(data + b"\x00", "_metadata")


@pytest.mark.parametrize("corruption", ["cut-3", "cut-400", "flip-boolean", "flip-suid", "flip-enum-name"])
def test_every_command_refuses_a_corrupted_trailer(corruption: str, case: Case,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    path = case.savepoint / "_metadata"
    data = bytearray(path.read_bytes())
    start = _trailer_start(bytes(data))
    if corruption.startswith("cut-"):
        del data[len(data) - int(corruption[4:]):]
    elif corruption == "flip-boolean":
        data[start + 0x102] = 0x02  # discardCancelled: ObjectOutputStream writes booleans as 0 or 1
    elif corruption == "flip-suid":
        data[start + 0x13F] ^= 0x10  # SavepointType's serialVersionUID: Flink throws InvalidClassException
    else:
        data[start + data[start:].index(b"CANONICAL")] ^= 0x20  # cANONICAL: no such SavepointFormatType
    path.write_bytes(bytes(data))
    for command in COMMANDS:
        assert_refused(case, command, capsys, "CheckpointProperties trailer", str(path))


# ------------------------------------------------------------------------------------------------------------------
# Flink's ranges
# ------------------------------------------------------------------------------------------------------------------


def _operator_fields_offset(data: bytes, operator_id: str) -> int:
    at = data.find(bytes.fromhex(operator_id))
    assert at > 0
    return at + 16  # parallelism, then max parallelism


def test_max_parallelism_outside_flinks_range_is_refused(case: Case, capsys: pytest.CaptureFixture[str]) -> None:
    path = case.savepoint / "_metadata"
    data = bytearray(path.read_bytes())
    op = Savepoint.open(case.savepoint).operator("stats")
    at = _operator_fields_offset(bytes(data), op.operator_id) + 4
    assert int.from_bytes(data[at:at + 4], "big") == 128
    data[at + 1] = 0x0B  # one corrupted byte: 128 becomes 721024 (0x000B0080)
    path.write_bytes(bytes(data))
    for command in COMMANDS:
        assert_refused(case, command, capsys, "operator stats: max parallelism 721024 is outside Flink's range "
                                              "1..32768", f"offset {at}")


@pytest.mark.parametrize("field, value, fragment", [
    ("parallelism", 129, "parallelism 129 is outside 1..128"),
    ("parallelism", 0, "parallelism 0 is outside 1..128"),
    ("max_parallelism", 0, "max parallelism 0 is outside"),
    ("max_parallelism", 32769, "max parallelism 32769 is outside Flink's range 1..32768"),
])
def test_the_writer_refuses_values_outside_flinks_ranges(field: str, value: int, fragment: str,
                                                         flink_savepoints: dict[str, Path]) -> None:
    metadata = read_metadata((flink_savepoints[SOURCE] / "_metadata").read_bytes())
    (op,) = [o for o in metadata.operators if o.uid == "stats"]
    setattr(op, field, value)
    with pytest.raises(WriteError, match=re.escape(fragment)):
        write_metadata(metadata)


def test_subtask_index_outside_the_parallelism_is_refused(case: Case, capsys: pytest.CaptureFixture[str]) -> None:
    metadata = read_metadata((case.savepoint / "_metadata").read_bytes())
    (op,) = [o for o in metadata.operators if o.uid == "stats"]
    op.subtasks[5] = op.subtasks.pop(1)
    with pytest.raises(WriteError, match=re.escape("subtask index 5 is outside 0..1")):
        write_metadata(metadata)
    # The same bytes as Flink's layout would have them, written without the writer's check.
    data = bytearray((case.savepoint / "_metadata").read_bytes())
    at = _operator_fields_offset(bytes(data), op.operator_id)
    parallelism_at = at
    data[parallelism_at:parallelism_at + 4] = (1).to_bytes(4, "big")  # parallelism 1, but 2 subtask states
    (case.savepoint / "_metadata").write_bytes(bytes(data))
    assert_refused(case, "describe", capsys, "operator stats: 2 subtask states for parallelism 1")


# ------------------------------------------------------------------------------------------------------------------
# The same on S3 (moto's S3 server)
# ------------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def containment_bucket(s3_endpoint: str) -> str:
    import boto3

    client = boto3.client("s3")
    client.create_bucket(Bucket="containment")
    client.put_object(Bucket="containment", Key="other-job/canary", Body=CANARY)
    client.put_object(Bucket="containment", Key="job-sibling/state", Body=CANARY)
    return "containment"


@pytest.mark.parametrize("handle", [
    "s3://containment/other-job/canary",  # another prefix of the same bucket
    "s3://containment/job-sibling/state",  # a prefix that starts like the savepoint's
    "../../other-job/canary",
    "/etc/passwd",
    "file:///etc/passwd",
])
def test_every_command_refuses_a_handle_outside_the_s3_prefix(
        handle: str, containment_bucket: str, case: Case, capsys: pytest.CaptureFixture[str]) -> None:
    from flinkstate.storage.uri import copy_savepoint

    rewrite_handle(case.savepoint, KEYED_STATE, lambda h: FileStateHandle(len(CANARY), handle))
    uri = f"s3://{containment_bucket}/job/{case.work.parent.name}/savepoint"
    copy_savepoint(case.savepoint, uri)
    s3_case = Case(case.work, Path(uri), case.manifest, case.canary)
    s3_case.argv = lambda command: [uri if a == str(case.savepoint) else a  # type: ignore[method-assign]
                                    for a in Case.argv(case, command)]
    fragment = "contains '..'" if handle.startswith("..") else "outside the savepoint prefix"
    for command in COMMANDS:
        assert_refused(s3_case, command, capsys, f"state handle {handle!r}", fragment, uri)
