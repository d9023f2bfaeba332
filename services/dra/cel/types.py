"""Static types for the compile-time checker.

Only as much of CEL's type system as selectors need: primitives, ``list(T)``, ``map(K, V)``,
``optional_type(T)``, ``type``, the Kubernetes object types and type parameters for overload
signatures. ``dyn`` unifies with everything (attribute values are ``dyn``, as upstream declares).
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "BOOL",
    "BYTES",
    "DEVICE",
    "DOUBLE",
    "DYN",
    "INT",
    "NULL",
    "QUANTITY",
    "SEMVER",
    "STRING",
    "TYPE",
    "UINT",
    "Type",
    "join",
    "list_of",
    "map_of",
    "optional_of",
    "param",
    "substitute",
    "unify",
]


class Type:
    """``kind`` is the type name (``list``, ``map``, ``int`` ...); ``params`` the type arguments."""

    __slots__ = ("is_param", "kind", "params")

    def __init__(self, kind: str, params: tuple[Type, ...] = (), is_param: bool = False) -> None:
        self.kind = kind
        self.params = params
        self.is_param = is_param

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Type)
            and other.kind == self.kind
            and other.params == self.params
            and other.is_param == self.is_param
        )

    def __hash__(self) -> int:
        return hash((self.kind, self.params, self.is_param))

    def __str__(self) -> str:
        if not self.params:
            return self.kind
        return f"{self.kind}({', '.join(str(p) for p in self.params)})"

    __repr__ = __str__

    @property
    def is_dyn(self) -> bool:
        return self.kind == "dyn"

    def contains_dyn(self) -> bool:
        return self.kind == "dyn" or self.is_param or any(p.contains_dyn() for p in self.params)


DYN: Final = Type("dyn")
INT: Final = Type("int")
UINT: Final = Type("uint")
DOUBLE: Final = Type("double")
BOOL: Final = Type("bool")
STRING: Final = Type("string")
BYTES: Final = Type("bytes")
NULL: Final = Type("null_type")
TYPE: Final = Type("type")
QUANTITY: Final = Type("kubernetes.Quantity")
SEMVER: Final = Type("kubernetes.Semver")
DEVICE: Final = Type("kubernetes.DRADevice")


def list_of(elem: Type) -> Type:
    return Type("list", (elem,))


def map_of(key: Type, value: Type) -> Type:
    return Type("map", (key, value))


def optional_of(elem: Type) -> Type:
    return Type("optional_type", (elem,))


def param(name: str) -> Type:
    return Type(name, (), True)


def join(a: Type, b: Type) -> Type | None:
    """The common type of two values (for list elements, ternary branches); None if incompatible."""
    if a == b:
        return a
    if a.is_dyn or b.is_dyn:
        return DYN
    if a.kind == "null_type" and _nullable(b):
        return b
    if b.kind == "null_type" and _nullable(a):
        return a
    if a.kind != b.kind or len(a.params) != len(b.params):
        return None
    joined = []
    for x, y in zip(a.params, b.params, strict=True):
        j = join(x, y)
        if j is None:
            return None
        joined.append(j)
    return Type(a.kind, tuple(joined))


def _nullable(t: Type) -> bool:
    # null is assignable to object-like types only (cel-go: messages, wrappers, dyn)
    return t.kind in ("kubernetes.DRADevice", "dyn")


def unify(formal: Type, actual: Type, subst: dict[str, Type]) -> bool:
    """Can a value of type ``actual`` be passed where ``formal`` is expected? Binds type params."""
    if formal.is_param:
        bound = subst.get(formal.kind)
        if bound is None:
            subst[formal.kind] = actual
            return True
        joined = join(bound, actual)
        if joined is None:
            return False
        subst[formal.kind] = joined
        return True
    if actual.is_dyn or formal.is_dyn:
        _bind_dyn(formal, subst)
        return True
    if formal.kind != actual.kind or len(formal.params) != len(actual.params):
        return False
    return all(unify(f, a, subst) for f, a in zip(formal.params, actual.params, strict=True))


def _bind_dyn(formal: Type, subst: dict[str, Type]) -> None:
    if formal.is_param:
        subst.setdefault(formal.kind, DYN)
    for p in formal.params:
        _bind_dyn(p, subst)


def substitute(t: Type, subst: dict[str, Type]) -> Type:
    if t.is_param:
        return subst.get(t.kind, DYN)
    if not t.params:
        return t
    return Type(t.kind, tuple(substitute(p, subst) for p in t.params))
