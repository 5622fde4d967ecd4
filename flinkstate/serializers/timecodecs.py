"""The bytes of the date and time serializers of ``org.apache.flink.api.common.typeutils.base`` (members of the
``SimpleTypeSerializerSnapshot`` family, whose table is :mod:`flinkstate.serializers.primitives`): java.util.Date,
java.sql.Date/Time/Timestamp, Instant, LocalDate, LocalTime, LocalDateTime, each with Java's ``hashCode``. The values
are the exact models of :mod:`flinkstate.serializers.times`."""

from __future__ import annotations

import datetime as dt
import struct
from collections.abc import Callable
from typing import Any

from flinkstate.binary import I8, I16, I32, I64, INT_MIN, LONG_MIN, java_long_hash, to_int32
from flinkstate.format_errors import SavepointFormatError
from flinkstate.serializers import times
from flinkstate.serializers.base import Decoder, Encoder

# Exact models (times.py): nanoseconds and Java's whole year range survive decoding, so re-encoding writes the very
# bytes Flink wrote. Encoders also take Python datetime/date/time values (converted exactly, or refused).

_I64_I32 = struct.Struct(">qi")
_LOCAL_DATE = struct.Struct(">ibb")
_LOCAL_TIME = struct.Struct(">bbbi")
_LOCAL_DATE_TIME = struct.Struct(">ibbbbbi")
_NANOS = 1_000_000_000
_LOCAL_DATE_NULL = I32.pack(INT_MIN) + I16.pack(-(1 << 15))
_LOCAL_TIME_NULL = I8.pack(-128) + I16.pack(-(1 << 15)) + I32.pack(INT_MIN)


def _bad(what: str, off: int) -> SavepointFormatError:
    return SavepointFormatError(what, offset=off)


def _coerce(value: Any, model: type, from_python: Callable[[Any], Any], python_type: type | tuple[type, ...]) -> Any:
    """A model value from ``value``: the model itself, or a Python date/time converted exactly."""
    if isinstance(value, model):
        return value
    if isinstance(value, python_type):
        return from_python(value)
    raise TypeError(f"expected a {model.__name__}, got {type(value).__name__}")


def _epoch_millis_codec(model: type[times.EpochMillis]) -> tuple[Decoder, Encoder]:
    """java.util.Date, java.sql.Date, java.sql.Time: ``i64 getTime()``, Long.MIN_VALUE for null."""
    make = times.unchecked_epoch_millis[model]
    unpack, pack = I64.unpack_from, I64.pack
    null = pack(LONG_MIN)

    def decode(buf: bytes, off: int) -> tuple[Any, int]:
        millis = unpack(buf, off)[0]
        return (None if millis == LONG_MIN else make(millis)), off + 8

    def encode(value: Any, out: bytearray) -> None:
        if value is None:
            out += null
        elif isinstance(value, times.EpochMillis):  # the three share the stored form
            out += pack(value.millis)
        else:
            out += pack(_coerce(value, model, model.from_datetime, dt.datetime).millis)

    return decode, encode


def _temporal_encoder(model: type, from_python: Callable[[Any], Any], python_type: type, null: bytes,
                      fields: Callable[[Any], bytes]) -> Encoder:
    """The encoder of one of the java.time / java.sql models: ``null`` for None, else ``fields`` of the model value
    (a Python date/time converted exactly first, anything else refused)."""

    def encode(value: Any, out: bytearray) -> None:
        if value is None:
            out += null
            return
        if type(value) is not model:
            value = _coerce(value, model, from_python, python_type)
        out += fields(value)

    return encode


def _decode_sql_timestamp(buf: bytes, off: int) -> tuple[times.SqlTimestamp | None, int]:
    millis, nanos = _I64_I32.unpack_from(buf, off)
    if millis == LONG_MIN:  # null: the nanos int is a 0 placeholder
        return None, off + 12
    if not 0 <= nanos < _NANOS:
        raise _bad(f"java.sql.Timestamp nanos {nanos} outside 0..999999999", off + 8)
    # new Timestamp(millis).setNanos(nanos): the whole seconds come from millis, the fraction from nanos (Flink
    # writes getTime(), which already agrees with nanos; this is what Java reads from any bytes).
    return _make_sql_timestamp(millis - millis % 1000 + nanos // 1_000_000, nanos), off + 12


def _decode_instant(buf: bytes, off: int) -> tuple[times.Instant | None, int]:
    seconds, nanos = _I64_I32.unpack_from(buf, off)
    if 0 <= nanos < _NANOS and _INSTANT_MIN <= seconds <= _INSTANT_MAX:
        return _make_instant(seconds, nanos), off + 12
    if seconds == LONG_MIN and nanos == INT_MIN:
        return None, off + 12
    try:  # Instant.ofEpochSecond(seconds, nanoAdjustment) normalises the nanos, then checks the range
        return times.Instant.of_epoch_nanos(seconds * _NANOS + nanos), off + 12
    except ValueError as e:
        raise _bad(f"Instant ({seconds} s, {nanos} ns): {e}", off) from None


def _decode_local_date(buf: bytes, off: int) -> tuple[times.LocalDate | None, int]:
    year, month, day = _LOCAL_DATE.unpack_from(buf, off)
    if 1 <= month <= 12 and 1 <= day <= _MONTH_DAYS[month] and _YEAR_MIN <= year <= _YEAR_MAX:
        return _make_local_date(year, month, day), off + 6
    if year == INT_MIN:
        return None, off + 6
    try:  # February 29 and invalid values: the full check
        return times.LocalDate(year, month, day), off + 6
    except ValueError as e:
        raise _bad(f"LocalDate: {e}", off) from None


def _decode_local_time(buf: bytes, off: int) -> tuple[times.LocalTime | None, int]:
    hour, minute, second, nano = _LOCAL_TIME.unpack_from(buf, off)
    if 0 <= hour < 24 and 0 <= minute < 60 and 0 <= second < 60 and 0 <= nano < _NANOS:
        return _make_local_time(hour, minute, second, nano), off + 7
    if hour == -128:
        return None, off + 7
    raise _bad(f"LocalTime: invalid time {hour}:{minute}:{second}.{nano}", off)


def _decode_local_date_time(buf: bytes, off: int) -> tuple[times.LocalDateTime | None, int]:
    year, month, day, hour, minute, second, nano = _LOCAL_DATE_TIME.unpack_from(buf, off)
    if 1 <= month <= 12 and 1 <= day <= _MONTH_DAYS[month] and _YEAR_MIN <= year <= _YEAR_MAX and 0 <= hour < 24 \
            and 0 <= minute < 60 and 0 <= second < 60 and 0 <= nano < _NANOS:
        return _make_local_date_time(year, month, day, hour, minute, second, nano), off + 13
    if year == INT_MIN and hour == -128:
        return None, off + 13
    if year == INT_MIN or hour == -128:
        raise _bad("LocalDateTime: exactly one of LocalDate and LocalTime is null", off)
    try:  # February 29 and invalid values: the full check
        return times.LocalDateTime(year, month, day, hour, minute, second, nano), off + 13
    except ValueError as e:
        raise _bad(f"LocalDateTime: {e}", off) from None


_encode_sql_timestamp = _temporal_encoder(times.SqlTimestamp, times.SqlTimestamp.from_datetime, dt.datetime,
                                          _I64_I32.pack(LONG_MIN, 0), lambda v: _I64_I32.pack(v.millis, v.nanos))
_encode_instant = _temporal_encoder(times.Instant, times.Instant.from_datetime, dt.datetime,
                                    _I64_I32.pack(LONG_MIN, INT_MIN), lambda v: _I64_I32.pack(v.seconds, v.nanos))
_encode_local_date = _temporal_encoder(times.LocalDate, times.LocalDate.from_date, dt.date, _LOCAL_DATE_NULL,
                                       lambda v: _LOCAL_DATE.pack(v.year, v.month, v.day))
_encode_local_time = _temporal_encoder(times.LocalTime, times.LocalTime.from_time, dt.time, _LOCAL_TIME_NULL,
                                       lambda v: _LOCAL_TIME.pack(v.hour, v.minute, v.second, v.nano))
_encode_local_date_time = _temporal_encoder(
    times.LocalDateTime, times.LocalDateTime.from_datetime, dt.datetime, _LOCAL_DATE_NULL + _LOCAL_TIME_NULL,
    lambda v: _LOCAL_DATE_TIME.pack(v.year, v.month, v.day, v.hour, v.minute, v.second, v.nano))
_make_instant = times.unchecked_instant
_make_sql_timestamp = times.unchecked_sql_timestamp
_make_local_time = times.unchecked_local_time
_make_local_date = times.unchecked_local_date
_make_local_date_time = times.unchecked_local_date_time
_INSTANT_MIN, _INSTANT_MAX = times.INSTANT_MIN_SECONDS, times.INSTANT_MAX_SECONDS
_YEAR_MIN, _YEAR_MAX = times.YEAR_MIN, times.YEAR_MAX
#: Days per month (index 1..12) valid in every year; February 29 takes the full (leap year) check.
_MONTH_DAYS = (0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def _instant_hash(value: times.Instant) -> int:
    # Instant.hashCode: ((int) (seconds ^ (seconds >>> 32))) + 51 * nanos
    return to_int32(java_long_hash(value.seconds) + 51 * value.nanos)


def _local_date_hash(value: times.LocalDate) -> int:
    # LocalDate.hashCode: (year & 0xFFFFF800) ^ ((year << 11) + (month << 6) + day)
    year = value.year
    return to_int32((year & 0xFFFFF800) ^ ((year << 11) + (value.month << 6) + value.day))


def _local_time_hash(value: times.LocalTime) -> int:
    # LocalTime.hashCode: Long.hashCode(toNanoOfDay())
    return java_long_hash(((value.hour * 60 + value.minute) * 60 + value.second) * _NANOS + value.nano)


def _local_date_time_hash(value: times.LocalDateTime) -> int:
    return to_int32(_local_date_hash(value.date) ^ _local_time_hash(value.time))


def _millis_hash(value: Any) -> int:
    # Date.hashCode (and Timestamp's, inherited): Long.hashCode(getTime())
    return java_long_hash(value.millis)


#: (serializer stem, type name, stored length, decoder, encoder, Java hashCode) of each date and time serializer:
#: ``<stem>Serializer$<stem>SerializerSnapshot`` in ``org.apache.flink.api.common.typeutils.base``.
TIME_SERIALIZERS: tuple[tuple[str, str, int, Decoder, Encoder, Callable[[Any], int]], ...] = (
    ("Date", "Date", 8, *_epoch_millis_codec(times.Date), _millis_hash),
    ("SqlDate", "java.sql.Date", 8, *_epoch_millis_codec(times.SqlDate), _millis_hash),
    ("SqlTime", "java.sql.Time", 8, *_epoch_millis_codec(times.SqlTime), _millis_hash),
    ("SqlTimestamp", "java.sql.Timestamp", 12, _decode_sql_timestamp, _encode_sql_timestamp, _millis_hash),
    ("Instant", "Instant", 12, _decode_instant, _encode_instant, _instant_hash),
    ("LocalDate", "LocalDate", 6, _decode_local_date, _encode_local_date, _local_date_hash),
    ("LocalTime", "LocalTime", 7, _decode_local_time, _encode_local_time, _local_time_hash),
    ("LocalDateTime", "LocalDateTime", 13, _decode_local_date_time, _encode_local_date_time, _local_date_time_hash),
)

__all__ = ["TIME_SERIALIZERS"]
