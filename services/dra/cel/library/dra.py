"""DRA-specific function: ``x.includes(v)`` (DRAListTypeAttributes, in the stored-expressions env).

True when a list attribute contains ``v`` or a scalar attribute equals ``v``. Like upstream it
refuses lists longer than ResourceSliceMaxAttributeValuesPerDevice (48) to bound the cost.
"""

from __future__ import annotations

from typing import Any, Final

from ..errors import EvalError
from ..types import BOOL, DYN
from ..values import cel_equal
from . import register

MAX_ATTRIBUTE_VALUES: Final = 48


def _equal(a: Any, b: Any) -> bool:
    try:
        return cel_equal(a, b)
    except EvalError:
        return False


@register("includes", "dra_includes_dyn_dyn", True, (DYN, DYN), BOOL)
def includes(target: Any, value: Any) -> bool:
    if isinstance(target, list):
        for i, item in enumerate(target):
            if i >= MAX_ATTRIBUTE_VALUES:
                limit = MAX_ATTRIBUTE_VALUES
                raise EvalError(f"'includes' function cannot be applied to lists longer than {limit} values")
            if _equal(item, value):
                return True
        return False
    return _equal(target, value)
