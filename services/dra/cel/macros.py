"""Comprehension macros and ``cel.bind``, compiled to plain Python loops.

Loop variables live in one-element "cells" captured by the body closures (a compiled program is
not re-entrant, so one cell per variable is enough). Each iteration charges the static cost of
the loop body to the program's cost counter; exceeding the limit is a runtime error, so nested
``all``/``map`` over literal lists cannot run away.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from .ast import Bind, Comprehension, Literal, Node
from .cost import BUDGET as budget
from .cost import over_budget
from .errors import EvalError
from .library.lists import _cmp as list_cmp
from .library.lists import order_key_check
from .values import NONE, Optional, go_type_name, no_such_overload, valid_key

if TYPE_CHECKING:
    from .compiler import Compiler, Fn

__all__ = ["compile_macro"]


def static_cost(node: Node) -> int:
    """Nodes evaluated per iteration (nested comprehensions charge their own iterations)."""
    if isinstance(node, Literal):
        return 0
    if isinstance(node, Comprehension):
        return 1 + static_cost(node.target)
    return 1 + sum(static_cost(ch) for ch in node.children())


def compile_macro(c: Compiler, node: Comprehension | Bind) -> Fn:
    if isinstance(node, Bind):
        init = c.compile(node.init)
        cell: list[Any] = [None]
        c.cells.setdefault(node.var, []).append(cell)
        try:
            body = c.compile(node.body)
        finally:
            c.cells[node.var].pop()

        def bind(d: Any) -> Any:
            cell[0] = init(d)
            return body(d)

        return bind
    return _comprehension(c, node)


def _comprehension(c: Compiler, node: Comprehension) -> Fn:
    c.costly = True
    target = c.compile(node.target)
    cell1: list[Any] = [None]
    cell2: list[Any] = [None]
    names = [node.var] + ([node.var2] if node.var2 else [])
    for name, cell in zip(names, (cell1, cell2), strict=False):
        c.cells.setdefault(name, []).append(cell)
    try:
        bodies = [c.compile(a) for a in node.args]
    finally:
        for name in names:
            c.cells[name].pop()
    kind = node.kind
    per_iter = 1 + sum(static_cost(a) for a in node.args)
    two = node.var2 is not None

    if kind in ("optMap", "optFlatMap"):
        body = bodies[0]
        flat = kind == "optFlatMap"

        def opt_map(d: Any) -> Any:
            o = target(d)
            if type(o) is not Optional:
                raise no_such_overload(kind, o)
            if not o.has:
                return NONE
            cell1[0] = o.value
            v = body(d)
            if flat:
                if type(v) is not Optional:
                    raise no_such_overload(kind, v)
                return v
            return Optional(v)

        return opt_map

    def items(d: Any) -> list[tuple[Any, Any]] | list[Any]:
        r = target(d)
        if isinstance(r, list):
            return list(enumerate(r)) if two else r
        if isinstance(r, dict):
            return list(r.items()) if two else list(r)
        raise EvalError(f"got '{go_type_name(r)}', expected iterable type")

    def charge() -> None:
        budget[0] += per_iter
        if budget[0] > budget[1]:
            over_budget()

    def bind_vars(x: Any) -> None:
        if two:
            cell1[0], cell2[0] = x
        else:
            cell1[0] = x

    pred = bodies[0]

    if kind in ("all", "exists"):
        decisive = kind == "exists"  # the value that ends the loop

        def quantifier(d: Any) -> bool:
            err: EvalError | None = None
            for x in items(d):
                charge()
                bind_vars(x)
                try:
                    v = pred(d)
                except EvalError as exc:
                    err = err or exc
                    continue
                if v is decisive:
                    return decisive
                if v is not (not decisive):
                    err = err or no_such_overload(kind, v)
            if err is not None:
                raise err
            return not decisive

        return quantifier

    if kind == "exists_one":

        def exists_one(d: Any) -> bool:
            count = 0
            for x in items(d):
                charge()
                bind_vars(x)
                v = pred(d)
                if v is True:
                    count += 1
                elif v is not False:
                    raise no_such_overload(kind, v)
            return count == 1

        return exists_one

    if kind == "sortBy":

        def sort_by(d: Any) -> list[Any]:
            values = items(d)
            keys = []
            for x in values:
                charge()
                bind_vars(x)
                keys.append(pred(d))
            order_key_check(keys)

            def by_key(i: int, j: int) -> int:
                return list_cmp(keys[i], keys[j])

            order: list[int] = sorted(range(len(keys)), key=functools.cmp_to_key(by_key))
            return [values[i] for i in order]

        return sort_by

    filtered = kind in ("filter", "map_filter") or kind.endswith("_filter")
    transform = bodies[-1]
    to_map = kind.startswith("transformMap")
    entries = kind.startswith("transformMapEntry")

    def collect(d: Any) -> Any:
        out_list: list[Any] = []
        out_map: dict[Any, Any] = {}
        for x in items(d):
            charge()
            bind_vars(x)
            if filtered:
                keep = pred(d)
                if keep is not True:
                    if keep is False:
                        continue
                    raise no_such_overload(kind, keep)
            if kind == "filter":
                out_list.append(x)
                continue
            v = transform(d)
            if entries:
                if not isinstance(v, dict):
                    raise no_such_overload(kind, v)
                for k, val in v.items():
                    if k in out_map:
                        raise EvalError(f"insert failed: key {k} already exists")
                    out_map[k] = val
            elif to_map:
                key = x[0] if two else x
                if not valid_key(key):
                    raise EvalError("unsupported map key")
                out_map[key] = v
            else:
                out_list.append(v)
        return out_map if to_map else out_list

    return collect
