"""Byte-level helpers against values Java and Flink compute."""

from __future__ import annotations

import pytest

from flinkstate.binary import (
    KeyGroupRange,
    Reader,
    Writer,
    assign_key_group,
    decode_leb128,
    decode_mutf8,
    decode_sv,
    decode_varint_le,
    default_max_parallelism,
    encode_leb128,
    encode_mutf8,
    encode_sv,
    encode_varint_le,
    flink_murmur_hash,
    java_bool_hash,
    java_double_hash,
    java_int_hash,
    java_long_hash,
    java_string_hash,
    key_group_range_for_operator_index,
    operator_id_from_uid,
    operator_index_for_key_group,
    varint_le_size,
)
from flinkstate.format_errors import TruncatedData


@pytest.mark.parametrize(("text", "encoded"), [
    ("abc", b"abc"), ("", b""), ("\x00", b"\xc0\x80"), ("é", b"\xc3\xa9"), ("€", b"\xe2\x82\xac"),
    ("\U0001F600", b"\xed\xa0\xbd\xed\xb8\x80"),  # a surrogate pair, each as 3 bytes (CESU-8 style)
])
def test_modified_utf8(text: str, encoded: bytes) -> None:
    assert encode_mutf8(text) == encoded
    assert decode_mutf8(encoded) == text


@pytest.mark.parametrize(("text", "encoded"), [
    (None, b"\x00"), ("", b"\x01"), ("key-1", b"\x06key-1"), ("é", b"\x02\xe9\x01"), ("€", b"\x02\xac\x41"),
    ("a" * 200, b"\xc9\x01" + b"a" * 200),
])
def test_string_value(text: str | None, encoded: bytes) -> None:
    assert encode_sv(text) == encoded
    assert decode_sv(encoded + b"tail", 0) == (text, len(encoded))


def test_string_value_roundtrip_unicode() -> None:
    for text in ("mixed é€ \U0001F600 text", "\x00\x7f\x80\uffff"):
        assert decode_sv(encode_sv(text), 0) == (text, len(encode_sv(text)))


def test_varints() -> None:
    assert encode_varint_le(300) == b"\x2c\x01"
    assert encode_varint_le(0) == b"\x00"
    assert decode_varint_le(b"\x2c\x01") == 300
    assert [varint_le_size(v) for v in (0, 255, 256, 65536)] == [1, 1, 2, 3]
    assert encode_leb128(300) == b"\xac\x02"
    assert decode_leb128(b"\xac\x02", 0) == (300, 2)


def test_java_hash_codes() -> None:
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("") == 0
    assert java_string_hash("polygenelubricants") == -(1 << 31)  # the well-known Integer.MIN_VALUE hash
    assert java_long_hash(1 << 32) == 1
    assert java_long_hash(-1) == 0
    assert java_int_hash(-7) == -7
    assert (java_bool_hash(True), java_bool_hash(False)) == (1231, 1237)
    assert java_double_hash(1.0) == 1072693248


def test_key_groups() -> None:
    assert flink_murmur_hash(0) >= 0
    assert all(0 <= assign_key_group(java_string_hash(f"key-{i}"), 128) < 128 for i in range(100))
    assert key_group_range_for_operator_index(128, 2, 0) == KeyGroupRange(0, 63)
    assert key_group_range_for_operator_index(128, 2, 1) == KeyGroupRange(64, 127)
    assert [key_group_range_for_operator_index(128, 3, i) for i in range(3)] == [
        KeyGroupRange(0, 42), KeyGroupRange(43, 85), KeyGroupRange(86, 127)]
    assert operator_index_for_key_group(128, 3, 43) == 1
    assert [default_max_parallelism(p) for p in (1, 2, 100, 200, 30000)] == [128, 128, 256, 512, 32768]
    assert len(KeyGroupRange(0, -1)) == 0 and 5 in KeyGroupRange(0, 63)
    assert KeyGroupRange(0, 63).intersection(KeyGroupRange(60, 100)) == KeyGroupRange(60, 63)


def test_operator_id_from_uid() -> None:
    # Flink 2.3 wrote these operator ids for the sample job's uids.
    assert operator_id_from_uid("stats") == "6ff44e1cda9c78739616fcefe460e861"
    assert operator_id_from_uid("sequence-source") == "f421c7059e6771b9a595acc02e87aaef"


def test_reader_writer_roundtrip_and_truncation() -> None:
    writer = Writer()
    writer.i32(-5)
    writer.i64(1 << 40)
    writer.utf("naïve")
    writer.sv("x")
    writer.bool(True)
    writer.i16(-2)
    reader = Reader(writer.getvalue(), path="some/file", base=100)
    assert (reader.i32(), reader.i64(), reader.utf(), reader.sv(), reader.bool(), reader.i16()) == (
        -5, 1 << 40, "naïve", "x", True, -2)
    with pytest.raises(TruncatedData, match=r"some/file: offset \d+: truncated"):
        reader.i32()
