"""Compile a checked AST into nested Python closures ``f(device) -> value``.

No AST is walked at evaluation time and no source is generated. Constant sub-expressions (for
example ``quantity('4Gi')`` or ``['a', 'b']``) are evaluated once at compile time; when that raises
a CEL error the error is kept for run time, as CEL defines it. The common DRA shapes get
specialised closures: ``device.attributes["d"].id`` is one dict lookup in the device's flat map,
``x == 'lit'`` and ``x in ['a', 'b']`` avoid generic dispatch.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Final

from . import access, calls, operators
from .ast import Bind, Call, Comprehension, Has, Ident, Index, ListExpr, Literal, MapExpr, Node, Select
from .checker import Checker
from .cost import BUDGET, COST_EXCEEDED, COST_LIMIT, COSTLY_OVERLOADS, EvalInterrupted, reset, time_limit
from .errors import EvalError
from .library.core import TYPE_IDENTS
from .types import Type
from .values import Optional, Uint, map_lookup, no_such_overload, valid_key

__all__ = ["Compiler", "Fn"]

Fn = Callable[[Any], Any]

# wall time all constant folds of one compile may take (then the rest is left for run time)
FOLD_SECONDS: Final = 0.25


class Compiler:
    """Turns one checked expression into a closure; ``costly`` marks programs that use the budget."""

    def __init__(self, checker: Checker, locate: bool = False, variables: tuple[str, ...] = ()) -> None:
        self.checker = checker
        self.variables = frozenset(variables)  # top-level names read from the activation dict
        self.locate = locate
        self.consts: dict[int, tuple[Fn, Any]] = {}
        self.cells: dict[str, list[list[Any]]] = {}
        self.flats: dict[int, tuple[Fn, str, str, str]] = {}
        self.device_fields: dict[int, tuple[Fn, str]] = {}
        self.costly = False
        self.fold_left = COST_LIMIT  # cost all constant folds of this compile may still spend
        self.fold_deadline: float | None = None  # set at the first fold

    # -- constants -----------------------------------------------------------------------------
    def const(self, value: Any) -> Fn:
        def fn(d: Any) -> Any:
            return value

        self.consts[id(fn)] = (fn, value)
        return fn

    def is_const(self, fn: Fn) -> bool:
        return id(fn) in self.consts

    def value(self, fn: Fn) -> Any:
        return self.consts[id(fn)][1]

    def fold(self, fn: Fn, parts: list[Fn]) -> Fn:
        """If every input is constant, evaluate now; keep a CEL error for run time.

        All folds of one compile share one cost budget (``COST_LIMIT``) and ``FOLD_SECONDS`` of
        wall time, so a compile stays bounded however many constant sub-expressions it has
        (the API server compiles what users send). What does not fit is left for run time,
        where the evaluation's own budget charges it; the result is the same either way.
        """
        if not all(self.is_const(p) for p in parts) or self.fold_left <= 0:
            return fn
        if self.fold_deadline is None:
            self.fold_deadline = time.monotonic() + FOLD_SECONDS
        reset(self.fold_left)
        try:
            with time_limit(self.fold_deadline):
                value = fn(None)
        except EvalInterrupted:
            self.fold_left = 0
            return fn
        except EvalError as exc:
            self.fold_left -= BUDGET[0]
            if exc.message == COST_EXCEEDED:
                return fn
            message = exc.message

            def raise_(d: Any) -> Any:
                raise EvalError(message)

            return raise_
        self.fold_left -= BUDGET[0]
        return self.const(value)

    def flat_lookup(self, table: str, key: str, ident: str) -> Fn:
        """A closure reading one attribute/capacity from the device's flat map; remembered so
        that operators can fuse the lookup into their own closure (one call less per eval)."""
        fn = calls.flat_lookup_fn(table, key, ident)
        self.flats[id(fn)] = (fn, table, key, f"no such key: {ident}")
        return fn

    def device_field(self, fn: Fn) -> str | None:
        """The field name if ``fn`` reads ``device.<field>`` directly."""
        entry = self.device_fields.get(id(fn))
        return None if entry is None else entry[1]

    def flat_info(self, fn: Fn) -> tuple[str, str, str] | None:
        """(table, key, missing-key message) if ``fn`` is a flat device lookup."""
        entry = self.flats.get(id(fn))
        return None if entry is None else entry[1:]

    def type_of(self, node: Node) -> Type:
        return self.checker.types[id(node)]

    # -- dispatch ------------------------------------------------------------------------------
    def compile(self, node: Node) -> Fn:
        fn = self._compile(node)
        if not self.locate or self.is_const(fn):
            return fn
        # locating mode (used only to replay a failed evaluation): tag errors with the position
        # of the innermost node that raised them
        offset = node.offset

        def located(d: Any) -> Any:
            try:
                return fn(d)
            except EvalError as exc:
                if exc.offset < 0:
                    exc.offset = offset
                raise

        return located

    def _compile(self, node: Node) -> Fn:
        if isinstance(node, Literal):
            return self.const(node.value if node.kind != "uint" else Uint(node.value))  # type: ignore[call-overload]
        if isinstance(node, Ident):
            return self.ident(node)
        if isinstance(node, Select):
            return self.select(node)
        if isinstance(node, Has):
            return self.has(node)
        if isinstance(node, Index):
            return self.index(node)
        if isinstance(node, Call):
            return self.call(node)
        if isinstance(node, ListExpr):
            return self.list_expr(node)
        if isinstance(node, MapExpr):
            return self.map_expr(node)
        if isinstance(node, (Comprehension, Bind)):
            from .macros import compile_macro

            return compile_macro(self, node)
        raise EvalError(f"unsupported node {type(node).__name__}")  # pragma: no cover

    def ident(self, node: Ident) -> Fn:
        stack = self.cells.get(node.name)
        if stack:
            cell = stack[-1]
            return lambda d: cell[0]
        if node.name in self.variables:
            name = node.name
            return lambda d: d[name]
        if node.name == "device":
            return lambda d: d
        return self.const(TYPE_IDENTS[node.name])

    # -- field selection -----------------------------------------------------------------------
    def _device_field(self, node: Node) -> str | None:
        """``device.<field>`` with ``device`` the top-level variable (not shadowed)."""
        if (
            isinstance(node, Select)
            and not node.optional
            and isinstance(node.operand, Ident)
            and node.operand.name == "device"
            and not self.cells.get("device")
        ):
            return node.field
        return None

    def _flat_key(self, node: Node) -> tuple[str, str, str] | None:
        """``device.attributes["dom"].id`` / ``["dom"]["id"]`` -> (flat field, key, id)."""
        if isinstance(node, Select) and not node.optional:
            outer, ident = node.operand, node.field
        elif isinstance(node, Index) and not node.optional and _is_str_literal(node.index):
            outer, ident = node.operand, str(node.index.value)  # type: ignore[attr-defined]
        else:
            return None
        if isinstance(outer, Index) and not outer.optional and _is_str_literal(outer.index):
            domain = str(outer.index.value)  # type: ignore[attr-defined]
        elif isinstance(outer, Select) and not outer.optional:
            domain = outer.field
        else:
            return None
        field = self._device_field(outer.operand)
        if field not in ("attributes", "capacity") or "/" in domain:
            return None
        return ("attrs" if field == "attributes" else "caps"), f"{domain}/{ident}", ident

    def select(self, node: Select) -> Fn:
        flat = self._flat_key(node)
        if flat is not None:
            return self.flat_lookup(*flat)
        field_name = self._device_field(node)
        if field_name is not None:
            if field_name == "driver":
                fn: Fn = lambda d: d.driver  # noqa: E731
                self.device_fields[id(fn)] = (fn, "driver")
                return fn
            if field_name == "attributes":
                return lambda d: d.attributes
            if field_name == "capacity":
                return lambda d: d.capacity
            return lambda d: d.allow_multiple_allocations
        operand = self.compile(node.operand)
        field = node.field
        if node.optional:
            return self.fold(lambda d: access.opt_select(operand(d), field), [operand])
        return self.fold(lambda d: access.select(operand(d), field), [operand])

    def has(self, node: Has) -> Fn:
        flat = self._flat_key(Select(node.offset, node.operand, node.field))
        if flat is not None:
            table, key, _ = flat
            if table == "attrs":
                return lambda d: key in d.attrs
            return lambda d: key in d.caps
        operand = self.compile(node.operand)
        field = node.field
        return self.fold(lambda d: access.has(operand(d), field), [operand])

    def index(self, node: Index) -> Fn:
        flat = self._flat_key(node)
        if flat is not None:
            return self.flat_lookup(*flat)
        operand = self.compile(node.operand)
        key = self.compile(node.index)
        if node.optional:
            return self.fold(lambda d: access.opt_index(operand(d), key(d)), [operand, key])
        if self.is_const(key) and type(self.value(key)) is str:
            k = self.value(key)

            def index_str(d: Any) -> Any:
                m = operand(d)
                if type(m) is dict:
                    try:
                        return m[k]
                    except KeyError:
                        raise EvalError(f"no such key: {k}") from None
                return access.index(m, k)

            return self.fold(index_str, [operand])
        return self.fold(lambda d: access.index(operand(d), key(d)), [operand, key])

    # -- aggregates ----------------------------------------------------------------------------
    def list_expr(self, node: ListExpr) -> Fn:
        parts = [self.compile(e) for e in node.elements]
        if not any(node.optional):
            return self.fold(lambda d: [p(d) for p in parts], parts)
        flags = list(node.optional)

        def build(d: Any) -> list[Any]:
            out = []
            for p, opt in zip(parts, flags, strict=True):
                v = p(d)
                if opt:
                    if type(v) is not Optional:
                        raise no_such_overload("optional list element", v)
                    if v.has:
                        out.append(v.value)
                else:
                    out.append(v)
            return out

        return self.fold(build, parts)

    def map_expr(self, node: MapExpr) -> Fn:
        entries = [(self.compile(k), self.compile(v), opt) for k, v, opt in node.entries]

        def build(d: Any) -> dict[Any, Any]:
            out: dict[Any, Any] = {}
            for kf, vf, opt in entries:
                k = kf(d)
                if not valid_key(k):
                    raise EvalError(f"unsupported key type: {type(k).__name__}")
                if map_lookup(out, k)[0]:
                    raise EvalError(f"Failed with repeated key: {k}")
                v = vf(d)
                if opt:
                    if type(v) is not Optional:
                        raise no_such_overload("optional map entry", v)
                    if not v.has:
                        continue
                    v = v.value
                out[k] = v
            return out

        return self.fold(build, [f for kf, vf, _ in entries for f in (kf, vf)])

    # -- calls ---------------------------------------------------------------------------------
    def call(self, node: Call) -> Fn:
        special = operators.SPECIAL.get(node.function)
        if special is not None:
            return special(self, node)
        name, overloads = self.checker.calls[id(node)]
        if any(o.id in COSTLY_OVERLOADS for o in overloads):
            self.costly = True
        if name in ("orValue", "or") and node.target is not None:
            return operators.compile_optional_or(self, node, name)
        args = ([node.target] if node.target is not None and name == node.function else []) + list(node.args)
        fns = [self.compile(a) for a in args]
        types = [self.type_of(a) for a in args]
        if len(overloads) == 1:
            return self.fold(calls.direct(self, name, overloads[0], fns, types), fns)
        return self.fold(calls.dynamic(name, overloads, fns), fns)


def _is_str_literal(node: Node) -> bool:
    return isinstance(node, Literal) and node.kind == "string"
