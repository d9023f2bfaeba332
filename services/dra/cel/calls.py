"""Calling library functions from compiled code: direct calls when the checker resolved one
overload with known argument kinds, kind-guarded calls when some arguments are ``dyn``, and
dynamic dispatch over the remaining candidates (cel-go's runtime overload resolution)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from events.quantity import Quantity

from .device import DefaultingMap, DeviceInput
from .errors import EvalError
from .library import Overload
from .library.net import CIDR, IP
from .types import Type
from .values import CelType, Optional, Semver, Uint, no_such_overload

if TYPE_CHECKING:
    from .compiler import Compiler, Fn

__all__ = ["KIND_CHECKS", "direct", "dynamic", "flat_lookup_fn"]

# runtime kind of a value, by the classes that represent it (DefaultingMap is a map too)
KIND_CLASSES: dict[str, tuple[type, ...]] = {
    "int": (int,),
    "uint": (Uint,),
    "double": (float,),
    "bool": (bool,),
    "string": (str,),
    "bytes": (bytes,),
    "null_type": (type(None),),
    "list": (list,),
    "map": (dict, DefaultingMap),
    "kubernetes.Quantity": (Quantity,),
    "kubernetes.Semver": (Semver,),
    "optional_type": (Optional,),
    "type": (CelType,),
    "kubernetes.DRADevice": (DeviceInput,),
    "net.IP": (IP,),
    "net.CIDR": (CIDR,),
}


def _kind_check(kind: str) -> Callable[[Any], bool]:
    classes = KIND_CLASSES[kind]
    if len(classes) == 1:
        (cls,) = classes
        return lambda v: type(v) is cls
    return lambda v: type(v) in classes


KIND_CHECKS: dict[str, Callable[[Any], bool]] = {kind: _kind_check(kind) for kind in KIND_CLASSES}


def _needs_guard(formal: Type, actual: Type) -> bool:
    return not (formal.is_param or formal.is_dyn) and (actual.is_dyn or actual.is_param)


def direct(c: Compiler, name: str, overload: Overload, fns: list[Fn], types: list[Type]) -> Fn:
    impl = overload.impl
    guards = [
        (i, KIND_CHECKS[f.kind])
        for i, (f, a) in enumerate(zip(overload.params, types, strict=True))
        if _needs_guard(f, a) and f.kind in KIND_CHECKS
    ]
    if guards:
        return guarded(c, name, impl, fns, [f.kind for f in overload.params], [g[0] for g in guards])
    consts = [c.is_const(f) for f in fns]
    if len(fns) == 1:
        (a,) = fns
        return lambda d: impl(a(d))
    if len(fns) == 2:
        a, b = fns
        if consts[1]:
            bv = c.value(b)
            flat = c.flat_info(a)
            if flat is not None:
                return _fused_call(impl, flat, bv)
            return lambda d: impl(a(d), bv)
        return lambda d: impl(a(d), b(d))
    if len(fns) == 3:
        f1, f2, f3 = fns
        return lambda d: impl(f1(d), f2(d), f3(d))
    if not fns:
        return lambda d: impl()
    return lambda d: impl(*[f(d) for f in fns])


def guarded(
    c: Compiler, name: str, impl: Callable[..., Any], fns: list[Fn], kinds: list[str], idx: list[int]
) -> Fn:
    """One candidate overload, but some arguments are ``dyn``: check their kind, then call."""
    if len(fns) == 2 and idx == [0]:
        a, b = fns
        (cls,) = KIND_CLASSES[kinds[0]][:1]
        exact = len(KIND_CLASSES[kinds[0]]) == 1
        if c.is_const(b):
            bv = c.value(b)
            flat = c.flat_info(a)
            if flat is not None and exact:
                return _fused_guarded_call(name, impl, flat, cls, bv)

            def recv_const(d: Any) -> Any:
                v = a(d)
                if type(v) is cls or (not exact and type(v) in KIND_CLASSES[kinds[0]]):
                    return impl(v, bv)
                raise no_such_overload(name, v, bv)

            return recv_const

        def recv(d: Any) -> Any:
            v = a(d)
            w = b(d)
            if type(v) is cls or (not exact and type(v) in KIND_CLASSES[kinds[0]]):
                return impl(v, w)
            raise no_such_overload(name, v, w)

        return recv
    if len(fns) == 1:
        (a,) = fns
        check = KIND_CHECKS[kinds[0]]

        def unary(d: Any) -> Any:
            v = a(d)
            if check(v):
                return impl(v)
            raise no_such_overload(name, v)

        return unary
    checks = [(i, KIND_CHECKS[kinds[i]]) for i in idx]

    def call_checked(d: Any) -> Any:
        vals = [f(d) for f in fns]
        for i, check in checks:
            if not check(vals[i]):
                raise no_such_overload(name, *vals)
        return impl(*vals)

    return call_checked


def dynamic(name: str, overloads: list[Overload], fns: list[Fn]) -> Fn:
    candidates = [
        (o.impl, [(i, KIND_CHECKS[p.kind]) for i, p in enumerate(o.params) if p.kind in KIND_CHECKS])
        for o in overloads
    ]

    def call_dyn(d: Any) -> Any:
        vals = [f(d) for f in fns]
        for impl, checks in candidates:
            if all(check(vals[i]) for i, check in checks):
                return impl(*vals)
        raise no_such_overload(name, *vals)

    return call_dyn


def flat_lookup_fn(table: str, key: str, ident: str) -> Fn:
    message = f"no such key: {ident}"
    if table == "attrs":

        def attr(d: Any) -> Any:
            try:
                return d.attrs[key]
            except KeyError:
                raise EvalError(message) from None

        return attr

    def cap(d: Any) -> Any:
        try:
            return d.caps[key]
        except KeyError:
            raise EvalError(message) from None

    return cap


def _fused_call(impl: Callable[..., Any], flat: tuple[str, str, str], arg: Any) -> Fn:
    table, key, message = flat

    def call(d: Any) -> Any:
        try:
            v = (d.attrs if table == "attrs" else d.caps)[key]
        except KeyError:
            raise EvalError(message) from None
        return impl(v, arg)

    if table == "caps":

        def call_cap(d: Any) -> Any:
            try:
                v = d.caps[key]
            except KeyError:
                raise EvalError(message) from None
            return impl(v, arg)

        return call_cap
    return call


def _fused_guarded_call(
    name: str, impl: Callable[..., Any], flat: tuple[str, str, str], cls: type, arg: Any
) -> Fn:
    table, key, message = flat

    def call(d: Any) -> Any:
        try:
            v = (d.attrs if table == "attrs" else d.caps)[key]
        except KeyError:
            raise EvalError(message) from None
        if type(v) is cls:
            return impl(v, arg)
        raise no_such_overload(name, v, arg)

    return call
