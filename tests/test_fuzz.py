"""Fault injection over real savepoints: every command, on thousands of corrupted copies, fails cleanly or succeeds
honestly.

The sources are savepoints real Flink wrote in this test run (the sample job on HashMap and RocksDB, snappy on and
off, parallelism 1 and 2; the edge-types job on both backends) and a few of Flink's own vendored savepoints (a 2.3
HashMap one, a 1.20 RocksDB one, a 1.18 one whose state is inline in ``_metadata``). Each mutant is one copy of a
source with one file changed, ``_metadata`` or a state file, in one of these ways (seeded: the same mutants on every
run):

- ``truncate@N``: cut to N bytes (every N below 300, then strided);
- ``flip@N^M``: byte N XOR M;
- ``len32@N=V`` / ``len16@N=V``: a big-endian i32 (u16) that reads as a plausible length (it fits in what follows)
  set to a huge, negative or slightly larger value (Flink's length fields are all of these two shapes);
- ``kgoffset@N=V``: one key-group block offset of a keyed-state handle in ``_metadata`` set to 0, negative, past the
  end, inside the header, or another block's offset; ``handlesize@N=V``: a state file handle's recorded size changed.

Every mutant then goes through ``describe``, ``dump`` (one state), ``schema``, ``check`` and ``migrate`` in-process
(``flinkstate.cli.main``), a sample of them through the installed ``.venv/bin/flinkstate`` as well, each under a
per-run deadline. A run passes when:

- its exit status is 0 or 1 (``check`` also 3 or 4), never a traceback, never ``internal error`` (the CLI's last
  guard: it hides the stack but still means a bug), every stderr line ``flinkstate: error: ...``, and exactly one
  line for every command but ``describe`` (which names each unreadable state on its own line);
- it ends before the deadline (a hang fails with the mutant named);
- it opens no file outside its own work folder (an audit hook records every ``open``; Python's own modules aside);
- a ``migrate`` that fails publishes nothing (no output, no staging folder, no report); one that succeeds publishes
  a savepoint that the independent verifier, re-run here against the *mutated* source and the declared plan,
  accepts (every entry re-encoded and compared to the source's bytes).

The whole file is bounded to about two to three minutes on a 2-core machine by sampling the mutants (per source:
``MUTANTS_PER_SOURCE``); it prints the counts (mutants, runs per command, outcomes) at the end of each source.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import io
import os
import random
import shutil
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from flinkstate.cli import main
from flinkstate.format.handles import KeyGroupsStateHandle
from flinkstate.format.metadata import read_metadata
from flinkstate.migration.job import MigrationJob
from flinkstate.migration.verify import verify_migration
from flinkstate.savepoint import Savepoint
from tests.support import edge_job, sample_job
from tests.support.deadline import Hang, deadline

pytestmark = pytest.mark.fuzz  # flink comes from the fixtures (conftest)

ROOT = Path(__file__).resolve().parent.parent
FLINKSTATE = ROOT / ".venv" / "bin" / "flinkstate"
CORPUS = ROOT / "tests" / "corpus" / "savepoints" / "flink-tests" / "src" / "test" / "resources"
SEED = 20240501
#: Mutants drawn per source savepoint (stratified over files and kinds, see ``draw_mutants``).
MUTANTS_PER_SOURCE = int(os.environ.get("FLINKSTATE_FUZZ_MUTANTS", "70"))
#: Of those, how many also run through the installed command (a process each: slower, so few).
PROCESS_RUNS_PER_SOURCE = 1
#: A run that takes longer hangs: the sources are a few KiB, a clean run takes well under a second.
RUN_DEADLINE_S = 30
COMMANDS = ("describe", "dump", "schema", "check", "migrate")
ALLOWED_STATUS = {"describe": {0, 1}, "dump": {0, 1}, "schema": {0, 1}, "check": {0, 1, 3, 4}, "migrate": {0, 1}}
CORPUS_SOURCES = (
    "new-stateful-udf-migration-itcase-flink2.3-hashmap-savepoint",
    "new-stateful-broadcast-udf-migration-itcase-flink1.20-rocksdb-savepoint",
    "operatorstate/complexKeyed-flink1.18",
)
I32 = struct.Struct(">i")
U16 = struct.Struct(">H")
I64 = struct.Struct(">q")


# ------------------------------------------------------------------------------------------------------------------
# Mutants
# ------------------------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Mutant:
    source: str
    file: str  # a file name inside the savepoint directory
    kind: str
    detail: str
    data: bytes = dataclasses.field(repr=False)

    @property
    def label(self) -> str:
        return f"{self.source}:{self.file}:{self.kind}@{self.detail}"


def truncations(data: bytes) -> Iterator[tuple[str, bytes]]:
    """Every cut below 300 bytes, then one every ``stride`` bytes (about 60 more)."""
    stride = max(1, (len(data) - 300) // 60)
    for n in [*range(min(300, len(data))), *range(300, len(data), stride)]:
        yield str(n), data[:n]


def flips(data: bytes, rng: random.Random, count: int) -> Iterator[tuple[str, bytes]]:
    for _ in range(count):
        at = rng.randrange(len(data))
        mask = rng.randrange(1, 256)
        mutated = bytearray(data)
        mutated[at] ^= mask
        yield f"{at}^{mask:#04x}", bytes(mutated)


def inflations(data: bytes, rng: random.Random) -> Iterator[tuple[str, bytes]]:
    """Big-endian i32 and u16 fields that read as a plausible length (positive, no more than what follows), each
    set to a value a corrupted or hostile file would hold."""
    for width, fmt in ((4, I32), (2, U16)):
        for at in range(len(data) - width + 1):
            value = fmt.unpack_from(data, at)[0]
            if not 0 < value <= len(data) - at - width:
                continue
            if width == 4:
                choices = (0x7FFFFFFF, -1, -0x80000000, 0x10000000, value + rng.randrange(1, 64), 0)
            else:
                choices = (0xFFFF, value + rng.randrange(1, 64), 0)
            new = rng.choice(choices)
            new = min(new, 0xFFFF) if width == 2 else new
            mutated = bytearray(data)
            fmt.pack_into(mutated, at, new)
            yield f"len{width * 8}:{at}={new}", bytes(mutated)


def offset_corruptions(metadata: bytes, rng: random.Random) -> Iterator[tuple[str, bytes]]:
    """Key-group block offsets and recorded file sizes of the keyed-state handles, corrupted in place in the
    ``_metadata`` bytes (found as the exact i64 sequence the parsed handle holds)."""
    parsed = read_metadata(metadata)
    for op in parsed.operators:
        for sub in op.subtasks.values():
            handle = sub.managed_keyed_state
            if not isinstance(handle, KeyGroupsStateHandle) or not handle.offsets.offsets:
                continue
            packed = b"".join(I64.pack(o) for o in handle.offsets.offsets)
            base = metadata.find(packed)
            if base < 0:
                continue
            offsets = handle.offsets.offsets
            present = [i for i, o in enumerate(offsets) if o]
            size = handle.delegate.size if handle.delegate is not None else 1 << 20
            for index in rng.sample(present, min(4, len(present))):
                other = offsets[rng.choice(present)]
                for value in (0, -1, size, size + 1, 1, offsets[index] - 1, other, 1 << 62):
                    mutated = bytearray(metadata)
                    I64.pack_into(mutated, base + 8 * index, value)
                    yield f"kgoffset:{base + 8 * index}={value}", bytes(mutated)
            if handle.delegate is not None:
                at = metadata.find(I64.pack(size), base + len(packed))
                if at >= 0:
                    for value in (0, -1, size - 1, size + 1, 1 << 40):
                        mutated = bytearray(metadata)
                        I64.pack_into(mutated, at, value)
                        yield f"handlesize:{at}={value}", bytes(mutated)


def draw_mutants(source: str, savepoint: Path, count: int, seed: int = SEED) -> list[Mutant]:
    """``count`` mutants of ``savepoint``, the same on every run. All candidates are generated (a few thousand per
    source), grouped by kind, and drawn round-robin across kinds so that every kind is represented."""
    rng = random.Random(f"{seed}:{source}")
    pools = {kind: rng.sample(items, len(items)) for kind, items in sorted(_candidates(source, savepoint, rng).items())
             if items}
    drawn: list[Mutant] = []
    while len(drawn) < count and any(pools.values()):
        for items in pools.values():
            if items and len(drawn) < count:
                drawn.append(items.pop())
    return drawn


def mutant_by_label(label: str, savepoint: Path, seed: int = SEED) -> Mutant:
    """Reproduction: the mutant a failure names (``source:file:kind@detail``, as printed), rebuilt from the source
    savepoint the run kept (its ``--basetemp``), e.g. ``mutant_by_label("heap-p2:_metadata:flip@1234^0x10", sp)``.
    Every candidate is generated again with the run's seed, so flips and lengths get the same random draws."""
    source = label.split(":", 1)[0]
    for items in _candidates(source, savepoint, random.Random(f"{seed}:{source}")).values():
        for mutant in items:
            if mutant.label == label:
                return mutant
    raise LookupError(f"no mutant {label!r} among the candidates of {savepoint}")


def _candidates(source: str, savepoint: Path, rng: random.Random) -> dict[str, list[Mutant]]:
    """Every candidate mutant of ``savepoint``, by kind (``rng`` draws flips and length values, in file order)."""
    by_kind: dict[str, list[Mutant]] = collections.defaultdict(list)
    for path in sorted(p for p in savepoint.iterdir() if p.is_file()):
        data = path.read_bytes()
        if not data:
            continue
        name = path.name
        tag = "metadata" if name == "_metadata" else "state"
        by_kind[f"{tag}-truncate"] += [Mutant(source, name, "truncate", d, m) for d, m in truncations(data)]
        by_kind[f"{tag}-flip"] += [Mutant(source, name, "flip", d, m) for d, m in flips(data, rng, 300)]
        by_kind[f"{tag}-length"] += [Mutant(source, name, "length", d, m) for d, m in inflations(data, rng)]
        if name == "_metadata":
            by_kind["metadata-offsets"] += [Mutant(source, name, "offsets", d, m)
                                            for d, m in offset_corruptions(data, rng)]
    return by_kind


# ------------------------------------------------------------------------------------------------------------------
# Watching a run: deadline and files opened
# ------------------------------------------------------------------------------------------------------------------


_opened: list[str] | None = None


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if _opened is not None and event == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
        _opened.append(os.fsdecode(args[0]))


sys.addaudithook(_audit)  # audit hooks cannot be removed: it records nothing unless a run is being watched

#: Files a run may open outside its work folder: Python's own modules and data, lazily imported.
_RUNTIME = tuple(str(Path(p).resolve()) for p in {sys.prefix, sys.base_prefix, sys.exec_prefix, ROOT / "flinkstate"})


@contextlib.contextmanager
def watch_opens() -> Iterator[list[str]]:
    global _opened
    _opened = opened = []
    try:
        yield opened
    finally:
        _opened = None


def outside_reads(opened: list[str], work: Path) -> list[str]:
    inside = str(work.resolve())
    found = []
    for name in opened:
        resolved = str(Path(name).resolve())
        if resolved.startswith(inside + os.sep) or resolved == inside or resolved.startswith(_RUNTIME):
            continue
        if resolved.endswith((".py", ".pyc", ".so")) or resolved in ("/dev/null", "/dev/urandom"):
            continue
        if resolved.startswith(f"/proc/{os.getpid()}/"):  # the process's own start time (staging liveness)
            continue
        found.append(name)
    return found


# ------------------------------------------------------------------------------------------------------------------
# Running the commands
# ------------------------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Source:
    name: str
    savepoint: Path
    manifest: Path  # the source's own schema: check passes as-is
    target: Path  # what migrate migrates to (a manifest that re-encodes values, where the job has one)
    states: tuple[tuple[str, str], ...]  # (operator, state) pairs dump picks from


@dataclasses.dataclass
class Tally:
    mutants: int = 0
    runs: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    outcomes: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    failures: list[str] = dataclasses.field(default_factory=list)
    #: Every error line printed, with the work folder replaced by ``WORK`` (for reading what users would see).
    errors: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)

    def summary(self, name: str, seconds: float) -> str:
        runs = ", ".join(f"{c} {n}" for c, n in sorted(self.runs.items()))
        outcomes = ", ".join(f"{o} {n}" for o, n in sorted(self.outcomes.items()))
        return (f"fuzz {name}: {self.mutants} mutants, runs: {runs}; outcomes: {outcomes}; "
                f"{len(self.failures)} failures; {seconds:.1f}s")


def argv_for(command: str, savepoint: Path, source: Source, work: Path, rng: random.Random) -> list[str]:
    sp = str(savepoint)
    if command == "describe":
        return ["describe", sp]
    if command == "dump":
        operator, state = rng.choice(source.states)
        return ["dump", sp, "--operator", operator, "--state", state]
    if command == "schema":
        return ["schema", sp, "-o", str(work / "schema.yaml")]
    if command == "check":
        return ["check", sp, "--schema", str(work / "manifest.yaml")]
    return ["migrate", sp, "--schema", str(work / "target.yaml"), "--output", str(work / "migrated")]


def judge(command: str, status: int, err: str) -> str | None:
    """What is wrong with a run's status and stderr, or None."""
    if "Traceback" in err:
        return f"traceback: {err[-400:]!r}"
    if "internal error" in err:
        return f"internal error: {err.strip()!r}"
    if status not in ALLOWED_STATUS[command]:
        return f"exit status {status}: {err.strip()!r}"
    lines = err.splitlines()
    if any(not line.startswith("flinkstate: error: ") for line in lines):
        return f"stderr not flinkstate's one-line errors: {err!r}"
    if status == 1 and command != "describe" and len(lines) != 1:  # check's 3 and 4 are verdicts, not errors
        return f"exit {status} with {len(lines)} stderr lines: {err!r}"
    return None


def names_a_file(command: str, status: int, err: str, work: Path, tally: Tally) -> str | None:
    """An error must say where: every line of a failed run names a file of its work folder (the savepoint's
    ``_metadata`` or state file, or the manifest), not just an offset."""
    nameless = [line for line in err.splitlines() if status == 1 and str(work) not in line]
    return f"error naming no file: {nameless[0]!r}" if nameless else None


def check_migration(status: int, savepoint: Path, source: Source, work: Path, before: set[str]) -> str | None:
    """Nothing published by a failed migrate (nothing at all left beside the work folder's files ``before`` it
    ran: no output, staging folder, lock or report); an independently verified output from a successful one."""
    output = work / "migrated"
    left = sorted(set(os.listdir(work)) - before)
    if status != 0:
        return f"failed migrate left {left}" if left else None
    if left != ["migrated", "migrated.report"]:
        return f"a successful migrate left {left}, not just the output and its report"
    try:
        mutated = Savepoint.open(str(savepoint))
        plan = MigrationJob(str(savepoint), str(work / "target.yaml"), str(output)).plan(mutated)
        verify_migration(mutated, Savepoint.open(str(output)), plan)
    except Exception as exc:  # any error here means a published output the verifier refuses
        return f"published output refused by the verifier: {type(exc).__name__}: {exc}"
    return None


def run_in_process(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with deadline(RUN_DEADLINE_S), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(argv)
    return status, out.getvalue(), err.getvalue()


def run_process(argv: list[str]) -> tuple[int, str, str]:
    try:
        done = subprocess.run([str(FLINKSTATE), *argv], capture_output=True, text=True, timeout=RUN_DEADLINE_S * 2)
    except subprocess.TimeoutExpired as exc:
        raise Hang(f"process still running after {exc.timeout}s") from None
    return done.returncode, done.stdout, done.stderr


def fuzz_source(source: Source, tmp: Path, count: int = MUTANTS_PER_SOURCE,
                process_runs: int = PROCESS_RUNS_PER_SOURCE) -> Tally:
    tally = Tally()
    rng = random.Random(f"{SEED}:{source.name}:runs")
    mutants = draw_mutants(source.name, source.savepoint, count)
    in_process = [True] * len(mutants)
    for index in rng.sample(range(len(mutants)), min(process_runs, len(mutants))):
        in_process[index] = False
    for number, (mutant, here) in enumerate(zip(mutants, in_process, strict=True)):
        work = tmp / f"m{number}"
        savepoint = work / "savepoint"
        shutil.copytree(source.savepoint, savepoint)
        (savepoint / mutant.file).write_bytes(mutant.data)
        shutil.copyfile(source.manifest, work / "manifest.yaml")
        shutil.copyfile(source.target, work / "target.yaml")
        tally.mutants += 1
        for command in COMMANDS:
            argv = argv_for(command, savepoint, source, work, rng)
            tally.runs[command] += 1
            before = set(os.listdir(work))
            try:
                with watch_opens() as opened:
                    status, _, err = run_in_process(argv) if here else run_process(argv)
            except Hang as exc:
                tally.outcomes["hang"] += 1
                tally.failures.append(f"{mutant.label}: {' '.join(argv)}: {exc}")
                continue
            tally.outcomes[f"{command} exit {status}"] += 1
            for line in err.splitlines():
                tally.errors[f"{command}: {line.replace(str(work), 'WORK')}"] += 1
            problems = [judge(command, status, err), names_a_file(command, status, err, work, tally)]
            if here:
                reads = outside_reads(opened, work)
                problems.append(f"opened files outside the savepoint: {reads}" if reads else None)
            if command == "migrate":
                problems.append(check_migration(status, savepoint, source, work, before))
            for problem in problems:
                if problem is not None:
                    tally.failures.append(f"{mutant.label}: flinkstate {' '.join(argv[:1])}: {problem}")
        shutil.rmtree(work, ignore_errors=True)
    return tally


def make_source(name: str, savepoint: Path, tmp: Path, target: Path | None) -> Source:
    """The unmutated source: its own schema (check's manifest, and migrate's when no target is given) and its
    readable (operator, state) pairs for dump; every command must succeed on it (else mutants prove nothing)."""
    manifest = tmp / f"{name}.schema.yaml"
    status, _, err = run_in_process(["schema", str(savepoint), "-o", str(manifest)])
    assert status == 0, err
    opened = Savepoint.open(str(savepoint))
    keyed = [op for op in opened.operators if any(s.managed_keyed_state for s in op.subtasks.values())]
    states = tuple((op.uid or op.operator_id, info.name)
                   for op in keyed for info in opened.keyed_states(op.operator_id))
    assert states, f"{name} has no keyed state to dump"
    return Source(name, savepoint, manifest, target or manifest, states)


def assert_clean(source: Source, tally: Tally, seconds: float) -> None:
    print(tally.summary(source.name, seconds))
    assert tally.mutants > 0 and all(tally.runs[c] == tally.mutants for c in COMMANDS), tally
    assert not tally.failures, f"{len(tally.failures)} failing runs:\n" + "\n".join(tally.failures[:25])


# ------------------------------------------------------------------------------------------------------------------
# Tests
# ------------------------------------------------------------------------------------------------------------------

#: heap-p2 is left out: its blocks are heap-p1's (uncompressed) and its two subtasks heap-p2-snappy's.
SAMPLE_SOURCES = ("heap-p1", "heap-p2-snappy", "rocksdb-p2", "rocksdb-p2-snappy")


@pytest.mark.parametrize("name", SAMPLE_SOURCES)
def test_sample_job_mutants(name: str, flink_savepoints: dict[str, Path], tmp_path: Path) -> None:
    """The sample job's savepoints, migrated to v2 (the POJO gains a field: every ``stats`` value is re-encoded)."""
    source = make_source(name, flink_savepoints[name], tmp_path, sample_job.JOB_DIR / "manifests" / "v2.yaml")
    started = time.monotonic()
    assert_clean(source, fuzz_source(source, tmp_path), time.monotonic() - started)


@pytest.fixture(scope="module")
def edge_savepoints(flink_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("fuzz-edge")
    return {backend: edge_job.write_savepoint(flink_cluster, root / backend, backend=backend)
            for backend in ("hashmap", "rocksdb")}


@pytest.mark.parametrize("backend", ("hashmap", "rocksdb"))
def test_edge_job_mutants(backend: str, edge_savepoints: dict[str, Path], tmp_path: Path) -> None:
    """The edge-types job (nanosecond times, BigDecimal, Kryo values, POJO subclasses), migrated to its own schema
    (values copied and verified byte for byte)."""
    source = make_source(f"edge-{backend}", edge_savepoints[backend], tmp_path, None)
    started = time.monotonic()
    assert_clean(source, fuzz_source(source, tmp_path, count=MUTANTS_PER_SOURCE // 2, process_runs=1),
                 time.monotonic() - started)


@pytest.mark.parametrize("path", CORPUS_SOURCES)
def test_flink_corpus_mutants(path: str, tmp_path: Path) -> None:
    """Savepoints from Flink's own test suite (Flink 2.3 HashMap, 1.20 RocksDB, 1.18 with inline state)."""
    source = make_source(path.replace("/", "-"), CORPUS / path, tmp_path, None)
    started = time.monotonic()
    assert_clean(source, fuzz_source(source, tmp_path, count=MUTANTS_PER_SOURCE // 2, process_runs=1),
                 time.monotonic() - started)


def test_the_mutants_are_real() -> None:
    """The generators change what they say (not hollow): every kind yields mutants that differ from the source,
    truncations cut where they say, and the draw is the same on every run."""
    data = bytes(range(256)) * 3
    cuts = dict(truncations(data))
    assert cuts["0"] == b"" and cuts["299"] == data[:299] and all(len(m) == int(d) for d, m in cuts.items())
    rng = random.Random(1)
    assert all(m != data and len(m) == len(data) for _, m in flips(data, rng, 50))
    inflated = list(inflations(b"\x00\x00\x00\x03abc", random.Random(2)))
    assert inflated and all(m[4:] == b"abc" and m[:4] != b"\x00\x00\x00\x03" for _, m in inflated if "len32" in _)
    corpus = CORPUS / CORPUS_SOURCES[0]
    first = draw_mutants("x", corpus, 40)
    assert [m.label for m in first] == [m.label for m in draw_mutants("x", corpus, 40)]
    assert {m.kind for m in first} == {"truncate", "flip", "length", "offsets"}
    assert all(m.data != (corpus / m.file).read_bytes() for m in first if m.kind != "truncate")


def test_judge_refuses_what_it_must() -> None:
    """The run oracle itself: a traceback, an internal error, an unexpected status or a multi-line error fails."""
    assert judge("dump", 1, "flinkstate: error: x: offset 3: truncated\n") is None
    assert judge("describe", 1, "flinkstate: error: a\nflinkstate: error: b\n") is None
    assert judge("dump", 1, "Traceback (most recent call last):\n") is not None
    assert judge("dump", 1, "flinkstate: internal error: IndexError: x\n") is not None
    assert judge("dump", 2, "flinkstate: error: x\n") is not None
    assert judge("check", 3, "") is None and judge("migrate", 3, "") is not None
    assert judge("dump", 1, "flinkstate: error: a\nflinkstate: error: b\n") is not None
    assert judge("schema", 1, "boom\n") is not None


@pytest.mark.parametrize("command", ("dump", "migrate"))
def test_state_id_past_the_header(command: str, flink_savepoints: dict[str, Path], tmp_path: Path) -> None:
    """Found by this suite: a key-group block whose first state id (u16) is past the header's state list made
    ``migrate`` fail with ``IndexError`` (an internal error) and ``dump`` silently skip the entries. Both now refuse
    in one line naming the file, the offset, the operator, the key group and the id."""
    savepoint = tmp_path / "savepoint"
    shutil.copytree(flink_savepoints["heap-p2"], savepoint)  # uncompressed: a block starts with its state id
    stream = Savepoint.open(str(savepoint)).keyed_streams("stats")[0][1]
    key_group, start, _ = stream.blocks[0]
    states = len(stream.header().states)
    state_file = savepoint / stream.source.name
    data = bytearray(state_file.read_bytes())
    U16.pack_into(data, start, states)  # one past the last state
    state_file.write_bytes(bytes(data))
    source = Source("heap-p2", savepoint, tmp_path / "unused", sample_job.JOB_DIR / "manifests" / "v2.yaml",
                    (("stats", "count"),))
    work = tmp_path / "work"
    work.mkdir()
    shutil.copyfile(source.target, work / "target.yaml")
    argv = argv_for(command, savepoint, source, work, random.Random(0))
    before = set(os.listdir(work))
    status, out, err = run_in_process(argv)
    assert (status, out) == (1, "") and judge(command, status, err) is None, err
    state = ", state count" if command == "dump" else ""  # dump reads one state; migrate all of the block's
    assert err == (f"flinkstate: error: {state_file}: offset {start}: operator stats{state}, key group {key_group}: "
                   f"state id {states} in a key-group block, but the header lists {states} states\n"), err
    assert check_migration(status, savepoint, source, work, before) is None



def test_the_open_audit_sees_every_read(tmp_path: Path) -> None:
    """The outside-reads oracle is not hollow: the files a real run reads are recorded, and reported as outside
    reads when the run's work folder is elsewhere."""
    savepoint = (CORPUS / CORPUS_SOURCES[0]).resolve()
    with watch_opens() as opened:
        status, out, err = run_in_process(["dump", str(savepoint), "--operator", "CheckpointingKeyedStateFlatMap1",
                                           "--state", "state-name"])
    assert status == 0 and out and not err, err
    read = {Path(name).resolve() for name in opened}
    assert savepoint / "_metadata" in read and any(p.parent == savepoint and p.name != "_metadata" for p in read)
    assert outside_reads(opened, savepoint) == []
    assert {Path(name).resolve() for name in outside_reads(opened, tmp_path)} == {p for p in read
                                                                                 if p.parent == savepoint}


def test_a_tampered_output_is_caught(flink_savepoints: dict[str, Path], tmp_path: Path) -> None:
    """The published-output oracle is not hollow: a successful migration passes it, and the same output with one
    stored ``count`` value changed by one (still a valid Long) or with a stray file beside it fails it."""
    source = Source("heap-p2", flink_savepoints["heap-p2"], tmp_path / "unused",
                    sample_job.JOB_DIR / "manifests" / "v2.yaml", (("stats", "count"),))
    work = tmp_path / "work"
    work.mkdir()
    shutil.copyfile(source.target, work / "target.yaml")
    before = set(os.listdir(work))
    status, _, err = run_in_process(argv_for("migrate", source.savepoint, source, work, random.Random(0)))
    assert status == 0 and judge("migrate", status, err) is None, err
    assert check_migration(status, source.savepoint, source, work, before) is None
    stream = Savepoint.open(str(work / "migrated")).keyed_streams("stats")[0][1]
    count_id = stream.header().state_index("count")
    key_group, start, end = stream.blocks[0]
    data = stream.read_block(key_group, start, end)
    value_end = next(ve for sid, _, _, _, ve in stream.raw_entries(data, key_group, start) if sid == count_id)
    state_file = work / "migrated" / stream.source.name
    tampered = bytearray(state_file.read_bytes())
    tampered[start + value_end - 1] ^= 1  # the low byte of a Long: another valid value
    state_file.write_bytes(bytes(tampered))
    problem = check_migration(status, source.savepoint, source, work, before)
    assert problem is not None and "refused by the verifier" in problem and "count" in problem, problem
    (work / "stray").write_bytes(b"")
    assert "left ['migrated', 'migrated.report', 'stray']" in str(check_migration(1, source.savepoint, source, work,
                                                                                   before))


@pytest.mark.parametrize("command", COMMANDS)
def test_a_state_file_name_with_a_lone_surrogate(command: str, tmp_path: Path) -> None:
    """Found by this suite: a ``_metadata`` flip that turns a relative state file name's modified UTF-8 into a lone
    surrogate (valid in Java's encoding, impossible in a file name) failed every command with UnicodeEncodeError
    inside the file system call (an internal error). It is now refused in one line naming ``_metadata`` and the
    offset of the handle's path."""
    corpus = CORPUS / CORPUS_SOURCES[1]
    source = make_source("surrogate", corpus, tmp_path, None)
    savepoint = tmp_path / "savepoint"
    shutil.copytree(corpus, savepoint)
    data = (savepoint / "_metadata").read_bytes()
    name = sorted(p.name for p in corpus.iterdir() if p.name != "_metadata")[0].encode()
    at = data.index(U16.pack(len(name)) + name)
    (savepoint / "_metadata").write_bytes(data[:at + 2] + b"\xed\xa0\x80" + data[at + 5:])
    work = tmp_path / "work"
    work.mkdir()
    shutil.copyfile(source.manifest, work / "manifest.yaml")
    shutil.copyfile(source.target, work / "target.yaml")
    before = set(os.listdir(work))
    status, _, err = run_in_process(argv_for(command, savepoint, source, work, random.Random(0)))
    assert status == 1 and judge(command, status, err) is None, err
    assert err == (f"flinkstate: error: {savepoint / '_metadata'}: offset {at}: file state handle path "
                   f"'\\\\ud800{name[3:].decode()}' is not a valid file name (a lone UTF-16 surrogate)\n"), err
    if command == "migrate":
        assert check_migration(status, savepoint, source, work, before) is None
