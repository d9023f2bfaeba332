"""Kubernetes resource quantities ("80Gi", "10G", "500m"), parsed and printed as apimachinery does.

A value is held exactly as an integer number of nano-units: Kubernetes rounds every parsed value
up (away from zero) to a multiple of 10^-9, so that representation is lossless. Printing follows
apimachinery's canonical form, including its habit of keeping the user's own spelling when the
input was already canonical (so ``str(Quantity.parse("+1")) == "+1"`` exactly as upstream).
"""

from __future__ import annotations

import re
from functools import total_ordering
from typing import Final

__all__ = ["BINARY_SI", "DECIMAL_EXPONENT", "DECIMAL_SI", "Quantity", "QuantityError"]

DECIMAL_SI: Final = "DecimalSI"
BINARY_SI: Final = "BinarySI"
DECIMAL_EXPONENT: Final = "DecimalExponent"

_SPLIT_RE = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
_MSG_FORMAT = f"quantities must match the regular expression '{_SPLIT_RE}'"
_MSG_NUMERIC = "unable to parse numeric part of quantity"
_MSG_SUFFIX = "unable to parse quantity's suffix"

_NANO: Final = 10**9
_INT64_MAX: Final = 2**63 - 1
# Exponents beyond this would make the exact integer absurdly large; upstream accepts them but
# no real device or quota needs 10^4096, and refusing keeps hostile input from exhausting memory.
_MAX_DEC_EXPONENT: Final = 4096

_DEC_SUFFIXES: Final = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BIN_SUFFIXES: Final = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DEC_BY_EXP: Final = {v: k for k, v in _DEC_SUFFIXES.items()}
_BIN_BY_EXP: Final = {v: k for k, v in _BIN_SUFFIXES.items()}

_NUMBER_RE = re.compile(r"([+-]?)(0*)([0-9]*)(?:\.([0-9]*))?")
_SUFFIX_RE = re.compile(r"[eEinumkKMGTP]*[-+]?[0-9]*")


class QuantityError(ValueError):
    """The text is not a Kubernetes quantity; the message is apimachinery's."""


def _interpret_suffix(suffix: str) -> tuple[int, int, str]:
    """Return (base, exponent, format) for a suffix, as apimachinery's suffixer does."""
    if suffix in _DEC_SUFFIXES:
        return 10, _DEC_SUFFIXES[suffix], DECIMAL_SI
    if suffix in _BIN_SUFFIXES:
        return 2, _BIN_SUFFIXES[suffix], BINARY_SI
    if len(suffix) > 1 and suffix[0] in "eE":
        body = suffix[1:]
        if re.fullmatch(r"[+-]?[0-9]+", body):
            exp = int(body)
            if abs(exp) > _MAX_DEC_EXPONENT:
                raise QuantityError(f"quantity exponent {exp} is out of range")
            return 10, exp, DECIMAL_EXPONENT
    raise QuantityError(_MSG_SUFFIX)


def _ceil_div(a: int, b: int) -> int:
    return -((-a) // b)


@total_ordering
class Quantity:
    """An exact, immutable Kubernetes quantity."""

    __slots__ = ("_s", "format", "nanos")

    nanos: int
    format: str
    _s: str | None

    def __init__(self, nanos: int, format: str = DECIMAL_SI, _s: str | None = None) -> None:
        self.nanos = nanos
        self.format = format
        self._s = _s

    # -- construction -------------------------------------------------------------------------
    @classmethod
    def parse(cls, value: str | int | float) -> Quantity:
        """Parse a manifest value; JSON/YAML numbers are read through their text, as upstream."""
        if isinstance(value, bool):
            raise QuantityError(_MSG_FORMAT)
        if isinstance(value, int):
            text = str(value)
        elif isinstance(value, float):
            if value != value or value in (float("inf"), float("-inf")):
                raise QuantityError(_MSG_NUMERIC)
            text = repr(value)
        elif isinstance(value, str):
            text = value
        else:
            raise QuantityError(_MSG_FORMAT)
        return _parse(text)

    @classmethod
    def from_int(cls, value: int, format: str = DECIMAL_SI) -> Quantity:
        return cls(value * _NANO, format)

    # -- arithmetic and comparison --------------------------------------------------------------
    def __add__(self, other: Quantity) -> Quantity:
        if not isinstance(other, Quantity):
            return NotImplemented
        fmt = other.format if self.nanos == 0 else self.format
        return Quantity(self.nanos + other.nanos, fmt)

    def __sub__(self, other: Quantity) -> Quantity:
        if not isinstance(other, Quantity):
            return NotImplemented
        fmt = other.format if self.nanos == 0 else self.format
        return Quantity(self.nanos - other.nanos, fmt)

    def __neg__(self) -> Quantity:
        return Quantity(-self.nanos, self.format)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Quantity):
            return self.nanos == other.nanos
        return NotImplemented

    def __lt__(self, other: Quantity) -> bool:
        if isinstance(other, Quantity):
            return self.nanos < other.nanos
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.nanos)

    def cmp(self, other: Quantity) -> int:
        return (self.nanos > other.nanos) - (self.nanos < other.nanos)

    # -- views ----------------------------------------------------------------------------------
    @property
    def sign(self) -> int:
        return (self.nanos > 0) - (self.nanos < 0)

    def is_zero(self) -> bool:
        return self.nanos == 0

    def is_integer(self) -> bool:
        """True when the value is a whole number that fits in an int64 (CEL's isInteger)."""
        return self.nanos % _NANO == 0 and -(2**63) <= self.nanos // _NANO <= _INT64_MAX

    def as_int(self) -> int:
        """The exact int64 value; raises ValueError otherwise (CEL's asInteger)."""
        if not self.is_integer():
            raise ValueError(f"cannot convert value to integer: {self} is not an exact int64")
        return self.nanos // _NANO

    def as_float(self) -> float:
        return self.nanos / _NANO

    def value(self) -> int:
        """The value rounded up to a whole number (apimachinery's Value())."""
        return _ceil_div(self.nanos, _NANO) if self.nanos >= 0 else -_ceil_div(-self.nanos, _NANO)

    def milli_value(self) -> int:
        """The value in milli-units rounded up (apimachinery's MilliValue())."""
        m = 10**6
        return _ceil_div(self.nanos, m) if self.nanos >= 0 else -_ceil_div(-self.nanos, m)

    def canonical(self) -> str:
        """The canonical text, ignoring any spelling kept from the input."""
        return _canonical(self.nanos, self.format)

    def __str__(self) -> str:
        return self._s if self._s is not None else _canonical(self.nanos, self.format)

    def __repr__(self) -> str:
        return f"Quantity({str(self)!r})"


def _parse(text: str) -> Quantity:
    if not text:
        raise QuantityError(_MSG_FORMAT)
    if text == "0":
        return Quantity(0, DECIMAL_SI, "0")
    m = _NUMBER_RE.match(text)
    assert m is not None  # the pattern can match the empty prefix
    sign, num, denom = m.group(1), m.group(3), m.group(4)
    rest = text[m.end() :]
    if not _SUFFIX_RE.fullmatch(rest):
        raise QuantityError(_MSG_FORMAT)
    if not num:
        num = "0"
    denom = denom or ""
    base, exponent, fmt = _interpret_suffix(rest)
    positive = sign != "-"

    kept: str | None = None
    fast = _fast_path(num, denom, base, exponent, fmt)
    if fast is not None:
        nanos, keep = fast
        if keep:
            kept = text
        return Quantity(nanos if positive else -nanos, fmt, kept)

    # Exact slow path: value = int(num.denom) * base**exponent, rounded up to nanos.
    digits = int(num + denom)
    scale = len(denom)  # value = digits / 10**scale
    if base == 10:
        scale -= exponent
        numerator, denominator = digits, 1
        if scale >= 0:
            denominator = 10**scale
        else:
            numerator = digits * 10 ** (-scale)
    else:
        numerator, denominator = digits * (1 << exponent), 10**scale
    nanos = _ceil_div(numerator * _NANO, denominator) if numerator else 0
    if fmt == BINARY_SI and nanos > _INT64_MAX * _NANO:
        nanos = _INT64_MAX * _NANO
    if fmt == BINARY_SI and 0 < nanos < _NANO:
        fmt = DECIMAL_SI
    return Quantity(nanos if positive else -nanos, fmt)


def _fast_path(num: str, denom: str, base: int, exponent: int, fmt: str) -> tuple[int, bool] | None:
    """apimachinery's int64 fast path: exact, and it decides whether the input text is kept."""
    if fmt in (DECIMAL_SI, DECIMAL_EXPONENT):
        if 18 - (len(num) + len(denom)) < 0:
            return None
        scale = exponent - len(denom)
        if scale < -9:
            return None
        shifted = num + denom
        if not shifted:
            return None
        value = int(shifted)
        keep = scale % 3 == 0 and not shifted.endswith("000") and shifted[0] != "0"
        return value * 10 ** (scale + 9), keep
    # BinarySI: only whole numbers whose product still fits an int64 take the fast path.
    if exponent < 0 or denom:
        return None
    if 15 - len(num) - int(exponent * 3 / 10) - 1 < 0:
        return None
    value = int(num)
    result = value << exponent
    if result > _INT64_MAX:
        return None
    return result * _NANO, exponent % 10 == 0 and value & 7 != 0


def _canonical(nanos: int, fmt: str) -> str:
    if nanos == 0:
        return "0"
    if fmt == BINARY_SI:
        if -1024 * _NANO < nanos < 1024 * _NANO or nanos % _NANO:
            fmt = DECIMAL_SI
        else:
            value = nanos // _NANO
            exp = 0
            while value % 1024 == 0 and exp < 6:
                value //= 1024
                exp += 1
            return f"{value}{_BIN_BY_EXP.get(exp * 10, '')}"
    mantissa, exp = nanos, -9
    while mantissa % 10 == 0:
        mantissa //= 10
        exp += 1
    r = exp % 3
    if r == 1:
        mantissa, exp = mantissa * 10, exp - 1
    elif r == 2:
        mantissa, exp = mantissa * 100, exp - 2
    if fmt == DECIMAL_SI and exp in _DEC_BY_EXP:
        return f"{mantissa}{_DEC_BY_EXP[exp]}"
    return f"{mantissa}" if exp == 0 else f"{mantissa}e{exp}"
