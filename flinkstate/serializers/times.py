"""Exact value models of Java's date and time types, as Flink's serializers store them.

Python's ``datetime`` has microseconds and years 1..9999; Java's ``Instant``, ``LocalDateTime``, ``LocalTime`` and
``java.sql.Timestamp`` have nanoseconds, and Java's ranges reach years far beyond 9999 and before 1 (``Instant``
spans years -1,000,000,000..1,000,000,000, ``LocalDate`` -999,999,999..999,999,999, a ``java.util.Date``
+-292 million years). Decoding into ``datetime`` silently dropped the nanoseconds (and any re-encoding wrote the
shortened value), or failed outright outside 1..9999. These models keep every stored bit:

=================  =========================================  ===========================================
model              fields (what Flink's serializer writes)    ``str()`` / JSON
=================  =========================================  ===========================================
:class:`Instant`        ``seconds`` (i64), ``nanos`` (i32)         ``2024-05-01T10:15:00.123456789Z``
:class:`SqlTimestamp`   ``millis`` (i64 getTime), ``nanos`` (i32)  ``2024-05-01T10:15:00.123456789Z`` (UTC)
:class:`LocalDateTime`  LocalDate then LocalTime                   ``2024-05-01T10:15:00.123456789``
:class:`LocalDate`      ``year`` (i32), ``month``, ``day`` (i8)    ``2024-05-01``
:class:`LocalTime`      ``hour``, ``minute``, ``second`` (i8),     ``10:15:00.000000001``
                        ``nano`` (i32)
:class:`Date`,          ``millis`` (i64 getTime)                   ``2024-05-01T10:15:00.123Z`` (UTC)
:class:`SqlDate`,
:class:`SqlTime`
=================  =========================================  ===========================================

Years outside 0000..9999 are written as Java does (``+10000-01-01...``, ``-0001-...``). Every model is a frozen,
hashable, ordered dataclass (ordering = time order) and validates its fields like Java's factory methods
(``Instant.ofEpochSecond``, ``LocalDate.of``, ``LocalTime.of``, ``Timestamp.setNanos``), so an invalid value fails
where it is made. ``to_datetime()`` / ``to_date()`` / ``to_time()`` convert to Python's types and raise
:class:`ValueError` rather than lose anything (pass ``lossy=True`` to truncate nanoseconds to microseconds; the
range still has to fit); ``from_datetime()`` etc. convert back exactly.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

NANOS_PER_SECOND = 1_000_000_000
SECONDS_PER_DAY = 86_400
#: ``Instant.MIN`` / ``Instant.MAX`` epoch seconds (years -1e9 and 1e9).
INSTANT_MIN_SECONDS = -31_557_014_167_219_200
INSTANT_MAX_SECONDS = 31_556_889_864_403_199
#: ``Year.MIN_VALUE`` / ``Year.MAX_VALUE``.
YEAR_MIN = -999_999_999
YEAR_MAX = 999_999_999
LONG_MIN = -(1 << 63)
LONG_MAX = (1 << 63) - 1

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_DAYS_IN_MONTH = (0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


# -- proleptic Gregorian calendar arithmetic for any year (Howard Hinnant's civil algorithms) -------------------------


def is_leap(year: int) -> bool:
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (``LocalDate.toEpochDay``)."""
    year -= month <= 2
    era = year // 400
    yoe = year - era * 400
    doy = (153 * (month - 3 if month > 2 else month + 9) + 2) // 5 + day - 1
    return era * 146_097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 719_468


def civil_from_days(days: int) -> tuple[int, int, int]:
    """(year, month, day) of ``days`` since 1970-01-01 (``LocalDate.ofEpochDay``)."""
    z = days + 719_468
    era = z // 146_097
    doe = z - era * 146_097
    yoe = (doe - doe // 1460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    return yoe + era * 400 + (month <= 2), month, day


def format_year(year: int) -> str:
    """Java's ISO year: at least 4 digits, '-' for negative years, '+' beyond 9999."""
    if -1000 < year < 1000:
        return f"-{-year:04d}" if year < 0 else f"{year:04d}"
    return f"+{year}" if year > 9999 else str(year)


def _format_epoch_seconds(seconds: int, fraction: str) -> str:
    days, secs = divmod(seconds, SECONDS_PER_DAY)
    year, month, day = civil_from_days(days)
    hour, rest = divmod(secs, 3600)
    minute, second = divmod(rest, 60)
    return f"{format_year(year)}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}.{fraction}Z"


def _check(ok: bool, what: str) -> None:
    if not ok:
        raise ValueError(what)


def _check_int(name: str, value: Any) -> None:
    if type(value) is not int:
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")


def _lossless_micros(nanos: int, lossy: bool, what: str) -> int:
    if nanos % 1000 and not lossy:
        raise ValueError(f"{what} has nanoseconds ({nanos % 1000} below the microsecond) that Python's datetime "
                         f"cannot hold; pass lossy=True to truncate")
    return nanos // 1000


class Temporal:
    """Common base: ``str()`` is the ISO-8601 text ``flinkstate dump`` writes."""

    __slots__ = ()

    def isoformat(self) -> str:
        return str(self)


# -- Instant ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, order=True)
class Instant(Temporal):
    """``java.time.Instant``: ``seconds`` since the epoch and ``nanos`` (0..999,999,999) within that second."""

    seconds: int
    nanos: int = 0

    def __post_init__(self) -> None:
        _check_int("seconds", self.seconds)
        _check_int("nanos", self.nanos)
        _check(INSTANT_MIN_SECONDS <= self.seconds <= INSTANT_MAX_SECONDS,
               f"Instant seconds {self.seconds} outside Java's range")
        _check(0 <= self.nanos < NANOS_PER_SECOND, f"Instant nanos {self.nanos} outside 0..999999999")

    def __str__(self) -> str:
        return _format_epoch_seconds(self.seconds, f"{self.nanos:09d}")

    @property
    def epoch_nanos(self) -> int:
        return self.seconds * NANOS_PER_SECOND + self.nanos

    @classmethod
    def of_epoch_nanos(cls, nanos: int) -> Instant:
        seconds, rest = divmod(nanos, NANOS_PER_SECOND)
        return cls(seconds, rest)

    def to_datetime(self, lossy: bool = False) -> dt.datetime:
        """An aware UTC datetime; ValueError if nanoseconds would be lost (unless ``lossy``) or out of range."""
        micros = _lossless_micros(self.nanos, lossy, f"Instant {self}")
        try:
            return _EPOCH + dt.timedelta(seconds=self.seconds, microseconds=micros)
        except OverflowError:
            raise ValueError(f"Instant {self} is outside Python datetime's years 1..9999") from None

    @classmethod
    def from_datetime(cls, value: dt.datetime) -> Instant:
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(f"a naive datetime ({value}) is no Instant: give it a time zone")
        delta = value - _EPOCH
        return cls(delta.days * SECONDS_PER_DAY + delta.seconds, delta.microseconds * 1000)


# -- java.sql.Timestamp ----------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, order=True)
class SqlTimestamp(Temporal):
    """``java.sql.Timestamp`` as ``SqlTimestampSerializer`` writes it: ``millis`` (``getTime()``, which already
    contains the whole milliseconds of ``nanos``) and ``nanos`` (``getNanos()``, 0..999,999,999: the whole
    fraction of the second). Java keeps the two consistent; so does this model (a mismatch is a ValueError)."""

    millis: int
    nanos: int = 0

    def __post_init__(self) -> None:
        _check_int("millis", self.millis)
        _check_int("nanos", self.nanos)
        _check(LONG_MIN < self.millis <= LONG_MAX, f"Timestamp millis {self.millis} outside a Java long "
                                                   f"(Long.MIN_VALUE is the null marker)")
        _check(0 <= self.nanos < NANOS_PER_SECOND, f"Timestamp nanos {self.nanos} outside 0..999999999")
        _check(self.millis % 1000 == self.nanos // 1_000_000,
               f"Timestamp millis {self.millis} and nanos {self.nanos} disagree on the milliseconds")

    def __str__(self) -> str:
        return _format_epoch_seconds(self.millis // 1000, f"{self.nanos:09d}")

    def to_instant(self) -> Instant:
        """``Timestamp.toInstant()``."""
        return Instant(self.millis // 1000, self.nanos)

    @classmethod
    def from_instant(cls, value: Instant) -> SqlTimestamp:
        """``Timestamp.from(instant)``."""
        return cls(value.seconds * 1000 + value.nanos // 1_000_000, value.nanos)

    def to_datetime(self, lossy: bool = False) -> dt.datetime:
        return self.to_instant().to_datetime(lossy)

    @classmethod
    def from_datetime(cls, value: dt.datetime) -> SqlTimestamp:
        return cls.from_instant(Instant.from_datetime(value))


# -- LocalDate, LocalTime, LocalDateTime -----------------------------------------------------------------------------


def _check_date(year: int, month: int, day: int) -> None:
    for name, value in (("year", year), ("month", month), ("day", day)):
        _check_int(name, value)
    _check(YEAR_MIN <= year <= YEAR_MAX, f"year {year} outside Java's range")
    _check(1 <= month <= 12, f"month {month} outside 1..12")
    last = 29 if month == 2 and is_leap(year) else _DAYS_IN_MONTH[month]
    _check(1 <= day <= last, f"day {day} outside 1..{last} for {format_year(year)}-{month:02d}")


def _check_time(hour: int, minute: int, second: int, nano: int) -> None:
    for name, value in (("hour", hour), ("minute", minute), ("second", second), ("nano", nano)):
        _check_int(name, value)
    _check(0 <= hour < 24 and 0 <= minute < 60 and 0 <= second < 60 and 0 <= nano < NANOS_PER_SECOND,
           f"invalid time {hour}:{minute}:{second}.{nano}")


@dataclass(frozen=True, slots=True, order=True)
class LocalDate(Temporal):
    """``java.time.LocalDate`` (proleptic Gregorian, years -999,999,999..999,999,999)."""

    year: int
    month: int
    day: int

    def __post_init__(self) -> None:
        _check_date(self.year, self.month, self.day)

    def __str__(self) -> str:
        return f"{format_year(self.year)}-{self.month:02d}-{self.day:02d}"

    @property
    def epoch_day(self) -> int:
        return days_from_civil(self.year, self.month, self.day)

    @classmethod
    def of_epoch_day(cls, days: int) -> LocalDate:
        return cls(*civil_from_days(days))

    def to_date(self) -> dt.date:
        if not 1 <= self.year <= 9999:
            raise ValueError(f"LocalDate {self} is outside Python date's years 1..9999")
        return dt.date(self.year, self.month, self.day)

    @classmethod
    def from_date(cls, value: dt.date) -> LocalDate:
        return cls(value.year, value.month, value.day)


@dataclass(frozen=True, slots=True, order=True)
class LocalTime(Temporal):
    """``java.time.LocalTime``: nanosecond precision."""

    hour: int
    minute: int = 0
    second: int = 0
    nano: int = 0

    def __post_init__(self) -> None:
        _check_time(self.hour, self.minute, self.second, self.nano)

    def __str__(self) -> str:
        return f"{self.hour:02d}:{self.minute:02d}:{self.second:02d}.{self.nano:09d}"

    def to_time(self, lossy: bool = False) -> dt.time:
        micros = _lossless_micros(self.nano, lossy, f"LocalTime {self}")
        return dt.time(self.hour, self.minute, self.second, micros)

    @classmethod
    def from_time(cls, value: dt.time) -> LocalTime:
        if value.tzinfo is not None:
            raise ValueError(f"an aware time ({value}) is no LocalTime")
        return cls(value.hour, value.minute, value.second, value.microsecond * 1000)


@dataclass(frozen=True, slots=True, order=True)
class LocalDateTime(Temporal):
    """``java.time.LocalDateTime``: a :class:`LocalDate` and a :class:`LocalTime`, flat."""

    year: int
    month: int
    day: int
    hour: int = 0
    minute: int = 0
    second: int = 0
    nano: int = 0

    def __post_init__(self) -> None:
        _check_date(self.year, self.month, self.day)
        _check_time(self.hour, self.minute, self.second, self.nano)

    def __str__(self) -> str:
        return (f"{format_year(self.year)}-{self.month:02d}-{self.day:02d}T"
                f"{self.hour:02d}:{self.minute:02d}:{self.second:02d}.{self.nano:09d}")

    @property
    def date(self) -> LocalDate:
        return LocalDate(self.year, self.month, self.day)

    @property
    def time(self) -> LocalTime:
        return LocalTime(self.hour, self.minute, self.second, self.nano)

    @classmethod
    def of(cls, date: LocalDate, time: LocalTime) -> LocalDateTime:
        return cls(date.year, date.month, date.day, time.hour, time.minute, time.second, time.nano)

    def to_datetime(self, lossy: bool = False) -> dt.datetime:
        """A naive datetime; ValueError if nanoseconds would be lost (unless ``lossy``) or the year is outside
        1..9999."""
        micros = _lossless_micros(self.nano, lossy, f"LocalDateTime {self}")
        if not 1 <= self.year <= 9999:
            raise ValueError(f"LocalDateTime {self} is outside Python datetime's years 1..9999")
        return dt.datetime(self.year, self.month, self.day, self.hour, self.minute, self.second, micros)

    @classmethod
    def from_datetime(cls, value: dt.datetime) -> LocalDateTime:
        if value.tzinfo is not None:
            raise ValueError(f"an aware datetime ({value}) is no LocalDateTime")
        return cls(value.year, value.month, value.day, value.hour, value.minute, value.second,
                   value.microsecond * 1000)


# -- java.util.Date, java.sql.Date, java.sql.Time: milliseconds since the epoch -------------------------------------


@dataclass(frozen=True, slots=True, order=True)
class EpochMillis(Temporal):
    millis: int

    def __post_init__(self) -> None:
        _check_int("millis", self.millis)
        _check(LONG_MIN < self.millis <= LONG_MAX, f"{type(self).__name__} millis {self.millis} outside a Java "
                                                   f"long (Long.MIN_VALUE is the null marker)")

    def __str__(self) -> str:
        seconds, millis = divmod(self.millis, 1000)
        return _format_epoch_seconds(seconds, f"{millis:03d}")

    def to_instant(self) -> Instant:
        seconds, millis = divmod(self.millis, 1000)
        return Instant(seconds, millis * 1_000_000)

    def to_datetime(self) -> dt.datetime:
        """An aware UTC datetime (milliseconds always fit); ValueError outside years 1..9999."""
        return self.to_instant().to_datetime()

    @classmethod
    def from_datetime(cls, value: dt.datetime) -> Any:
        """Exact only for whole milliseconds: finer microseconds raise ValueError (Java's Date has none)."""
        instant = Instant.from_datetime(value)
        if instant.nanos % 1_000_000:
            raise ValueError(f"{value} has microseconds below the millisecond that a {cls.__name__} cannot hold")
        return cls(instant.seconds * 1000 + instant.nanos // 1_000_000)


class Date(EpochMillis):
    """``java.util.Date`` (``getTime()`` milliseconds since the epoch)."""

    __slots__ = ()


class SqlDate(EpochMillis):
    """``java.sql.Date`` (milliseconds since the epoch, as stored; Java renders it in the JVM's time zone, this
    model in UTC)."""

    __slots__ = ()


class SqlTime(EpochMillis):
    """``java.sql.Time`` (milliseconds since the epoch, as stored; rendered in UTC)."""

    __slots__ = ()


TEMPORAL_TYPES = (Instant, SqlTimestamp, LocalDate, LocalTime, LocalDateTime, Date, SqlDate, SqlTime)

__all__ = ["TEMPORAL_TYPES", "Date", "EpochMillis", "Instant", "LocalDate", "LocalDateTime", "LocalTime", "SqlDate",
           "SqlTime", "SqlTimestamp", "Temporal", "civil_from_days", "days_from_civil", "format_year", "is_leap"]


# -- unchecked constructors for decoders -----------------------------------------------------------------------------
# A checked constructor costs ~1.5 us (frozen dataclass __init__ plus validation), four times the decode itself.
# Decoders check the few range conditions inline and build through the slot descriptors directly (~0.35 us).

_new = object.__new__


def _setters(cls: type, *names: str) -> tuple[Any, ...]:
    return tuple(getattr(cls, name).__set__ for name in names)


def _make_two(cls: type, first: str, second: str) -> Any:
    set_a, set_b = _setters(cls, first, second)

    def make(a: int, b: int) -> Any:
        obj: Any = _new(cls)
        set_a(obj, a)
        set_b(obj, b)
        return obj

    return make


def _make_one(cls: type) -> Any:
    (set_millis,) = _setters(cls, "millis")

    def make(millis: int) -> Any:
        obj: Any = _new(cls)
        set_millis(obj, millis)
        return obj

    return make


def _make_local_date_time() -> Any:
    setters = _setters(LocalDateTime, "year", "month", "day", "hour", "minute", "second", "nano")
    set_y, set_mo, set_d, set_h, set_mi, set_s, set_n = setters

    def make(year: int, month: int, day: int, hour: int, minute: int, second: int, nano: int) -> LocalDateTime:
        obj = _new(LocalDateTime)
        set_y(obj, year)
        set_mo(obj, month)
        set_d(obj, day)
        set_h(obj, hour)
        set_mi(obj, minute)
        set_s(obj, second)
        set_n(obj, nano)
        return obj

    return make


def _make_local_time() -> Any:
    set_h, set_mi, set_s, set_n = _setters(LocalTime, "hour", "minute", "second", "nano")

    def make(hour: int, minute: int, second: int, nano: int) -> LocalTime:
        obj = _new(LocalTime)
        set_h(obj, hour)
        set_mi(obj, minute)
        set_s(obj, second)
        set_n(obj, nano)
        return obj

    return make


def _make_local_date() -> Any:
    set_y, set_mo, set_d = _setters(LocalDate, "year", "month", "day")

    def make(year: int, month: int, day: int) -> LocalDate:
        obj = _new(LocalDate)
        set_y(obj, year)
        set_mo(obj, month)
        set_d(obj, day)
        return obj

    return make


#: Build without validation: only for decoders that checked the fields already.
unchecked_instant = _make_two(Instant, "seconds", "nanos")
unchecked_sql_timestamp = _make_two(SqlTimestamp, "millis", "nanos")
unchecked_local_time = _make_local_time()
unchecked_local_date = _make_local_date()
unchecked_local_date_time = _make_local_date_time()
unchecked_epoch_millis = {Date: _make_one(Date), SqlDate: _make_one(SqlDate), SqlTime: _make_one(SqlTime)}
