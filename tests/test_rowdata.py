"""The Table/SQL runtime's RowData family (flinkstate.serializers.rowdata, binaryrow, logicaltypes).

1. On Flink's own bytes: the savepoints of Flink's Table/SQL restore tests (tests/corpus/savepoints, written by the
   planner's ``RestoreTestBase``): every Table-runtime snapshot is written back to exactly the bytes Flink wrote;
   every RowData key decodes, re-encodes to the same bytes and hashes to the key group Flink stored it in (so
   ``BinaryRowData.hashCode`` is reproduced); every value of a state whose serializer is RowData round-trips; a few
   decoded values are pinned to what the tests' SQL inserted.
2. Generated rows (hypothesis, derandomized) of every logical type the codecs support, nested ones included:
   ``decode(encode(v)) == v`` and ``encode(decode(b)) == b``.
3. Flink's compatibility rule, the type notation (``{table: ..., snapshot: ...}``) and the one-line refusal of a
   logical type the codecs do not support.
"""

from __future__ import annotations

import struct
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flinkstate.binary import assign_key_group
from flinkstate.compatibility import AS_IS, INCOMPATIBLE
from flinkstate.format.keyed_stream import iter_raw_entries, key_group_prefix_bytes, raw_key
from flinkstate.format_errors import SavepointFormatError, UnknownSerializerSnapshot, UnsupportedFormat
from flinkstate.jsonify import to_json
from flinkstate.savepoint import Savepoint
from flinkstate.serializers.base import TypeSerializerSnapshot
from flinkstate.serializers.binaryrow import RowDataValue, row_codec
from flinkstate.serializers.bitmapvariant import BitmapValue
from flinkstate.serializers.logicaltypes import LogicalType
from flinkstate.serializers.registry import snapshot_bytes
from flinkstate.serializers.rowdata import TABLE_SNAPSHOTS, RowDataSnapshot, StringDataSnapshot
from flinkstate.serializers.times import Instant, LocalDate, LocalDateTime, LocalTime
from flinkstate.snapshotnotation import to_notation
from flinkstate.typenotation import to_snapshot

ROOT = Path(__file__).resolve().parent.parent
RESTORE = ROOT / "tests/corpus/savepoints/flink-table/flink-table-planner/src/test/resources/restore-tests"
SQL_SAVEPOINTS = sorted(p.parent for p in RESTORE.glob("*/*/savepoint/_metadata")
                        if b"RowDataSerializer$RowDataSerializerSnapshot" in p.read_bytes())
#: Savepoints whose RowData reads but which stop at another family (StreamElement, CEP's NFA): not part of 1.
OTHER_FAMILY = {"stream-exec-delta-join_1", "stream-exec-delta-join_2", "stream-exec-match_1"}
#: Those with keyed state (the others hold RowData in operator state only, e.g. a source's).
KEYED = [p for p in SQL_SAVEPOINTS
         if any(Savepoint.open(p).keyed_streams(op) for op in Savepoint.open(p).operators)]
READABLE = [p for p in KEYED if p.parent.parent.name not in OTHER_FAMILY]

#: (RowData keys, RowData values, savepoints with keys) checked by test_round_trip_figures.
FIGURES = (170, 37, 29)

PROPERTY = settings(max_examples=60, derandomize=True, database=None, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _id(path: Path) -> str:
    return f"{path.parent.parent.name}/{path.parent.name}"


def _tree(snapshot: TypeSerializerSnapshot) -> list[TypeSerializerSnapshot]:
    return [snapshot] + [s for n in snapshot.nested for s in _tree(n)]


def _streams(sp: Savepoint) -> list[tuple[Any, Any]]:
    return [(op, stream) for op in sp.operators for _, stream in sp.keyed_streams(op)]


# --------------------------------------------------------------------------------------------------------------------
# 1. Flink's bytes
# --------------------------------------------------------------------------------------------------------------------


def test_corpus_selection() -> None:
    # 47 savepoints hold RowData snapshots, 32 in keyed state (the 32 that were refused before the RowData family)
    assert (len(SQL_SAVEPOINTS), len(KEYED), len(READABLE)) == (49, 34, 31)


@pytest.mark.parametrize("path", KEYED, ids=_id)
def test_snapshots_write_back_flinks_bytes(path: Path) -> None:
    """Every Table snapshot of every header (key, namespace, values, nested) is written as Flink wrote it: the
    bytes this tool writes occur in the savepoint's _metadata, where Flink put the (inline) keyed state."""
    metadata = (path / "_metadata").read_bytes()
    sp = Savepoint.open(path)
    checked = 0
    for _, stream in _streams(sp):
        try:
            header = stream.header()
        except UnknownSerializerSnapshot:
            continue  # another family's snapshot in this header (delta join, MATCH_RECOGNIZE)
        roots = [header.key_serializer] + [s for state in header.states for _, s in state.serializers]
        for root in roots:
            for snapshot in _tree(root) if root is not None else []:
                if isinstance(snapshot, TABLE_SNAPSHOTS):
                    assert snapshot_bytes(snapshot) in metadata, snapshot.type_name()
                    checked += 1
    assert checked > 0 or path.parent.parent.name in OTHER_FAMILY


def _round_trip(path: Path) -> tuple[int, int]:
    """Checks every RowData key of every KEY_VALUE entry (and every value of a RowData-valued state): decodes,
    re-encodes to Flink's bytes, hashes to its key group. Returns (keys, values) checked."""
    sp = Savepoint.open(path)
    keys = values = 0
    for op, stream in _streams(sp):
        header = stream.header()
        key_snapshot = header.key_serializer
        assert isinstance(key_snapshot, RowDataSnapshot), key_snapshot
        prefix = key_group_prefix_bytes(op.max_parallelism)
        decode_key, encode_key = key_snapshot.decoder(), key_snapshot.encoder()
        value_codecs = {}
        for index, state in enumerate(header.states):
            value = dict(state.serializers).get("VALUE_SERIALIZER")
            if state.backend_type == "KEY_VALUE" and isinstance(value, RowDataSnapshot):
                value_codecs[index] = value
        for key_group, start, end in stream.blocks:
            data = stream.read_block(key_group, start, end)
            for state_id, ks, ke, vs, ve in iter_raw_entries(data):
                if header.states[state_id].backend_type != "KEY_VALUE":
                    continue  # timers: keys in the Timer codec
                key_bytes = raw_key(data, ks, ke)
                key, key_end = decode_key(key_bytes, prefix)
                out = bytearray()
                encode_key(key, out)
                assert bytes(out) == key_bytes[prefix:key_end]
                assert assign_key_group(key_snapshot.hash_code(key), op.max_parallelism) == key_group
                keys += 1
                if state_id in value_codecs and ve > vs:
                    snapshot = value_codecs[state_id]
                    value_bytes = data[vs:ve]
                    value, value_end = snapshot.decoder()(value_bytes, 0)
                    assert value_end == len(value_bytes)
                    assert snapshot.encode(value) == value_bytes
                    to_json(value)
                    values += 1
    return keys, values


@pytest.mark.parametrize("path", READABLE, ids=_id)
def test_keys_and_values_round_trip_and_hash_to_their_key_group(path: Path) -> None:
    _round_trip(path)


def test_round_trip_figures() -> None:
    """How many keys and values the check above covers (some savepoints hold only timers, or nothing)."""
    figures = [_round_trip(p) for p in READABLE]
    assert (sum(k for k, _ in figures), sum(v for _, v in figures), sum(1 for k, _ in figures if k)) == FIGURES


def _entries(name: str, state: str) -> list[tuple[Any, ...]]:
    sp = Savepoint.open(RESTORE / name / "savepoint")
    found = []
    for _, stream in _streams(sp):
        if state in {s.name for s in stream.header().states}:
            found += [e for _, entries in stream.iter_blocks(state) for e in entries]
    return sorted(found, key=repr)


def test_values_are_those_the_sql_tests_wrote() -> None:
    # RankTestPrograms: counts per key of the ranked fruit/book rows
    assert _entries("stream-exec-rank_1/rank-n-test", "counterState") == [(("book",), None, 2), (("fruit",), None, 1)]
    # WindowDeduplicateTestPrograms: DECIMAL(10, 2), strings, TIMESTAMP(3) rowtime, window start and end
    assert _entries("stream-exec-window-deduplicate_1/window-deduplicate-asc-cumulate-first-row",
                    "window_deduplicate") == [
        ((), 1586937620000, (Decimal("2.00"), "B", "supplier3", LocalDateTime(2020, 4, 15, 8, 0, 11),
                             LocalDateTime(2020, 4, 15, 8, 0, 10), LocalDateTime(2020, 4, 15, 8, 0, 20)))]
    # ExpandTestPrograms: a nested ROW accumulator (first value with retraction), nulls, Long.MAX_VALUE, and the
    # RAW MapView placeholder (NullSerializer's one 0 byte)
    acc = _entries("stream-exec-expand_1/expand", "accState")
    assert ((1, None, 289), None, (0, ("Hi", 1700520691998), b"\x00")) in acc
    assert ((2, 2, None), None, (1, (None, 9223372036854775807), b"\x00")) in acc
    assert ((2,), None, (2, ("Hello", 1700520692080, b"\x00", b"\x00"), 4)) in acc
    # an ARRAY<BIGINT> inside an ExternalSerializer (a MapView's values)
    assert ((2,), None, "Hello world", [1700520692081]) in _entries("stream-exec-expand_1/expand",
                                                                    "agg1$valueToOrderMap")
    # ChangelogNormalize keeps the last row per upsert key
    assert _entries("stream-exec-changelog-normalize_1/changelog-normalize-upsert-filter", "deduplicate-state") == [
        (("three",), None, ("three", 3, "cc"))]



def test_dump_shows_a_rows_kind() -> None:
    # SinkMaterializer keeps the rows it wrote per upsert key with their RowKind: BOB's 5 was inserted and updated to
    # 6 (+U). An update that dumped as the array of an insert would misstate the state, so the kind is named.
    [(key, namespace, rows)] = _entries("stream-exec-sink_1/insert-into-upsert-with-sink-upsert-materializer-"
                                        "writable-metadata-v1", "values")
    assert (key, namespace) == (("BOB",), None)
    assert [getattr(row, "kind", 0) for row in rows] == [0, 2]
    assert to_json(rows) == [["BOB", 5], {"row_kind": "+U", "fields": ["BOB", 6]}]

# --------------------------------------------------------------------------------------------------------------------
# 2. Generated rows of every logical type
# --------------------------------------------------------------------------------------------------------------------


def _t(root: str, **kwargs: Any) -> LogicalType:
    return LogicalType(root, True, **kwargs)


_LONG = st.integers(-(1 << 63), (1 << 63) - 1)
_INT = st.integers(-(1 << 31), (1 << 31) - 1)
_FLOAT32 = st.floats(width=32, allow_nan=False)
_DATE = st.integers(-719_162, 2_932_896).map(LocalDate.of_epoch_day)  # years 1..9999, as Flink's DATE tests use
_TIME = st.integers(0, 86_399_999).map(
    lambda ms: LocalTime(ms // 3_600_000, ms // 60_000 % 60, ms // 1000 % 60, ms % 1000 * 1_000_000))
_MILLIS = st.integers(-(1 << 55), 1 << 55)


def _local_date_time(millis: int, nanos: int) -> LocalDateTime:
    days, ms = divmod(millis, 86_400_000)
    d = LocalDate.of_epoch_day(days)
    return LocalDateTime(d.year, d.month, d.day, ms // 3_600_000, ms // 60_000 % 60, ms // 1000 % 60,
                         ms % 1000 * 1_000_000 + nanos)


def _decimal(precision: int, scale: int) -> st.SearchStrategy[Decimal]:
    bound = 10 ** precision - 1
    return st.integers(-bound, bound).map(
        lambda u: Decimal((1 if u < 0 else 0, tuple(int(c) for c in str(abs(u))), -scale)))


#: (logical type, values) for every leaf root; nested types are built from these below.
LEAVES: list[tuple[LogicalType, st.SearchStrategy[Any]]] = [
    (_t("BOOLEAN"), st.booleans()),
    (_t("TINYINT"), st.integers(-128, 127)),
    (_t("SMALLINT"), st.integers(-32768, 32767)),
    (_t("INTEGER"), _INT),
    (_t("BIGINT"), _LONG),
    (_t("FLOAT"), _FLOAT32),
    (_t("DOUBLE"), st.floats(allow_nan=False)),
    (_t("VARCHAR", length=2147483647), st.text(st.characters(exclude_categories=("Cs",)), max_size=40)),
    (_t("CHAR", length=3), st.text(st.characters(exclude_categories=("Cs",)), max_size=3)),
    (_t("VARBINARY", length=2147483647), st.binary(max_size=40)),
    (_t("BINARY", length=7), st.binary(min_size=7, max_size=7)),
    (_t("DECIMAL", precision=10, scale=2), _decimal(10, 2)),
    (_t("DECIMAL", precision=18, scale=0), _decimal(18, 0)),
    (_t("DECIMAL", precision=38, scale=10), _decimal(38, 10)),
    (_t("DECIMAL", precision=19, scale=19), _decimal(19, 19)),
    (_t("DATE"), _DATE),
    (_t("TIME_WITHOUT_TIME_ZONE", precision=0), _TIME),
    (_t("TIMESTAMP_WITHOUT_TIME_ZONE", precision=3), _MILLIS.map(lambda ms: _local_date_time(ms, 0))),
    (_t("TIMESTAMP_WITHOUT_TIME_ZONE", precision=9),
     st.tuples(_MILLIS, st.integers(0, 999_999)).map(lambda p: _local_date_time(*p))),
    (_t("TIMESTAMP_WITH_LOCAL_TIME_ZONE", precision=3), _MILLIS.map(lambda ms: Instant.of_epoch_nanos(ms * 10**6))),
    (_t("TIMESTAMP_WITH_LOCAL_TIME_ZONE", precision=6),
     st.tuples(_MILLIS, st.integers(0, 999_999)).map(lambda p: Instant.of_epoch_nanos(p[0] * 10**6 + p[1]))),
    (_t("INTERVAL_YEAR_MONTH"), _INT),
    (_t("INTERVAL_DAY_TIME"), _LONG),
    (_t("RAW", java_class="java.lang.Object"), st.binary(max_size=20)),
    (_t("DISTINCT_TYPE", children=(_t("BIGINT"),)), _LONG),
    (_t("BITMAP"), st.sets(_INT, max_size=20).map(lambda m: BitmapValue(sorted(m, key=lambda v: v & 0xFFFFFFFF)))),
]


def _nullable(values: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.none() | values


def _nested(depth: int) -> st.SearchStrategy[tuple[LogicalType, st.SearchStrategy[Any]]]:
    leaves = st.sampled_from(LEAVES)
    if depth == 0:
        return leaves

    def array(inner: tuple[LogicalType, Any]) -> tuple[LogicalType, Any]:
        return _t("ARRAY", children=(inner[0],)), st.lists(_nullable(inner[1]), max_size=5)

    def multiset(inner: tuple[LogicalType, Any]) -> tuple[LogicalType, Any]:
        # float keys: -0.0 == 0.0 merges dict keys; a bitmap is a list, which cannot be a key
        keys = inner[1].filter(lambda v: not isinstance(v, (float, list)))
        return _t("MULTISET", children=(inner[0],)), st.dictionaries(keys, st.integers(1, 5), max_size=4)

    def mapping(pair: tuple[tuple[LogicalType, Any], tuple[LogicalType, Any]]) -> tuple[LogicalType, Any]:
        (kt, kv), (vt, vv) = pair
        keys = kv.filter(lambda v: not isinstance(v, (float, list)))
        return _t("MAP", children=(kt, vt)), st.dictionaries(keys, _nullable(vv), max_size=4)

    def row(fields: list[tuple[LogicalType, Any]]) -> tuple[LogicalType, Any]:
        types = tuple(f[0] for f in fields)
        values = st.tuples(*(_nullable(f[1]) for f in fields))
        return (_t("ROW", children=types, names=tuple(f"f{i}" for i in range(len(types)))), values)

    inner = _nested(depth - 1)
    return st.one_of(leaves, inner.map(array), leaves.map(multiset), st.tuples(leaves, inner).map(mapping),
                     st.lists(inner, min_size=1, max_size=4).map(row))


@st.composite
def rows(draw: st.DrawFn) -> tuple[list[LogicalType], Any]:
    fields = draw(st.lists(_nested(2), min_size=0, max_size=6))
    values = draw(st.tuples(*(_nullable(f[1]) for f in fields)))
    kind = draw(st.integers(0, 3))
    return [f[0] for f in fields], (RowDataValue(values, kind) if kind else values)


def _same(a: Any, b: Any) -> bool:
    """Exact equality: Python types, float bits, Decimal digits and exponent, RowKind."""
    if type(a) is not type(b) and not (isinstance(a, tuple) and isinstance(b, tuple)):
        return False
    if isinstance(a, float):
        return struct.pack(">d", a) == struct.pack(">d", b)
    if isinstance(a, Decimal):
        return a.as_tuple() == b.as_tuple()
    if isinstance(a, tuple | list):
        return getattr(a, "kind", 0) == getattr(b, "kind", 0) and len(a) == len(b) and \
            all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    return bool(a == b)


@PROPERTY
@given(rows())
def test_generated_rows_round_trip(case: tuple[list[LogicalType], Any]) -> None:
    types, value = case
    read, write = row_codec(types)
    data = write(value)
    assert len(data) % 8 == 0
    back = read(data)
    assert _same(back, value)
    assert write(back) == data


def test_layout_matches_binary_row_writer() -> None:
    """A hand-checked BinaryRowData (BinaryRowWriter's layout): header byte (RowKind), null bits from bit 8,
    8-byte slots, a short string in its slot (0x80 | length in the last byte), a long one in the word-aligned
    var part at (offset << 32) | length, little-endian numbers."""
    read, write = row_codec([_t("INTEGER"), _t("VARCHAR", length=9), _t("VARCHAR", length=9), _t("BIGINT")])
    data = write(RowDataValue([7, "ab", "abcdefghi", None], 2))
    assert data == bytes.fromhex(
        "02" "08" "000000000000"  # UPDATE_AFTER, field 3 null (bit 8 + 3)
        "0700000000000000"  # INT 7
        "6162000000000082"  # "ab" inline
        "0900000028000000"  # "abcdefghi" at offset 40, 9 bytes
        "0000000000000000"  # null BIGINT
        "6162636465666768" "6900000000000000")  # var part, zero padded to a word
    assert read(data) == (7, "ab", "abcdefghi", None) and read(data).kind == 2


def test_null_with_reserved_space_round_trips() -> None:
    """Generated projections write a null DECIMAL(p > 18) / TIMESTAMP(p > 3) with writeDecimal / writeTimestamp(pos,
    null, p): null bit set, 16 / 8 zero bytes reserved in the var part, the slot pointing at them. Kept as such."""
    read, write = row_codec([_t("DECIMAL", precision=20, scale=2), _t("TIMESTAMP_WITHOUT_TIME_ZONE", precision=6),
                             _t("DECIMAL", precision=20, scale=2)])
    data = write(RowDataValue([None, None, None], 0, (0, 1)))
    assert data == bytes.fromhex("00" "07" "000000000000"  # fields 0, 1 and 2 null (bits 8, 9, 10)
                                 "0000000020000000" "0000000030000000" "0000000000000000") + bytes(24)
    back = read(data)
    assert (back, back.reserved, write(back)) == ((None, None, None), (0, 1), data)
    plain = write((None, None, None))
    assert len(plain) == 32 and read(plain) == (None, None, None) and type(read(plain)) is tuple


# --------------------------------------------------------------------------------------------------------------------
# 3. Compatibility, notation, refusal
# --------------------------------------------------------------------------------------------------------------------


def _value_snapshot(name: str, operator: str, state: str) -> RowDataSnapshot:
    sp = Savepoint.open(RESTORE / name / "savepoint")
    for info in sp.keyed_states(operator):
        if info.name == state:
            snapshot = dict(sp.keyed_header(operator).states[[s.name for s in sp.keyed_header(operator).states]
                                                                .index(state)].serializers)["VALUE_SERIALIZER"]
            assert isinstance(snapshot, RowDataSnapshot)
            return snapshot
    raise AssertionError(state)


DEDUP = ("stream-exec-window-deduplicate_1/window-deduplicate-asc-cumulate-first-row",
         "0a5ac1d3406a16b6ff94b9c6e583f2e5", "window_deduplicate")
NORMALIZE = ("stream-exec-changelog-normalize_1/changelog-normalize-upsert-filter", "aba4ee9282150dc96ea7dce6d8d2cfe1",
             "deduplicate-state")


def test_type_notation_is_flink_sql() -> None:
    assert _value_snapshot(*NORMALIZE).type_name() == "ROW<`f0` STRING NOT NULL, `f1` INT NOT NULL, `f2` STRING>"
    assert _value_snapshot(*DEDUP).type_name() == (
        "ROW<`f0` DECIMAL(10, 2), `f1` STRING, `f2` STRING, `f3` TIMESTAMP(3) *ROWTIME*, `f4` TIMESTAMP(3) NOT NULL, "
        "`f5` TIMESTAMP(3) NOT NULL>")


def test_notation_round_trips_and_refuses_an_edited_type() -> None:
    snapshot = _value_snapshot(*DEDUP)
    notation = to_notation(snapshot)
    assert isinstance(notation, dict) and notation["table"] == snapshot.type_name()
    assert snapshot_bytes(to_snapshot(notation)) == snapshot_bytes(snapshot)
    with pytest.raises(Exception, match="is not the snapshot's"):
        to_snapshot({**notation, "table": "ROW<`f0` BIGINT>"})


def test_compatibility_same_types_as_is_other_types_incompatible() -> None:
    dedup, normalize = _value_snapshot(*DEDUP), _value_snapshot(*NORMALIZE)
    assert dedup.resolve_compatibility(dedup).verdict is AS_IS
    changed = normalize.resolve_compatibility(dedup, "value")
    assert changed.verdict is INCOMPATIBLE
    assert [f.code for f in changed.findings] == ["ROWDATA_TYPE_CHANGED"]
    # nullability alone is a different LogicalType (LogicalType.equals compares isNullable): the key of
    # ChangelogNormalize is STRING NOT NULL, the rank key STRING
    rank_key = Savepoint.open(RESTORE / "stream-exec-rank_1/rank-n-test/savepoint")
    rank = next(s.header().key_serializer for _, s in _streams(rank_key))
    normalize_sp = Savepoint.open(RESTORE / NORMALIZE[0] / "savepoint")
    not_null = next(s.header().key_serializer for _, s in _streams(normalize_sp))
    assert rank.type_name() == "ROW<`f0` STRING>" and not_null.type_name() == "ROW<`f0` STRING NOT NULL>"
    assert rank.resolve_compatibility(not_null).verdict is INCOMPATIBLE
    assert rank.resolve_compatibility(rank).verdict is AS_IS


def test_unsupported_logical_type_is_refused_in_one_line() -> None:
    zoned = LogicalType("TIMESTAMP_WITH_TIME_ZONE", True, precision=6)
    snapshot = RowDataSnapshot(RowDataSnapshot.CLASS_NAMES[0], 3, [zoned], [b""], [StringDataSnapshot()])
    with pytest.raises(UnsupportedFormat) as refused:
        snapshot.decoder()
    message = str(refused.value)
    assert "\n" not in message
    assert "TIMESTAMP(6) WITH TIME ZONE (TIMESTAMP_WITH_TIME_ZONE) is not supported" in message


def test_a_malformed_variant_field_is_refused_in_one_line() -> None:
    """A VARIANT field is ``i32 metadata length`` (big-endian), the metadata, the value: a length past the field
    is a format error, not an IndexError (the real layout is read from Flink's bytes in tests/test_sql_job.py)."""
    read, write = row_codec([_t("VARIANT")])
    data = bytearray(write((None,)))
    data[1] = 0  # not null
    body = struct.pack(">i", 99) + b"\x01\x00\x00" + b"\x0c\x01"  # says 99 bytes of metadata, has 3
    data[8:16] = struct.pack("<q", (len(data) << 32) | len(body))
    data += body + bytes(-len(body) % 8)
    with pytest.raises(SavepointFormatError) as refused:
        read(bytes(data))
    assert "\n" not in str(refused.value) and "metadata of 99 bytes" in str(refused.value)
