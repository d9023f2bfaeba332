"""The static worst-case cost of a checked selector: what the API server compares with 1,000,000.

Kubernetes' validation compiles every device selector and refuses one whose *estimated* maximum
cost exceeds ``CELSelectorExpressionMaxCost`` (``too complex, exceeds cost limit``) before anything
runs. The estimate follows cel-go's checker rules (``checker/cost.go``), node by node on the
macro-level AST (a macro is costed as the comprehension cel-go expands it into):

* literals 0, identifiers and field selections on maps or objects 1, ``has()`` 1, list literals
  10 and map literals 30 plus their elements, ``cel.bind`` 10 (its empty range) plus both parts;
* a call: its target and arguments plus the function's own cost, 1 for most functions; string
  work in proportion to the sizes involved (equality and ordering of strings a tenth of the
  shorter side, ``startsWith``/``endsWith`` a tenth of the argument, ``contains`` a tenth of both
  multiplied, concatenation a tenth of the result, ``matches`` a tenth of the text times a
  quarter of the pattern), ``in`` over a list its size; ``&&``, ``||`` and ``?:`` only their
  operands (the costlier branch);
* a comprehension: range, accumulator and result once, plus (loop condition + loop step) times
  the range's size, so nested loops multiply.

Sizes are exact for literals and derived for concatenations; for the device they are the API's
limits (at most 32 attributes and capacities per device, 63-character driver names and keys,
64-character attribute values); scalars and objects (quantities, versions) count as one; any
other string, list or map is unbounded, as in cel-go. Deviations: functions of Kubernetes'
libraries (quantity, semver, lists, regex extensions) cost 1 plus their operands here, and its
string transforms (``lowerAscii`` ...) a tenth of their text; upstream sizes a few more of them.
Every selector of the real-world corpus (tests/data/realworld) and of the examples stays far
below the limit (52 at most), as on a real cluster.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Final

from .ast import Bind, Call, Comprehension, Has, Ident, Index, ListExpr, Literal, MapExpr, Node, Select
from .checker import Checker

__all__ = ["estimate_max_cost"]

U: Final = 2**64 - 1  # cel-go's saturated uint64: unknown size, unaffordable cost
MAX_PER_DEVICE: Final = 32  # ResourceSliceMaxAttributesAndCapacitiesPerDevice
MAX_NAME: Final = 63  # driver names, attribute domains and ids
MAX_VALUE: Final = 64  # DeviceAttributeMaxValueLength
STRING_FACTOR: Final = 0.1  # common.StringTraversalCostFactor
REGEX_FACTOR: Final = 0.25  # common.RegexStringLengthCostFactor
_SIZED_ONE = frozenset(
    {"bool", "int", "uint", "double", "null_type", "google.protobuf.Duration", "google.protobuf.Timestamp"}
)
_ORDERING = frozenset({"_<_", "_<=_", "_>_", "_>=_"})
_SIZED = frozenset({"string", "bytes", "list", "map", "dyn"})
# Kubernetes' string library: the result is at most as long as the text, walked once
_STRING_TRANSFORMS = frozenset({"lowerAscii", "upperAscii", "trim", "substring", "charAt", "reverse"})


def _add(*xs: int) -> int:
    return min(U, sum(xs))


def _mul(x: int, y: int) -> int:
    return min(U, x * y)


def _factor(x: int, f: float) -> int:
    return U if x >= U else min(U, math.ceil(x * f))


class _Estimator:
    def __init__(self, checker: Checker) -> None:
        self.types = checker.types
        self.paths: dict[int, tuple[str, ...]] = {}
        self.sizes: dict[int, int] = {}
        self.scopes: dict[str, list[tuple[tuple[str, ...], int | None]]] = {}

    # -- sizes ---------------------------------------------------------------------------------

    def kind(self, node: Node) -> str:
        t = self.types.get(id(node))
        return t.kind if t is not None else "dyn"

    def size(self, node: Node) -> int:
        if id(node) in self.sizes:
            return self.sizes[id(node)]
        if isinstance(node, Literal):
            if node.kind == "string":
                return len(str(node.value))
            if node.kind == "bytes":
                return len(bytes(node.value))  # type: ignore[call-overload]
            return 1
        if isinstance(node, ListExpr):
            return len(node.elements)
        if isinstance(node, MapExpr):
            return len(node.entries)
        device = self.device_size(self.paths.get(id(node), ()))
        if device is not None:
            return device
        if self.kind(node) not in _SIZED:
            return 1  # scalars and objects (quantities, versions, addresses): one unit

        if isinstance(node, Ident) and self.scopes.get(node.name):
            local = self.scopes[node.name][-1][1]
            if local is not None:
                return local
        return U

    @staticmethod
    def device_size(path: tuple[str, ...]) -> int | None:
        """The API's limits on what a selector reads from the device (Kubernetes' estimator)."""
        if len(path) < 2 or path[0] != "device":
            return None
        if path == ("device", "driver"):
            return MAX_NAME
        if path[1] not in ("attributes", "capacity"):
            return None
        rest = path[2:]
        if len(rest) <= 1 and rest != ("@keys",):
            return MAX_PER_DEVICE  # the domains, or one domain's entries
        if rest[-1] == "@keys":
            return MAX_NAME
        return MAX_VALUE if path[1] == "attributes" else None

    def path(self, node: Node) -> tuple[str, ...]:
        return self.paths.get(id(node), ())

    # -- costs ---------------------------------------------------------------------------------

    def cost(self, node: Node) -> int:
        if isinstance(node, Literal):
            return 0
        if isinstance(node, Ident):
            scope = self.scopes.get(node.name)
            self.paths[id(node)] = scope[-1][0] if scope else (node.name,)
            return 1
        if isinstance(node, Select):
            c = self.cost(node.operand)
            self.paths[id(node)] = (*self.path(node.operand), node.field)
            operand = self.kind(node.operand)
            return _add(c, 0 if operand in ("list", "dyn") or operand in _SIZED_ONE else 1)
        if isinstance(node, Has):
            return _add(1, self.cost(node.operand))
        if isinstance(node, Index):
            c = _add(1, self.cost(node.operand), self.cost(node.index))
            sub = "@items" if self.kind(node.operand) == "list" else "@values"
            self.paths[id(node)] = (*self.path(node.operand), sub)
            return c
        if isinstance(node, ListExpr):
            return _add(10, *(self.cost(e) for e in node.elements))
        if isinstance(node, MapExpr):
            return _add(30, *(self.cost(x) for k, v, _ in node.entries for x in (k, v)))
        if isinstance(node, Bind):
            init = self.cost(node.init)
            self.push(node.var, self.path(node.init), self.size(node.init))
            body = self.cost(node.body)
            self.pop(node.var)
            if id(node.body) in self.sizes:
                self.sizes[id(node)] = self.sizes[id(node.body)]
            return _add(10, init, body)
        if isinstance(node, Comprehension):
            return self.comprehension(node)
        if isinstance(node, Call):
            return self.call(node)
        return 0

    def push(self, name: str, path: tuple[str, ...], size: int | None) -> None:
        self.scopes.setdefault(name, []).append((path, size if size is not None and size < U else None))

    def pop(self, name: str) -> None:
        self.scopes[name].pop()

    def comprehension(self, node: Comprehension) -> int:
        target = self.cost(node.target)
        n = self.size(node.target)
        base = self.path(node.target)
        listy = self.kind(node.target) == "list"
        # a literal's elements have known sizes (cel-go's entry sizes): its variable takes the largest
        items: int | None = None
        keys: int | None = None
        if isinstance(node.target, ListExpr) and node.target.elements:
            items = max(self.size(e) for e in node.target.elements)
        elif isinstance(node.target, MapExpr) and node.target.entries:
            keys = max(self.size(k) for k, _, _ in node.target.entries)
            items = max(self.size(v) for _, v, _ in node.target.entries)
        if node.var2 is not None:
            self.push(node.var, (*base, "@indices" if listy else "@keys"), 1 if listy else keys)
            self.push(node.var2, (*base, "@items" if listy else "@values"), items)
        else:
            self.push(node.var, (*base, "@items" if listy else "@keys"), items if listy else keys)
        bodies = [self.cost(a) for a in node.args]
        for var in (node.var, node.var2):
            if var is not None:
                self.pop(var)
        kind = node.kind
        # (accumulator init, result, loop condition, loop step) of cel-go's expansion
        if kind == "all":
            init, result, cond, step = 0, 1, 2, _add(1, bodies[0])
        elif kind == "exists":
            init, result, cond, step = 0, 1, 3, _add(1, bodies[0])
        elif kind == "exists_one":
            init, result, cond, step = 0, 2, 0, _add(bodies[0], 2)
        elif kind == "filter":
            init, result, cond, step = 10, 1, 0, _add(bodies[0], 13)
        elif kind in ("optMap", "optFlatMap"):
            return _add(target, 1, *bodies)
        elif kind.startswith("transformMap"):
            init, result, cond, step = 30, 1, 0, _add(3, *bodies)
        else:  # map, transformList, their filter forms, sortBy: append one element per item
            init, result, cond, step = 10, 1, 0, _add(12, *bodies)
        if kind not in ("all", "exists", "exists_one"):
            self.sizes[id(node)] = n
        return _add(target, init, result, _mul(n, _add(cond, step)))

    def call(self, node: Call) -> int:
        name = node.function
        args: Sequence[Node] = node.args
        costs = [self.cost(a) for a in args]
        target = self.cost(node.target) if node.target is not None else 0
        own = sum(costs)
        if name == "dyn":
            if args and id(args[0]) in self.paths:
                self.paths[id(node)] = self.path(args[0])
            return _add(1, own)
        if name in ("_&&_", "_||_"):
            return _add(*costs)
        if name == "_?_:_":
            self.sizes[id(node)] = max(self.size(args[1]), self.size(args[2]))
            return _add(costs[0], max(costs[1], costs[2]))
        if name in ("_==_", "_!=_") or (name in _ORDERING and self.kind(args[0]) in ("string", "bytes")):
            smallest = min(self.size(args[0]), self.size(args[1]))
            return _add(_factor(smallest, STRING_FACTOR), own)
        if name == "_+_" and len(args) == 2:
            total = _add(self.size(args[0]), self.size(args[1]))
            self.sizes[id(node)] = total
            if self.kind(node) == "list":
                return _add(1, own)
            if self.kind(node) in ("string", "bytes"):
                return _add(_factor(total, STRING_FACTOR), own)
            return _add(1, own)
        if name == "@in" and len(args) == 2 and self.kind(args[1]) == "list":
            return _add(self.size(args[1]), own)
        if node.target is not None and name in _STRING_TRANSFORMS:
            text = self.size(node.target)
            self.sizes[id(node)] = text
            return _add(target, _factor(text, STRING_FACTOR), own)
        if node.target is not None and len(args) == 1:
            text = self.size(node.target)
            if name == "matches":
                regex = _factor(self.size(args[0]), REGEX_FACTOR)
                return _add(target, _mul(_factor(_add(text, 1), STRING_FACTOR), regex), own)
            if name == "contains" and self.kind(node.target) == "string":
                sub = _factor(self.size(args[0]), STRING_FACTOR)
                return _add(target, _mul(_factor(text, STRING_FACTOR), sub), own)
            if name in ("startsWith", "endsWith"):
                return _add(target, _factor(self.size(args[0]), STRING_FACTOR), own)
        if name == "matches" and node.target is None and len(args) == 2:
            regex = _factor(self.size(args[1]), REGEX_FACTOR)
            return _add(_mul(_factor(_add(self.size(args[0]), 1), STRING_FACTOR), regex), own)
        return _add(target, 1, own)


def estimate_max_cost(root: Node, checker: Checker) -> int:
    """The estimated worst-case cost of a checked expression (saturating at 2**64-1)."""
    return _Estimator(checker).cost(root)
