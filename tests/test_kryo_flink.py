"""Kryo records of JDK classes, written by Flink's own KryoSerializer (GenericTypeInfo) in the test run: Flink 1.20.3
(Kryo 2.24) and Flink 2.3 (Kryo 5.6), by tests/support/kryo_job (a Java program on each distribution's lib/). Each
value the Java side wrote is decoded and compared exactly with what it asked Java to write; the serializer snapshot
it wrote is parsed; Kryo's registrations as the live Kryo instance reports them are compared with the table the
reader uses; decoded values are written back byte for byte; and corrupted or truncated records fail in one line."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flinkstate.binary import Reader
from flinkstate.format_errors import SavepointFormatError, UnsupportedFormat
from flinkstate.jsonify import to_json
from flinkstate.serializers.kryo import KryoSnapshot, OpaqueValue
from flinkstate.serializers.kryo_carry import kryo2_to_kryo5
from flinkstate.serializers.kryo_data import KRYO2, KRYO5, KryoCorrupt, KryoOpaque, KryoValue, registration_table
from flinkstate.serializers.registry import read_snapshot, snapshot_bytes

pytestmark = pytest.mark.flink  # runs Flink's KryoSerializer in a JVM

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "tests" / "support" / "kryo_job" / "build.sh"
LIBS = {KRYO2: ROOT / ".flink-dists" / "1.20.3" / "pyflink" / "lib",
        KRYO5: ROOT / ".venv-flink" / "lib" / "python3.11" / "site-packages" / "pyflink" / "lib"}

#: What KryoBytes.java writes, as `dump` shows it: both Kryo versions.
EXPECTED: dict[str, Any] = {
    "int": 42, "int_negative": -1, "long": -7, "long_big": 1 << 40, "string": "h\u00e9llo", "string_ascii": "hello",
    "string_empty": "", "boolean": True, "double": 1.5, "float": -2.25, "short": -300, "byte": -5, "char": "Z",
    "big_decimal": "-123.4500", "big_decimal_big": "123456789012345678901234567890.5",
    "big_integer": 123456789012345678901234567890, "big_integer_negative": -129,
    "date": "2024-05-01T10:15:00.123Z", "sql_timestamp": "2024-05-01T10:15:00.123456789Z",
    "sql_date": "2024-05-01T00:00:00.000Z", "uuid": "123e4567-e89b-12d3-a456-426614174000", "enum": "SECONDS",
    "currency": "EUR", "array_list_mixed": [7, "seven", None, 7, True], "array_list_same": ["a", "b", "c"],
    "array_list_null": ["a", None], "array_list_empty": [], "array_list_registered": ["a", "b", "c"],
    "linked_list": [1, 2, 3], "hash_set": [3], "linked_hash_set": ["x", "y"], "tree_set": [1, 5],
    "hash_map": {"one": 1}, "linked_hash_map": {"b": 2, "a": "x"}, "tree_map": {"a": 1, "z": 26}, "empty_list": [],
    "empty_map": {}, "singleton_list": ["only"], "singleton_map": {"k": 9}, "arrays_as_list": ["p", "q"],
    "int_array": [1, -2, 300], "long_array": [1, -2], "byte_array": "AQL/", "string_array": ["a", None, "b"],
    "double_array": [0.5, -1.0], "shared_string": ["dup", "dup"], "shared_list": [[1, 2], [1, 2]],
    "nested": [["i"], {"one": 1}], "map_of_lists": {"l": [1]}, "null_value": None,
}
#: Kryo 5 only: its default serializers for java.time, Locale and Charset (Kryo 2.24 has none: FieldSerializer or,
#: for Locale, Chill's Java serialization, which stay opaque).
EXPECTED_KRYO5 = {"locale": "de_CH", "charset": "UTF-8", "instant": "2024-05-01T10:15:00.123456789Z",
                  "local_date": "2024-05-01", "local_time": "10:15:00.000000001",
                  "local_date_time": "2024-05-01T10:15:00.123456789", "duration": {"seconds": 90, "nanos": 5}}
OPAQUE_KRYO2 = {"locale", "charset", "instant", "local_date", "local_time", "local_date_time", "duration"}
OPAQUE = {"user_class", "list_with_user_class"}  # a user class under FieldSerializer


def _run(version: int, out: Path) -> dict[str, Any]:
    lib = LIBS[version]
    if not lib.is_dir():
        pytest.skip(f"no Flink distribution at {lib} (make setup)")
    subprocess.run([str(BUILD), str(lib), str(out)], check=True, timeout=300)
    records: dict[str, tuple[str, bytes]] = {}
    registrations: dict[int, str] = {}
    snapshot = b""
    for line in out.read_text().splitlines():
        item = json.loads(line)
        if "name" in item:
            records[item["name"]] = (item["type"], bytes.fromhex(item["hex"]))
        elif "registration" in item:
            registrations[item["registration"]] = item["class"]
        else:
            snapshot = bytes.fromhex(item["hex"])
    return {"records": records, "registrations": registrations, "snapshot": snapshot}


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[int, dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("kryo")
    return {version: _run(version, tmp / f"kryo{version}.jsonl") for version in (KRYO2, KRYO5)}


def _snapshot(data: dict[str, Any], version: int | None, type_class: str = "java.lang.Object") -> KryoSnapshot:
    snap = read_snapshot(Reader(data["snapshot"]))
    assert isinstance(snap, KryoSnapshot)
    if type_class != snap.type_class:  # the serializer Java used for this record was built for another type
        snap.type_class = type_class
        snap.registrations = [type(e)(type_class, e.key, e.value) if i == 0 else e
                              for i, e in enumerate(snap.registrations)]
    snap.kryo_version = version
    return snap


def _expected(version: int) -> dict[str, Any]:
    return {**EXPECTED, **(EXPECTED_KRYO5 if version == KRYO5 else {})}


@pytest.mark.parametrize("version", [KRYO2, KRYO5])
def test_snapshot_is_flinks_and_round_trips(written: dict[int, dict[str, Any]], version: int) -> None:
    data = written[version]
    snap = _snapshot(data, version)
    assert snap.type_class == "java.lang.Object"
    assert snap.registrations_in_order()[0] == ("java.lang.Object", True)
    assert snapshot_bytes(snap) == data["snapshot"]


@pytest.mark.parametrize("version", [KRYO2, KRYO5])
def test_registration_ids_match_the_live_kryo_instance(written: dict[int, dict[str, Any]], version: int) -> None:
    live = written[version]["registrations"]
    table = registration_table(version, _snapshot(written[version], version).registrations_in_order())
    for rid, (name, _) in table.items():
        if rid < 85 or rid == 85:
            assert live.get(rid) == name, rid
    # Every JDK id the Java side registered below Flink's own is in the table (Scala ones in 1.x stay unknown).
    jdk = {rid: name for rid, name in live.items() if rid < 85 and name.startswith(("java.", "int", "long", "float",
                                                                                       "double", "boolean", "byte",
                                                                                       "char", "short", "void"))}
    assert {rid: table[rid][0] for rid in jdk} == jdk


@pytest.mark.parametrize("version", [KRYO2, KRYO5])
@pytest.mark.parametrize("known", [True, False], ids=["version-known", "version-unknown"])
def test_whole_values_decode_exactly(written: dict[int, dict[str, Any]], version: int, known: bool) -> None:
    data = written[version]
    expected = _expected(version)
    ambiguous = set()
    for name, (type_class, record) in data["records"].items():
        snap = _snapshot(data, version if known else None, type_class)
        value, end = snap.tail_decoder()(record, 0)
        assert end == len(record)
        assert snap.encode(value) == record, name  # written back byte for byte
        if name in expected:
            if isinstance(value, OpaqueValue):
                ambiguous.add(name)
                continue
            assert isinstance(value, KryoValue), name
            assert to_json(value) == {"type": f"Kryo<{type_class}>", "class": value.java_class,
                                      "value": expected[name]}, name
        else:
            assert name in OPAQUE | (OPAQUE_KRYO2 if version == KRYO2 else set())
            assert isinstance(value, OpaqueValue), name
            assert to_json(value)["type"] == f"Kryo<{type_class}>"
    if known:
        assert not ambiguous
    else:
        # Without the version, only records both Kryo versions read alike (or only one reads to the end, the other
        # failing on the bytes) decode: fixed-width numbers (big- vs little-endian) and what only Kryo 5 decodes
        # (java.time, Locale, Charset) stay opaque; so do Kryo 5's TreeSet/TreeMap, whose bytes Kryo 2.24 would read as
        # a stored comparator (opaque), which does not rule 2.24 out.
        fixed = {"double", "float", "short", "char", "double_array"}
        only5 = set(EXPECTED_KRYO5) | {"tree_set", "tree_map"}
        assert ambiguous == fixed | (only5 if version == KRYO5 else set())


@pytest.mark.parametrize("version", [KRYO2, KRYO5])
def test_delimited_decoder_reads_a_record_followed_by_others(written: dict[int, dict[str, Any]],
                                                             version: int) -> None:
    """A list element / a POJO field followed by others: decoding gives the record's length."""
    data = written[version]
    snap = _snapshot(data, version)
    decode = snap.decoder()
    _, first = data["records"]["nested"]
    _, second = data["records"]["tree_map"]
    buf = first + second + b"\x07"
    value, end = decode(buf, 0)
    assert (to_json(value)["value"], end) == (EXPECTED["nested"], len(first))
    value, end = decode(buf, end)
    assert (to_json(value)["value"], end) == (EXPECTED["tree_map"], len(first) + len(second))
    _, opaque = data["records"]["list_with_user_class"]
    with pytest.raises(UnsupportedFormat) as refused:
        decode(opaque + second, 0)
    assert "\n" not in str(refused.value) and "kryojob.KryoBytes$Point" in str(refused.value)


def test_describe_values_says_decoded_or_opaque(written: dict[int, dict[str, Any]]) -> None:
    data = written[KRYO5]
    snap = _snapshot(data, KRYO5)
    tail = snap.tail_decoder()
    values = [tail(data["records"][n][1], 0)[0] for n in ("array_list_same", "hash_map")]
    assert snap.describe_values(values) == "Kryo: decoded (java.util.ArrayList, java.util.HashMap)"
    opaque = tail(data["records"]["user_class"][1], 0)[0]
    assert snap.describe_values([opaque]) == "Kryo: opaque (passed through byte for byte)"
    assert snap.describe_values([*values, opaque]) == ("Kryo: 2 of 3 values decoded (java.util.ArrayList, "
                                                       "java.util.HashMap), 1 opaque (passed through byte for byte)")


def _all_records(written: dict[int, dict[str, Any]]) -> list[tuple[int, bytes]]:
    return [(v, rec) for v in (KRYO2, KRYO5) for _, rec in written[v]["records"].values()]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_corrupted_and_truncated_records_fail_in_one_line(written: dict[int, dict[str, Any]],
                                                          data: st.DataObject) -> None:
    records = _all_records(written)
    version, record = data.draw(st.sampled_from(records))
    snap = _snapshot(written[version], version)
    cut = data.draw(st.integers(0, max(0, len(record) - 1)))
    mutated = bytearray(record[:cut] if data.draw(st.booleans()) else record)
    if mutated and data.draw(st.booleans()):
        at = data.draw(st.integers(0, len(mutated) - 1))
        mutated[at] = data.draw(st.integers(0, 255))
    try:
        value, end = snap.decoder()(bytes(mutated), 0)
    except SavepointFormatError as e:
        assert "\n" not in str(e)
    else:
        assert isinstance(value, KryoValue) and 0 < end <= len(mutated)
        assert snap.encode(value) == bytes(mutated[:end])
    # The whole-value reader never fails: what it cannot decode passes through.
    whole, _ = snap.tail_decoder()(bytes(mutated), 0)
    assert snap.encode(whole) == bytes(mutated)


def test_huge_lengths_fail_without_allocating(written: dict[int, dict[str, Any]]) -> None:
    snap = _snapshot(written[KRYO2], KRYO2)
    # An ArrayList, a byte[] and a String claiming 2^31 - 1 elements, bytes or chars in a few bytes.
    name = b"java.util.ArrayLis\xf4"
    for record in (b"\x01\x00" + name + b"\x01\xff\xff\xff\xff\x07", b"\x01\x00[\xc2\x01\xff\xff\xff\xff\x07\x00",
                   b"\x03\x01\xbf\xff\xff\xff\x07abc"):
        with pytest.raises(KryoCorrupt) as failed:
            snap.decoder()(record, 0)
        assert "exceeds the record" in str(failed.value)


def test_kryo2_records_become_the_kryo5_records_flink2_writes(written: dict[int, dict[str, Any]]) -> None:
    """Issue 27: every record Kryo 2.24 (Flink 1.20.3) wrote that flinkstate decodes, re-encoded for Kryo 5, is
    byte for byte the record Flink 2.3's KryoSerializer wrote for the same value (classes, references, shared
    objects, nulls, every built-in serializer's Kryo 5 format); a user class is refused in one line."""
    old, new = written[KRYO2], written[KRYO5]
    carried = []
    for name, (type_class, record) in old["records"].items():
        registrations = _snapshot(old, KRYO2, type_class).registrations_in_order()
        if name in OPAQUE | OPAQUE_KRYO2:
            with pytest.raises(KryoOpaque) as refused:
                kryo2_to_kryo5(record, registrations)
            assert "\n" not in str(refused.value), name
            continue
        assert kryo2_to_kryo5(record, registrations).hex() == new["records"][name][1].hex(), name
        carried.append(name)
    assert set(carried) == set(EXPECTED)


def test_a_carried_record_differs_when_the_value_does(written: dict[int, dict[str, Any]]) -> None:
    """The comparison above can fail: the Kryo 2 record of one value does not carry to another value's record."""
    old, new = written[KRYO2], written[KRYO5]
    registrations = _snapshot(old, KRYO2).registrations_in_order()
    assert kryo2_to_kryo5(old["records"]["long"][1], registrations) != new["records"]["long_big"][1]
    assert old["records"]["double"][1][1:] != new["records"]["double"][1][1:]  # big- vs little-endian
