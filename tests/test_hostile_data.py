"""Structurally valid hostile data (issue 26, rows 6 to 10): inputs that follow the format exactly but ask the reader
to build far more than their size (snapshots nested thousands deep, shared references that expand exponentially,
snappy bombs, a million operators, YAML alias bombs). Each is built here from one of Flink's own savepoints in
tests/corpus (no binary fixture), run through the command in a subprocess under a memory limit and a deadline, and
must end in one line naming the file and the bound (with the variable that raises it); the Python API must raise a
FlinkStateError naming the file, never RecursionError or MemoryError. No cluster: these run in `make unit`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import cramjam
import pytest

import flinkstate
import flinkstate.cli
from flinkstate.binary import Reader, Writer
from flinkstate.format.handles import KeyGroupRangeOffsets, KeyGroupsStateHandle, RelativeFileStateHandle
from flinkstate.format.key_group_block import encode_block, iter_raw_entries, raw_key
from flinkstate.format.keyed_header import VALUE_SERIALIZER, read_keyed_header, write_state_meta_info
from flinkstate.format.keyed_stream import KeyedStreamWriter
from flinkstate.format.metadata import OperatorState, read_metadata, write_metadata
from flinkstate.format.snappy_frames import SnappyCorrupt, decompress_framed, framed_length
from flinkstate.limits import LimitExceeded
from flinkstate.serializers.collections import ListSnapshot
from flinkstate.serializers.composite import COMPOSITE_MAGIC, COMPOSITE_VERSION, NESTED_MAGIC, NESTED_VERSION
from flinkstate.serializers.javacollections import fingerprint
from flinkstate.serializers.registry import SNAPSHOT_PROXY_VERSION, read_snapshot, snapshot_bytes
from tests.support.deadline import deadline

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "corpus" / "savepoints" / "flink-tests" / "src" / "test" / "resources"
#: Flink 2.3, HashMap backend, canonical format: keyed state in separate files, one keyed header per file.
HEAP_23 = CORPUS / "new-stateful-udf-migration-itcase-flink2.3-hashmap-savepoint"
#: Address space a command may use (RLIMIT_AS): the interpreter and its imports take ~0.5 GiB of it.
MEMORY_LIMIT = 1536 * 1024 * 1024
DEADLINE_S = 60


def run_cli(*args: str, env: dict[str, str] | None = None, memory: int = MEMORY_LIMIT) -> tuple[int, str, str]:
    """The installed command in its own process, under an address-space limit and a deadline (a bomb that is not
    bounded dies of MemoryError or hangs, instead of taking the machine with it)."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    done = subprocess.run([sys.executable, "-m", "flinkstate", *args], capture_output=True, text=True,
                          timeout=DEADLINE_S, preexec_fn=limit, env={**os.environ, **(env or {})}, cwd=ROOT)
    return done.returncode, done.stdout, done.stderr


def tree_hash(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def replace_state_file(savepoint: Path, name: str, data: bytes, shift: int) -> None:
    """Writes ``data`` as state file ``name`` and makes ``_metadata`` record it: its size, and every key-group block
    offset moved by ``shift`` (the bytes inserted before the first block)."""
    (savepoint / name).write_bytes(data)
    metadata = read_metadata((savepoint / "_metadata").read_bytes())
    for op in metadata.operators:
        for sub in op.subtasks.values():
            handle = sub.managed_keyed_state
            if isinstance(handle, KeyGroupsStateHandle) and isinstance(handle.delegate, RelativeFileStateHandle) \
                    and handle.delegate.relative_path == name:
                offsets = tuple(o + shift if o else 0 for o in handle.offsets.offsets)
                sub.managed_keyed_state = dataclasses.replace(
                    handle, offsets=KeyGroupRangeOffsets(handle.offsets.key_group_range, offsets),
                    delegate=RelativeFileStateHandle(len(data), name))
    (savepoint / "_metadata").write_bytes(write_metadata(metadata))


def operator_files(savepoint: Path, uid: str) -> list[Path]:
    """The keyed state files of operator ``uid``, one per subtask, in subtask order."""
    metadata = read_metadata((savepoint / "_metadata").read_bytes())
    operator = next(op for op in metadata.operators if op.uid == uid)
    handles = [operator.subtasks[i].managed_keyed_state for i in sorted(operator.subtasks)]
    return [savepoint / h.delegate.relative_path for h in handles
            if isinstance(h, KeyGroupsStateHandle) and isinstance(h.delegate, RelativeFileStateHandle)]


def rewrite_values(savepoint: Path, uid: str, state: str, value: bytes | None, value_serializer: bytes | None = None,
                   compressed: bool | None = None, first_block: bytes | None = None) -> None:
    """Rewrites every subtask stream of operator ``uid`` in place: each entry of ``state`` holds ``value`` (None:
    keeps its own; its value serializer snapshot replaced by ``value_serializer``, top-level snapshot bytes, when
    given), blocks snappy-compressed or not as ``compressed`` says (default: as they were), the first subtask's first
    block stored as ``first_block`` when given, and ``_metadata`` records the new offsets and sizes. Everything else
    (keys, other states, the header's other snapshots) stays as Flink wrote it."""
    metadata = read_metadata((savepoint / "_metadata").read_bytes())
    operator = next(op for op in metadata.operators if op.uid == uid)
    for subtask, sub in sorted(operator.subtasks.items()):
        handle = sub.managed_keyed_state
        assert isinstance(handle, KeyGroupsStateHandle) and isinstance(handle.delegate, RelativeFileStateHandle)
        path = savepoint / handle.delegate.relative_path
        data = path.read_bytes()
        header = read_keyed_header(Reader(data, 0, str(path), 0))
        assert not header.compressed, "the source's blocks are read uncompressed here"
        index = header.state_index(state)
        assert index is not None
        if value_serializer is not None:
            serializers = header.states[index].serializers
            at = next(i for i, (key, _) in enumerate(serializers) if key == VALUE_SERIALIZER)
            serializers[at] = (VALUE_SERIALIZER, read_snapshot(Reader(value_serializer), top_level=True))
        if compressed is not None:
            header.compressed = compressed
        sink = io.BytesIO()
        writer = KeyedStreamWriter(sink, header, handle.key_group_range, path.name)
        present = sorted((off, kg) for kg, off in zip(handle.key_group_range, handle.offsets.offsets, strict=True)
                         if off)
        ends = [off for off, _ in present[1:]] + [len(data)]
        for (start, key_group), end in zip(present, ends, strict=True):
            block = data[start:end]
            runs: list[tuple[int, list[tuple[bytes, bytes]]]] = []
            for state_id, ks, ke, vs, ve in iter_raw_entries(block):
                if not runs or runs[-1][0] != state_id:
                    runs.append((state_id, []))
                new_value = value if state_id == index and value is not None else block[vs:ve]
                runs[-1][1].append((raw_key(block, ks, ke), new_value))
            if first_block is not None and subtask == min(operator.subtasks) and start == present[0][0]:
                writer.write_raw_block(key_group, first_block)
            else:
                writer.write_block(key_group, encode_block(runs))
        new = writer.finish()
        path.write_bytes(sink.getvalue())
        sub.managed_keyed_state = dataclasses.replace(handle, offsets=new.offsets, delegate=new.delegate)
    (savepoint / "_metadata").write_bytes(write_metadata(metadata))


# ------------------------------------------------------------------------------------------------------------------
# Row 10: serializer snapshots nested thousands deep
# ------------------------------------------------------------------------------------------------------------------


#: The operator of HEAP_23 whose key serializer is nested (its four subtasks alike, as a job's would be).
NESTED_UID = "CheckpointingTimelyStatefulOperator2"


def nest_key_serializer(source: Path, target: Path, depth: int) -> list[Path]:
    """A copy of ``source`` whose operator NESTED_UID has its key serializer wrapped in ``depth`` List serializer
    snapshots in every subtask's file (written level by level: the snapshot writer itself recurses). Returns those
    files."""
    shutil.copytree(source, target)
    files = operator_files(target, NESTED_UID)
    for path in files:
        _nest(target, path, depth)
    return files


def _nest(target: Path, path: Path, depth: int) -> None:
    data = path.read_bytes()
    header = read_keyed_header(Reader(data, 0, str(path), 0))
    level = Writer()
    level.utf(ListSnapshot.CLASS_NAMES[0])
    for word in (COMPOSITE_VERSION, COMPOSITE_MAGIC, ListSnapshot.OUTER_VERSION, NESTED_MAGIC, NESTED_VERSION, 1):
        level.i32(word)
    head = Writer()
    head.i32(header.version)
    head.bool(header.compressed)
    head.i32(SNAPSHOT_PROXY_VERSION)
    assert header.key_serializer is not None
    states = Writer()
    states.i16(len(header.states))
    for state in header.states:
        write_state_meta_info(states, state)
    new_header = head.getvalue() + level.getvalue() * depth + snapshot_bytes(header.key_serializer) + states.getvalue()
    replace_state_file(target, path.name, new_header + data[header.length:], len(new_header) - header.length)


@pytest.mark.parametrize("depth", [400, 100_000])
def test_deeply_nested_snapshots_are_refused_by_the_api_and_the_cli_naming_the_file(
        tmp_path: Path, depth: int, capsys: pytest.CaptureFixture[str]) -> None:
    state_files = nest_key_serializer(HEAP_23, tmp_path / "deep", depth)
    before = tree_hash(tmp_path / "deep")
    savepoint = flinkstate.open_savepoint(str(tmp_path / "deep"))
    operator = next(op for op in savepoint.operators if op.uid == NESTED_UID)
    with pytest.raises(flinkstate.FlinkStateError) as refused:
        savepoint.keyed_states(operator)
    message = str(refused.value)
    assert str(state_files[0]) in message and NESTED_UID in message
    assert "FLINKSTATE_MAX_SNAPSHOT_DEPTH" in message and "64" in message
    capsys.readouterr()
    status = flinkstate.cli.main(["describe", str(tmp_path / "deep")])  # in-process: its stack is the one at stake
    lines = capsys.readouterr().err.splitlines()
    assert status == 1 and lines == [f"flinkstate: error: {message}"]
    assert tree_hash(tmp_path / "deep") == before


def test_a_raised_snapshot_depth_still_ends_in_an_error_naming_the_file(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the bound the Python stack ends the read: still a FlinkStateError naming the file, not RecursionError."""
    state_files = nest_key_serializer(HEAP_23, tmp_path / "deep", 5_000)
    monkeypatch.setenv("FLINKSTATE_MAX_SNAPSHOT_DEPTH", "1000000")
    savepoint = flinkstate.open_savepoint(str(tmp_path / "deep"))
    operator = next(op for op in savepoint.operators if op.uid == NESTED_UID)
    with pytest.raises(flinkstate.FlinkStateError, match="nest") as refused:
        savepoint.keyed_states(operator)
    assert str(state_files[0]) in str(refused.value)


def test_nesting_within_the_bound_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nest_key_serializer(HEAP_23, tmp_path / "nested", 12)
    savepoint = flinkstate.open_savepoint(str(tmp_path / "nested"))
    operator = next(op for op in savepoint.operators if op.uid == NESTED_UID)
    assert savepoint.keyed_states(operator)[0].key_type == "List<" * 12 + "Tuple1<Long>" + ">" * 12
    monkeypatch.setenv("FLINKSTATE_MAX_SNAPSHOT_DEPTH", "10")  # the variable lowers it as well as raising it
    with pytest.raises(flinkstate.FlinkStateError, match="FLINKSTATE_MAX_SNAPSHOT_DEPTH"):
        flinkstate.open_savepoint(str(tmp_path / "nested")).keyed_states(operator)


# ------------------------------------------------------------------------------------------------------------------
# Row 6: the release file goes through the one bounded YAML loader
# ------------------------------------------------------------------------------------------------------------------

#: A release whose program_args hold 9 * 4^20 (about 10^13) strings when expanded, in 700 bytes: its validator names
#: the bad value in its error, and with plain ``yaml.safe_load`` data printing it never ends.
ALIAS_BOMB = ("savepoint_base: /b\njobs:\n  a:\n    jar: j\n    manifest: m\n"
              "    program_args: [&a0 [x, x, x, x, x, x, x, x, x]"
              + "".join(f", &a{i + 1} [*a{i}, *a{i}, *a{i}, *a{i}]" for i in range(20)) + "]\n")


def parse_release_in_a_process(text: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """The plugin's parse_release on ``text`` in its own process, under the memory limit and a deadline."""
    path = tmp_path / "release.yaml"
    path.write_text(text)
    code = ("import sys; sys.path.insert(0, 'plugins')\n"
            "from flinkstate_airflow.releases import ReleaseError, load_release\n"
            "try:\n    load_release(sys.argv[1])\nexcept ReleaseError as exc:\n    print(exc)\n")
    return subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=DEADLINE_S,
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT)),
                          cwd=ROOT)


def test_a_release_alias_bomb_is_refused_in_one_line(tmp_path: Path) -> None:
    done = parse_release_in_a_process(ALIAS_BOMB, tmp_path)  # a process: unbounded, the bomb never returns
    assert done.returncode == 0 and done.stderr == "", done.stderr[-500:]
    assert done.stdout == f"{tmp_path / 'release.yaml'}: not YAML (line 6): aliases (*name) are not allowed\n"


@pytest.mark.parametrize(("text", "problem"), [
    ("savepoint_base: /b\njobs: " + "[" * 50_000 + "]" * 50_000 + "\n", "nested more than 64 levels deep"),
    ("savepoint_base: /b\n# " + "x" * (5 * 1024 * 1024) + "\n", "larger than 4 MiB"),
])
def test_a_deep_or_huge_release_file_is_refused_in_one_line(tmp_path: Path, text: str, problem: str) -> None:
    sys.path.insert(0, str(ROOT / "plugins"))
    try:
        from flinkstate_airflow.releases import ReleaseError, parse_release
    finally:
        sys.path.remove(str(ROOT / "plugins"))
    with deadline(10), pytest.raises(ReleaseError) as refused:
        parse_release(text, "r.yaml")
    assert str(refused.value).startswith("r.yaml: not YAML") and problem in str(refused.value)


# ------------------------------------------------------------------------------------------------------------------
# Row 7: Kryo back-references that expand exponentially
# ------------------------------------------------------------------------------------------------------------------

#: A KryoSerializer snapshot Flink 2.3 wrote (KryoSerializerUpgradeTest): the value serializer given to the state.
KRYO_SNAPSHOT = ROOT / "tests" / "corpus" / "serializers" / "kryo-type-serializer-empty-config-2.3" / \
    "serializer-snapshot"
KRYO_UID = "CheckpointingKeyedStateFlatMap1"


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    return bytes(out + bytes((n,)))


def shared_lists(levels: int) -> bytes:
    """A Kryo 5 record (``writeClassAndObject``): an ArrayList of ten elements, the first a new list of the same
    shape, the other nine back-references to it, ``levels`` deep, an empty list innermost: 1 + 10 + ... + 10^levels
    lists written out, from 12 bytes a level."""
    name = b"java.util.ArrayList"
    record = bytearray(b"\x01\x00" + name[:-1] + bytes((name[-1] | 0x80,)) + b"\x01")  # by name; a new object
    # per level: 10 elements of one class (ArrayList, name 0), none null, the first a new object
    record += (bytes((0x80 | 11,)) + b"\x01\x00" + b"\x00" + b"\x01") * levels
    record += b"\x01"  # the innermost list: empty
    for slot in reversed(range(levels)):
        record += _varint(slot + 1 + 2) * 9  # references to the object read as the (slot + 1)-th
    return bytes(record)


def kryo_savepoint(target: Path, levels: int) -> Path:
    shutil.copytree(HEAP_23, target)
    rewrite_values(target, KRYO_UID, "state-name", shared_lists(levels), KRYO_SNAPSHOT.read_bytes())
    return target


def test_kryo_references_that_expand_exponentially_are_refused_in_one_line(tmp_path: Path) -> None:
    savepoint = kryo_savepoint(tmp_path / "kryo", 8)  # 111,111,111 lists written out, from 135 bytes
    assert len(shared_lists(8)) == 135
    before = tree_hash(savepoint)
    status, out, err = run_cli("dump", str(savepoint), "--operator", KRYO_UID, "--state", "state-name")
    assert status == 1 and out == "", err[-500:]
    [line] = err.splitlines()
    assert line.startswith(f"flinkstate: error: {savepoint}/") and KRYO_UID in line and "state-name" in line
    assert "1,000,000 nodes per value" in line and "FLINKSTATE_MAX_VALUE_NODES" in line
    assert tree_hash(savepoint) == before


def test_the_node_budget_counts_every_expanded_reference(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """Two levels write out 1 + 10 + 100 = 111 lists: exactly what the budget must count (the nine references of
    each level as the ten lists they stand for), so 111 passes and 110 is refused."""
    savepoint = kryo_savepoint(tmp_path / "kryo", 2)
    argv = ["dump", str(savepoint), "--operator", KRYO_UID, "--state", "state-name"]
    monkeypatch.setenv("FLINKSTATE_MAX_VALUE_NODES", "111")
    assert flinkstate.cli.main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines and all(json.loads(line)["value"]["value"] == [[[]] * 10] * 10 for line in lines)
    monkeypatch.setenv("FLINKSTATE_MAX_VALUE_NODES", "110")
    assert flinkstate.cli.main(argv) == 1
    assert "over the limit of 110 nodes per value" in capsys.readouterr().err


def test_java_serialization_handles_are_bounded_when_compared(monkeypatch: pytest.MonkeyPatch) -> None:
    """Java serialization's handles share objects as Kryo's references do: an ArrayList of ten handles to one
    ArrayList of ten handles to ... (as javaobj's transformer parses it: one Python list) is compared by its
    fingerprint, which mirrors what it expands to. Bounded, it is refused at once; 1 + 10 + 100 lists pass at a
    budget of 111, not 110."""
    shared: list[object] = []
    for _ in range(8):
        shared = [shared] * 10
    with deadline(5), pytest.raises(LimitExceeded, match="FLINKSTATE_MAX_VALUE_NODES"):
        fingerprint(shared)
    small = [[[]] * 10] * 10
    monkeypatch.setenv("FLINKSTATE_MAX_VALUE_NODES", "111")
    empty = ("java.util.List", ())
    assert fingerprint(small) == ("java.util.List", (("java.util.List", (empty,) * 10),) * 10)
    monkeypatch.setenv("FLINKSTATE_MAX_VALUE_NODES", "110")
    with pytest.raises(LimitExceeded):
        fingerprint(small)


# ------------------------------------------------------------------------------------------------------------------
# Row 8: snappy blocks that expand 21 times
# ------------------------------------------------------------------------------------------------------------------


def snappy_bomb(decompressed: int) -> bytes:
    """A valid snappy frame stream (as Flink frames key-group blocks) of ``decompressed`` zero bytes: one 64 KiB
    chunk compressed once (3 KiB) and repeated, so that the bomb costs nothing to build."""
    chunk = 65536
    stream = bytes(cramjam.snappy.compress(bytes(chunk)))
    identifier, frame = stream[:10], stream[10:]
    return identifier + frame * (decompressed // chunk)


def snappy_savepoint(target: Path, decompressed: int) -> Path:
    shutil.copytree(HEAP_23, target)
    rewrite_values(target, KRYO_UID, "state-name", None, compressed=True, first_block=snappy_bomb(decompressed))
    return target


def test_a_snappy_bomb_is_refused_before_it_is_decompressed(tmp_path: Path) -> None:
    """640 MiB from 30 MB under a 1 GiB address space: today's reader decompressed it whole (dump peaked at 3 GB on
    the issue's bomb; migrate reported the MemoryError as a corrupted block). Both refuse it by the budget now."""
    savepoint = snappy_savepoint(tmp_path / "snappy", 640 * 1024 * 1024)
    before = tree_hash(savepoint)
    schema = tmp_path / "schema.yaml"
    assert flinkstate.cli.main(["schema", str(savepoint), "-o", str(schema)]) == 0  # headers only, no block read
    for argv in (["dump", str(savepoint), "--operator", KRYO_UID, "--state", "state-name"],
                 ["migrate", str(savepoint), "--schema", str(schema), "--output", str(tmp_path / "out")]):
        status, _, err = run_cli(*argv, memory=1024 * 1024 * 1024)
        assert status == 1 and "Traceback" not in err, err[-500:]
        [line] = err.splitlines()
        assert line.startswith(f"flinkstate: error: {savepoint}/") and KRYO_UID in line and "key group" in line
        assert "snappy data decompresses to 671,088,640 bytes" in line and "corrupt" not in line
        assert "over the limit of 268,435,456 decompressed bytes per block" in line
        assert "FLINKSTATE_MAX_DECOMPRESSED_BYTES" in line
    assert not (tmp_path / "out").exists() and tree_hash(savepoint) == before


def test_out_of_memory_while_decompressing_is_not_called_corruption(tmp_path: Path) -> None:
    savepoint = snappy_savepoint(tmp_path / "snappy", 640 * 1024 * 1024)
    status, _, err = run_cli("dump", str(savepoint), "--operator", KRYO_UID, "--state", "state-name",
                             env={"FLINKSTATE_MAX_DECOMPRESSED_BYTES": str(1 << 40)}, memory=1024 * 1024 * 1024)
    assert status == 1 and "corrupt" not in err and "Traceback" not in err, err[-500:]
    [line] = err.splitlines()
    assert line.startswith(f"flinkstate: error: {savepoint}/") and "out of memory decompressing" in line


def test_blocks_within_the_budget_decompress_as_flink_wrote_them(tmp_path: Path) -> None:
    """The recompressed copy reads the values Flink wrote; its blocks' frame headers give their exact size, so a
    budget one byte short of the largest block refuses it."""
    savepoint = tmp_path / "snappy"
    shutil.copytree(HEAP_23, savepoint)
    rewrite_values(savepoint, KRYO_UID, "state-name", None, compressed=True)
    source, copy = flinkstate.open_savepoint(str(HEAP_23)), flinkstate.open_savepoint(str(savepoint))

    def values(sp: flinkstate.Savepoint) -> list[object]:
        return sorted(map(repr, sp.iter_entries(next(op for op in sp.operators if op.uid == KRYO_UID), "state-name")))

    assert values(copy) == values(source) and len(values(source)) > 1
    largest = max(framed_length(block) for block in stored_blocks(savepoint, KRYO_UID))
    os.environ["FLINKSTATE_MAX_DECOMPRESSED_BYTES"] = str(largest - 1)
    try:
        with pytest.raises(LimitExceeded, match=f"decompresses to {largest} bytes"):
            values(flinkstate.open_savepoint(str(savepoint)))
    finally:
        del os.environ["FLINKSTATE_MAX_DECOMPRESSED_BYTES"]


def test_a_corrupted_chunk_length_is_corruption_not_a_large_block(tmp_path: Path) -> None:
    """A frame holds at most 64 KiB: a chunk whose length preamble says more is corrupt, not over a budget."""
    savepoint = tmp_path / "snappy"
    shutil.copytree(HEAP_23, savepoint)
    rewrite_values(savepoint, KRYO_UID, "state-name", None, compressed=True)
    block = bytearray(stored_blocks(savepoint, KRYO_UID)[0])
    assert framed_length(bytes(block)) == len(decompress_framed(bytes(block)))
    assert block[10] == 0x01  # a block this small is stored as an uncompressed chunk: its length is its size
    block[11:14] = b"\xff\xff\x7f"
    with pytest.raises(SnappyCorrupt, match="more than the 65536 a snappy frame holds"):
        decompress_framed(bytes(block))


def stored_blocks(savepoint: Path, uid: str) -> list[bytes]:
    metadata = read_metadata((savepoint / "_metadata").read_bytes())
    operator = next(op for op in metadata.operators if op.uid == uid)
    blocks = []
    for sub in operator.subtasks.values():
        handle = sub.managed_keyed_state
        assert isinstance(handle, KeyGroupsStateHandle) and isinstance(handle.delegate, RelativeFileStateHandle)
        data = (savepoint / handle.delegate.relative_path).read_bytes()
        starts = sorted(o for o in handle.offsets.offsets if o)
        blocks += [data[a:b] for a, b in zip(starts, [*starts[1:], len(data)], strict=True)]
    return blocks


# ------------------------------------------------------------------------------------------------------------------
# Row 9: a _metadata listing a great many operators
# ------------------------------------------------------------------------------------------------------------------

MEASURE_PEAK = ("import resource, sys\nfrom flinkstate.cli import main\nstatus = main(sys.argv[1:])\n"
                "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, file=sys.stderr)\nsys.exit(status)\n")


def describe_peak(savepoint: Path, output: Path) -> int:
    """``describe --json`` in its own process (under the memory limit and the deadline), stdout to ``output``:
    the process's peak resident memory in bytes."""
    with output.open("w") as sink:
        done = subprocess.run([sys.executable, "-c", MEASURE_PEAK, "describe", "--json", str(savepoint)],
                              stdout=sink, stderr=subprocess.PIPE, text=True, timeout=DEADLINE_S, cwd=ROOT,
                              preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT,) * 2))
    assert done.returncode == 0, done.stderr[-500:]
    return int(done.stderr.split()[-1])


def test_describe_of_many_operators_holds_one_operator_at_a_time(tmp_path: Path) -> None:
    """30,000 empty operators added to Flink's savepoint (1 MB of _metadata): describe --json used to hold every
    operator's description and the whole JSON text at once (about 120 times the file; the issue's million operators
    took 3.6 GB). Streamed, what it adds to a small savepoint's peak is the parsed metadata: here under 40 times the
    file. The output is still the whole description, operators in order."""
    many = tmp_path / "many"
    shutil.copytree(HEAP_23, many)
    metadata = read_metadata((many / "_metadata").read_bytes())
    flink_operators = [op.operator_id for op in metadata.operators]
    metadata.operators.extend(OperatorState(f"{i:032x}", 1, 128) for i in range(30_000))
    (many / "_metadata").write_bytes(write_metadata(metadata))
    size = (many / "_metadata").stat().st_size
    baseline = describe_peak(HEAP_23, tmp_path / "small.json")
    peak = describe_peak(many, tmp_path / "many.json")
    print(f"describe --json of {size} bytes of _metadata: {(peak - baseline) / size:.1f} times it above the baseline")
    assert peak - baseline < 40 * size, f"{(peak - baseline) / size:.0f} times the {size} bytes of _metadata"
    described = json.loads((tmp_path / "many.json").read_text())
    assert [op["id"] for op in described["operators"]] == flink_operators + [f"{i:032x}" for i in range(30_000)]
    small = json.loads((tmp_path / "small.json").read_text())
    assert described["operators"][:len(flink_operators)] == small["operators"]
    assert described["operators"][-1] == {
        "id": f"{29_999:032x}", "uid": None, "name": None, "parallelism": 1, "max_parallelism": 128, "subtasks": 0,
        "finished_subtasks": [], "fully_finished": False, "operator_states": [], "coordinator_state_bytes": None,
        "key_group_ranges": [], "keyed_states": [], "operator_state_details": []}
