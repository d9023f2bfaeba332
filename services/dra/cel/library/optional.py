"""cel-go's optional types library: ``optional.of/none/ofNonZeroValue``, ``hasValue``, ``value``,
``orValue``, ``or`` (``optMap``/``optFlatMap`` and ``.?``/``[?]`` are handled by the compiler)."""

from __future__ import annotations

from typing import Any

from ..errors import EvalError
from ..types import BOOL, optional_of, param
from ..values import NONE, Optional, Uint
from . import register

A = param("A")


def _value(o: Optional) -> Any:
    if not o.has:
        raise EvalError("optional.none() dereference")
    return o.value


def _is_zero(v: Any) -> bool:
    if v is None or v is False:
        return True
    if type(v) in (int, Uint, float, str, bytes, list, dict):
        return not v
    return False


register("optional.of", "optional_of", False, (A,), optional_of(A))(lambda v: Optional(v))
register("optional.none", "optional_none", False, (), optional_of(param("Z")))(lambda: NONE)
register("optional.ofNonZeroValue", "optional_ofNonZeroValue", False, (A,), optional_of(A))(
    lambda v: NONE if _is_zero(v) else Optional(v)
)
register("hasValue", "optional_hasValue", True, (optional_of(A),), BOOL)(lambda o: o.has)
register("value", "optional_value", True, (optional_of(A),), A)(_value)
register("orValue", "optional_orValue_value", True, (optional_of(A), A), A)(
    lambda o, v: o.value if o.has else v
)
register("or", "optional_or_optional", True, (optional_of(A), optional_of(A)), optional_of(A))(
    lambda o, other: o if o.has else other
)
