"""Runtime values of the CEL engine and the operations every part of it shares.

CEL values are plain Python objects for speed: ``int`` (CEL int), :class:`Uint` (CEL uint),
``float``, ``bool``, ``str``, ``bytes``, ``None`` (null), ``list``, ``dict``, plus
:class:`~events.quantity.Quantity`, :class:`Semver`, :class:`Optional` and :class:`CelType`.
Because ``True == 1`` in Python but not in CEL, equality and map keys go through the helpers here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any, Final

from events.quantity import Quantity

from .errors import EvalError

__all__ = [
    "INT64_MAX",
    "INT64_MIN",
    "NONE",
    "UINT64_MAX",
    "CelType",
    "Optional",
    "Semver",
    "Uint",
    "cel_equal",
    "check_int",
    "compare",
    "go_type_name",
    "in_list",
    "map_get",
    "no_such_overload",
    "register_strict_equality",
    "type_name",
    "type_of",
]

INT64_MAX: Final = 2**63 - 1
INT64_MIN: Final = -(2**63)
UINT64_MAX: Final = 2**64 - 1


class Uint(int):
    """A CEL ``uint`` (Python ints are CEL ``int``)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"{int(self)}u"


class CelType:
    """A CEL type value (the result of ``type(x)``, or the identifiers ``int``, ``string`` ...)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CelType) and other.name == self.name

    def __hash__(self) -> int:
        return hash(("type", self.name))

    def __repr__(self) -> str:
        return self.name


class Optional:
    """CEL ``optional_type``: a value or nothing."""

    __slots__ = ("has", "value")

    def __init__(self, value: Any = None, has: bool = True) -> None:
        self.value = value
        self.has = has

    def __repr__(self) -> str:
        return f"optional.of({self.value!r})" if self.has else "optional.none()"


NONE: Final = Optional(None, False)


class Semver:
    """A parsed semantic version (blang/semver v4 rules); ordered by ``key`` (build is ignored)."""

    __slots__ = ("build", "key", "major", "minor", "patch", "pre", "text")

    def __init__(
        self, major: int, minor: int, patch: int, pre: tuple[int | str, ...], build: tuple[str, ...]
    ):
        self.major = major
        self.minor = minor
        self.patch = patch
        self.pre = pre
        self.build = build
        # prerelease identifiers: numeric < alphanumeric; a version without prerelease sorts last
        pre_key: tuple[Any, ...] = (
            (1,) if not pre else (0, *((0, p, "") if isinstance(p, int) else (1, 0, p) for p in pre))
        )
        self.key = (major, minor, patch, pre_key)
        text = f"{major}.{minor}.{patch}"
        if pre:
            text += "-" + ".".join(str(p) for p in pre)
        if build:
            text += "+" + ".".join(build)
        self.text = text

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Semver) and other.key == self.key

    def __hash__(self) -> int:
        return hash(self.key)

    def __repr__(self) -> str:
        return f"semver({self.text!r})"


# -- type names --------------------------------------------------------------------------------
_TYPE_NAMES: Final[dict[type, str]] = {
    bool: "bool",
    int: "int",
    Uint: "uint",
    float: "double",
    str: "string",
    bytes: "bytes",
    type(None): "null_type",
    list: "list",
    tuple: "list",
    dict: "map",
    Quantity: "kubernetes.Quantity",
    Semver: "kubernetes.Semver",
    Optional: "optional_type",
    CelType: "type",
}
# cel-go's Go type names, used verbatim in a few upstream error texts ("got 'types.Int', ...").
_GO_NAMES: Final[dict[str, str]] = {
    "bool": "types.Bool",
    "int": "types.Int",
    "uint": "types.Uint",
    "double": "types.Double",
    "string": "types.String",
    "bytes": "types.Bytes",
    "null_type": "types.Null",
    "kubernetes.Quantity": "cel.Quantity",
    "kubernetes.Semver": "cel.Semver",
    "optional_type": "*types.Optional",
    "type": "*types.Type",
}


def type_name(value: object) -> str:
    name = _TYPE_NAMES.get(type(value))
    if name is not None:
        return name
    for cls, n in _TYPE_NAMES.items():
        if isinstance(value, cls):
            return n
    return getattr(value, "cel_type_name", type(value).__name__)


def go_type_name(value: object) -> str:
    name = type_name(value)
    return _GO_NAMES.get(name, name)


def type_of(value: object) -> CelType:
    return CelType(type_name(value))


def no_such_overload(function: str, *args: object) -> EvalError:
    shown = ", ".join(type_name(a) for a in args)
    return EvalError(f"no such overload: {function}({shown})")


# -- integers ----------------------------------------------------------------------------------
def check_int(value: int) -> int:
    if INT64_MIN <= value <= INT64_MAX:
        return value
    raise EvalError("integer overflow")


def check_uint(value: int) -> Uint:
    if 0 <= value <= UINT64_MAX:
        return Uint(value)
    raise EvalError("unsigned integer overflow")


# -- equality ----------------------------------------------------------------------------------
_NUMERIC: Final = (int, float)


def cel_equal(a: Any, b: Any) -> bool:
    """CEL heterogeneous equality: numbers compare by value across int/uint/double; bools are not
    numbers; values of different kinds are unequal. Quantity and semver equality is semantic but,
    as in Kubernetes, comparing them with another kind is a "no such overload" error."""
    ta = type(a)
    tb = type(b)
    if ta is tb:
        if ta is list:
            return len(a) == len(b) and all(cel_equal(x, y) for x, y in zip(a, b, strict=True))
        if ta is dict:
            return _map_equal(a, b)
        if ta is Optional:
            return a.has == b.has and (not a.has or cel_equal(a.value, b.value))
        return bool(a == b)
    if a is None or b is None:
        return False
    if ta is bool or tb is bool:
        return False
    if isinstance(a, _NUMERIC) and isinstance(b, _NUMERIC):
        if ta is float or tb is float:
            # cel-go compares int/uint with double after converting to double
            return float(a) == float(b)
        return bool(a == b)
    if ta in STRICT_EQUALITY:
        raise no_such_overload("_==_", a, b)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(cel_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return _map_equal(a, b)
    return False


# Library types whose Equal is "no such overload" against any other kind (as upstream's
# Quantity, Semver, IP, CIDR); extended by the libraries that define such types.
STRICT_EQUALITY: set[type] = {Quantity, Semver}


def register_strict_equality(*classes: type) -> None:
    STRICT_EQUALITY.update(classes)


def _map_equal(a: dict[Any, Any], b: dict[Any, Any]) -> bool:
    if len(a) != len(b):
        return False
    for k, v in a.items():
        found, other = map_lookup(b, k)
        if not found or not cel_equal(v, other):
            return False
    return True


def in_list(value: Any, items: Iterable[Any]) -> bool:
    """``value in list``: like cel-go, an element whose equality has no overload just does not match."""
    for x in items:
        try:
            if cel_equal(value, x):
                return True
        except EvalError:
            continue
    return False


# -- maps --------------------------------------------------------------------------------------
_KEY_KINDS: Final = (str, int, bool)


def map_lookup(m: dict[Any, Any], key: Any) -> tuple[bool, Any]:
    """Find ``key`` with CEL semantics: numeric keys match across int/uint/double (a double key
    only when it is a whole number), bool keys never match numbers."""
    tk = type(key)
    if tk is str:
        if key in m:
            return True, m[key]
        return False, None
    if tk is bool:
        for k, v in m.items():
            if type(k) is bool and k is key:
                return True, v
        return False, None
    if tk is int or tk is Uint or tk is float:
        if tk is float and (not math.isfinite(key) or key != int(key)):
            return False, None
        for k, v in m.items():
            if type(k) is not bool and isinstance(k, int) and k == key:
                return True, v
        return False, None
    if key is None or isinstance(key, (float, int)):
        return False, None
    raise EvalError(f"unsupported key type: {type_name(key)}")


def map_get(m: dict[Any, Any], key: Any) -> Any:
    found, value = map_lookup(m, key)
    if not found:
        raise EvalError(f"no such key: {format_key(key)}")
    return value


def format_key(key: Any) -> str:
    if isinstance(key, bool):
        return "true" if key else "false"
    return str(key)


def valid_key(key: Any) -> bool:
    return isinstance(key, _KEY_KINDS) and not isinstance(key, float)


# -- ordering ----------------------------------------------------------------------------------
def compare(function: str, a: Any, b: Any, op: Callable[[Any, Any], bool]) -> bool:
    """Ordering with cross-type numeric comparison (Kubernetes enables it); NaN cannot be ordered."""
    ta = type(a)
    tb = type(b)
    if ta is bool or tb is bool:
        if ta is tb:
            return op(a, b)
        raise no_such_overload(function, a, b)
    if isinstance(a, _NUMERIC) and isinstance(b, _NUMERIC):
        if ta is float or tb is float:
            if a != a or b != b:
                raise EvalError("NaN values cannot be ordered")
            return op(float(a), float(b))
        return op(a, b)
    if ta is tb and ta in (str, bytes):
        return op(a, b)
    raise no_such_overload(function, a, b)
