"""The compiled fast path (flinkstate/_speedups) against its reference, the pure-Python codecs: differential tests on
Flink-written bytes (the serializer corpus, the savepoint corpus) and on generated values and mutated bytes.

The compiled decoders must return exactly the reference's values (types too: bool vs int, float bits, Decimal,
time models) or fail, and every failure is reported by the reference: so a savepoint read with the compiled path on
gives the same entries, or the same one-line error, as with ``FLINKSTATE_PURE_PYTHON=1``.

No test here is skipped when the extension is missing: ``test_extension_is_built`` fails then (unless
FLINKSTATE_PURE_PYTHON is set, which is how the pure-Python reference is run on purpose).
"""

from __future__ import annotations

import functools
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flinkstate import _speedups
from flinkstate.binary import Reader
from flinkstate.errors import FlinkStateError
from flinkstate.format.keyed_stream import iter_raw_entries
from flinkstate.savepoint import Savepoint
from flinkstate.serializers.base import TypeSerializerSnapshot
from flinkstate.serializers.registry import read_snapshot
from tests.test_codec_roundtrip import CASES, FOLDERS, same
from tests.test_rowdata import rows

pytestmark = pytest.mark.corpus

SAVEPOINTS = Path(__file__).parent / "corpus" / "savepoints"
SAVEPOINT_DIRS = (SAVEPOINTS / "dirs.txt").read_text(encoding="utf-8").split()
COMPILED = _speedups.enabled()
needs_compiled = pytest.mark.skipif(not COMPILED and _speedups.pure_python_requested(),
                                    reason="FLINKSTATE_PURE_PYTHON is set: the reference alone is under test")

#: Generated families whose bytes are mutated (each has a compiled node of its own).
MUTATED = ["simple-String", "simple-Long", "simple-Char", "simple-Double", "pojo", "row-3", "row-7-kinds", "tuple3",
           "list-long", "list-tuple2", "map-string-long", "map-long-row", "nullable-padded", "nullable-not-padded"]
PROPERTY = settings(max_examples=60, derandomize=True, database=None, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def test_extension_is_built() -> None:
    """CI builds the extension (pip install): it must import, unless the reference was asked for."""
    if _speedups.pure_python_requested():
        assert not _speedups.enabled()
        return
    assert _speedups.BUILD_ERROR is None, f"the compiled fast path did not build: {_speedups.BUILD_ERROR}"
    assert _speedups.enabled()


def test_pure_python_variable_turns_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(_speedups.PURE_PYTHON_VARIABLE, "1")
    assert not _speedups.enabled()
    assert _speedups.fast_codec(CASES["simple-Long"][0]) is None
    monkeypatch.setenv(_speedups.PURE_PYTHON_VARIABLE, "0")
    assert _speedups.enabled() == (_speedups.BUILD_ERROR is None)


# ---------------------------------------------------------------------------------------------------------------------
# Record codecs: compiled vs reference
# ---------------------------------------------------------------------------------------------------------------------


def _outcome(action: Any) -> tuple[str, Any]:
    try:
        return "ok", action()
    except Exception as exc:  # the outcome is compared, whatever it is
        return "error", f"{type(exc).__name__}: {exc}"


def _compiled(snapshot: TypeSerializerSnapshot) -> Any:
    codec = _speedups.fast_codec(snapshot)
    assert codec is not None
    return codec


def _check_codec(snapshot: TypeSerializerSnapshot, data: bytes, must_decode: bool) -> tuple[str, Any]:
    """Decodes ``data`` with both; the compiled one may only fail where the reference fails (or, when
    ``must_decode``, not at all), and when it decodes, its value and end are the reference's."""
    reference = _outcome(lambda: snapshot.decoder()(data, 0))
    compiled = _outcome(lambda: _compiled(snapshot)(data, 0))
    if compiled[0] == "ok":
        assert reference[0] == "ok", f"compiled decoded {compiled[1]!r} where the reference failed: {reference[1]}"
        assert compiled[1][1] == reference[1][1], "ends differ"
        assert same(compiled[1][0], reference[1][0]), f"{compiled[1][0]!r} != {reference[1][0]!r}"
    elif must_decode:
        assert reference[0] == "error", f"compiled failed ({compiled[1]}) where the reference decoded"
    return compiled


#: Families whose every node the compiled path decodes itself (no call back into Python): the fast path is real.
NATIVE = ("long-serializer", "int-serializer", "short-serializer", "byte-serializer", "boolean-serializer",
          "double-serializer", "float-serializer", "char-serializer", "string-serializer", "long-value-serializer",
          "boolean-value-serializer", "char-value-serializer", "null-value-serializer", "list-serializer",
          "map-serializer", "nullable-not-padded-serializer", "nullable-padded-serializer", "row-serializer",
          "tuple-serializer", "pojo-serializer-with-modified-schema", "void-namespace-serializer",
          "global-window-serializer")


def _python_nodes(spec: tuple[Any, ...]) -> int:
    """How many nodes of a spec call back into a Python decoder."""
    if spec[0] == _speedups.K_PY:
        return 1
    total = 0
    for item in spec[1:]:
        if isinstance(item, tuple) and item and isinstance(item[0], int):  # one nested spec
            total += _python_nodes(item)
        elif isinstance(item, tuple):  # children (or POJO field names, which are no specs)
            total += sum(_python_nodes(child) for child in item if isinstance(child, tuple))
    return total


@needs_compiled
@pytest.mark.parametrize("folder", FOLDERS, ids=[f.name for f in FOLDERS])
def test_flink_serializer_corpus(folder: Path) -> None:
    """Every record Flink's upgrade tests wrote: the compiled decoder gives the reference's value and end."""
    snapshot = read_snapshot(Reader((folder / "serializer-snapshot").read_bytes()), top_level=True)
    data = (folder / "test-data").read_bytes() + b"\xa5trailing"
    reference_codec = _outcome(snapshot.decoder)
    spec = _outcome(lambda: _speedups.codec_spec(snapshot))
    if reference_codec[0] == "error":  # e.g. a POJO ending in a Kryo field: refused alike, with the same error
        assert spec == reference_codec
        return
    assert spec[0] == "ok"
    _check_codec(snapshot, data, must_decode=True)
    if folder.name.rsplit("-", 1)[0] in NATIVE:
        assert _python_nodes(spec[1]) == 0, f"{folder.name}: {spec[1]!r}"


def test_native_families_are_in_the_corpus() -> None:
    assert set(NATIVE) <= {f.name.rsplit("-", 1)[0] for f in FOLDERS}


@needs_compiled
@pytest.mark.parametrize("case", sorted(CASES))
@PROPERTY
@given(data=st.data())
def test_generated_values(case: str, data: st.DataObject) -> None:
    """Values of every family (test_codec_roundtrip's generators), written by the reference encoder: decoded alike."""
    snapshot, strategy = CASES[case]
    if snapshot.needs_end:
        return  # decoded only as whole stored values, by the reference (fast_entry_decoder declines them)
    encoded = snapshot.encode(data.draw(strategy))
    _check_codec(snapshot, encoded + data.draw(st.binary(max_size=3)), must_decode=True)


@needs_compiled
@pytest.mark.parametrize("case", MUTATED)
@PROPERTY
@given(data=st.data())
def test_mutated_bytes_never_decode_differently(case: str, data: st.DataObject) -> None:
    """Garbage and near-miss bytes: whatever the compiled decoder accepts, the reference decodes to the same."""
    snapshot, strategy = CASES[case]
    encoded = bytearray(snapshot.encode(data.draw(strategy)))
    if encoded:
        for _ in range(data.draw(st.integers(1, 3))):
            encoded[data.draw(st.integers(0, len(encoded) - 1))] = data.draw(st.integers(0, 255))
    _check_codec(snapshot, bytes(encoded[:data.draw(st.integers(0, len(encoded)))]), must_decode=False)


def test_mutation_cases_exist() -> None:
    assert set(MUTATED) <= set(CASES)


# ---------------------------------------------------------------------------------------------------------------------
# Savepoints: entries, raw entries and errors, compiled vs reference
# ---------------------------------------------------------------------------------------------------------------------


def read_everything(path: Path) -> list[tuple[str, Any]]:
    """Every keyed state of every stream, decoded block by block, and every block's raw entries: values, or the
    one-line error the read ended with."""
    found: list[tuple[str, Any]] = []
    try:
        sp = Savepoint.open(path)
        operators = sp.operators
    except FlinkStateError as exc:
        return [("open", str(exc))]
    for op in operators:
        try:
            streams = sp.keyed_streams(op)
        except FlinkStateError as exc:
            found.append((op.operator_id, str(exc)))
            continue
        for index, stream in streams:
            where = f"{op.operator_id}/{index}"
            try:
                names = [s.name for s in stream.header().states]
            except FlinkStateError as exc:
                found.append((where, str(exc)))
                continue
            for name in names:
                found.append((f"{where}/{name}", _outcome(lambda n=name, s=stream: list(s.iter_blocks(n)))))
            if stream.heap_format:
                continue
            for key_group, start, end in stream.blocks:
                def raw(kg: int = key_group, s: int = start, e: int = end, st: Any = stream, n: int = len(names)
                        ) -> Any:
                    block = st.read_block(kg, s, e)
                    pairs = [_speedups.state_pairs(st, block, kg, s, state) for state in (None, *range(n))]
                    return list(iter_raw_entries(block, n)), list(st.raw_entries(block, kg, s)), pairs
                found.append((f"{where}/raw/{key_group}", _outcome(raw)))
    return found


def _both(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[list[tuple[str, Any]], list[tuple[str, Any]]]:
    compiled = read_everything(path)
    with monkeypatch.context() as patch:
        patch.setenv(_speedups.PURE_PYTHON_VARIABLE, "1")
        reference = read_everything(path)
    return compiled, reference


def _assert_same_reading(compiled: list[tuple[str, Any]], reference: list[tuple[str, Any]]) -> None:
    assert [where for where, _ in compiled] == [where for where, _ in reference]
    for (where, got), (_, expected) in zip(compiled, reference, strict=True):
        assert same(got, expected), f"{where}: {str(got)[:300]} != {str(expected)[:300]}"


@needs_compiled
@pytest.mark.parametrize("path", SAVEPOINT_DIRS, ids=lambda p: p.split("resources/")[-1])
def test_flink_savepoint_corpus(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Flink's own test savepoints, every keyed state: the same entries (or the same refusal) both ways, and the
    compiled one-pass block walk really used for every block the reference reads."""
    compiled, reference = _both(SAVEPOINTS / path, monkeypatch)
    _assert_same_reading(compiled, reference)
    if compiled and compiled[0][0] == "open":
        return
    sp = Savepoint.open(SAVEPOINTS / path)
    for op in sp.operators:
        streams = _outcome(lambda o=op: sp.keyed_streams(o))
        for _, stream in streams[1] if streams[0] == "ok" else []:
            if _outcome(stream.header)[0] == "error" or not stream.canonical_blocks:
                continue  # no canonical blocks to walk (the entries were compared above, both ways)
            _assert_compiled_walk(stream)


def _assert_compiled_walk(stream: Any) -> None:
    from flinkstate.format.keyed_entries import make_entry_decoder

    header = stream.header()
    for index, state in enumerate(header.states):
        layout = _outcome(lambda s=state: stream._key_layout(header, s))
        decoder = _outcome(lambda s=state, lay=layout: make_entry_decoder(s, lay[1]))
        if layout[0] == "error" or decoder[0] == "error" or not _speedups.is_compiled(decoder[1]):
            continue
        for key_group, start, end in stream.blocks:
            data = stream.read_block(key_group, start, end)
            if _outcome(lambda d=data, kg=key_group, i=index, dec=decoder[1]: stream._scan_block(
                    d, kg, i, dec, [], len(header.states)))[0] == "ok":
                assert _speedups.scan_compiled(decoder[1], data, key_group, index, len(header.states),
                                               stream.prefix_bytes) is not None, f"{state.name} {key_group}"


_T = "flink-tests/src/test/resources/"
#: Savepoints to corrupt: keyed state in files (HashMap, RocksDB, snappy-compressed) and inline in _metadata (POJO,
#: RowData with windows).
CANONICAL = [_T + "new-stateful-udf-migration-itcase-flink2.3-hashmap-savepoint",
             _T + "new-stateful-udf-migration-itcase-flink1.19-rocksdb-savepoint",
             _T + "new-stateful-udf-migration-itcase-flink1.8-rocksdb-savepoint",
             _T + "operatorstate/complexKeyed-flink2.3",
             "flink-table/flink-table-planner/src/test/resources/restore-tests/stream-exec-window-join_1/"
             "window-join-anti-tumble-event-time/savepoint"]


@needs_compiled
@pytest.mark.parametrize("path", CANONICAL, ids=lambda p: p.split("resources/")[-1])
@settings(max_examples=15, derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_corrupted_savepoints_fail_alike(path: str, data: st.DataObject, tmp_path_factory: pytest.TempPathFactory,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A byte of a keyed-state file changed: the same entries, or the same error naming file and offset."""
    copy = tmp_path_factory.mktemp("corrupt") / "savepoint"
    shutil.copytree(SAVEPOINTS / path, copy)
    files = sorted(p for p in copy.iterdir() if p.name != "_metadata") or [copy / "_metadata"]
    target = data.draw(st.sampled_from(files))
    raw = bytearray(target.read_bytes())
    for _ in range(data.draw(st.integers(1, 2))):
        raw[data.draw(st.integers(len(raw) // 4, len(raw) - 1))] = data.draw(st.integers(0, 255))
    target.write_bytes(bytes(raw))
    compiled, reference = _both(copy, monkeypatch)
    _assert_same_reading(_relocated(compiled, copy), _relocated(reference, copy))


def _relocated(found: list[tuple[str, Any]], copy: Path) -> list[tuple[str, Any]]:
    return [(where, str(value).replace(str(copy), "<copy>")) for where, value in found]


def test_corrupted_savepoints_are_vendored() -> None:
    assert set(CANONICAL) <= set(SAVEPOINT_DIRS)


def test_environment_reports_reference_runs() -> None:
    """The variable is read when decoders are built, not at import: one process can run both (the benches do)."""
    before = os.environ.get(_speedups.PURE_PYTHON_VARIABLE)
    try:
        os.environ[_speedups.PURE_PYTHON_VARIABLE] = "1"
        assert not _speedups.enabled()
    finally:
        if before is None:
            del os.environ[_speedups.PURE_PYTHON_VARIABLE]
        else:
            os.environ[_speedups.PURE_PYTHON_VARIABLE] = before


@needs_compiled
@pytest.mark.parametrize(("where", "byte", "message"),
                         [(5, 0x7F, "bad key length"), (1, 0x05, "state id 5 in a key-group block")])
def test_a_broken_block_is_reported_by_the_reference(where: int, byte: int, message: str, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A block whose first entry is broken: the compiled walk refuses it, and the error is the reference's one line
    naming the file, the operator, the key group and the offset."""
    copy = tmp_path / "savepoint"
    shutil.copytree(SAVEPOINTS / CANONICAL[0], copy)
    sp = Savepoint.open(copy)
    stream = next(stream for op in sp.operators for _, stream in sp.keyed_streams(op) if stream.blocks)
    _, start, _ = stream.blocks[0]
    assert stream.source.name is not None and not stream.header().compressed
    path = copy / stream.source.name
    raw = bytearray(path.read_bytes())
    raw[start + where] = byte
    path.write_bytes(bytes(raw))
    compiled, reference = _both(copy, monkeypatch)
    _assert_same_reading(compiled, reference)
    errors = [value[1] for _, value in compiled if value[0] == "error"]
    assert errors and all(message in error and "\n" not in error for error in errors), errors
    # the decoding reader's error (the raw walk of iter_raw_entries alone knows no file) locates it fully
    assert any(str(copy) in error and "key group" in error and "state " in error for error in errors), errors


# ---------------------------------------------------------------------------------------------------------------------
# RowData (the Table runtime's BinaryRowData): generated rows of every logical type
# ---------------------------------------------------------------------------------------------------------------------


def _row_data_snapshot(types: list[Any]) -> TypeSerializerSnapshot:
    from flinkstate.serializers.rowdata import RowDataSnapshot

    return RowDataSnapshot(RowDataSnapshot.CLASS_NAMES[0], 3, types, [b""] * len(types), [])


@needs_compiled
@PROPERTY
@given(case=rows(), mutations=st.lists(st.tuples(st.integers(0), st.integers(0, 255)), max_size=2))
def test_generated_row_data(case: tuple[list[Any], Any], mutations: list[tuple[int, int]]) -> None:
    """Rows of every logical type (test_rowdata's generator: nested rows, arrays, maps, decimals, timestamps,
    RowKinds), written by the reference; then with bytes changed: the compiled decoder gives the reference's rows."""
    types, value = case
    snapshot = _row_data_snapshot(types)
    spec = _speedups.codec_spec(snapshot)
    assert spec[0] == _speedups.K_BROW
    encoded = snapshot.encode(value)
    _check_codec(snapshot, encoded + b"\x00", must_decode=True)
    mutated = bytearray(encoded)
    for where, byte in mutations:
        mutated[where % len(mutated)] = byte
    _check_codec(snapshot, bytes(mutated), must_decode=False)


def test_row_data_scalars_are_native() -> None:
    from flinkstate.serializers.logicaltypes import LogicalType

    roots = ["BOOLEAN", "TINYINT", "SMALLINT", "INTEGER", "BIGINT", "FLOAT", "DOUBLE", "VARCHAR", "VARBINARY"]
    spec = _speedups.codec_spec(_row_data_snapshot([LogicalType(root, True) for root in roots]))
    assert [field[0] for field in spec[1]] == [_speedups.S_BOOL, _speedups.S_I8, _speedups.S_I16, _speedups.S_I32,
                                               _speedups.S_I64, _speedups.S_F32, _speedups.S_F64, _speedups.S_TEXT,
                                               _speedups.S_BYTES]


# ---------------------------------------------------------------------------------------------------------------------
# Encoders: compiled vs reference
# ---------------------------------------------------------------------------------------------------------------------


def _check_encoder(snapshot: TypeSerializerSnapshot, value: Any) -> tuple[str, Any]:
    """Both encoders append to a bytearray that already holds bytes: the same bytes, or the same error (and then
    the compiled one leaves ``out`` as the reference does)."""
    encoder = _speedups.fast_encoder(snapshot)
    assert encoder is not None
    reference_out, compiled_out = bytearray(b"prefix"), bytearray(b"prefix")
    reference = _outcome(lambda: snapshot.encoder()(value, reference_out))
    compiled = _outcome(lambda: encoder(value, compiled_out))
    assert compiled == reference
    assert compiled_out == reference_out
    return compiled


@needs_compiled
@pytest.mark.parametrize("folder", FOLDERS, ids=[f.name for f in FOLDERS])
def test_flink_serializer_corpus_encodes_alike(folder: Path) -> None:
    """Flink's records, decoded, written back by both encoders: Flink's bytes both times."""
    snapshot = read_snapshot(Reader((folder / "serializer-snapshot").read_bytes()), top_level=True)
    data = (folder / "test-data").read_bytes()
    if _outcome(snapshot.encoder)[0] == "error" or snapshot.needs_end:
        assert _outcome(lambda: _speedups.encoder_spec(snapshot)) == _outcome(snapshot.encoder) or snapshot.needs_end
        return
    value, _ = snapshot.decoder()(data, 0)
    _check_encoder(snapshot, value)
    encoder = _speedups.fast_encoder(snapshot)
    assert encoder is not None
    out = bytearray()
    encoder(value, out)
    assert bytes(out) == data
    if folder.name.rsplit("-", 1)[0] in NATIVE and "row" not in folder.name:  # rows are encoded by the reference
        assert _python_nodes(_speedups.encoder_spec(snapshot)) == 0, folder.name


@needs_compiled
@pytest.mark.parametrize("case", sorted(CASES))
@PROPERTY
@given(data=st.data())
def test_generated_values_encode_alike(case: str, data: st.DataObject) -> None:
    snapshot, strategy = CASES[case]
    _check_encoder(snapshot, data.draw(strategy))


#: Values the compiled encoders leave to the reference: other types, out of range, subclasses, NaN payloads.
ODD_VALUES = [("simple-Long", True), ("simple-Long", 1 << 63), ("simple-Long", 2.0), ("simple-Int", 1 << 31),
              ("simple-Int", -(1 << 31) - 1), ("simple-Short", 32768), ("simple-Byte", -129), ("simple-Byte", None),
              ("simple-Boolean", 2), ("simple-Boolean", ""), ("simple-Double", 1), ("simple-Double", float("-nan")),
              ("simple-Float", 1e300), ("simple-Float", float("nan")), ("simple-Char", "ab"),
              ("simple-Char", "\U0001F600"),
              ("simple-String", b"bytes"), ("simple-String", "\ud800 lone surrogate"), ("simple-String", "\U0001F600"),
              ("pojo", {"@class": "some.Subclass"}), ("pojo", None), ("pojo", [1, 2]), ("tuple3", [1, "a", 2]),
              ("tuple3", (1, "a")), ("list-long", (1, 2)), ("list-long", [1, None]), ("map-string-long", {"a": None}),
              ("map-string-long", [("a", 1)]), ("nullable-padded", None)]


@needs_compiled
@pytest.mark.parametrize(("case", "value"), ODD_VALUES, ids=[f"{c}-{v!r}"[:40] for c, v in ODD_VALUES])
def test_odd_values_encode_or_fail_alike(case: str, value: Any) -> None:
    _check_encoder(CASES[case][0], value)


# ---------------------------------------------------------------------------------------------------------------------
# The verifier's canonical form: compiled vs reference
# ---------------------------------------------------------------------------------------------------------------------

_LEAVES = (st.none() | st.booleans() | st.integers() | st.floats() | st.text() | st.binary()
           | st.decimals(allow_nan=False) | st.sampled_from([float("nan"), -0.0, 0.0]))
_NESTED = st.recursive(_LEAVES, lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner)
                       | st.dictionaries(st.text(max_size=3) | st.integers(), inner, max_size=4)
                       | st.frozensets(st.integers(), max_size=3), max_leaves=12)


@needs_compiled
@PROPERTY
@given(value=_NESTED)
def test_canonical_forms_alike(value: Any) -> None:
    from flinkstate.migration.canonical import canonical

    fast = _speedups.fast_canonical(canonical)
    assert fast is not None
    assert _outcome(lambda: fast(value)) == _outcome(lambda: canonical(value))


@needs_compiled
@pytest.mark.parametrize("case", sorted(CASES))
@PROPERTY
@given(data=st.data())
def test_canonical_forms_of_decoded_values_alike(case: str, data: st.DataObject) -> None:
    """Every family's decoded values (rows with a RowKind, Decimal, time models, sets): the same canonical form."""
    from flinkstate.migration.canonical import canonical

    snapshot, strategy = CASES[case]
    value = snapshot.decoder()(snapshot.encode(data.draw(strategy)), 0)[0] if not snapshot.needs_end else \
        data.draw(strategy)
    fast = _speedups.fast_canonical(canonical)
    assert fast is not None
    assert same(fast(("key", None, value)), canonical(("key", None, value)))


# -- native RocksDB snapshots: a key group's (key, value) pairs, taken from RocksDB's iterator in one call ------------

@functools.cache
def native_columns() -> list[tuple[str, Any, Any, list[tuple[bytes, bytes]]]]:
    """``(where, stream, state, pairs)`` of every keyed state with entries in the corpus's native RocksDB savepoints
    whose header this reader knows, the pairs as the reader's RocksDB scan gives them (the retained checkpoints hold
    the same kinds of state: opening their RocksDB instances too would double the time for nothing new)."""
    from flinkstate.format.rocksdb_native import NativeRocksDBStream
    from tests.test_rocksdb_native import NATIVE_DIRS

    found = []
    for path in (p for p in NATIVE_DIRS if p.endswith("-savepoint-native")):
        sp = Savepoint.open(SAVEPOINTS / path)
        for op in sp.operators:
            for index, stream in sp.keyed_streams(op):
                assert isinstance(stream, NativeRocksDBStream)
                if stream.header(tolerant=True).error is not None:  # a serializer of Flink's tests' own
                    continue
                db = stream._open_db()
                for state in stream.header().states:
                    if state.name in stream._families and (pairs := list(stream._scan(db, state.name, b""))):
                        found.append((f"{path.split('resources/')[-1]}/{op.operator_id}/{index}/{state.name}",
                                      stream, state, pairs))
    return found



def _decoders(stream: Any, state: Any) -> tuple[Any, Any]:
    """The state's compiled key-group scan (None when its values have no compiled decoder) and its reference."""
    from functools import partial

    from flinkstate.format.keyed_entries import make_entry_decoder, reference_entry_decoder
    from flinkstate.format.rocksdb_native import take_key_group

    layout = stream._key_layout(stream.header(), state)
    compiled = _speedups.native_group_scanner(make_entry_decoder(state, layout))
    return compiled, partial(take_key_group, reference_entry_decoder(state, layout))


def _key_groups(take_group: Any, pairs: list[tuple[bytes, bytes]], prefix_bytes: int) -> list[Any]:
    """Every key group as ``take_group`` reads it from ``pairs``, as ``iter_blocks`` calls it: its entries and the
    pair it stopped at."""
    groups: list[Any] = []
    remaining = iter(pairs)
    pending = next(remaining, None)
    while pending is not None:
        entries: list[Any] = []
        pending = take_group(remaining, pending, prefix_bytes, entries)
        groups.append((entries, pending))
    return groups


def assert_native_scan_compiled(stream: Any, state: Any, pairs: list[tuple[bytes, bytes]], where: str) -> bool:
    """The state's compiled key-group scan reads ``pairs`` (a native RocksDB stream's) as its reference does, the
    same key groups, entries (types too) and the same pair stopped at, decoding every pair itself: its reference
    decoder refuses to be asked (a compiled decoder that fell back on every entry would still be right, but slow).
    False when the state's values have no compiled decoder."""
    from functools import partial

    from flinkstate.format.keyed_entries import reference_entry_decoder
    from flinkstate.format.rocksdb_native import take_key_group

    def refuse(*args: Any) -> Any:
        raise AssertionError(f"{where}: the compiled scan needed the reference decoder")

    layout = stream._key_layout(stream.header(), state)
    compiled = _speedups.fast_entry_decoder(state, layout, refuse)
    if compiled is None:
        return False
    want = _key_groups(partial(take_key_group, reference_entry_decoder(state, layout)), pairs, stream.prefix_bytes)
    assert sum(len(entries) for entries, _ in want) == len(pairs), where
    got = _key_groups(_speedups.native_group_scanner(compiled), pairs, stream.prefix_bytes)
    assert same(got, want), f"{where}: {str(got)[:300]} != {str(want)[:300]}"
    return True


@needs_compiled
def test_native_rocksdb_key_groups_alike() -> None:
    """Every keyed state of Flink's native RocksDB savepoints in the corpus (Long values and timers; the sample job's
    POJO, list, map and timers: tests/test_rocksdb_native.py): the compiled scan (``scan_pairs``: one call per key
    group, RocksDB's pairs decoded in place) reads what its reference (``rocksdb_native.take_key_group``) reads."""
    compiled = [len(pairs) for where, stream, state, pairs in native_columns()
                if assert_native_scan_compiled(stream, state, pairs, where)]
    assert (len(compiled), sum(compiled)) == (48, 64)


@functools.cache
def compiled_native_columns() -> list[tuple[str, Any, Any, list[tuple[bytes, bytes]]]]:
    return [column for column in native_columns() if _decoders(column[1], column[2])[0] is not None]


@needs_compiled
@settings(max_examples=200, derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_changed_native_rocksdb_pairs_read_alike(data: st.DataObject) -> None:
    """A byte of a key or value changed, one cut off or added, a key cut below its key-group prefix: the compiled
    scan reads the same entries, or fails with the reference's own error (it reruns the reference on what it
    cannot decode)."""
    where, stream, state, pairs = data.draw(st.sampled_from(compiled_native_columns()))
    changed = list(pairs)
    at = data.draw(st.integers(0, len(changed) - 1))
    part = data.draw(st.sampled_from([0, 1]))  # the key or the value
    raw = bytearray(changed[at][part])
    how = data.draw(st.sampled_from(["byte", "cut", "add", "short key"]))
    if how == "byte" and raw:
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    elif how == "cut" and raw:
        del raw[data.draw(st.integers(0, len(raw) - 1)):]
    elif how == "add":
        raw += bytes([data.draw(st.integers(0, 255))])
    elif how == "short key":
        part, raw = 0, raw[:stream.prefix_bytes - 1] if part == 0 else bytearray()
    pair = (bytes(raw), changed[at][1]) if part == 0 else (changed[at][0], bytes(raw))
    changed[at] = pair
    compiled, reference = _decoders(stream, state)
    got = _outcome(lambda: _key_groups(compiled, changed, stream.prefix_bytes))
    want = _outcome(lambda: _key_groups(reference, changed, stream.prefix_bytes))
    assert got[0] == want[0] and same(got[1], want[1]), f"{where} ({how}): {str(got)[:300]} != {str(want)[:300]}"
