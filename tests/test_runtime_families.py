"""The Either, runtime list (ArrayList, LinkedList, ListView, MapView), TtlAware, Value/CopyableValue, Java
serialization, Scala (Option, Either, Try, case class, traversables, Enumeration), streaming runtime (StreamElement,
CoGroup's TaggedUnion, interval join's BufferEntry, the two-phase commit sink's state), Hadoop Writable and CEP
(NFAState, shared buffer), Bitmap and Variant families, beyond the corpus round trip of tests/test_codec_roundtrip.py:

1. Flink's compatibility verdicts, as its upgrade tests assert them, on the snapshots Flink wrote for every version
   of the serializer corpus (the new snapshot being what Flink 2.3 writes for the upgraded serializer), and the
   family rules on changed types (findings and paths).
2. The type notation both ways, and its one-line errors.
3. ``dump``'s JSON of each family's values, and the one-line refusals of values that cannot be written.
4. A savepoint of Flink's SQL restore tests nesting a LinkedList (tests/corpus/family-savepoints).
5. Values written by Flink's own ``JavaSerializer`` (flink-runtime, from the Flink distribution, run by the JDK):
   decoded to their views, bounded, written back byte for byte, refused when changed.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from flinkstate.binary import Reader
from flinkstate.compatibility import AFTER_MIGRATION, AS_IS, INCOMPATIBLE, Compatibility
from flinkstate.engine.local import find_flink_home
from flinkstate.format_errors import SavepointFormatError, UnsupportedFormat
from flinkstate.jsonify import to_json
from flinkstate.savepoint import Savepoint
from flinkstate.serializers.base import TypeSerializerSnapshot
from flinkstate.serializers.bitmapvariant import BitmapValue
from flinkstate.serializers.either import Either, LegacyEitherSnapshot
from flinkstate.serializers.javaserial import MAX_VIEW_NODES, TRUNCATED, JavaObjectValue, JavaSerializerSnapshot
from flinkstate.serializers.kryo import OpaqueValue
from flinkstate.serializers.registry import read_snapshot, snapshot_bytes
from flinkstate.serializers.rowdata import RawValueDataSnapshot
from flinkstate.serializers.runtimelists import LinkedListSnapshot
from flinkstate.serializers.ttl import TtlValue
from flinkstate.snapshotnotation import to_notation
from flinkstate.typenotation import TypeNotationError, to_snapshot

ROOT = Path(__file__).resolve().parent.parent
SERIALIZERS = ROOT / "tests" / "corpus" / "serializers"
LAG = (ROOT / "tests/corpus/family-savepoints/flink-table/flink-table-planner/src/test/resources/restore-tests/"
       "stream-exec-over-aggregate_1/over-aggregate-lag/savepoint")


def corpus_snapshot(folder: str) -> TypeSerializerSnapshot:
    return read_snapshot(Reader((SERIALIZERS / folder / "serializer-snapshot").read_bytes()), top_level=True)


def versions(family: str) -> list[str]:
    return sorted(p.name for p in SERIALIZERS.glob(f"{family}-[0-9]*"))


def codes(result: Compatibility) -> list[tuple[str, str]]:
    return [(f.code, f.path) for f in result.findings]


# ---------------------------------------------------------------------------------------------------------------------
# 1. Compatibility
# ---------------------------------------------------------------------------------------------------------------------

#: family -> (the family whose 2.3 snapshot is the upgraded serializer's, the verdict Flink's upgrade test asserts)
UPGRADES = {
    "either-serializer": ("either-serializer", AS_IS),  # CompositeTypeSerializerUpgradeTest
    "arraylist-serializer": ("arraylist-serializer", AS_IS),
    "value-serializer": ("value-serializer", AS_IS),
    "copyable-value-serializer": ("copyable-value-serializer", AS_IS),
    "java-serializer": ("java-serializer", AS_IS),
    # TtlAwareSerializerUpgradeTest: written with TTL, read without it, and the other way round
    "ttl-aware-serializer-ttl-value": ("ttl-aware-serializer-string-value", AFTER_MIGRATION),
    "ttl-aware-serializer-string-value": ("ttl-aware-serializer-ttl-value", AFTER_MIGRATION),
    # the Scala API's upgrade tests: all as is
    **{family: (family, AS_IS) for family in (
        "scala-option-serializer", "scala-either-serializer", "scala-try-serializer", "scala-enum-serializer",
        "scala-case-class-serializer", "traversable-serializer-bitset", "traversable-serializer-indexedseq",
        "traversable-serializer-linearseq", "traversable-serializer-list-buffer", "traversable-serializer-map",
        "traversable-serializer-seq", "traversable-serializer-set", "traversable-serializer-with-case-class",
        "traversable-serializer-with-pojo")},
    **{family: (family, AS_IS) for family in (
        "stream-element-serializer", "union-serializer-one", "union-serializer-two", "buffer-entry-serializer",
        "writeable-serializer", "event-id-serializer", "node-id-serializer", "dewey-number-serializer",
        "shared-buffer-edge-serializer", "nfa-state-serializer", "lockable-type-serializer", "bitmap-serializer",
        "variant-serializer")},
}
UPGRADE_CASES = [(folder, family) for family in UPGRADES for folder in versions(family)]


@pytest.mark.parametrize(("folder", "family"), UPGRADE_CASES, ids=[c[0] for c in UPGRADE_CASES])
def test_flinks_upgrade_verdicts(folder: str, family: str) -> None:
    upgraded, verdict = UPGRADES[family]
    result = corpus_snapshot(f"{upgraded}-2.3").resolve_compatibility(corpus_snapshot(folder), "value")
    assert result.verdict is verdict, codes(result)


@pytest.mark.parametrize("folder", versions("two-phase-commit-sink-state-serializer"))
def test_two_phase_commit_null_support_verdicts(folder: str) -> None:
    # TwoPhaseCommitSinkStateSerializerUpgradeTest (Flink 1.x): as is from 1.14 on; 1.13 and before did not support
    # a null pending transaction, which needs a migration.
    result = corpus_snapshot("two-phase-commit-sink-state-serializer-1.20").resolve_compatibility(
        corpus_snapshot(folder), "value")
    if folder.endswith(("-1.11", "-1.12", "-1.13")):
        assert (result.verdict, codes(result)) == (AFTER_MIGRATION, [("NULL_TRANSACTION_SUPPORT_CHANGED", "value")])
    else:
        assert (result.verdict, result.findings) == (AS_IS, [])


@pytest.mark.parametrize("folder", versions("linked-list-serializer"))
def test_linked_list_null_mask_verdicts(folder: str) -> None:
    # LinkedListSerializerUpgradeTest: as is from Flink 1.14 on; 1.13 wrote no null mask, which needs a migration.
    result = corpus_snapshot("linked-list-serializer-2.3").resolve_compatibility(corpus_snapshot(folder), "value")
    if folder.endswith("-1.13"):
        assert (result.verdict, codes(result)) == (AFTER_MIGRATION, [("LINKED_LIST_NULL_MASK_CHANGED", "value")])
    else:
        assert (result.verdict, result.findings) == (AS_IS, [])


def resolve(old: Any, new: Any) -> Compatibility:
    return to_snapshot(new).resolve_compatibility(to_snapshot(old), "value")


@pytest.mark.parametrize(("old", "new", "verdict", "found"), [
    ("Either<String, Integer>", "Either<String, Integer>", AS_IS, []),
    ("Either<String, Integer>", "Either<String, Long>", INCOMPATIBLE, [("TYPE_CHANGED", "value.right")]),
    ("Either<String, Integer>", "Either<Integer, String>", INCOMPATIBLE,
     [("TYPE_CHANGED", "value.left"), ("TYPE_CHANGED", "value.right")]),
    ("Either<String, Integer>", "Tuple2<String, Integer>", INCOMPATIBLE, [("TYPE_CHANGED", "value")]),
    ("ArrayList<Long>", "ArrayList<Integer>", INCOMPATIBLE, [("TYPE_CHANGED", "value.element")]),
    ("ArrayList<Long>", "List<Long>", INCOMPATIBLE, [("TYPE_CHANGED", "value")]),
    ("ListView<List<String>>", "ListView<List<Long>>", INCOMPATIBLE, [("TYPE_CHANGED", "value.element")]),
    ("MapView<Map<Integer, String>>", "MapView<Map<Integer, String>>", AS_IS, []),
    ({"linked_list": "Long", "null_mask": True}, {"linked_list": "Long", "null_mask": False}, AFTER_MIGRATION,
     [("LINKED_LIST_NULL_MASK_CHANGED", "value")]),
    ("TtlAware<Long>", "TtlAware<TTL<Long>>", AFTER_MIGRATION, [("TTL_CHANGED", "value")]),
    ("TtlAware<TTL<Long>>", "TtlAware<Long>", AFTER_MIGRATION, [("TTL_CHANGED", "value")]),
    # TTL turned on while the value type changes: the value type's verdict stands
    ("TtlAware<Long>", "TtlAware<TTL<String>>", INCOMPATIBLE, [("TYPE_CHANGED", "value")]),
    ("TtlAware<TTL<Long>>", "TtlAware<TTL<Integer>>", INCOMPATIBLE, [("TYPE_CHANGED", "value")]),
    ({"value": "x.Name"}, {"value": "x.Name"}, AS_IS, []),
    ({"value": "x.Name"}, {"value": "x.Other"}, INCOMPATIBLE, [("VALUE_CLASS_CHANGED", "value")]),
    ({"value": "x.Name"}, {"copyable_value": "x.Name"}, INCOMPATIBLE, [("TYPE_CHANGED", "value")]),
    ("JavaSerializable", "JavaSerializable", AS_IS, []),
    ("JavaSerializable", "String", INCOMPATIBLE, [("TYPE_CHANGED", "value")]),
    ("ScalaEither<Long, String>", "Either<Long, String>", INCOMPATIBLE, [("TYPE_CHANGED", "value")]),
    ("StreamElement<String>", "StreamElement<Long>", INCOMPATIBLE, [("TYPE_CHANGED", "value.record")]),
    ("TaggedUnion<String, Long>", "TaggedUnion<String, Integer>", INCOMPATIBLE, [("TYPE_CHANGED", "value.two")]),
    ("BufferEntry<String>", "BufferEntry<String>", AS_IS, []),
    ({"two_phase_commit": {"transaction": "Long", "context": "String"}},
     {"two_phase_commit": {"transaction": "Long", "context": "Integer"}}, INCOMPATIBLE,
     [("TYPE_CHANGED", "value.context")]),
    ({"writable": "org.apache.hadoop.io.IntWritable"}, {"writable": "org.apache.hadoop.io.LongWritable"},
     INCOMPATIBLE, [("VALUE_CLASS_CHANGED", "value")]),
    ({"nfa_state": {"previous_timestamp": False}}, "NFAState", AFTER_MIGRATION,
     [("NFA_PREVIOUS_TIMESTAMP_CHANGED", "value")]),
    ("Lockable<String>", "Lockable<Long>", INCOMPATIBLE, [("TYPE_CHANGED", "value.element")]),
    ("NodeId", "EventId", INCOMPATIBLE, [("TYPE_CHANGED", "value")]),
    ("ScalaOption<Long>", "ScalaOption<String>", INCOMPATIBLE, [("TYPE_CHANGED", "value.some")]),
    ("ScalaTry<Long, String>", "ScalaTry<Integer, String>", INCOMPATIBLE, [("TYPE_CHANGED", "value.success")]),
    ({"scala_case_class": "x.P", "fields": ["Long"]}, {"scala_case_class": "x.Q", "fields": ["Long"]}, INCOMPATIBLE,
     [("SCALA_CASE_CLASS_CHANGED", "value")]),
    ({"scala_case_class": "x.P", "fields": ["Long"]}, {"scala_case_class": "x.P", "fields": ["Long", "Long"]},
     INCOMPATIBLE, [("ARITY_CHANGED", "value")]),
    ({"scala_traversable": "Long", "builder": "a"}, {"scala_traversable": "Long", "builder": "b"}, INCOMPATIBLE,
     [("SCALA_COLLECTION_BUILDER_CHANGED", "value")]),
    # ScalaEnumSerializerSnapshot: an old constant's id, as a position in the new list, must hold its name
    ({"scala_enum": "x.L$", "constants": {"A": 0, "B": 1}}, {"scala_enum": "x.L$", "constants": {"A": 0, "B": 1,
                                                                                               "C": 2}}, AS_IS, []),
    ({"scala_enum": "x.L$", "constants": {"A": 0, "B": 1}}, {"scala_enum": "x.L$", "constants": {"B": 1, "A": 0}},
     INCOMPATIBLE, [("SCALA_ENUM_CHANGED", "value")]),
    ({"scala_enum": "x.L$", "constants": {"A": 0, "B": 1}}, {"scala_enum": "x.L$", "constants": {"A": 0}},
     INCOMPATIBLE, [("SCALA_ENUM_CHANGED", "value")]),
])
def test_family_rules(old: Any, new: Any, verdict: Any, found: list[tuple[str, str]]) -> None:
    result = resolve(old, new)
    assert (result.verdict, codes(result)) == (verdict, found)


# ---------------------------------------------------------------------------------------------------------------------
# 2. Notation
# ---------------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("notation", [
    "Either<String, Integer>", "Either<Either<Long, String>, List<Long>>", "ArrayList<String>", "LinkedList<Long>",
    "ListView<List<String>>", "MapView<Map<Integer, String>>", "TtlAware<String>", "TtlAware<TTL<String>>",
    "JavaSerializable", "List<Either<Long, JavaSerializable>>",
    {"either": {"left": {"row": {"f0": "Long"}}, "right": "String"}},
    {"linked_list": "Long", "null_mask": False}, {"ttl_aware": "TTL<String>", "ttl_enabled": False},
    {"ttl_aware": {"ttl": {"row": {"f0": "Long"}}}},
    {"value": "org.apache.flink.types.IntValue"}, {"copyable_value": "x.MyCopyable"},
    {"array_list": {"row": {"f0": "Long"}}},
    "ScalaOption<String>", "ScalaEither<Integer, String>", "ScalaTry<String, JavaSerializable>",
    {"scala_option": {"row": {"f0": "Long"}}}, {"scala_either": {"left": "Long", "right": {"row": {"f0": "Long"}}}},
    {"scala_try": {"row": {"f0": "Long"}}, "throwable": "JavaSerializable"},
    {"scala_case_class": "x.P", "fields": ["Long", {"scala_enum": "x.L$", "constants": {"A": 0, "B": 5}}]},
    {"scala_traversable": "Long", "builder": "implicitly[CanBuildFrom[Seq[Long], Long, Seq[Long]]]"},
    "StreamElement<String>", "TaggedUnion<String, Long>", "BufferEntry<Long>",
    {"stream_element": {"row": {"f0": "Long"}}},
    {"tagged_union": {"one": "Long", "two": {"row": {"f0": "Long"}}}}, {"buffer_entry": {"row": {"f0": "Long"}}},
    {"two_phase_commit": {"transaction": "Long", "context": "String"}},
    {"two_phase_commit": {"transaction": "Long", "context": "String"}, "null_transactions": False,
     "snapshot_class": "org.apache.flink.streaming.api.functions.sink.legacy.TwoPhaseCommitSinkFunction"
                       "$StateSerializerSnapshot"},
    {"writable": "org.apache.hadoop.io.Text"},
    "NFAState", {"nfa_state": {"previous_timestamp": False}}, "DeweyNumber", "EventId", "NodeId", "SharedBufferEdge",
    "Lockable<SharedBufferNode>", {"lockable": {"row": {"f0": "Long"}}}, "Bitmap", "Variant", "List<Variant>",
])
def test_notation_round_trip(notation: Any) -> None:
    snapshot = to_snapshot(notation)
    assert to_notation(snapshot) == notation
    again = read_snapshot(Reader(snapshot_bytes(snapshot, top_level=True)), top_level=True)
    assert snapshot_bytes(again, top_level=True) == snapshot_bytes(snapshot, top_level=True)
    assert to_notation(again) == notation


@pytest.mark.parametrize("folder", [f"{family}-2.3" for family in (
    "either-serializer", "arraylist-serializer", "linked-list-serializer", "ttl-aware-serializer-ttl-value",
    "ttl-aware-serializer-string-value", "value-serializer", "copyable-value-serializer", "java-serializer")]
    + ["list-view-serializer-1.13", "map-view-serializer-1.13"]
    + [f.name for f in SERIALIZERS.glob("*-2.3") if f.name.startswith(("scala-", "traversable-"))])
def test_notation_gives_back_flinks_snapshot(folder: str) -> None:
    raw = (SERIALIZERS / folder / "serializer-snapshot").read_bytes()
    assert snapshot_bytes(to_snapshot(to_notation(corpus_snapshot(folder))), top_level=True) == raw


@pytest.mark.parametrize(("notation", "message"), [
    ("Either<String>", "Either needs 2 type argument(s), got 1 (in 'Either<String>')"),
    ("JavaSerializable<String>", "JavaSerializable takes no type arguments (in 'JavaSerializable<String>')"),
    ("TtlAware<TtlAware<Long>>", "TtlAware cannot wrap another TtlAware (in 'TtlAware<TtlAware<Long>>')"),
    ({"either": {"left": "Long"}}, "either: either needs exactly {left: TYPE, right: TYPE}"),
    ({"either": {"left": "Long", "right": "Nope"}}, "either.right: unknown type 'Nope'"),
    ({"ttl_aware": "Long", "ttl_enabled": True}, "ttl_enabled: must be true (only for a TTL<...> type) or false, "
                                                 "got True"),
    ({"linked_list": "Long", "null_mask": "yes"}, "null_mask: must be true or false, got 'yes'"),
    ({"value": 3}, "value: value needs the Java class name, got 3"),
    ({"linked_list": "Long", "padding": 1}, "unknown key(s) padding in a linked_list type"),
])
def test_notation_errors(notation: Any, message: str) -> None:
    with pytest.raises(TypeNotationError) as error:
        to_snapshot(notation)
    assert str(error.value) == message


# ---------------------------------------------------------------------------------------------------------------------
# 3. JSON and refusals
# ---------------------------------------------------------------------------------------------------------------------

def test_dump_json_of_each_family() -> None:
    either = to_snapshot("Either<String, List<Long>>")
    assert to_json(either.decode(either.encode(Either.right([1, 2])))) == {"right": [1, 2]}
    assert to_json(Either.left("x")) == {"left": "x"} and repr(Either.left("x")) == "Either.Left('x')"
    assert to_json(to_snapshot("LinkedList<Long>").decode(to_snapshot("LinkedList<Long>").encode([1, None]))) == \
        [1, None]
    java = corpus_snapshot("java-serializer-2.3")
    value = java.decode((SERIALIZERS / "java-serializer-2.3" / "test-data").read_bytes())
    assert json.dumps(to_json(value)) == '{"class": "java.lang.Integer", "value": 26}'
    opaque = corpus_snapshot("value-serializer-2.3").tail_decoder()(b"\x00\x07klion26", 0)[0]
    assert to_json(opaque) == {"type": "Value<org.apache.flink.api.java.typeutils.runtime.ValueSerializerUpgradeTest"
                                       "$NameValue>", "base64": "AAdrbGlvbjI2"}


def test_scala_try_failure_written_by_flink() -> None:
    # ScalaTrySerializerUpgradeTest: Failure(new SpecifiedException("Specified exception for ScalaTry.")), the
    # exception written by Kryo (passed through whole); its Java-serialized message is in the bytes.
    for folder in versions("scala-try-serializer"):
        snapshot = corpus_snapshot(folder)
        data = (SERIALIZERS / folder / "test-data").read_bytes()
        value, end = snapshot.tail_decoder()(data, 0)
        assert end == len(data) and list(value) == ["failure"]
        failure = value["failure"]
        assert isinstance(failure, OpaqueValue) and failure.type_name == "Kryo<java.lang.Throwable>"
        assert failure.data == data[1:] and b"Specified exception for ScalaTry." in failure.data
        assert to_json(value) == {"failure": to_json(failure)}


def test_scala_json() -> None:
    option = to_snapshot("ScalaOption<String>")
    assert [to_json(option.decode(option.encode(v))) for v in (None, {"some": None}, {"some": "x"})] == \
        [None, {"some": None}, {"some": "x"}]
    enum = to_snapshot({"scala_enum": "x.L$", "constants": {"A": 0, "B": 5}})
    assert enum.encode("B") == bytes.fromhex("00000005") and enum.decode(bytes.fromhex("00000005")) == "B"
    with pytest.raises(SavepointFormatError, match=r"x\.L\$ has no value with id 3"):
        enum.decode(bytes.fromhex("00000003"))


def test_legacy_either_snapshot_of_flink_1_7() -> None:
    # The state evolution end-to-end test's Flink 1.7 savepoint holds the legacy EitherSerializerSnapshot (version 2:
    # the nested snapshots alone) for its Either<String, Boolean> state.
    metadata = (ROOT / "tests/corpus/savepoints/flink-end-to-end-tests/flink-state-evolution-test/savepoints/1.7/"
                "_metadata").read_bytes()
    start = metadata.index(b"org.apache.flink.api.java.typeutils.runtime.EitherSerializerSnapshot") - 2
    reader = Reader(metadata, start)
    snapshot = read_snapshot(reader)
    assert isinstance(snapshot, LegacyEitherSnapshot) and snapshot.type_name() == "Either<String, Boolean>"
    assert snapshot_bytes(snapshot) == metadata[start:reader.pos]
    assert to_notation(snapshot) == {"either": {"left": "String", "right": "Boolean"}, "legacy_snapshot": True}
    assert snapshot.decode(b"\x00\x01") == Either.right(True)  # EitherSerializer's records
    # Flink 1.17+ has no such class: a new job's JavaEitherSerializerSnapshot cannot restore it.
    result = to_snapshot("Either<String, Boolean>").resolve_compatibility(snapshot, "value")
    assert (result.verdict, codes(result)) == (INCOMPATIBLE, [("LEGACY_EITHER_SNAPSHOT", "value")])
    assert "Flink 1.17+" in result.findings[0].message
    # Version 1 held Java-serialized serializers: refused in one line.
    legacy_v1 = bytearray(metadata[start:reader.pos])
    legacy_v1[2 + 68 + 3] = 1
    with pytest.raises(UnsupportedFormat, match=r"EitherSerializerSnapshot version 1 .* is not supported"):
        read_snapshot(Reader(bytes(legacy_v1)))


def test_bitmaps_are_written_like_flink() -> None:
    # A bitmap built here (no bytes read) is serialized as RoaringBitmapData.toBytes does: the same bytes as Flink's.
    written = (SERIALIZERS / "bitmap-serializer-2.3" / "test-data").read_bytes()
    snapshot = corpus_snapshot("bitmap-serializer-2.3")
    assert snapshot.encode(BitmapValue([1, 2**31 - 1])) == written
    assert snapshot.encode([1, 2**31 - 1]) == written
    # Java ints at or above 2^31 unsigned are negative, and come last.
    value = snapshot.decode(snapshot.encode(BitmapValue([0, -1, 5, -(2**31)])))
    assert value == [0, 5, -(2**31), -1]
    run = BitmapValue(range(1000))  # 1000 consecutive members: a run container after runOptimize
    assert len(snapshot.encode(run)) < 40 and snapshot.decode(snapshot.encode(run)) == list(range(1000))


def test_variants_pass_through() -> None:
    snapshot = corpus_snapshot("variant-serializer-2.3")
    data = (SERIALIZERS / "variant-serializer-2.3" / "test-data").read_bytes()
    value = snapshot.decode(data)
    assert value["variant"]["object"] == {"k": "hello"}
    assert snapshot.encode(value) == data
    value["variant"]["k"] = 2
    with pytest.raises(UnsupportedFormat, match=r"Variant values pass through byte for byte.*\(got a changed value\)"):
        snapshot.encode(value)
    with pytest.raises(SavepointFormatError, match="runs past its record"):
        snapshot.decode(data[:-1])


def test_stream_elements_of_every_kind() -> None:
    # StreamElementSerializer's tags: 0 record with timestamp, 1 without, 2 watermark, 3 latency marker, 4 status,
    # 5 record attributes, 6 internal watermark.
    snapshot = to_snapshot("StreamElement<String>")
    cases = [
        ("00" + "0000000000000005" + "0278", {"record": "x", "timestamp": 5}),  # StringValue: length + 1
        ("01" + "00", {"record": None}),
        ("02" + "fffffffffffffffe", {"watermark": -2}),
        ("03" + "0000000000000001" + "0000000000000002" + "0000000000000003" + "00000004",
         {"latency_marker": {"marked_time": 1, "operator_id": [2, 3], "subtask": 4}}),
        ("04" + "ffffffff", {"watermark_status": -1}),
        ("05" + "01", {"record_attributes": {"backlog": True}}),
        ("06" + "00000007" + "0000000000000009", {"watermark": 9, "subpartition": 7}),
    ]
    for hex_data, value in cases:
        data = bytes.fromhex(hex_data)
        assert (snapshot.decode(data), snapshot.encode(value)) == (value, data)
        assert to_json(snapshot.decode(data)) == value
    with pytest.raises(SavepointFormatError, match="corrupt stream element: tag 7"):
        snapshot.decode(b"\x07")
    with pytest.raises(UnsupportedFormat, match="not a value of this type"):
        snapshot.encode({"record": "x", "watermark": 1})


def test_hadoop_number_writables_decode() -> None:
    snapshot = to_snapshot({"writable": "org.apache.hadoop.io.LongWritable"})
    assert (snapshot.fixed_length, snapshot.decode(bytes.fromhex("ffffffffffffffff"))) == (8, -1)
    assert to_snapshot({"writable": "org.apache.hadoop.io.Text"}).needs_end  # Hadoop's own vint format: passed


def test_flink_value_types_decode_with_their_codecs() -> None:
    # ValueSerializer over org.apache.flink.types.LongValue writes what LongValue.write does: 8 bytes.
    snapshot = to_snapshot({"value": "org.apache.flink.types.LongValue"})
    assert (snapshot.fixed_length, snapshot.needs_end) == (8, False)
    assert snapshot.decode(bytes.fromhex("00000000000004d2")) == 1234
    assert snapshot.hash_code(1234) == 1234


@pytest.mark.parametrize(("notation", "value", "message"), [
    ("Either<Long, String>", {"left": 1, "right": 2}, 'an Either value is {"left": value} or {"right": value}'),
    ("Either<Long, String>", Either.left(None), "Either.Left cannot hold null"),
    ({"linked_list": "Long", "null_mask": False}, [1, None], "without a null mask cannot hold null elements"),
    ({"value": "x.Name"}, b"\x00", "only values read from a savepoint (passed through byte for byte) can be written"),
    ({"value": "x.Name"}, OpaqueValue("Value<x.Other>", b"\x00"), "only values read from a savepoint"),
    ("JavaSerializable", {"class": "java.lang.Integer", "value": 26}, "Java-serialized values pass through byte for "
                                                                      "byte, so a migration cannot change them"),
])
def test_values_that_cannot_be_written_are_refused_in_one_line(notation: Any, value: Any, message: str) -> None:
    with pytest.raises(UnsupportedFormat, match=message.replace("(", r"\(").replace(")", r"\)")) as error:
        to_snapshot(notation).encode(value)
    assert "\n" not in str(error.value)


def test_changed_java_value_is_refused() -> None:
    java = corpus_snapshot("java-serializer-2.3")
    data = (SERIALIZERS / "java-serializer-2.3" / "test-data").read_bytes()
    value = java.decode(data)
    assert java.encode(value) == data
    value["value"] = 27
    with pytest.raises(UnsupportedFormat, match=r"cannot change them \(got a changed value\)"):
        java.encode(value)


def test_user_value_types_only_pass_through_whole() -> None:
    snapshot = to_snapshot({"copyable_value": "x.MyCopyable"})
    assert snapshot.needs_end
    with pytest.raises(UnsupportedFormat, match="carries no length"):
        snapshot.decoder()
    # An Either whose side has no length is read as a whole stored value.
    either = to_snapshot({"either": {"left": "Long", "right": {"copyable_value": "x.MyCopyable"}}})
    assert either.needs_end
    assert either.tail_decoder()(b"\x00\x01\x02", 0) == (Either.right(OpaqueValue(
        "CopyableValue<x.MyCopyable>", b"\x01\x02")), 3)


def test_ttl_of_a_value_without_length_reads_as_a_whole_value() -> None:
    # TTL<Kryo>: the timestamp, then Kryo bytes that run to the end of the stored value.
    for notation, opaque in (({"ttl": {"kryo": "x.Foo"}}, "Kryo<x.Foo>"),
                             ({"ttl": {"value": "x.Name"}}, "Value<x.Name>")):
        snapshot = to_snapshot(notation)
        assert snapshot.needs_end
        data = (5).to_bytes(8, "big") + b"abc"
        value = snapshot.tail_decoder()(data, 0)
        assert value == (TtlValue(OpaqueValue(opaque, b"abc"), 5), len(data))
        assert snapshot.encode(value[0]) == data
    assert not to_snapshot("TTL<Long>").needs_end


# ---------------------------------------------------------------------------------------------------------------------
# 4. A Flink SQL savepoint nesting a LinkedList
# ---------------------------------------------------------------------------------------------------------------------

def test_sql_lag_accumulator_linked_list() -> None:
    # LAG's accumulator keeps its buffer as RAW('java.util.LinkedList') over a LinkedListSerializer of MapData.
    savepoint = Savepoint.open(LAG)
    [(operator, streams)] = [(op, s) for op in savepoint.operators if (s := savepoint.keyed_streams(op))]
    [(_, stream)] = streams
    [meta] = [s for s in stream.header().states if s.name == "accState"]
    assert meta.value_serializer is not None
    raw_field = meta.value_serializer.nested[0].nested[2]
    assert isinstance(raw_field, RawValueDataSnapshot)
    linked = raw_field.nested[0]
    assert isinstance(linked, LinkedListSnapshot) and linked.has_null_mask
    assert to_notation(linked) == {"linked_list": {"table": "MAP<DOUBLE, DOUBLE>",
                                                   "snapshot": to_notation(linked.nested[0])["snapshot"]}}
    [(_, _, value)] = list(savepoint.iter_entries(operator, "accState"))
    buffer = value[0][2]  # the RAW field: the LinkedList serializer's bytes
    decoded, end = linked.decoder()(buffer, 0)
    assert (decoded, end) == ([{42.0: 42.0}], len(buffer))  # one buffered row's MAP<DOUBLE, DOUBLE>
    assert linked.encode(decoded) == buffer


MATCH = (ROOT / "tests/corpus/savepoints/flink-table/flink-table-planner/src/test/resources/restore-tests/"
         "stream-exec-match_1/match-complex/savepoint")


def test_sql_match_recognize_nfa_state() -> None:
    # MATCH_RECOGNIZE's CEP operator: the NFA state and the shared buffer, as the planner's restore test left them
    # (tests/test_flink_corpus.py checks that every entry is written back byte for byte).
    savepoint = Savepoint.open(MATCH)
    [operator] = [op for op in savepoint.operators if savepoint.keyed_streams(op)]
    nfa = {key[0]: value for key, _, value in savepoint.iter_entries(operator, "nfaStateName")}
    assert nfa["ACME"] == {"partial_matches": [{
        "state": "DOWN:1", "previous_entry": None, "version": "5", "start_timestamp": -1, "previous_timestamp": -1,
        "start_event": None}], "completed_matches": []}
    first = nfa["BETA"]["partial_matches"][0]
    assert first == {"state": "DOWN", "previous_entry": {"event_id": {"id": 0, "timestamp": 1701784717829},
                                                         "page": "DOWN"},
                     "version": "1.0.0", "start_timestamp": 1701784717828, "previous_timestamp": 1701784717829,
                     "start_event": {"id": 0, "timestamp": 1701784717828}}
    events = {json.dumps(to_json(user_key)): value for _, _, user_key, value in
              savepoint.iter_entries(operator, "sharedBuffer-events")}
    assert events['{"id": 0, "timestamp": 1701784717828}'] == {"ref_count": 1, "element": ("BETA", 2, 18, 1, None)}
    nodes = [value for _, _, _, value in savepoint.iter_entries(operator, "sharedBuffer-entries-with-lockable-edges")]
    assert {"ref_count": 1, "element": {"edges": [{"ref_count": 1, "edge": {"target": None, "version": "1"}}]}} \
        in nodes
    schema = {s.name: s.value_type for s in savepoint.keyed_states(operator)}
    assert schema["nfaStateName"] == "NFAState"
    assert schema["sharedBuffer-entries-with-lockable-edges"] == "Lockable<SharedBufferNode>"


# ---------------------------------------------------------------------------------------------------------------------
# 5. Flink's JavaSerializer
# ---------------------------------------------------------------------------------------------------------------------

JAVA_WRITER = r"""
import java.io.ByteArrayOutputStream;
import java.io.Serializable;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;

import java.util.LinkedList;

import org.apache.flink.api.common.typeutils.TypeSerializer;
import org.apache.flink.api.common.typeutils.base.LongSerializer;
import org.apache.flink.api.common.typeutils.base.StringSerializer;
import org.apache.flink.api.java.typeutils.runtime.EitherSerializer;
import org.apache.flink.core.memory.DataOutputViewStreamWrapper;
import org.apache.flink.runtime.state.JavaSerializer;
import org.apache.flink.table.runtime.typeutils.LinkedListSerializer;
import org.apache.flink.types.Either;

/** Writes values with Flink's own serializers, one "name hex" line each. */
public class JavaValues {
    static <T> void print(String name, TypeSerializer<T> serializer, T value) throws Exception {
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        serializer.serialize(value, new DataOutputViewStreamWrapper(bytes));
        StringBuilder hex = new StringBuilder();
        for (byte b : bytes.toByteArray()) {
            hex.append(String.format("%02x", b));
        }
        System.out.println(name + " " + hex);
    }

    public enum Color { RED, GREEN }

    public static class Node implements Serializable {
        private static final long serialVersionUID = 1L;
        public String name;
        public int weight;
        public Node next;
        public Color color;
        public long[] marks;
    }

    public static void main(String[] args) throws Exception {
        JavaSerializer<Serializable> serializer = new JavaSerializer<>();
        Node node = new Node();
        node.name = "a";
        node.weight = 3;
        node.next = node;
        node.color = Color.GREEN;
        node.marks = new long[] {1L, 2L};
        HashMap<String, Integer> map = new HashMap<>();
        map.put("k", 7);
        ArrayList<Integer> big = new ArrayList<>();
        for (int i = 0; i < 20000; i++) {
            big.add(i);
        }
        List<Serializable> values = List.of("text", 42L, new ArrayList<>(List.of("x", "y")), map, node,
                new int[] {1, 2, 3}, Color.RED, big);
        for (Serializable value : values) {
            print("java", serializer, value);
        }
        LinkedList<Long> linked = new LinkedList<>();
        for (long i = 0; i < 10; i++) {
            linked.add(i % 3 == 1 ? null : i);  // nulls at 1, 4 and 7; 10 elements: two mask bytes
        }
        print("linked", new LinkedListSerializer<>(LongSerializer.INSTANCE), linked);
        print("either", new EitherSerializer<>(LongSerializer.INSTANCE, StringSerializer.INSTANCE),
                Either.<Long, String>Right("r"));

    }
}
"""

#: The views of the values JAVA_WRITER writes, in order (the last one is checked apart: it is truncated).
JAVA_VIEWS = [
    {"class": "java.lang.String", "value": "text"},
    {"class": "java.lang.Long", "value": 42},
    {"class": "java.util.ArrayList", "value": ["x", "y"]},
    {"class": "java.util.HashMap", "value": {"k": 7}},
    # ObjectOutputStream writes primitive fields first, then object fields, each group by name; next is the node
    {"class": "JavaValues$Node", "value": {"@class": "JavaValues$Node", "weight": 3, "color": "GREEN",
                                           "marks": [1, 2], "name": "a", "next": {"@ref": "JavaValues$Node"}}},
    {"class": "[I", "value": [1, 2, 3]},
    {"class": "JavaValues$Color", "value": "RED"},
]


@pytest.fixture(scope="module")
def flink_written(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[str, bytes]]:
    """The records Flink's own serializers write (JavaSerializer from the distribution's flink-dist jar,
    LinkedListSerializer from its flink-table-runtime jar), by name."""
    work = tmp_path_factory.mktemp("java-serializer")
    (work / "JavaValues.java").write_text(JAVA_WRITER)
    lib = find_flink_home() / "lib"
    jars = ":".join(str(jar) for pattern in ("flink-dist-*.jar", "flink-table-runtime-*.jar")
                    for jar in lib.glob(pattern))
    subprocess.run(["javac", "-cp", jars, "JavaValues.java"], cwd=work, check=True, capture_output=True)
    out = subprocess.run(["java", "-cp", f"{jars}:.", "JavaValues"], cwd=work, check=True, capture_output=True,
                         text=True).stdout
    return [(name, bytes.fromhex(data)) for name, data in (line.split() for line in out.splitlines())]


@pytest.fixture(scope="module")
def java_written(flink_written: list[tuple[str, bytes]]) -> list[bytes]:
    return [data for name, data in flink_written if name == "java"]


@pytest.mark.flink
def test_linked_list_and_either_written_by_flink(flink_written: list[tuple[str, bytes]]) -> None:
    records = dict(flink_written)
    linked = to_snapshot("LinkedList<Long>")
    assert linked.decode(records["linked"]) == [0, None, 2, 3, None, 5, 6, None, 8, 9]
    assert records["linked"][4:6] == bytes([0b01001001, 0])  # MaskUtils: most significant bit first
    assert linked.encode([0, None, 2, 3, None, 5, 6, None, 8, 9]) == records["linked"]
    either = to_snapshot("Either<Long, String>")
    assert either.decode(records["either"]) == Either.right("r")
    assert either.encode(Either.right("r")) == records["either"]


@pytest.mark.flink
def test_values_written_by_flinks_java_serializer(java_written: list[bytes]) -> None:
    snapshot = JavaSerializerSnapshot()
    decode = snapshot.decoder()
    views = []
    for data in java_written:
        value, end = decode(data + b"\xa5trailing", 0)
        assert end == len(data)
        assert isinstance(value, JavaObjectValue)
        assert snapshot.encode(value) == data
        views.append(json.loads(json.dumps(to_json(value))))
    assert views[:-1] == JAVA_VIEWS
    # 20,000 Integers: the view stops at MAX_VIEW_NODES nodes (an element and its boxed value are two), the bytes
    # are all kept.
    big = views[-1]["value"]
    assert big[:3] == [0, 1, 2] and big[-1] == TRUNCATED and TRUNCATED not in big[:MAX_VIEW_NODES // 2 - 2]
    assert len(big) == 20_000


@pytest.mark.flink
def test_java_records_back_to_back(java_written: list[bytes]) -> None:
    # Java serialization delimits itself: a List of JavaSerializable values decodes element by element.
    snapshot = to_snapshot("List<JavaSerializable>")
    data = len(java_written[:-1]).to_bytes(4, "big") + b"".join(java_written[:-1])
    value = snapshot.decode(data)
    assert [json.loads(json.dumps(to_json(v))) for v in value] == JAVA_VIEWS
    assert snapshot.encode(value) == data
