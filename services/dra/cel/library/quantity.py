"""Kubernetes' CEL quantity library (k8s.io/apiserver pkg/cel/library/quantity.go).

``quantity(s)``/``isQuantity(s)`` and the Quantity members ``sign``, ``isGreaterThan``,
``isLessThan``, ``compareTo``, ``asApproximateFloat``, ``asInteger``, ``isInteger``, ``add``,
``sub``. Equality of two quantities is semantic (``quantity('1Gi') == quantity('1024Mi')``).
"""

from __future__ import annotations

from functools import lru_cache

from events.quantity import DECIMAL_EXPONENT, Quantity, QuantityError

from ..errors import EvalError
from ..types import BOOL, DOUBLE, INT, QUANTITY, STRING
from . import register


@lru_cache(maxsize=1024)
def parse_quantity(text: str) -> Quantity:
    """``quantity(text)``; literal arguments are folded at compile time, others are cached."""
    try:
        return Quantity.parse(text)
    except QuantityError as exc:
        raise EvalError(str(exc)) from None


def _is_quantity(text: str) -> bool:
    try:
        parse_quantity(text)
    except EvalError:
        return False
    return True


def _as_integer(q: Quantity) -> int:
    if not q.is_integer():
        raise EvalError("cannot convert value to integer")
    return q.nanos // 1_000_000_000


def _from_int(v: int) -> Quantity:
    return Quantity.from_int(v, DECIMAL_EXPONENT)


register("quantity", "string_to_quantity", False, (STRING,), QUANTITY)(parse_quantity)
register("isQuantity", "is_quantity_string", False, (STRING,), BOOL)(_is_quantity)
register("sign", "quantity_sign", True, (QUANTITY,), INT)(lambda q: q.sign)
register("isGreaterThan", "quantity_is_greater_than", True, (QUANTITY, QUANTITY), BOOL)(
    lambda a, b: a.nanos > b.nanos
)
register("isLessThan", "quantity_is_less_than", True, (QUANTITY, QUANTITY), BOOL)(
    lambda a, b: a.nanos < b.nanos
)
register("compareTo", "quantity_compare_to", True, (QUANTITY, QUANTITY), INT)(
    lambda a, b: (a.nanos > b.nanos) - (a.nanos < b.nanos)
)
register("asApproximateFloat", "quantity_get_float", True, (QUANTITY,), DOUBLE)(lambda q: q.as_float())
register("asInteger", "quantity_get_int", True, (QUANTITY,), INT)(_as_integer)
register("isInteger", "quantity_is_integer", True, (QUANTITY,), BOOL)(lambda q: q.is_integer())
register("add", "quantity_add", True, (QUANTITY, QUANTITY), QUANTITY)(lambda a, b: a + b)
register("add", "quantity_add_int", True, (QUANTITY, INT), QUANTITY)(lambda a, b: a + _from_int(b))
register("sub", "quantity_sub", True, (QUANTITY, QUANTITY), QUANTITY)(lambda a, b: a - b)
register("sub", "quantity_sub_int", True, (QUANTITY, INT), QUANTITY)(lambda a, b: a - _from_int(b))
