"""Macro recognition (as cel-go's parser does): ``has``, the comprehension macros, their
two-variable forms, ``optMap``/``optFlatMap``, ``sortBy`` and ``cel.bind`` become dedicated nodes."""

from __future__ import annotations

from typing import Final

from .ast import Bind, Call, Comprehension, Has, Ident, Node, Select
from .errors import CelCompileError
from .lexer import Token

__all__ = ["global_call", "member_call"]

# receiver macros: name -> allowed argument counts (including the iteration variables)
_RECEIVER_MACROS: Final = {
    "all": (2, 3),
    "exists": (2, 3),
    "exists_one": (2, 3),
    "existsOne": (2, 3),
    "map": (2, 3),
    "filter": (2,),
    "transformList": (3, 4),
    "transformMap": (3, 4),
    "transformMapEntry": (3, 4),
    "optMap": (2,),
    "optFlatMap": (2,),
    "sortBy": (2,),
}
# forms whose first two arguments are both variables
_TWO_VAR: Final = {"transformList", "transformMap", "transformMapEntry"}


def global_call(text: str, t: Token, name: str, args: list[Node]) -> Node:
    """``name(args)``: the ``has`` macro or a plain global call."""
    if name == "has" and len(args) == 1:
        arg = args[0]
        if not isinstance(arg, Select) or arg.optional:
            raise CelCompileError(text, "invalid argument to has() macro", arg.offset)
        return Has(t.offset, arg.operand, arg.field)
    return Call(t.offset, name, None, args)


def member_call(text: str, t: Token, target: Node, name: str, args: list[Node]) -> Node:
    """``target.name(args)``: a receiver macro, ``cel.bind``, or a plain member call."""
    if name == "bind" and isinstance(target, Ident) and target.name == "cel" and len(args) == 3:
        var = _variable_name(text, args[0], "cel.bind")
        return Bind(t.offset, var, args[1], args[2])
    counts = _RECEIVER_MACROS.get(name)
    if counts is None or len(args) not in counts:
        return Call(t.offset, name, target, args)
    two_var = name in _TWO_VAR or (len(args) == 3 and name in ("all", "exists", "exists_one", "existsOne"))
    var = _variable_name(text, args[0], name)
    var2: str | None = None
    rest = args[1:]
    if two_var:
        var2 = _variable_name(text, args[1], name)
        if var2 == var:
            raise CelCompileError(text, f"duplicate variable name: {var}", args[1].offset)
        rest = args[2:]
    kind = "exists_one" if name == "existsOne" else name
    if name == "map" and len(args) == 3:
        kind = "map_filter"
    if name in ("transformList", "transformMap", "transformMapEntry") and len(args) == 4:
        kind = name + "_filter"
    return Comprehension(t.offset, kind, target, var, var2, rest)


def _variable_name(text: str, node: Node, macro: str) -> str:
    if not isinstance(node, Ident):
        raise CelCompileError(text, f"{macro}() variable name must be a simple identifier", node.offset)
    return node.name
