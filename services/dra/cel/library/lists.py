"""List functions of the Kubernetes base environment.

Kubernetes' list library (``isSorted``, ``sum``, ``min``, ``max``, ``indexOf``, ``lastIndexOf``),
cel-go's lists extension v3 (``lists.range``, ``slice``, ``flatten``, ``distinct``, ``reverse``,
``sort``; ``sortBy`` is a macro handled by the compiler) and the sets extension
(``sets.contains``, ``sets.equivalent``, ``sets.intersects``).
"""

from __future__ import annotations

import functools
import itertools
from typing import Any

from ..cost import COSTLY_OVERLOADS, charge
from ..errors import EvalError
from ..types import BOOL, DOUBLE, INT, UINT, list_of, param
from ..values import Uint, cel_equal, check_int, check_uint, compare, in_list
from . import register

A = param("A")
_COMPARABLE = (bool, int, Uint, float, str, bytes)


def order_key_check(items: list[Any]) -> None:
    """All elements must be of one comparable kind (``sort``, ``min``, ``isSorted`` ...)."""
    if not items:
        return
    first = type(items[0])
    if first not in _COMPARABLE:
        raise EvalError("list elements must be comparable")
    for x in items:
        if type(x) is not first:
            raise EvalError("list elements must have the same type")


def _cmp(a: Any, b: Any) -> int:
    if compare("_<_", a, b, lambda x, y: x < y):
        return -1
    if compare("_>_", a, b, lambda x, y: x > y):
        return 1
    return 0


def sort_values(items: list[Any]) -> list[Any]:
    charge(1 + len(items) * max(1, len(items).bit_length()))
    order_key_check(items)
    return sorted(items, key=functools.cmp_to_key(_cmp))


def _is_sorted(items: list[Any]) -> bool:
    for a, b in itertools.pairwise(items):
        if _cmp(a, b) > 0:
            return False
    return True


def _sum(items: list[Any]) -> Any:
    if not items:
        return 0
    kind = type(items[0])
    total: Any = kind(0) if kind in (int, Uint, float) else 0
    for x in items:
        if type(x) is not kind or kind not in (int, Uint, float):
            raise EvalError("sum: list elements must be numbers of one type")
        total = total + x
    if kind is int:
        return check_int(total)
    if kind is Uint:
        return check_uint(total)
    return float(total)


def _min(items: list[Any]) -> Any:
    if not items:
        raise EvalError("min of empty list")
    best = items[0]
    for x in items[1:]:
        if _cmp(x, best) < 0:
            best = x
    return best


def _max(items: list[Any]) -> Any:
    if not items:
        raise EvalError("max of empty list")
    best = items[0]
    for x in items[1:]:
        if _cmp(x, best) > 0:
            best = x
    return best


def _index_of(items: list[Any], value: Any) -> int:
    for i, x in enumerate(items):
        if cel_equal(x, value):
            return i
    return -1


def _last_index_of(items: list[Any], value: Any) -> int:
    for i in range(len(items) - 1, -1, -1):
        if cel_equal(items[i], value):
            return i
    return -1


def _range(n: int) -> list[int]:
    charge(1 + max(n, 0))
    return list(range(max(n, 0)))


def _slice(items: list[Any], start: int, end: int) -> list[Any]:
    if start < 0 or end < 0:
        raise EvalError(f"cannot slice({start}, {end}), negative indexes not supported")
    if start > end:
        raise EvalError(f"cannot slice({start}, {end}), start index must be less than or equal to end index")
    if end > len(items):
        raise EvalError(f"cannot slice({start}, {end}), list is length {len(items)}")
    return items[start:end]


def _flatten(items: list[Any], depth: int = 1) -> list[Any]:
    charge(1 + len(items))
    if depth < 0:
        raise EvalError("level must be non-negative")
    out: list[Any] = []
    for x in items:
        if isinstance(x, list) and depth > 0:
            out.extend(_flatten(x, depth - 1))
        else:
            out.append(x)
    return out


def _distinct(items: list[Any]) -> list[Any]:
    charge(1 + len(items) * len(items))
    out: list[Any] = []
    for x in items:
        if not in_list(x, out):
            out.append(x)
    return out


def _sets_contains(a: list[Any], b: list[Any]) -> bool:
    # every element of b is looked for in a: charged as the product of the sizes (cel-go's sets
    # cost tracker), else two lists built cheaply would make an uncharged quadratic walk
    charge(1 + len(a) * len(b))
    return all(in_list(x, a) for x in b)


def _sets_equivalent(a: list[Any], b: list[Any]) -> bool:
    charge(1 + 2 * len(a) * len(b))
    return all(in_list(x, a) for x in b) and all(in_list(x, b) for x in a)


def _sets_intersects(a: list[Any], b: list[Any]) -> bool:
    charge(1 + len(a) * len(b))
    return any(in_list(x, a) for x in b)


register("isSorted", "list_is_sorted", True, (list_of(A),), BOOL)(_is_sorted)
for _t in (INT, UINT, DOUBLE):
    register("sum", f"list_{_t.kind}_sum", True, (list_of(_t),), _t)(_sum)
register("min", "list_min", True, (list_of(A),), A)(_min)
register("max", "list_max", True, (list_of(A),), A)(_max)
register("indexOf", "list_index_of", True, (list_of(A), A), INT)(_index_of)
register("lastIndexOf", "list_last_index_of", True, (list_of(A), A), INT)(_last_index_of)
register("lists.range", "lists_range", False, (INT,), list_of(INT))(_range)
register("slice", "list_slice", True, (list_of(A), INT, INT), list_of(A))(_slice)
register("flatten", "list_flatten", True, (list_of(param("B")),), list_of(param("B")))(_flatten)
register("flatten", "list_flatten_int", True, (list_of(param("B")), INT), list_of(param("B")))(_flatten)
register("distinct", "list_distinct", True, (list_of(A),), list_of(A))(_distinct)
register("reverse", "list_reverse", True, (list_of(A),), list_of(A))(lambda items: items[::-1])
register("sort", "list_sort", True, (list_of(A),), list_of(A))(sort_values)
register("sets.contains", "list_sets_contains_list", False, (list_of(A), list_of(A)), BOOL)(_sets_contains)
register("sets.equivalent", "list_sets_equivalent_list", False, (list_of(A), list_of(A)), BOOL)(
    _sets_equivalent
)
register("sets.intersects", "list_sets_intersects_list", False, (list_of(A), list_of(A)), BOOL)(
    _sets_intersects
)
COSTLY_OVERLOADS.update(("lists_range", "list_flatten", "list_flatten_int", "list_distinct", "list_sort"))
COSTLY_OVERLOADS.update(("list_sets_contains_list", "list_sets_equivalent_list", "list_sets_intersects_list"))
