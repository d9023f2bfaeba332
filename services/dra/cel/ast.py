"""Abstract syntax tree of a parsed CEL expression.

Operators are calls with cel-go's internal names (``_+_``, ``_&&_``, ``@in`` ...). Macros are kept
as their own nodes (``Comprehension``, ``Bind``, ``Has``) instead of being expanded into generic
comprehension loops, so the compiler can turn each into a tight Python loop.
"""

from __future__ import annotations

__all__ = [
    "Bind",
    "Call",
    "Comprehension",
    "Has",
    "Ident",
    "Index",
    "ListExpr",
    "Literal",
    "MapExpr",
    "Node",
    "Select",
]


class Node:
    """Base node; ``offset`` is the position in the source text (for error messages)."""

    __slots__ = ("offset",)

    def __init__(self, offset: int) -> None:
        self.offset = offset

    def children(self) -> list[Node]:
        return []


class Literal(Node):
    """A constant; ``kind`` is one of int, uint, double, string, bytes, bool, null."""

    __slots__ = ("kind", "value")

    def __init__(self, offset: int, kind: str, value: object) -> None:
        super().__init__(offset)
        self.kind = kind
        self.value = value


class Ident(Node):
    __slots__ = ("name",)

    def __init__(self, offset: int, name: str) -> None:
        super().__init__(offset)
        self.name = name


class Select(Node):
    """``operand.field`` or, with ``optional``, ``operand.?field``."""

    __slots__ = ("field", "operand", "optional")

    def __init__(self, offset: int, operand: Node, field: str, optional: bool = False) -> None:
        super().__init__(offset)
        self.operand = operand
        self.field = field
        self.optional = optional

    def children(self) -> list[Node]:
        return [self.operand]


class Has(Node):
    """``has(operand.field)``: presence test of a field or map key."""

    __slots__ = ("field", "operand")

    def __init__(self, offset: int, operand: Node, field: str) -> None:
        super().__init__(offset)
        self.operand = operand
        self.field = field

    def children(self) -> list[Node]:
        return [self.operand]


class Index(Node):
    """``operand[index]`` or, with ``optional``, ``operand[?index]``."""

    __slots__ = ("index", "operand", "optional")

    def __init__(self, offset: int, operand: Node, index: Node, optional: bool = False) -> None:
        super().__init__(offset)
        self.operand = operand
        self.index = index
        self.optional = optional

    def children(self) -> list[Node]:
        return [self.operand, self.index]


class Call(Node):
    """A global (``target is None``) or member call; operators use cel-go's names."""

    __slots__ = ("args", "function", "target")

    def __init__(self, offset: int, function: str, target: Node | None, args: list[Node]) -> None:
        super().__init__(offset)
        self.function = function
        self.target = target
        self.args = args

    def children(self) -> list[Node]:
        return ([self.target] if self.target is not None else []) + list(self.args)


class ListExpr(Node):
    """``[a, ?b]``: ``optional[i]`` marks elements written with a leading ``?``."""

    __slots__ = ("elements", "optional")

    def __init__(self, offset: int, elements: list[Node], optional: list[bool]) -> None:
        super().__init__(offset)
        self.elements = elements
        self.optional = optional

    def children(self) -> list[Node]:
        return list(self.elements)


class MapExpr(Node):
    """``{k: v, ?k2: v2}`` as (key, value, optional) triples."""

    __slots__ = ("entries",)

    def __init__(self, offset: int, entries: list[tuple[Node, Node, bool]]) -> None:
        super().__init__(offset)
        self.entries = entries

    def children(self) -> list[Node]:
        out: list[Node] = []
        for k, v, _ in self.entries:
            out.append(k)
            out.append(v)
        return out


class Comprehension(Node):
    """A comprehension macro over ``target``.

    ``kind`` is the macro name (all, exists, exists_one, map, filter, transformList, ...);
    ``var2`` is the second variable of the two-variable forms; ``args`` are the macro bodies
    after the variables (predicate / transform / filter+transform).
    """

    __slots__ = ("args", "kind", "target", "var", "var2")

    def __init__(
        self, offset: int, kind: str, target: Node, var: str, var2: str | None, args: list[Node]
    ) -> None:
        super().__init__(offset)
        self.kind = kind
        self.target = target
        self.var = var
        self.var2 = var2
        self.args = args

    def children(self) -> list[Node]:
        return [self.target, *self.args]


class Bind(Node):
    """``cel.bind(var, init, body)``."""

    __slots__ = ("body", "init", "var")

    def __init__(self, offset: int, var: str, init: Node, body: Node) -> None:
        super().__init__(offset)
        self.var = var
        self.init = init
        self.body = body

    def children(self) -> list[Node]:
        return [self.init, self.body]
