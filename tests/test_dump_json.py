"""`flinkstate dump`'s compiled JSON Lines writer (flinkstate/_speedups/_cjson.c) against its reference, the
per-entry loop of flinkstate/cli/dump.py (``json.dumps(record, allow_nan=False)`` of ``to_json`` forms): the bytes
must be the same for every value the codecs decode, and a block the writer fails on must come out of the reference
exactly as before (the same lines, then the same error).

Values: every generated family of tests/test_codec_roundtrip.py, decoded from its encoded bytes; every keyed state of
Flink's savepoint corpus; edge values (escapes, surrogates, long ints, floats, bytes, depth, non-str map keys); and
the savepoints Flink writes in this run (the sample job: POJO, List, Map of Row, timers).
"""

from __future__ import annotations

import json
import math
import random
import struct
from decimal import Decimal
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flinkstate import _speedups
from flinkstate.cli.dump import _json_line, _write_entries
from flinkstate.jsonify import to_json
from flinkstate.savepoint import Savepoint
from flinkstate.serializers.kryo import OpaqueValue
from flinkstate.serializers.row import KindedRow
from tests.test_codec_roundtrip import CASES

SAVEPOINTS = Path(__file__).parent / "corpus" / "savepoints"
SAVEPOINT_DIRS = (SAVEPOINTS / "dirs.txt").read_text(encoding="utf-8").split()
DUMPS = partial(json.dumps, allow_nan=False)
PROPERTY = settings(max_examples=15, derandomize=True, database=None, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
needs_compiled = pytest.mark.skipif(_speedups.pure_python_requested(),
                                    reason="FLINKSTATE_PURE_PYTHON is set: the reference alone is under test")


def compiled(is_map: bool) -> Any:
    lines = _speedups.fast_json_lines(is_map, lambda value: DUMPS(to_json(value)))
    assert lines is not None, f"the compiled JSON writer is off: {_speedups.JSON_BUILD_ERROR}"
    return lines


def reference(entries: list[tuple[Any, ...]], is_map: bool) -> str:
    return "".join(_json_line(entry, is_map, DUMPS) for entry in entries)


def assert_same_lines(entries: list[tuple[Any, ...]], is_map: bool) -> None:
    want = reference(entries, is_map)
    got = compiled(is_map)(entries)
    assert got == want, next(f"line {i}: {g!r} != {w!r}" for i, (g, w) in
                             enumerate(zip(got.splitlines(), want.splitlines(), strict=False)) if g != w)


def test_writer_is_built() -> None:
    """CI builds the writer beside the decoders (setup.py); it must import, unless the reference was asked for."""
    if _speedups.pure_python_requested():
        assert _speedups.fast_json_lines(False, str) is None
        return
    assert _speedups.JSON_BUILD_ERROR is None, f"the JSON writer did not build: {_speedups.JSON_BUILD_ERROR}"


@needs_compiled
@pytest.mark.parametrize("case", sorted(CASES))
@PROPERTY
@given(data=st.data())
def test_generated_values_write_the_references_bytes(case: str, data: st.DataObject) -> None:
    """Each family's values as its decoder returns them, as key, namespace, user key and value."""
    snapshot, values = CASES[case]
    decode = snapshot.decoder()
    decoded = [decode(snapshot.encode(v), 0)[0] for v in data.draw(st.lists(values, min_size=1, max_size=4))]
    assert_same_lines([(v, None, v) for v in decoded], is_map=False)
    assert_same_lines([(decoded[0], v, v, decoded[-1]) for v in decoded], is_map=True)


@pytest.mark.corpus
@needs_compiled
def test_flink_corpus_states_write_the_references_bytes() -> None:
    """Every keyed state of Flink's savepoint corpus that the reader decodes, block by block."""
    blocks = 0
    for path in SAVEPOINT_DIRS:
        try:
            savepoint = Savepoint.open(SAVEPOINTS / path)
            states = [(op, state) for op in savepoint.operators for state in savepoint.keyed_states(op)]
        except Exception:  # savepoints the reader refuses by design have nothing to write
            continue
        for op, state in states:
            try:
                groups = list(savepoint.iter_key_groups(op, state.name))
            except Exception:
                continue
            for _, entries in groups:
                assert_same_lines(entries, is_map=state.kind == "MAP")
                blocks += 1
    assert blocks > 100  # the corpus is there and read


EDGE_STRINGS = ["", "plain", 'quote " and \\ backslash', "\b\f\n\r\t\x00\x1f\x7f", "é ü ß", "€ 中文", "\U0001f600",
                "\ud800 lone \udfff", "\ud83d\ude00", "~ }{", "a" * 5000, "key-1#1"]
EDGE_INTS = [0, -1, 1, 2**31, -(2**31) - 1, 2**63 - 1, -(2**63), 2**63, -(2**63) - 1, 2**64, 10**40, -(10**40)]
EDGE_FLOATS = [0.0, -0.0, 0.125, -1.5, 1e-3, 9.99e-4, 1e-4, 1e-5, 5e-324, 1e15, 1e16, 1e17, 2.0**50, 2.0**53,
               1.7976931348623157e308, 0.1, 1 / 3, 123.456, math.nan, -math.nan, math.inf, -math.inf]


class Subclassed(int):
    """An int subclass: json writes int.__repr__, to_json keeps it: the fallback writes it."""


def edge_values() -> list[Any]:
    nested: Any = "bottom"
    for _ in range(150):  # deeper than the writer's limit: the rest goes to the fallback
        nested = [nested]
    return [None, True, False, *EDGE_STRINGS, *EDGE_INTS, *EDGE_FLOATS,
            b"", b"\x00", b"\xff\xfe", b"abc", b"\xfb\xff\xbf", bytes(range(256)), bytearray(b"xy"),
            [], (), {}, [1, "a", None], (1.5, (2, [3])), {"a": 1, "b": [None, {"c": math.nan}]},
            {1: "int key", 2.5: "float key"}, {(1, 2): "tuple key"}, {"s": 1, 7: 2},
            {3, 1, 2}, frozenset({"b", "a"}), KindedRow((1, "x"), 2), KindedRow((1, "x"), 0), Decimal("-1.50"),
            OpaqueValue("com.example.T", b"\x01\x02"), Subclassed(7), True, nested]


@needs_compiled
def test_edge_values_write_the_references_bytes() -> None:
    values = edge_values()
    assert_same_lines([(v, None, v) for v in values], is_map=False)
    assert_same_lines([(v, v, "k", v) for v in values], is_map=True)


@needs_compiled
def test_floats_write_reprs_digits() -> None:
    """The writer's own short-float path against float.__repr__ on random doubles: uniform, short decimals, and
    every bit pattern."""
    rng = random.Random(28)
    floats = [rng.uniform(-1e6, 1e6) for _ in range(10_000)]
    floats += [rng.randint(-10**15, 10**15) / 10 ** rng.randint(0, 17) for _ in range(20_000)]
    floats += [round(rng.uniform(-1e3, 1e3), rng.randint(0, 6)) for _ in range(10_000)]
    floats += [struct.unpack("<d", rng.randbytes(8))[0] for _ in range(10_000)]
    floats += [f for f in EDGE_FLOATS if math.isfinite(f)]
    assert_same_lines([(f, None, -f) for f in floats], is_map=False)


def test_a_corrupted_writer_output_is_caught() -> None:
    """The comparison can fail: one changed byte in the compiled output is a difference."""
    entries = [("key-1", None, {"count": 1, "total": 0.125})]
    text = compiled(False)(entries) if not _speedups.pure_python_requested() else reference(entries, False)
    assert text == reference(entries, False)
    with pytest.raises(AssertionError):
        assert text.replace("0.125", "0.126") == reference(entries, False)


class Unencodable:
    """A value to_json has no encoding for (its TypeError is what dump has always raised)."""


def test_a_failing_block_is_written_by_the_reference() -> None:
    """A block the writer fails on comes out of the reference: the same lines before the bad entry, then the same
    error; the blocks before it are written whole."""
    good = [("a", None, 1), ("b", None, [1.5, "x"])]
    bad = [("c", None, "ok"), ("d", None, Unencodable()), ("e", None, 3)]
    written: list[str] = []
    with pytest.raises(TypeError, match="no JSON encoding for Unencodable"):
        _write_entries([(0, good), (1, bad)], False, written.append, DUMPS)
    assert "".join(written) == reference(good, False) + _json_line(bad[0], False, DUMPS)
    written.clear()
    with pytest.raises(ValueError):  # not a (key, namespace, value) triple: the reference's unpacking error
        _write_entries([(0, [("a", None)])], False, written.append, DUMPS)
    assert written == []


def test_dump_counts_and_writes_every_group() -> None:
    """_write_entries returns the number of entries and writes every group in order, compiled or not."""
    groups = [(0, [("a", None, 1)]), (1, []), (2, [("b", None, 2), ("c", None, 3)])]
    written: list[str] = []
    assert _write_entries(groups, False, written.append, DUMPS) == 3
    assert "".join(written) == reference([e for _, entries in groups for e in entries], False)


@needs_compiled
def test_flink_written_savepoints_dump_the_references_bytes(flink_savepoints: dict[str, Path]) -> None:
    """The sample job's savepoints that Flink wrote in this run: every keyed state, compiled against reference."""
    for name, path in flink_savepoints.items():
        savepoint = Savepoint.open(path)
        written = set()
        for op in savepoint.operators:
            if not savepoint.keyed_streams(op):
                continue
            for state in savepoint.keyed_states(op):
                entries = [e for _, group in savepoint.iter_key_groups(op, state.name) for e in group]
                assert_same_lines(entries, is_map=state.kind == "MAP")
                if entries:
                    written.add(state.name)
        # the event-time timers are empty by design (the job sets processing-time timers only)
        assert written >= {"stats", "count", "recent", "buckets", "_timer_state/processing_user-timers"}, name
