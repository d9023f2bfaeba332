"""Field selection, indexing, presence tests and membership on runtime values.

Maps from CEL literals are plain dicts; ``device.attributes``/``device.capacity`` are
DefaultingMaps (unknown domain -> empty map, every domain "present" for ``has``/``.?``); lists
index with int, uint or whole doubles, as cel-go.
"""

from __future__ import annotations

from typing import Any

from .device import EMPTY_MAP, DefaultingMap, DeviceInput
from .errors import EvalError
from .values import NONE, Optional, Uint, in_list, map_get, map_lookup, no_such_overload

__all__ = ["contains", "has", "index", "opt_index", "opt_select", "select"]

_DEVICE_FIELDS = ("driver", "attributes", "capacity", "allowMultipleAllocations")


def select(o: Any, field: str) -> Any:
    t = type(o)
    if t is dict:
        try:
            return o[field]
        except KeyError:
            raise EvalError(f"no such key: {field}") from None
    if t is DefaultingMap:
        return o.get(field, EMPTY_MAP)
    if t is DeviceInput:
        return o.field(field)
    if t is Optional:
        return opt_select(o, field)
    raise EvalError(f"no such key: {field}")


def opt_select(o: Any, field: str) -> Optional:
    if type(o) is Optional:
        if not o.has:
            return NONE
        o = o.value
    t = type(o)
    if t is dict:
        return Optional(o[field]) if field in o else NONE
    if t is DefaultingMap:
        return Optional(o.get(field, EMPTY_MAP))
    if t is DeviceInput:
        return Optional(o.field(field))
    raise EvalError(f"no such key: {field}")


def has(o: Any, field: str) -> bool:
    t = type(o)
    if t is dict:
        return field in o
    if t is DefaultingMap:
        return True  # upstream's defaulting map reports every domain as present
    if t is DeviceInput:
        return field in _DEVICE_FIELDS
    raise EvalError(f"invalid type for field selection: {field}")


def _list_index(items: list[Any], k: Any) -> int:
    tk = type(k)
    if tk is int or tk is Uint:
        i = int(k)
    elif tk is float and k == k and k == int(k):
        i = int(k)
    else:
        raise EvalError(f"unsupported index value: {k}")
    if i < 0 or i >= len(items):
        raise EvalError(f"index out of bounds: {i}")
    return i


def index(o: Any, k: Any) -> Any:
    t = type(o)
    if t is list:
        return o[_list_index(o, k)]
    if t is dict:
        return map_get(o, k)
    if t is DefaultingMap:
        found, v = map_lookup(o, k)
        return v if found else EMPTY_MAP
    if t is Optional:
        return opt_index(o, k)
    raise no_such_overload("_[_]", o, k)


def opt_index(o: Any, k: Any) -> Optional:
    if type(o) is Optional:
        if not o.has:
            return NONE
        o = o.value
    t = type(o)
    if t is list:
        try:
            return Optional(o[_list_index(o, k)])
        except EvalError:
            return NONE
    if t is dict or t is DefaultingMap:
        found, v = map_lookup(o, k)
        if t is DefaultingMap and not found:
            return Optional(EMPTY_MAP)
        return Optional(v) if found else NONE
    raise no_such_overload("_[?_]", o, k)


def contains(container: Any, v: Any) -> bool:
    t = type(container)
    if t is list:
        return in_list(v, container)
    if t is dict or t is DefaultingMap:
        return map_lookup(container, v)[0]
    raise no_such_overload("@in", v, container)
