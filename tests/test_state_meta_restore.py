"""A state's meta info that Flink's restore cannot use is refused when the header is read, by every command, in one
line naming the state file, the offset of the state's meta info, the operator and the state.

Found by the fuzz suite (tests/test_fuzz.py, a ``length`` mutant of a heap savepoint: the u16 over a serializer key's
length and first letter set so that ``NAMESPACE_SERIALIZER`` read as ```AMESPACE_SERIALIZER``): ``describe``,
``schema`` and ``check`` accepted the savepoint, ``dump`` refused it naming no file and ``migrate`` failed with an
internal error (an assertion). Flink's restore looks the serializer snapshots up by key and parses the state type
with ``Enum.valueOf`` (``Registered*BackendMetaInfo(StateMetaInfoSnapshot)``): a missing key or an unknown type fails
it, so the header reader refuses both. Each case here is that corruption made on purpose in one of Flink's own
savepoints (tests/corpus), so that it does not depend on a random draw.
"""

from __future__ import annotations

import contextlib
import io
import shutil
from pathlib import Path

import pytest

from flinkstate.cli import main

CORPUS = (Path(__file__).parent / "corpus" / "savepoints" / "flink-tests" / "src" / "test" / "resources"
          / "new-stateful-udf-migration-itcase-flink2.3-hashmap-savepoint")
#: CheckpointingKeyedStateFlatMap1's subtask 1: one VALUE state, ``state-name``.
KEYED_FILE = "8c2d1a1b-debb-4750-b6f2-260fe94c5869"
#: CheckpointingTimelyStatefulOperator2's subtask 0: the two timer states only.
TIMERS_FILE = "58c296ae-1728-44c1-8906-6c287ccdef10"
#: CheckpointingSource2's operator state (one UNION list state, ``source-state``).
OPERATOR_FILE = "63be2c2f-3f94-432c-8e12-2111d32d8259"
COMMANDS = ("describe", "dump", "schema", "check", "migrate")

#: case -> (file, operator, state, bytes Flink wrote, the same corrupted, the error after "state <name>: ").
CASES = {
    # The fuzz suite's mutant: the serializer key's first letter changed (its length kept).
    "namespace key": (KEYED_FILE, "CheckpointingKeyedStateFlatMap1", "state-name",
                      b"\x00\x14NAMESPACE_SERIALIZER", b"\x00\x14`AMESPACE_SERIALIZER",
                      "no NAMESPACE_SERIALIZER snapshot for a KEY_VALUE state (serializer snapshots: VALUE_SERIALIZER, "
                      "`AMESPACE_SERIALIZER); Flink's restore needs it"),
    "value key": (KEYED_FILE, "CheckpointingKeyedStateFlatMap1", "state-name",
                  b"\x00\x10VALUE_SERIALIZER", b"\x00\x10VALUE_SERIALIZEQ",
                  "no VALUE_SERIALIZER snapshot for a KEY_VALUE state (serializer snapshots: VALUE_SERIALIZEQ, "
                  "NAMESPACE_SERIALIZER); Flink's restore needs it"),
    "state type": (KEYED_FILE, "CheckpointingKeyedStateFlatMap1", "state-name",
                   b"\x00\x10KEYED_STATE_TYPE\x00\x05VALUE", b"\x00\x10KEYED_STATE_TYPE\x00\x05VALUf",
                   "option KEYED_STATE_TYPE is 'VALUf', not one of Flink's (UNKNOWN, VALUE, LIST, REDUCING, FOLDING, "
                   "AGGREGATING, MAP)"),
    "timer key": (TIMERS_FILE, "CheckpointingTimelyStatefulOperator2", "_timer_state/processing_timer",
                  b"\x00\x10VALUE_SERIALIZER", b"\x00\x10WALUE_SERIALIZER",
                  "no VALUE_SERIALIZER snapshot for a PRIORITY_QUEUE state (serializer snapshots: WALUE_SERIALIZER); "
                  "Flink's restore needs it"),
}


def _corrupt(tmp_path: Path, file: str, state: str, original: bytes, corrupted: bytes) -> tuple[Path, Path, int]:
    """A copy of the corpus savepoint (and its own schema, written before the corruption) with the first occurrence
    of ``original`` in ``file`` replaced; returns the savepoint, the schema and the offset of ``state``'s meta info
    (its name's length field), which is where the refusal points."""
    savepoint, manifest = tmp_path / "savepoint", tmp_path / "manifest.yaml"
    shutil.copytree(CORPUS, savepoint)
    assert _run(["schema", str(savepoint), "-o", str(manifest)])[0] == 0
    data = (savepoint / file).read_bytes()
    name = state.encode()
    meta_at = data.index(len(name).to_bytes(2, "big") + name)
    at = data.index(original, meta_at)  # the first one after the state's name: that state's own
    (savepoint / file).write_bytes(data[:at] + corrupted + data[at + len(original):])
    return savepoint, manifest, meta_at


def _run(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        status = main(argv)
    return status, err.getvalue()


def _argv(command: str, savepoint: Path, manifest: Path, operator: str, state: str, tmp_path: Path) -> list[str]:
    return {"describe": ["describe", str(savepoint)],
            "dump": ["dump", str(savepoint), "--operator", operator, "--state", state],
            "schema": ["schema", str(savepoint), "-o", str(tmp_path / "schema.yaml")],
            "check": ["check", str(savepoint), "--schema", str(manifest)],
            "migrate": ["migrate", str(savepoint), "--schema", str(manifest), "--output", str(tmp_path / "out")],
            }[command]


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_state_meta_info_flinks_restore_cannot_use_is_refused(case: str, command: str, tmp_path: Path) -> None:
    file, operator, state, original, corrupted, problem = CASES[case]
    savepoint, manifest, meta_at = _corrupt(tmp_path, file, state, original, corrupted)
    before = sorted(p.name for p in tmp_path.iterdir())
    status, err = _run(_argv(command, savepoint, manifest, operator, state, tmp_path))
    assert (status, err) == (1, f"flinkstate: error: {savepoint / file}: offset {meta_at}: operator {operator}: "
                                f"state {state}: {problem}\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # migrate published nothing, left nothing


def test_the_uncorrupted_savepoint_passes_every_command(tmp_path: Path) -> None:
    """The cases above fail because of their one corruption: the same copy, unchanged, passes every command."""
    savepoint, manifest = tmp_path / "savepoint", tmp_path / "manifest.yaml"
    shutil.copytree(CORPUS, savepoint)
    assert _run(["schema", str(savepoint), "-o", str(manifest)]) == (0, "")
    for command in COMMANDS:
        operator, state = "CheckpointingTimelyStatefulOperator2", "_timer_state/processing_timer"
        assert _run(_argv(command, savepoint, manifest, operator, state, tmp_path)) == (0, ""), command


def test_an_operator_state_with_an_unknown_distribution_mode_is_refused_by_dump(tmp_path: Path) -> None:
    """The same rule for operator state (``OperatorStateHandle.Mode.valueOf`` in Flink's restore): dump refuses it
    in one line naming the file and the state; describe shows the state with the reason its type is unknown."""
    savepoint, _, meta_at = _corrupt(tmp_path, OPERATOR_FILE, "source-state",
                                     b"\x00\x05UNION\x00", b"\x00\x05UNIOn\x00")
    problem = (f"{savepoint / OPERATOR_FILE}: offset {meta_at}: operator CheckpointingSource2, subtask 0: state "
               f"source-state: option OPERATOR_STATE_DISTRIBUTION_MODE is 'UNIOn', not one of Flink's "
               f"(SPLIT_DISTRIBUTE, UNION, BROADCAST)")
    assert _run(["dump", str(savepoint), "--operator", "CheckpointingSource2", "--state", "source-state"]) == \
        (1, f"flinkstate: error: {problem}\n")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["describe", str(savepoint)]) == 0
    assert f"    source-state: UNION, type unknown ({problem})\n" in out.getvalue()
