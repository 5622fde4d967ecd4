"""The migration's compiled per-entry work against its pure-Python twins (flinkstate/_speedups, used by
flinkstate/migration/rewrite.py and verify_entries.py): a POJO's fields mapped (``RecordMap`` against
transforms.py's ``pojo``), a block's run of entries decoded, migrated and written in one step (``migrate_block``
against the decoded entries, ``migrate_entry``, the state's encoder and ``encode_block``), on generated POJO values
and on every block of Flink's savepoint corpus, and the verifier's expected entries (``expected_run`` against
``migrate_entry``).

Each compiled piece returns exactly what its reference returns, raises what it raises, or (the runs) hands the run
back (None) wherever the reference would not write one stored entry per source entry: a transform that raises, a
DROP, an emptied list. Generated values, with field renames, conversions that fail, defaults and subclass values.
``tests/test_copy_runs.py`` compares whole migrations of savepoints Flink writes in the test run, and refuses a
wrong value written by the compiled run.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flinkstate import _speedups
from flinkstate._speedups import runs
from flinkstate.format.key_group_block import encode_block
from flinkstate.format.keyed_entries import KeyLayout, make_entry_decoder
from flinkstate.format.keyed_header import (
    KEYED_STATE_TYPE,
    NAMESPACE_SERIALIZER,
    VALUE_SERIALIZER,
    StateMetaInfo,
)
from flinkstate.migration.entry_codec import migrate_entry
from flinkstate.migration.plan import DROP, StateRewrite
from flinkstate.migration.spec import parse_migration
from flinkstate.migration.transforms import build_transform
from flinkstate.savepoint import Savepoint
from flinkstate.serializers.namespaces import VoidNamespaceSnapshot
from flinkstate.serializers.pojo import PojoSnapshot
from flinkstate.serializers.primitives import simple
from tests.support.corpus_states import SAVEPOINT_DIRS, SAVEPOINTS, state_codecs

needs_compiled = pytest.mark.skipif(not _speedups.enabled() and _speedups.pure_python_requested(),
                                    reason="FLINKSTATE_PURE_PYTHON is set: the reference alone is under test")
PROPERTY = settings(max_examples=150, derandomize=True, database=None, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

OLD = PojoSnapshot.create("t.Stats", [("name", simple("String")), ("count", simple("String")),
                                      ("total", simple("Int"))])
NEW = PojoSnapshot.create("t.Stats", [("title", simple("String")), ("count", simple("Long")),
                                      ("total", simple("Long")), ("label", simple("String"))])
# name renamed to title, count parsed as Java does (fails on what is not a number), total widened, label added
RULES = parse_migration({"fields": {"title": {"from": "name"}, "count": {"convert": "to-number"},
                                    "total": {"convert": "widen"}, "label": {"default": "n/a"}}}).fields

_NUMBERS = st.sampled_from(["0", "-7", "9223372036854775807", "12", " 3", "x", "", "1e3", "+4"])
_POJOS = st.fixed_dictionaries(
    {"name": st.none() | st.text(max_size=4), "count": st.none() | _NUMBERS,
     "total": st.none() | st.integers(-2**31, 2**31 - 1)},
    optional={"@class": st.just("t.SubStats"), "extra": st.integers()})
_STORED_POJOS = st.fixed_dictionaries(  # what a POJO serializer without registered subclasses writes
    {"name": st.none() | st.text(max_size=4), "count": st.none() | _NUMBERS,
     "total": st.none() | st.integers(-2**31, 2**31 - 1)})
_VALUES = st.none() | _POJOS | st.tuples(st.integers()) | st.integers()
_KEYS = st.binary(min_size=1, max_size=6).map(lambda b: bytes((b[0] & 0x7F,)) + b[1:])


@functools.cache
def _transforms() -> tuple[Callable[[Any], Any], Callable[[Any], Any]]:
    """The compiled POJO transform and its pure-Python reference, built from the same rules."""
    compiled = build_transform(OLD, NEW, rules=RULES)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(_speedups.PURE_PYTHON_VARIABLE, "1")
        reference = build_transform(OLD, NEW, rules=RULES)
    assert compiled is not None and reference is not None
    assert type(compiled).__name__ == "RecordMap", _speedups.BUILD_ERROR  # not hollow: the compiled one
    assert type(reference).__name__ == "function"
    return compiled, reference


def _outcome(function: Callable[[], Any]) -> tuple[Any, ...]:
    try:
        return "value", function()
    except Exception as exc:
        return "error", type(exc), str(exc)


@needs_compiled
@PROPERTY
@given(values=st.lists(_VALUES, max_size=6))
def test_record_map_returns_and_raises_what_the_reference_does(values: list[Any]) -> None:
    compiled, reference = _transforms()
    for value in values:
        got, want = _outcome(functools.partial(compiled, value)), _outcome(functools.partial(reference, value))
        assert got == want
        if got[0] == "value" and got[1] is not None:
            assert list(got[1]) == list(want[1])  # the new field order too (it is the written order)


def _reference_run(rewrite: StateRewrite, entries: list[tuple[Any, ...]], keys: list[bytes],
                   encode_value: Callable[[Any], bytes | None]) -> bytes | None:
    """What the entry-by-entry loop writes for a run of entries with their stored keys (migrate_entry, the state
    codec's value bytes, encode_block), or None where it would not write one entry per source entry (the compiled
    step hands those back) or fails (the loop then dead-letters or reports)."""
    pairs = []
    for key, entry in zip(keys, entries, strict=True):
        try:
            new = migrate_entry(rewrite, entry)
            if new is None:
                return None
            value = encode_value(new[3] if rewrite.kind == "MAP" else new[2])
        except Exception:
            return None
        if value is None:  # an emptied list
            return None
        pairs.append((key, value))
    return encode_block(((0, pairs),))[2:-2] if pairs else None


def _drop_second(transform: Callable[[Any], Any] | None) -> Callable[[Any], Any]:
    """A Python transform around ``transform`` that DROPs the second value it is given."""
    seen = []

    def dropping(value: Any) -> Any:
        seen.append(value)
        return DROP if len(seen) == 2 else value if transform is None else transform(value)

    return dropping


def _failing(value: Any) -> Any:
    raise ValueError("no")


def _compiled_decoder(meta: StateMetaInfo, key: Any, prefix_bytes: int) -> Any:
    namespace = meta.namespace_serializer
    assert namespace is not None
    decoder = make_entry_decoder(meta, KeyLayout(prefix_bytes, key.decoder(), namespace.decoder(),
                                                 key.fixed_length < 0 and namespace.fixed_length < 0,
                                                 key_snapshot=key))
    return decoder if _speedups.is_compiled(decoder) else None


def _one_step(decoder: Any, data: bytes, key_group: int, state_id: int, state_count: int, prefix_bytes: int,
              kind: str, transform: Any, value_enc: Any) -> bytes | None:
    run = runs.migrate_block(decoder, data, key_group, state_id, state_count, prefix_bytes, kind, transform,
                                  DROP, value_enc)
    return None if run is None else bytes(run)


@needs_compiled
@PROPERTY
@given(rows=st.lists(st.tuples(st.text(max_size=4), st.none() | _STORED_POJOS), min_size=1, max_size=8),
       key_group=st.integers(0, 127))
def test_migrate_block_writes_the_reference_bytes_or_hands_the_run_back(rows: list[tuple[str, Any]],
                                                                        key_group: int) -> None:
    """A POJO state's block (String keys, written by the reference encoders) migrated in one compiled step: the
    bytes of the entry-by-entry loop, or None where the loop would not write every entry (a failed conversion, a
    DROP, a subclass value)."""
    compiled, _ = _transforms()
    key, namespace = simple("String"), VoidNamespaceSnapshot()
    meta = StateMetaInfo("s", "KEY_VALUE", [(KEYED_STATE_TYPE, "VALUE")],
                         [(NAMESPACE_SERIALIZER, namespace), (VALUE_SERIALIZER, OLD)])
    keys, values = [], []
    for name, value in rows:
        stored = bytearray((key_group,))
        key.encoder()(name, stored)
        namespace.encoder()(None, stored)
        keys.append(bytes(stored))
        encoded = bytearray()
        OLD.encoder()(value, encoded)
        values.append(bytes(encoded))
    block = encode_block(((0, list(zip(keys, values, strict=True))),))
    decoder = _compiled_decoder(meta, key, 1)
    assert decoder is not None, _speedups.BUILD_ERROR
    entries = _speedups.scan_compiled(decoder, block, key_group, 0, 1, 1)
    assert entries is not None and [e[2] for e in entries] == [v for _, v in rows]
    encoder = _speedups.fast_encoder(NEW)
    assert encoder is not None

    def encode_value(value: Any) -> bytes:
        out = bytearray()
        NEW.encoder()(value, out)
        return bytes(out)

    for make in (lambda: compiled, lambda: _drop_second(compiled), lambda: _failing):  # fresh for each side
        rewrite = StateRewrite("s", "s", 0, "VALUE", make(), None, False, False)
        want = _reference_run(rewrite, entries, keys, encode_value)
        assert _one_step(decoder, block, key_group, 0, 1, 1, "VALUE", make(), encoder) == want


@needs_compiled
@pytest.mark.parametrize("path", SAVEPOINT_DIRS, ids=lambda p: p.split("resources/")[-1])
def test_migrate_block_on_flinks_corpus_is_the_entry_loop(path: str) -> None:
    """Every state's every block of Flink's savepoint corpus (VALUE, LIST and MAP states of every serializer the
    fast path compiles), in one step with no transform and with a Python one: the entry loop's bytes (with the
    keys as Flink stored them, the run flag on the last); handed back where a transform DROPs or raises."""
    _corpus_blocks_agree(path)


def _corpus_blocks_agree(path: str) -> int:
    checked = 0
    for stream, state_id, state, codec in state_codecs(SAVEPOINTS / path):
        header = stream.header()
        if _speedups.is_compiled(codec.decode):
            for key_group, start, end in stream.blocks:
                data = stream.read_block(key_group, start, end)
                runs = _speedups.block_runs(stream, data, key_group)
                if runs is None or [r[0] for r in runs].count(state_id) != 1:
                    continue
                entries = _speedups.scan_compiled(codec.decode, data, key_group, state_id, len(header.states),
                                                  stream.prefix_bytes)
                if entries is None:
                    continue
                written = 0
                stored_keys = [k for k, _ in _speedups.state_pairs(stream, data, key_group, start, state_id)]
                args = (codec.decode, data, key_group, state_id, len(header.states), stream.prefix_bytes, state.kind)
                # no transform, a Python one, one that DROPs its second value (a list's element is left out, a
                # dropped value hands the run back), one that raises: fresh ones for each side
                for make in (lambda: None, lambda: lambda v: v, lambda: _drop_second(None), lambda: _failing):
                    rewrite = StateRewrite(state.name, state.name, 0, state.kind, make(), None, False, False)
                    want = _reference_run(rewrite, entries, stored_keys, codec.encode_value)
                    assert _one_step(*args, make(), codec.value_enc) == want
                    written += want is not None
                checked += written > 0
    return checked


@needs_compiled
def test_migrate_block_runs_on_flinks_corpus() -> None:
    # not hollow: the one-step migration really ran on Flink-written blocks of each kind
    kinds = set()
    for path in SAVEPOINT_DIRS:
        if _corpus_blocks_agree(path):
            sp = Savepoint.open(SAVEPOINTS / path)
            kinds |= {s.kind for op in sp.operators for _, stream in sp.keyed_streams(op)
                      for s in stream.header().states}
    assert {"VALUE", "LIST", "MAP"} <= kinds


def _entries(kind: str, values: list[Any]) -> list[tuple[Any, ...]]:
    if kind == "LIST":
        return [(i, None, [v, values[0]] if i % 2 else [v]) for i, v in enumerate(values)]
    if kind == "MAP":
        return [(i, None, f"k{i}", v) for i, v in enumerate(values)]
    return [(i, None, v) for i, v in enumerate(values)]


@needs_compiled
@PROPERTY
@pytest.mark.parametrize("kind", ["VALUE", "LIST", "MAP"])
@given(values=st.lists(st.none() | _POJOS, max_size=8), drop_at=st.none() | st.integers(0, 7))
def test_expected_run_is_migrate_entry_of_each_entry(kind: str, values: list[Any],
                                                      drop_at: int | None) -> None:
    compiled, _ = _transforms()
    if kind == "LIST":
        values = [v if v is not None else {"name": "n"} for v in values]
    entries = _entries(kind, values)
    dropped = None if drop_at is None or drop_at >= len(values) else values[drop_at]

    def transform(value: Any) -> Any:
        return DROP if dropped is not None and value is dropped else compiled(value)

    for chosen in (compiled, transform):
        rewrite = StateRewrite("s", "s", 0, kind, chosen, None, False, False)
        try:
            want: list[Any] | None = [migrate_entry(rewrite, entry) for entry in entries]
        except Exception:
            want = None
        if want is not None and any(e is None or (kind == "LIST" and not e[2]) for e in want):
            want = None  # dropped or emptied: the reference loop counts those
        assert runs.expected_run(entries, kind, chosen, DROP) == want


@needs_compiled
def test_runs_leave_interrupts_alone() -> None:
    """Only an Exception hands a run back to the reference; an interrupt goes through."""
    def interrupted(value: Any) -> Any:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        runs.expected_run([(1, None, {})], "VALUE", interrupted, DROP)
    assert runs.expected_run([(1, None)], "VALUE", None, DROP) is None
    assert runs.expected_run([(1, None, {})], "TIMERS", None, DROP) is None
