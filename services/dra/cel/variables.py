"""Expressions over named variables of any JSON value (KEP-4381's templates: ``object``).

The selector entry points bind one variable, ``device``; a numeric class's CEL template reads the
vendor parameter object as ``object`` instead. This compiles an expression with such variables
declared as ``dyn`` (their values are plain JSON data: maps, lists, strings, numbers, booleans)
and evaluates it to a value of any type, under the same cost limit as selectors.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .checker import Checker
from .compiler import Compiler, Fn
from .cost import COST_LIMIT, EvalInterrupted, reset
from .errors import CelCompileError, CelInterrupted, CelRuntimeError, EvalError
from .parser import parse
from .program import _FUNCTIONS, deep_stack
from .types import DYN

__all__ = ["VariableProgram", "compile_with_variables"]


class VariableProgram:
    """A compiled expression over ``names``; ``evaluate(values)`` -> the CEL value."""

    __slots__ = ("_cells", "_fn", "_limit", "expression", "names")

    def __init__(
        self, expression: str, names: tuple[str, ...], fn: Fn, cells: list[list[Any]], limit: int
    ) -> None:
        self.expression = expression
        self.names = names
        self._fn = fn
        self._cells = cells
        self._limit = limit

    def evaluate(self, values: Mapping[str, Any]) -> Any:
        """Raises CelRuntimeError (missing key, no such overload, cost limit, ...)."""
        for name, cell in zip(self.names, self._cells, strict=True):
            cell[0] = values.get(name)
        reset(self._limit)
        try:
            return self._fn(None)
        except EvalError as exc:
            raise CelRuntimeError(self.expression, exc.message, exc.offset) from None
        except RecursionError:
            raise CelRuntimeError(self.expression, "expression too deeply nested to evaluate") from None
        except EvalInterrupted:
            raise CelInterrupted(self.expression) from None


def compile_with_variables(
    expression: str, names: Sequence[str], cost_limit: int = COST_LIMIT
) -> VariableProgram:
    """Compile; raises CelCompileError (syntax, undeclared reference, unknown function, ...)."""
    with deep_stack():
        root = parse(expression)
        checker = Checker(expression, _FUNCTIONS)
        try:
            checker.check(root, {name: DYN for name in names})
        except RecursionError:
            raise CelCompileError(expression, "expression too deeply nested") from None
        checker.validate_regexes()
        compiler = Compiler(checker, locate=True)
        cells: list[list[Any]] = []
        for name in names:
            cell: list[Any] = [None]
            compiler.cells[name] = [cell]
            cells.append(cell)
        fn = compiler.compile(root)
    return VariableProgram(expression, tuple(names), fn, cells, cost_limit)
