"""CEL standard definitions: operators, ``size``, type conversions, string predicates, regex.

Integer arithmetic is int64/uint64 with overflow errors; division truncates toward zero (Go).
Ordering allows int/uint/double to be compared with each other, as Kubernetes enables
``CrossTypeNumericComparisons``.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from typing import Any

from ..cost import COSTLY_OVERLOADS, charge, charge_text
from ..errors import EvalError
from ..regex import REGEX_CACHE, eval_regex, regex_cost
from ..types import BOOL, BYTES, DOUBLE, DYN, INT, NULL, STRING, TYPE, UINT, Type, list_of, map_of, param
from ..values import (
    INT64_MAX,
    INT64_MIN,
    UINT64_MAX,
    CelType,
    Uint,
    check_int,
    check_uint,
    type_of,
)
from . import register

A = param("A")
B = param("B")
_NUM = (INT, UINT, DOUBLE)


# -- arithmetic --------------------------------------------------------------------------------
def int_div(a: int, b: int) -> int:
    if b == 0:
        raise EvalError("division by zero")
    q = abs(a) // abs(b)
    return check_int(q if (a >= 0) == (b >= 0) else -q)


def int_mod(a: int, b: int) -> int:
    if b == 0:
        raise EvalError("modulus by zero")
    if a == INT64_MIN and b == -1:
        raise EvalError("integer overflow")
    r = abs(a) % abs(b)
    return r if a >= 0 else -r


def _uint_div(a: int, b: int) -> Uint:
    if b == 0:
        raise EvalError("division by zero")
    return Uint(a // b)


def _uint_mod(a: int, b: int) -> Uint:
    if b == 0:
        raise EvalError("modulus by zero")
    return Uint(a % b)


def _double_div(a: float, b: float) -> float:
    if b == 0:
        if a == 0 or a != a:
            return math.nan
        return math.copysign(math.inf, a) * math.copysign(1.0, b)
    return a / b


register("_+_", "add_int64", False, (INT, INT), INT)(lambda a, b: check_int(a + b))
register("_+_", "add_uint64", False, (UINT, UINT), UINT)(lambda a, b: check_uint(a + b))
register("_+_", "add_double", False, (DOUBLE, DOUBLE), DOUBLE)(lambda a, b: a + b)


def _concat_text(a: Any, b: Any) -> Any:
    charge_text(len(a) + len(b))
    return a + b


def _concat_list(a: list[Any], b: list[Any]) -> list[Any]:
    charge(1 + len(a) + len(b))
    return [*a, *b]


register("_+_", "add_string", False, (STRING, STRING), STRING)(_concat_text)
register("_+_", "add_bytes", False, (BYTES, BYTES), BYTES)(_concat_text)
register("_+_", "add_list", False, (list_of(A), list_of(A)), list_of(A))(_concat_list)
COSTLY_OVERLOADS.update(("add_string", "add_bytes", "add_list"))
register("_-_", "subtract_int64", False, (INT, INT), INT)(lambda a, b: check_int(a - b))
register("_-_", "subtract_uint64", False, (UINT, UINT), UINT)(lambda a, b: check_uint(a - b))
register("_-_", "subtract_double", False, (DOUBLE, DOUBLE), DOUBLE)(lambda a, b: a - b)
register("_*_", "multiply_int64", False, (INT, INT), INT)(lambda a, b: check_int(a * b))
register("_*_", "multiply_uint64", False, (UINT, UINT), UINT)(lambda a, b: check_uint(a * b))
register("_*_", "multiply_double", False, (DOUBLE, DOUBLE), DOUBLE)(lambda a, b: a * b)
register("_/_", "divide_int64", False, (INT, INT), INT)(int_div)
register("_/_", "divide_uint64", False, (UINT, UINT), UINT)(_uint_div)
register("_/_", "divide_double", False, (DOUBLE, DOUBLE), DOUBLE)(_double_div)
register("_%_", "modulo_int64", False, (INT, INT), INT)(int_mod)
register("_%_", "modulo_uint64", False, (UINT, UINT), UINT)(_uint_mod)
register("-_", "negate_int64", False, (INT,), INT)(lambda a: check_int(-a))
register("-_", "negate_double", False, (DOUBLE,), DOUBLE)(lambda a: -a)
register("!_", "logical_not", False, (BOOL,), BOOL)(lambda a: not a)

# -- ordering (the compiler evaluates these with values.compare; here only the signatures) ----
_ORDER = {"_<_": "less", "_<=_": "less_equals", "_>_": "greater", "_>=_": "greater_equals"}
for _op, _name in _ORDER.items():
    for _t in (BOOL, STRING, BYTES):
        register(_op, f"{_name}_{_t.kind}", False, (_t, _t), BOOL)(lambda a, b: None)
    for _l in _NUM:
        for _r in _NUM:
            register(_op, f"{_name}_{_l.kind}_{_r.kind}", False, (_l, _r), BOOL)(lambda a, b: None)

register("_==_", "equals", False, (A, A), BOOL)(lambda a, b: None)
register("_!=_", "not_equals", False, (A, A), BOOL)(lambda a, b: None)
register("@in", "in_list", False, (A, list_of(A)), BOOL)(lambda a, b: None)
register("@in", "in_map", False, (A, map_of(A, B)), BOOL)(lambda a, b: None)


# -- size --------------------------------------------------------------------------------------
def _size(v: Any) -> int:
    return len(v)


for _t in (STRING, BYTES, list_of(A), map_of(A, B)):
    register("size", f"size_{_t.kind}", False, (_t,), INT)(_size)
    register("size", f"{_t.kind}_size", True, (_t,), INT)(_size)


# -- conversions -------------------------------------------------------------------------------
def _double_to_int(v: float) -> int:
    if not math.isfinite(v) or not (-(2.0**63) < v < 2.0**63):
        raise EvalError("integer overflow")
    return int(v)


def _string_to_int(v: str) -> int:
    try:
        return check_int(int(v, 10)) if _INT_RE.fullmatch(v) else _bad_conversion(v, "int")
    except ValueError:
        return _bad_conversion(v, "int")


def _bad_conversion(v: str, target: str) -> Any:
    raise EvalError(f"type conversion error from 'string' to '{target}'")


_INT_RE = re.compile(r"[+-]?[0-9]+")
_UINT_RE = re.compile(r"[0-9]+")
_FLOAT_RE = re.compile(
    r"[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|inf(?:inity)?|nan)", re.IGNORECASE
)


def _string_to_uint(v: str) -> Uint:
    if not _UINT_RE.fullmatch(v):
        return _bad_conversion(v, "uint")
    return check_uint(int(v, 10))


def _string_to_double(v: str) -> float:
    if not _FLOAT_RE.fullmatch(v):
        return _bad_conversion(v, "double")
    return float(v)


def _double_to_uint(v: float) -> Uint:
    if not math.isfinite(v) or not (-1.0 < v < 2.0**64):
        raise EvalError("unsigned integer overflow")
    return Uint(int(v))


def format_double(v: float) -> str:
    """Go's ``fmt.Sprintf("%g", v)`` (shortest digits), which cel-go uses for ``string(double)``."""
    if v != v:
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    if v == 0:
        return "-0" if math.copysign(1.0, v) < 0 else "0"
    sign, digits, exponent = Decimal(repr(v)).normalize().as_tuple()
    assert isinstance(exponent, int)
    ds = "".join(str(d) for d in digits)
    exp10 = len(ds) + exponent - 1
    prefix = "-" if sign else ""
    if exp10 < -4 or exp10 >= 6:
        mant = ds[0] + ("." + ds[1:] if len(ds) > 1 else "")
        return f"{prefix}{mant}e{'-' if exp10 < 0 else '+'}{abs(exp10):02d}"
    if exponent >= 0:
        return prefix + ds + "0" * exponent
    point = len(ds) + exponent
    if point > 0:
        return prefix + ds[:point] + "." + ds[point:]
    return prefix + "0." + "0" * (-point) + ds


def _bytes_to_string(v: bytes) -> str:
    try:
        return v.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise EvalError("invalid UTF-8 in bytes, cannot convert to string") from exc


def _string_to_bool(v: str) -> bool:
    if v in ("true", "True", "TRUE", "t", "T", "1"):
        return True
    if v in ("false", "False", "FALSE", "f", "F", "0"):
        return False
    raise EvalError("type conversion error from 'string' to 'bool'")


register("int", "int64_to_int64", False, (INT,), INT)(lambda v: v)
register("int", "uint64_to_int64", False, (UINT,), INT)(lambda v: check_int(int(v)))
register("int", "double_to_int64", False, (DOUBLE,), INT)(_double_to_int)
register("int", "string_to_int64", False, (STRING,), INT)(_string_to_int)
register("uint", "uint64_to_uint64", False, (UINT,), UINT)(lambda v: v)
register("uint", "int64_to_uint64", False, (INT,), UINT)(check_uint)
register("uint", "double_to_uint64", False, (DOUBLE,), UINT)(_double_to_uint)
register("uint", "string_to_uint64", False, (STRING,), UINT)(_string_to_uint)
register("double", "double_to_double", False, (DOUBLE,), DOUBLE)(lambda v: v)
register("double", "int64_to_double", False, (INT,), DOUBLE)(float)
register("double", "uint64_to_double", False, (UINT,), DOUBLE)(float)
register("double", "string_to_double", False, (STRING,), DOUBLE)(_string_to_double)
register("string", "string_to_string", False, (STRING,), STRING)(lambda v: v)
register("string", "int64_to_string", False, (INT,), STRING)(str)
register("string", "uint64_to_string", False, (UINT,), STRING)(lambda v: str(int(v)))
register("string", "double_to_string", False, (DOUBLE,), STRING)(format_double)
register("string", "bytes_to_string", False, (BYTES,), STRING)(_bytes_to_string)
register("string", "bool_to_string", False, (BOOL,), STRING)(lambda v: "true" if v else "false")
register("bytes", "bytes_to_bytes", False, (BYTES,), BYTES)(lambda v: v)
register("bytes", "string_to_bytes", False, (STRING,), BYTES)(lambda v: v.encode("utf-8"))
register("bool", "bool_to_bool", False, (BOOL,), BOOL)(lambda v: v)
register("bool", "string_to_bool", False, (STRING,), BOOL)(_string_to_bool)
register("dyn", "to_dyn", False, (A,), DYN)(lambda v: v)
register("type", "type", False, (A,), TYPE)(type_of)

# -- strings -----------------------------------------------------------------------------------
register("contains", "contains_string", True, (STRING, STRING), BOOL)(lambda s, sub: sub in s)
register("startsWith", "starts_with_string", True, (STRING, STRING), BOOL)(lambda s, p: s.startswith(p))
register("endsWith", "ends_with_string", True, (STRING, STRING), BOOL)(lambda s, p: s.endswith(p))


def _matches(s: str, pattern: str) -> bool:
    # charged before running (cel-go charges after, but its outcome is the same: a call over the
    # limit cancels the evaluation either way); RE2 keeps the run itself linear in ``s``
    rx = REGEX_CACHE.get(pattern)
    if rx is None:
        charge(regex_cost(s, pattern))
        rx = eval_regex(pattern)
    else:
        charge(rx.cost(s))
    return rx.search(s)


register("matches", "matches_string", True, (STRING, STRING), BOOL)(_matches)
register("matches", "matches", False, (STRING, STRING), BOOL)(_matches)


def _find(s: str, pattern: str) -> str:
    charge(regex_cost(s, pattern))
    return eval_regex(pattern, "Illegal regex: ").find(s)


def _find_all(s: str, pattern: str, limit: int = -1) -> list[str]:
    charge(regex_cost(s, pattern))
    return eval_regex(pattern, "Illegal regex: ").find_all(s, limit)


# Kubernetes' regex library
register("find", "string_find_string", True, (STRING, STRING), STRING)(_find)
register("findAll", "string_find_all_string", True, (STRING, STRING), list_of(STRING))(_find_all)
register("findAll", "string_find_all_string_int", True, (STRING, STRING, INT), list_of(STRING))(_find_all)
COSTLY_OVERLOADS.update(
    (
        "matches_string",
        "matches",
        "string_find_string",
        "string_find_all_string",
        "string_find_all_string_int",
    )
)

TYPE_IDENTS: dict[str, CelType] = {
    name: CelType(name)
    for name in (
        "int",
        "uint",
        "double",
        "bool",
        "string",
        "bytes",
        "list",
        "map",
        "null_type",
        "type",
        "optional_type",
    )
}
_ = (INT64_MAX, UINT64_MAX, NULL, Type)
