"""The verifier's compiled checks against their pure-Python twins (flinkstate/_speedups, used by
flinkstate/migration/verify_entries.py): the block-level exactness check (decode + re-encode + byte compare), the
pairwise comparison of written and expected entries without canonical forms, and kept states compared as runs of bytes.

Each compiled check may only ever say "equal" (or "exact") when its reference does; on Flink's savepoint corpus
and on generated values they agree, and a corrupted migration output (a migrated value, a kept value) is refused by
the verifier both ways with the same one-line error, on a savepoint real Flink wrote in this test run.
"""

from __future__ import annotations

import copy
import re
import shutil
import struct
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flinkstate import _speedups
from flinkstate.format.keyed_stream import iter_raw_entries, raw_key
from flinkstate.migration.canonical import canonical
from flinkstate.migration.plan import OperatorTarget, StateTarget, plan_migration
from flinkstate.migration.rewrite import StateCodec
from flinkstate.migration.runner import migrate_savepoint
from flinkstate.migration.spec import parse_migration
from flinkstate.migration.verify import VerificationError, verify_migration
from flinkstate.savepoint import Savepoint
from flinkstate.serializers.pojo import PojoSnapshot
from flinkstate.serializers.primitives import simple
from flinkstate.storage.uri import open_output
from tests.support.corpus_states import SAVEPOINT_DIRS, SAVEPOINTS, canonical_streams, state_codecs

needs_compiled = pytest.mark.skipif(not _speedups.enabled() and _speedups.pure_python_requested(),
                                    reason="FLINKSTATE_PURE_PYTHON is set: the reference alone is under test")
PROPERTY = settings(max_examples=80, derandomize=True, database=None, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _compiled_same() -> Any:
    same = _speedups.fast_same_entries(canonical)
    assert same is not None, _speedups.BUILD_ERROR
    return same


# -- written vs expected entries: no canonical forms unless needed -----------------------------------------------------

_LEAVES = (st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5) | st.binary(max_size=5)
           | st.decimals(allow_nan=False) | st.sampled_from([float("nan"), -0.0, 0.0, 1, 1.0, True]))
_NESTED = st.recursive(_LEAVES, lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner)
                       | st.dictionaries(st.text(max_size=3) | st.integers(), inner, max_size=4)
                       | st.frozensets(st.integers(), max_size=3), max_leaves=12)


@needs_compiled
@PROPERTY
@given(want=st.lists(_NESTED, max_size=5), got=st.lists(_NESTED, max_size=5))
def test_pairwise_comparison_never_calls_unequal_entries_equal(want: list[Any], got: list[Any]) -> None:
    compiled = _compiled_same()(want, got)
    reference = _speedups.same_entries_reference(want, got, canonical)
    if compiled == -1:
        assert reference == -1
    if reference != -1:  # it stops at the first pair the reference finds different, or earlier (then rechecked)
        assert 0 <= compiled <= reference


@needs_compiled
@PROPERTY
@given(want=st.lists(_NESTED, max_size=5))
def test_pairwise_comparison_calls_copies_equal(want: list[Any]) -> None:
    assert _compiled_same()(want, copy.deepcopy(want)) == -1
    assert _speedups.same_entries_reference(want, copy.deepcopy(want), canonical) == -1


NAN_OTHER_PAYLOAD = struct.unpack(">d", bytes.fromhex("7ff8000000000001"))[0]


@needs_compiled
@pytest.mark.parametrize(("a", "b"), [
    (1, True), (1, 1.0), (0, False), (-0.0, 0.0), (float("nan"), 0.0), ("1", 1), (b"a", "a"), (None, 0),
    (Decimal("1.0"), Decimal("1.00")), ([1], [True]), ({"a": 1}, {"a": True}), ({"a": 1}, {"b": 1}),
    (("k", None, {"x": -0.0}), ("k", None, {"x": 0.0})), ([1, 2], [1, 2, 3]), (frozenset({1}), frozenset({2})),
])
def test_values_java_tells_apart_are_different_both_ways(a: Any, b: Any) -> None:
    assert _compiled_same()([a], [b]) == 0
    assert _speedups.same_entries_reference([a], [b], canonical) == 0


@needs_compiled
@pytest.mark.parametrize(("a", "b"), [
    (float("nan"), NAN_OTHER_PAYLOAD), ({"a": 1, "b": 2}, {"b": 2, "a": 1}), ([1, "x"], (1, "x")),
])
def test_values_only_canonical_forms_call_equal_are_left_to_them(a: Any, b: Any) -> None:
    # Not "surely equal" to the compiled comparison: the verifier then compares canonical forms, which decide.
    assert _compiled_same()([a], [b]) == 0
    assert _speedups.same_entries_reference([a], [b], canonical) == -1


# -- the source's exactness check and kept states, on Flink's savepoint corpus -----------------------------------------


def _reference_exact(codec: StateCodec, stream: Any, data: bytes, key_group: int, start: int, state_id: int,
                     entries: list[tuple[Any, ...]]) -> int:
    """The pure-Python check of verify_entries._exact_source_entries, over given decoded entries: the index of the first
    that does not re-encode to its bytes, else -1."""
    raws = [(ks, ke, vs, ve) for sid, ks, ke, vs, ve in stream.raw_entries(data, key_group, start) if sid == state_id]
    for index, (ks, ke, vs, ve) in enumerate(raws):
        if index >= len(entries) or codec.encode_entry(entries[index], key_group) != (raw_key(data, ks, ke),
                                                                                     data[vs:ve]):
            return index
    return -1 if len(raws) == len(entries) else len(raws)


@needs_compiled
@pytest.mark.parametrize("path", SAVEPOINT_DIRS, ids=lambda p: p.split("resources/")[-1])
def test_block_exactness_check_agrees_with_the_reference(path: str) -> None:
    """Every state's every block: the compiled check says exact where the reference does; an entry swapped for
    another one of the block is found at the same index both ways."""
    _exactness_agrees(path)


def _exactness_agrees(path: str) -> int:
    checked = 0
    for stream, state_id, state, codec in state_codecs(SAVEPOINTS / path):
        header = stream.header()
        try:
            checker = _speedups.reencode_checker(header.key_serializer, state, stream.prefix_bytes)
        except Exception:
            continue  # a state this tool cannot encode: the verifier refuses it with the reference's error
        assert checker is not None
        for key_group, start, end in stream.blocks:
            data = stream.read_block(key_group, start, end)
            decoded = _speedups.scan_compiled(codec.decode, data, key_group, state_id, len(header.states),
                                              stream.prefix_bytes)
            if decoded is None:
                continue
            try:
                fast = checker(data, key_group, state_id, len(header.states), decoded)
            except Exception:
                continue  # the verifier reruns the reference for this block
            assert fast == _reference_exact(codec, stream, data, key_group, start, state_id, decoded)
            checked += 1
            pairs = _speedups.state_pairs(stream, data, key_group, start, state_id)
            other = next((j for j in range(1, len(pairs)) if pairs[j] != pairs[0]), None)
            if other is not None:
                swapped = [decoded[other], *decoded[1:]]
                assert checker(data, key_group, state_id, len(header.states), swapped) == 0
                assert _reference_exact(codec, stream, data, key_group, start, state_id, swapped) == 0
            if decoded:  # one entry fewer than the block holds
                shorter = decoded[:-1]
                assert checker(data, key_group, state_id, len(header.states), shorter) == len(shorter)
    return checked


@needs_compiled
def test_block_exactness_check_runs() -> None:
    # not hollow: the compiled check really ran on Flink-written blocks
    assert _exactness_agrees("flink-tests/src/test/resources/new-stateful-udf-migration-itcase-flink2.3-hashmap-"
                             "savepoint") > 0


@needs_compiled
@pytest.mark.parametrize("path", SAVEPOINT_DIRS, ids=lambda p: p.split("resources/")[-1])
def test_state_spans_hold_exactly_the_states_entries(path: str) -> None:
    for stream in canonical_streams(SAVEPOINTS / path):
        count = len(stream.header().states)
        for key_group, start, end in stream.blocks:
            data = stream.read_block(key_group, start, end)
            try:
                ids = [sid for sid, *_ in iter_raw_entries(data, count)]
            except Exception:
                continue
            for state_id in range(count):
                pairs = _speedups.state_pairs(stream, data, key_group, start, state_id)
                span = _speedups.state_span(stream, data, key_group, state_id)
                runs = sum(1 for i, sid in enumerate(ids) if sid == state_id and (i == 0 or ids[i - 1] != state_id))
                if runs > 1:
                    assert span is None
                    continue
                assert span is not None
                first, last, number = span
                assert number == len(pairs)
                found, pos = [], first
                while pos < last:  # the span parsed as entries: exactly the state's (key, value) pairs
                    key_len = int.from_bytes(data[pos:pos + 4], "big")
                    key = data[pos + 4:pos + 4 + key_len]
                    value_len = int.from_bytes(data[pos + 4 + key_len:pos + 8 + key_len], "big")
                    value = data[pos + 8 + key_len:pos + 8 + key_len + value_len]
                    found.append((bytes((key[0] & 0x7F,)) + key[1:], value))
                    pos += 8 + key_len + value_len
                assert pos == last and found == pairs


# -- the verifier, both ways, on a migration of a savepoint Flink wrote ------------------------------------------------


def _v2_targets() -> list[OperatorTarget]:
    stats = PojoSnapshot.create("sample.Stats", [("key", simple("String")), ("total", simple("Long")),
                                                 ("count", simple("Long")), ("label", simple("String"))])
    return [OperatorTarget("stats", states=[StateTarget("stats", value=stats, migration=parse_migration(
        {"fields": {"label": {"default": "n/a"}}}))])]


@pytest.fixture(scope="module")
def migrated(flink_savepoints: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    source = flink_savepoints["heap-p1"]  # uncompressed: bytes can be flipped in place
    out = tmp_path_factory.mktemp("verify-compiled") / "v2"
    migrate_savepoint(str(source), _v2_targets(), open_output(str(out)))
    return source, out


def _verify_both_ways(source: Path, output: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The verifier's outcome compiled and pure: its report's lines or its error, which must be the same."""
    outcomes = []
    for pure in ("", "1"):
        with monkeypatch.context() as patch:
            patch.setenv(_speedups.PURE_PYTHON_VARIABLE, pure)
            src = Savepoint.open(source)
            try:
                outcomes.append(verify_migration(src, Savepoint.open(output), plan_migration(src, _v2_targets())
                                                 ).lines())
            except VerificationError as exc:
                outcomes.append([f"error: {exc}"])
    assert outcomes[0] == outcomes[1]
    return outcomes[0]


def _flip_value_byte(savepoint: Path, state_name: str, nth: int) -> None:
    """Changes the last byte of the ``nth`` stored value of a state in its uncompressed keyed stream."""
    sp = Savepoint.open(savepoint)
    op = sp.operator("stats")
    _, stream = sp.keyed_streams(op)[0]
    state_id = stream.header().state_index(state_name)
    seen = 0
    for key_group, start, end in stream.blocks:
        data = stream.read_block(key_group, start, end)
        for sid, _ks, _ke, vs, ve in iter_raw_entries(data):
            if sid == state_id and ve > vs:
                if seen == nth:
                    file = savepoint / stream.source.name  # type: ignore[operator]
                    raw = bytearray(file.read_bytes())
                    raw[start + ve - 1] ^= 0x01
                    file.write_bytes(bytes(raw))
                    return
                seen += 1
    raise AssertionError(f"no entry {nth} of {state_name}")


@pytest.mark.flink
def test_both_ways_accept_the_migration(migrated: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    lines = _verify_both_ways(*migrated, monkeypatch)
    assert "stats/stats: 20 entries equal to the declared transform of the source's" in lines
    assert "stats/count: 20 entries equal byte for byte" in lines


@pytest.mark.flink
@pytest.mark.parametrize(("state_name", "nth", "message"), [
    ("stats", 0, "state stats, key group .*: expected 1 entries not found .*1 written entries not expected"),
    ("stats", 7, "state stats, key group .*: expected 1 entries not found .*1 written entries not expected"),
    ("count", 3, "state count, key group .*: 1 source entries missing or changed, 1 entries not in the source"),
    ("recent", 0, "state recent, key group .*: 1 source entries missing or changed"),
])
def test_both_ways_refuse_a_corrupted_output(migrated: tuple[Path, Path], tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch, state_name: str, nth: int,
                                             message: str) -> None:
    source, output = migrated
    corrupted = tmp_path / "corrupted"
    shutil.copytree(output, corrupted)
    _flip_value_byte(corrupted, state_name, nth)
    lines = _verify_both_ways(source, corrupted, monkeypatch)
    assert len(lines) == 1 and lines[0].startswith("error: ") and "\n" not in lines[0]
    assert re.search(message, lines[0]), lines[0]
