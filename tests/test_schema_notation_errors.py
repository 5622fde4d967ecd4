"""A serializer snapshot that has no manifest notation is refused by ``schema`` in one line naming the state file
whose header holds it, the operator and the state (or the key serializer).

Found by the fuzz suite (tests/test_fuzz.py, a ``flip`` mutant of a heap savepoint: ``java`` in the tuple class of
the ``recent`` state's ``Tuple2`` became ``ja\\x12a``): ``schema`` refused it with ``tuple class ... has no
notation`` and nothing else, raised while the YAML was written. Flink reads any class name there (a user class may
extend a tuple), so the savepoint is read as before; only the manifest, which has no notation for such a class, is
refused, and now says where. Each case is that corruption made on purpose in one of Flink's own savepoints
(tests/corpus: keyed state inline in ``_metadata``, every subtask's copy changed alike), so that it does not depend
on a random draw.
"""

from __future__ import annotations

import contextlib
import io
import shutil
from pathlib import Path

import pytest

from flinkstate import FlinkStateError, Savepoint, manifest_from_savepoint
from flinkstate.cli import main

CORPUS = (Path(__file__).parent / "corpus" / "savepoints" / "flink-tests" / "src" / "test" / "resources"
          / "operatorstate" / "complexKeyed-flink1.18")
#: The window operator (keyed by Tuple1<Integer>, a window-contents list of Tuple2<Integer, Integer>) and the inline
#: stream of its first subtask, whose header the schema takes the states from.
OPERATOR = "01203aa9a12dc1ec725e03853dd7c8f2"
STREAM = "62fb74ca-73f2-423d-9d6b-1f50243da5e4"

#: case -> (class name Flink wrote, how many times, the same corrupted (same length), what the error names, the class
#: as printed). Tuple2 is the window contents' (one header per subtask); Tuple1 the key of all three keyed operators
#: (the window operator is the first of them).
CASES = {
    "state value": (b"org.apache.flink.api.java.tuple.Tuple2", 4, b"org.apache.flink.api.ja\x12a.tuple.Tuple2",
                    "state window-contents", "org.apache.flink.api.ja\\x12a.tuple.Tuple2"),
    "key": (b"org.apache.flink.api.java.tuple.Tuple1", 12, b"org.apache.flink.api.java.tuple.TupleX",
            "key serializer", "org.apache.flink.api.java.tuple.TupleX"),
}


def _corrupted(tmp_path: Path, original: bytes, count: int, corrupted: bytes) -> Path:
    savepoint = tmp_path / "savepoint"
    shutil.copytree(CORPUS, savepoint)
    data = (savepoint / "_metadata").read_bytes()
    assert data.count(original) == count
    (savepoint / "_metadata").write_bytes(data.replace(original, corrupted))
    return savepoint


@pytest.mark.parametrize("case", sorted(CASES))
def test_schema_names_the_state_file_of_a_snapshot_without_notation(case: str, tmp_path: Path) -> None:
    original, count, corrupted, what, printed = CASES[case]
    savepoint = _corrupted(tmp_path, original, count, corrupted)
    separator = ":" if what == "key serializer" else ","
    expected = (f"{savepoint / '_metadata'} (inline stream {STREAM}): operator {OPERATOR}{separator} {what}: tuple "
                f"class {printed} has no notation")
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(["schema", str(savepoint), "-o", str(tmp_path / "schema.yaml")])
    assert (status, out.getvalue(), err.getvalue()) == (1, "", f"flinkstate: error: {expected}\n")
    assert not (tmp_path / "schema.yaml").exists()
    with pytest.raises(FlinkStateError) as refused:  # the API refuses when the manifest is built, not when dumped
        manifest_from_savepoint(Savepoint.open(savepoint))
    assert str(refused.value) == expected.replace(printed, corrupted.decode())


def test_the_uncorrupted_copy_has_a_schema(tmp_path: Path) -> None:
    """The refusals above come from their one corruption: the same copy unchanged gives the window operator's
    schema with both tuple types."""
    savepoint = tmp_path / "savepoint"
    shutil.copytree(CORPUS, savepoint)
    text = manifest_from_savepoint(Savepoint.open(savepoint)).dump()
    assert "key: Tuple1<Integer>" in text and "value: Tuple2<Integer, Integer>" in text
