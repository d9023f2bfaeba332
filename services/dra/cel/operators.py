"""Operators with CEL's special evaluation rules, and field/index access on runtime values.

``&&``/``||`` absorb errors commutatively (``false && error`` and ``error && false`` are both
false), ``!=`` is true when equality itself has no overload (as cel-go), ``in`` never fails on
mixed element types, and ordering compares int/uint/double across types.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from . import access
from .ast import Call
from .errors import EvalError
from .values import (
    STRICT_EQUALITY,
    Optional,
    Uint,
    cel_equal,
    compare,
    in_list,
    no_such_overload,
)

if TYPE_CHECKING:
    from .compiler import Compiler, Fn

__all__ = ["SPECIAL", "compile_optional_or"]


# -- compile-time specialisations ------------------------------------------------------------
def _is_bool(c: Compiler, node: Any) -> bool:
    return c.type_of(node).kind == "bool"


def _chain(node: Any, function: str, out: list[Any]) -> list[Any]:
    """The operands of a (balanced) chain of the same logical operator, in source order."""
    if isinstance(node, Call) and node.function == function:
        for arg in node.args:
            _chain(arg, function, out)
    else:
        out.append(node)
    return out


def _logical(c: Compiler, node: Call) -> Fn:
    terms = _chain(node, node.function, [])
    if len(terms) > 2:
        return _logical_n(c, node.function, terms)
    return _logical2(c, node)


def _logical_n(c: Compiler, name: str, nodes: list[Any]) -> Fn:
    """``a && b && c ...`` as one loop: the first decisive value wins, else the first error."""
    short = name == "_||_"
    fns = []
    for n in nodes:
        fn = c.compile(n)
        if c.is_const(fn) and c.value(fn) is short:
            return c.const(short)
        if c.is_const(fn) and c.value(fn) is (not short):
            continue  # neutral element
        fns.append(fn)
    if not fns:
        return c.const(not short)
    terms = tuple(fns)
    strict = all(_is_bool(c, n) for n in nodes)
    other = not short

    def chain(d: Any) -> Any:
        err: EvalError | None = None
        for term in terms:
            try:
                v = term(d)
            except EvalError as exc:
                if err is None:
                    err = exc
                continue
            if v is short:
                return short
            if not strict and v is not other and err is None:
                err = no_such_overload(name, v)
        if err is not None:
            raise err
        return other

    return chain


def _logical2(c: Compiler, node: Call) -> Fn:
    is_and = node.function == "_&&_"
    name = node.function
    short = not is_and  # value that decides the result
    left, right = (c.compile(a) for a in node.args)
    if c.is_const(left) and c.value(left) is short:
        return c.const(short)
    if c.is_const(right) and c.value(right) is short:
        return c.const(short)
    strict = _is_bool(c, node.args[0]) and _is_bool(c, node.args[1])

    def check(v: Any) -> Any:
        if v is True or v is False:
            return v
        raise no_such_overload(name, v)

    if strict and is_and:

        def and_(d: Any) -> Any:
            try:
                lv = left(d)
            except EvalError as err:
                try:
                    if right(d) is False:
                        return False
                except EvalError:
                    pass
                raise err from None
            if lv is False:
                return False
            return right(d)

        return c.fold(and_, [left, right])
    if strict:

        def or_(d: Any) -> Any:
            try:
                lv = left(d)
            except EvalError as err:
                try:
                    if right(d) is True:
                        return True
                except EvalError:
                    pass
                raise err from None
            if lv is True:
                return True
            return right(d)

        return c.fold(or_, [left, right])

    def logic(d: Any) -> Any:
        try:
            lv = check(left(d))
        except EvalError as err:
            try:
                if check(right(d)) is short:
                    return short
            except EvalError:
                pass
            raise err from None
        if lv is short:
            return short
        return check(right(d))

    return c.fold(logic, [left, right])


def _not(c: Compiler, node: Call) -> Fn:
    operand = c.compile(node.args[0])
    if _is_bool(c, node.args[0]):
        return c.fold(lambda d: not operand(d), [operand])

    def not_(d: Any) -> bool:
        v = operand(d)
        if v is True or v is False:
            return not v
        raise no_such_overload("!_", v)

    return c.fold(not_, [operand])


def _conditional(c: Compiler, node: Call) -> Fn:
    cond, yes, no = (c.compile(a) for a in node.args)
    if c.is_const(cond) and type(c.value(cond)) is bool:
        return yes if c.value(cond) else no
    if _is_bool(c, node.args[0]):
        return lambda d: yes(d) if cond(d) else no(d)

    def ternary(d: Any) -> Any:
        v = cond(d)
        if v is True:
            return yes(d)
        if v is False:
            return no(d)
        raise no_such_overload("_?_:_", v)

    return ternary


_SIMPLE_KINDS = frozenset(("string", "bytes", "bool", "int", "uint"))
_STRICT_EQ = STRICT_EQUALITY


def _equality(c: Compiler, node: Call) -> Fn:
    negate = node.function == "_!=_"
    left, right = (c.compile(a) for a in node.args)
    lt, rt = (c.type_of(a) for a in node.args)
    fn: Fn
    if lt == rt and lt.kind in _SIMPLE_KINDS:
        if c.is_const(right) and not c.is_const(left):
            rv = c.value(right)
            if c.device_field(left) == "driver":
                fn = (lambda d: d.driver != rv) if negate else (lambda d: d.driver == rv)
            else:
                fn = (lambda d: left(d) != rv) if negate else (lambda d: left(d) == rv)
            return fn
        fn = (lambda d: left(d) != right(d)) if negate else (lambda d: left(d) == right(d))
        return c.fold(fn, [left, right])
    const_side = 1 if c.is_const(right) else 0 if c.is_const(left) else -1
    if const_side >= 0:
        cv = c.value(right if const_side == 1 else left)
        other = left if const_side == 1 else right
        dyn_left = const_side == 1
        tc = type(cv)
        if tc in (str, bytes, int, float, bool) or cv is None:
            numeric = tc is int or tc is float or tc is Uint
            fcv = float(cv) if numeric else 0.0

            def eq_const(d: Any) -> bool:
                v = other(d)
                tv = type(v)
                if tv is tc:
                    return v == cv
                if numeric and (tv is int or tv is float or tv is Uint):
                    return float(v) == fcv if (tv is float or tc is float) else bool(v == cv)
                if dyn_left and tv in _STRICT_EQ:
                    raise no_such_overload("_==_", v, cv)
                return False

            flat = c.flat_info(other)
            if flat is not None and tc is str:
                return _fused_eq_str(flat, cv, negate, dyn_left)
            if not negate:
                return c.fold(eq_const, [other])

            def ne_const(d: Any) -> bool:
                try:
                    return not eq_const(d)
                except EvalError as exc:
                    if exc.message.startswith("no such overload: _==_"):
                        return True
                    raise

            return c.fold(ne_const, [other])

    def eq(d: Any) -> bool:
        return cel_equal(left(d), right(d))

    if not negate:
        return c.fold(eq, [left, right])

    def ne(d: Any) -> bool:
        a = left(d)
        b = right(d)
        try:
            return not cel_equal(a, b)
        except EvalError:
            return True

    return c.fold(ne, [left, right])


_ORDER_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "_<_": operator.lt,
    "_<=_": operator.le,
    "_>_": operator.gt,
    "_>=_": operator.ge,
}


def _ordering(c: Compiler, node: Call) -> Fn:
    name = node.function
    op = _ORDER_OPS[name]
    left, right = (c.compile(a) for a in node.args)
    lt, rt = (c.type_of(a) for a in node.args)
    if lt == rt and lt.kind in _SIMPLE_KINDS:
        if c.is_const(right):
            rv = c.value(right)
            return c.fold(lambda d: op(left(d), rv), [left])
        return c.fold(lambda d: op(left(d), right(d)), [left, right])
    if c.is_const(right) and type(c.value(right)) is int:
        rv = c.value(right)
        flat = c.flat_info(left)
        if flat is not None:
            table, key, message = flat

            def cmp_int_flat(d: Any) -> bool:
                try:
                    v = (d.attrs if table == "attrs" else d.caps)[key]
                except KeyError:
                    raise EvalError(message) from None
                if v.__class__ is int:
                    return op(v, rv)
                return compare(name, v, rv, op)

            return cmp_int_flat

        def cmp_int(d: Any) -> bool:
            v = left(d)
            if type(v) is int:
                return op(v, rv)
            return compare(name, v, rv, op)

        return c.fold(cmp_int, [left])
    return c.fold(lambda d: compare(name, left(d), right(d), op), [left, right])


def _in(c: Compiler, node: Call) -> Fn:
    value, container = (c.compile(a) for a in node.args)
    if c.is_const(container) and type(c.value(container)) is list:
        items = c.value(container)
        if items and all(type(x) is str for x in items):
            strings = frozenset(items)
            flat = c.flat_info(value)
            if flat is not None:
                table, key, message = flat

                def in_strings_flat(d: Any) -> bool:
                    try:
                        v = (d.attrs if table == "attrs" else d.caps)[key]
                    except KeyError:
                        raise EvalError(message) from None
                    return v.__class__ is str and v in strings

                return in_strings_flat
            return c.fold(lambda d: (v := value(d)).__class__ is str and v in strings, [value])
        if items and all(type(x) is int for x in items):
            ints = frozenset(items)

            def in_ints(d: Any) -> bool:
                v = value(d)
                if type(v) is int:
                    return v in ints
                return in_list(v, items)

            return c.fold(in_ints, [value])
    return c.fold(lambda d: access.contains(container(d), value(d)), [value, container])


def compile_optional_or(c: Compiler, node: Call, name: str) -> Fn:
    """``opt.orValue(v)`` / ``opt.or(opt2)``: the alternative is evaluated only when needed."""
    assert node.target is not None
    target = c.compile(node.target)
    alt = c.compile(node.args[0])
    want_value = name == "orValue"

    def or_(d: Any) -> Any:
        o = target(d)
        if type(o) is not Optional:
            raise no_such_overload(name, o)
        if o.has:
            return o.value if want_value else o
        v = alt(d)
        if not want_value and type(v) is not Optional:
            raise no_such_overload(name, o, v)
        return v

    return c.fold(or_, [target, alt])


def _fused_eq_str(flat: tuple[str, str, str], cv: str, negate: bool, dyn_left: bool) -> Fn:
    """``device.attributes["d"].id == "lit"`` in one closure (the most common selector shape)."""
    table, key, message = flat

    def eq(d: Any) -> bool:
        try:
            v = (d.attrs if table == "attrs" else d.caps)[key]
        except KeyError:
            raise EvalError(message) from None
        if v.__class__ is str:
            return v == cv
        if dyn_left and type(v) in _STRICT_EQ:
            if negate:
                return True
            raise no_such_overload("_==_", v, cv)
        return negate

    def ne(d: Any) -> bool:
        try:
            v = (d.attrs if table == "attrs" else d.caps)[key]
        except KeyError:
            raise EvalError(message) from None
        if v.__class__ is str:
            return v != cv
        return True

    return ne if negate else eq


SPECIAL: dict[str, Callable[[Compiler, Call], Fn]] = {
    "_&&_": _logical,
    "_||_": _logical,
    "!_": _not,
    "_?_:_": _conditional,
    "_==_": _equality,
    "_!=_": _equality,
    "_<_": _ordering,
    "_<=_": _ordering,
    "_>_": _ordering,
    "_>=_": _ordering,
    "@in": _in,
}
