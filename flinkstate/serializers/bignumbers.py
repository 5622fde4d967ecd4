"""BigInteger and BigDecimal as Flink's ``BigIntSerializer`` and ``BigDecSerializer`` write them (members of the
``SimpleTypeSerializerSnapshot`` family, whose table is :mod:`flinkstate.serializers.primitives`). Python values:
BigInteger -> int, BigDecimal -> Decimal (exact, any precision); null -> None."""

from __future__ import annotations

from decimal import Decimal

from flinkstate.binary import I32
from flinkstate.format_errors import SavepointFormatError

# BigIntSerializer writes the codes 1, 2, 3 for the BigInteger.ZERO/ONE/TEN *instances* (reference equality), the
# general form (i32 len+4, two's complement bytes) for every other instance, equal values included. The instances are
# what Java nearly always has (BigInteger.valueOf, arithmetic results, BigDecimal.unscaledValue() of a small decimal),
# so 0, 1 and 10 are written as the codes; a 0, 1 or 10 read in the general form is decoded as a
# NonCanonicalBigInteger (an int) or NonCanonicalBigDecimal (a Decimal) whose encoding keeps that form, so that
# re-encoding writes back the very bytes that were read.
_BIGINT_SHORTCUTS = {1: 0, 2: 1, 3: 10}
_BIGINT_CODES = {0: I32.pack(1), 1: I32.pack(2), 10: I32.pack(3)}


class NonCanonicalBigInteger(int):
    """0, 1 or 10 stored in BigIntSerializer's general form (not as the shortcut code)."""


class NonCanonicalBigDecimal(Decimal):
    """A BigDecimal whose unscaled value 0, 1 or 10 was stored in the general form."""


def decode_big_integer(buf: bytes, off: int) -> tuple[int | None, int]:
    code = I32.unpack_from(buf, off)[0]
    off += 4
    if code == 0:
        return None, off
    if code in _BIGINT_SHORTCUTS:
        return _BIGINT_SHORTCUTS[code], off
    if code < 4:
        raise SavepointFormatError(f"BigInteger length code {code} is negative", offset=off - 4)
    n = code - 4
    if off + n > len(buf):
        raise SavepointFormatError(f"BigInteger of {n} bytes runs past the end of the record", offset=off - 4)
    value = int.from_bytes(buf[off:off + n], "big", signed=True)
    return (NonCanonicalBigInteger(value) if value in _BIGINT_CODES else value), off + n


def encode_big_integer(value: int | None, out: bytearray) -> None:
    if value is None:
        out += I32.pack(0)
        return
    if value in _BIGINT_CODES and type(value) is not NonCanonicalBigInteger:
        out += _BIGINT_CODES[value]
        return
    # BigInteger.toByteArray: the minimal two's complement, at least one byte.
    raw = value.to_bytes((value if value >= 0 else ~value).bit_length() // 8 + 1, "big", signed=True)
    out += I32.pack(len(raw) + 4) + raw


def decode_big_decimal(buf: bytes, off: int) -> tuple[Decimal | None, int]:
    unscaled, off = decode_big_integer(buf, off)
    if unscaled is None:
        return None, off
    scale = I32.unpack_from(buf, off)[0]
    # Built from the digits: Decimal arithmetic (scaleb) would round to the context's 28 digits.
    # (Decimal(int) and int(Decimal) are exact and, unlike str(), know no 4300-digit limit.)
    cls = NonCanonicalBigDecimal if type(unscaled) is NonCanonicalBigInteger else Decimal
    sign, digits, _ = Decimal(unscaled).as_tuple()
    return cls((sign, digits, -scale)), off + 4


def encode_big_decimal(value: Decimal | None, out: bytearray) -> None:
    if value is None:
        encode_big_integer(None, out)
        return
    sign, digits, exponent = value.as_tuple()
    if not isinstance(exponent, int):
        raise ValueError(f"BigDecimal has no {value}")
    unscaled = int(Decimal((sign, digits, 0)))
    if type(value) is NonCanonicalBigDecimal:
        unscaled = NonCanonicalBigInteger(unscaled)
    encode_big_integer(unscaled, out)
    out += I32.pack(-exponent)


__all__ = ["NonCanonicalBigDecimal", "NonCanonicalBigInteger", "decode_big_decimal", "decode_big_integer",
           "encode_big_decimal", "encode_big_integer"]
