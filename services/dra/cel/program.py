"""Compiling and evaluating selector expressions; the public entry points live here."""

from __future__ import annotations

import contextlib
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any, Final

from .ast import Node
from .checker import Checker
from .compiler import Compiler, Fn
from .cost import BUDGET, CHECK_EVERY, COST_LIMIT, EvalInterrupted, reset
from .device import DeviceInput
from .errors import CelCompileError, CelInterrupted, CelRuntimeError, EvalError
from .estimate import estimate_max_cost
from .library import load
from .parser import parse
from .types import BOOL, DYN, Type
from .values import type_name

__all__ = [
    "COST_LIMIT",
    "Program",
    "RuleProgram",
    "cache_clear",
    "check_expression",
    "compile_expression",
    "compile_rule",
]

CACHE_SIZE: Final = 1024
_COMPILE_STACK: Final = 4000

_FUNCTIONS = load()


class Program:
    """A compiled selector. ``evaluate(device) -> bool`` raises CelRuntimeError; not thread-safe.

    ``evaluate`` is a per-program closure (no bound-method or attribute lookups per call).
    """

    __slots__ = ("_fn", "_limit", "evaluate", "expression", "result_type")

    def __init__(self, expression: str, fn: Fn, limit: int, costly: bool, result_type: Type) -> None:
        self.expression = expression
        self.result_type = result_type
        self._fn = fn
        self._limit = limit
        self.evaluate: Callable[[DeviceInput], bool] = _make_evaluate(
            expression, fn, limit, costly, result_type
        )

    def evaluate_value(self, device: DeviceInput) -> Any:
        """The raw CEL result (for tests and tools); raises CelRuntimeError like ``evaluate``."""
        if device.error is not None:
            raise CelRuntimeError(self.expression, device.error)
        reset(self._limit)
        try:
            return self._fn(device)
        except EvalError as exc:
            offset = locate_error(self.expression, device, exc, self._limit)
            raise CelRuntimeError(self.expression, exc.message, offset) from None
        except EvalInterrupted:
            raise CelInterrupted(self.expression) from None

    def __repr__(self) -> str:
        return f"Program({self.expression!r})"


def _make_evaluate(
    expression: str, fn: Fn, limit: int, costly: bool, result_type: Type
) -> Callable[[DeviceInput], bool]:
    def fail(device: DeviceInput, exc: BaseException | None, result: Any = None) -> bool:
        """Raise the CelRuntimeError for a failed evaluation (never returns)."""
        if device.error is not None:
            raise CelRuntimeError(expression, device.error)
        if isinstance(exc, EvalError):
            offset = locate_error(expression, device, exc, limit)
            raise CelRuntimeError(expression, exc.message, offset) from None
        if isinstance(exc, RecursionError):
            raise CelRuntimeError(expression, "expression too deeply nested to evaluate") from None
        if isinstance(exc, EvalInterrupted):
            raise CelInterrupted(expression) from None
        raise CelRuntimeError(
            expression, f"CEL result of type {type_name(result)} could not be converted to bool"
        )

    if result_type == BOOL and not costly:

        def evaluate_bool(device: DeviceInput) -> bool:
            """True/False for this device; raises CelRuntimeError (a fatal allocation error)."""
            if device.error is None:
                try:
                    return fn(device)
                except (EvalError, RecursionError) as exc:
                    return fail(device, exc)
            return fail(device, None)

        return evaluate_bool

    first_checkpoint = min(limit, CHECK_EVERY)

    def evaluate(device: DeviceInput) -> bool:
        """True/False for this device; raises CelRuntimeError (a fatal allocation error)."""
        if device.error is not None:
            return fail(device, None)
        if costly:
            BUDGET[0] = 0
            BUDGET[1] = first_checkpoint
            BUDGET[2] = limit
        try:
            result = fn(device)
        except (EvalError, RecursionError, EvalInterrupted) as exc:
            return fail(device, exc)
        if result is True or result is False:
            return result
        return fail(device, None, result)

    return evaluate


def locate_error(expression: str, device: DeviceInput, exc: EvalError, limit: int = COST_LIMIT) -> int:
    """Offset of the sub-expression that raised ``exc``: the evaluation is replayed with a
    program compiled in locating mode (evaluation is deterministic), so the fast path pays
    nothing for positions. Cost-limit errors are not replayed (no single node is at fault)."""
    if "cost limit" in exc.message:
        return -1
    try:
        with deep_stack():
            root = parse(expression)
            checker = Checker(expression, _FUNCTIONS)
            checker.check(root, {})
            fn = Compiler(checker, locate=True).compile(root)
            reset(limit)
            fn(device)
    except EvalError as replayed:
        return replayed.offset if replayed.message == exc.message else -1
    except (CelCompileError, RecursionError, EvalInterrupted):
        return -1
    return -1


_stack_lock = threading.Lock()
_stack_users = [0, 0]  # [compiles running, the recursion limit before the first of them]


@contextlib.contextmanager
def deep_stack() -> Iterator[None]:
    """Raise the recursion limit for a compile: the checker and compiler recurse ~3 frames per
    AST level and the parser allows 250 levels, more than Python's default 1000 frames. The limit
    is process-wide, so it is restored only when the last compile running (in any thread, e.g.
    the apiserver's admission worker) is done."""
    with _stack_lock:
        if _stack_users[0] == 0:
            _stack_users[1] = sys.getrecursionlimit()
            if _stack_users[1] < _COMPILE_STACK:
                sys.setrecursionlimit(_COMPILE_STACK)
        _stack_users[0] += 1
    try:
        yield
    finally:
        with _stack_lock:
            _stack_users[0] -= 1
            if _stack_users[0] == 0 and _stack_users[1] < _COMPILE_STACK:
                sys.setrecursionlimit(_stack_users[1])


def _compile(expression: str, cost_limit: int, require_bool: bool) -> Program:
    with deep_stack():
        return _compile_checked(expression, cost_limit, require_bool)


def _checked(expression: str, require_bool: bool) -> tuple[Node, Checker, Type]:
    root: Node = parse(expression)
    checker = Checker(expression, _FUNCTIONS)
    try:
        result_type = checker.check(root, {})
    except RecursionError:
        raise CelCompileError(expression, "expression too deeply nested") from None
    checker.validate_regexes()
    if require_bool and result_type not in (BOOL, DYN):
        raise CelCompileError(
            expression, f"must evaluate to bool or the unknown type, not {result_type}", positional=False
        )
    return root, checker, result_type


def check_expression(expression: str) -> int:
    """Every compile-time check of :func:`compile_expression` (parse, types, regex literals,
    bool result) and nothing else: no program is built, no constant is folded, so no part of the
    expression is evaluated. Returns the estimated worst-case cost (``estimate``), which the API
    server compares with the cost limit. Thread-safe; for validation (the API server's admission)."""
    with deep_stack():
        root, checker, _ = _checked(expression, True)
        return estimate_max_cost(root, checker)


def _compile_checked(expression: str, cost_limit: int, require_bool: bool) -> Program:
    root, checker, result_type = _checked(expression, require_bool)
    compiler = Compiler(checker)
    fn = compiler.compile(root)
    return Program(expression, fn, cost_limit, compiler.costly, result_type)


_cache: OrderedDict[str, Program] = OrderedDict()


def compile_expression(expression: str) -> Program:
    """Compile a DRA selector (result must be bool or dyn); cached by expression text (LRU).

    Raises CelCompileError (with the position) for syntax errors, undeclared references,
    unknown functions/fields, type errors and a non-bool result. Failures are not cached.
    """
    program = _cache.get(expression)
    if program is not None:
        _cache.move_to_end(expression)
        return program
    program = _compile(expression, COST_LIMIT, True)
    _cache[expression] = program
    if len(_cache) > CACHE_SIZE:
        _cache.popitem(last=False)
    return program


def compile_any(expression: str, cost_limit: int = COST_LIMIT) -> Program:
    """Compile an expression of any result type (not cached); for tests and tools."""
    return _compile(expression, cost_limit, False)


def cache_clear() -> None:
    _cache.clear()
    _rule_cache.clear()


class RuleProgram:
    """An expression over named variables (``self``, ``oldSelf``, ``object``...), each bound to a
    JSON-like value (dict, list, str, int, float, bool, None) at evaluation: CRD validation rules
    and templates, where the DRA selectors have ``device``."""

    __slots__ = ("_fn", "_limit", "expression", "result_type", "variables")

    def __init__(
        self, expression: str, fn: Fn, limit: int, result_type: Type, variables: tuple[str, ...]
    ) -> None:
        self.expression = expression
        self.result_type = result_type
        self.variables = variables
        self._fn = fn
        self._limit = limit

    def evaluate(self, activation: dict[str, Any]) -> Any:
        """The CEL result; raises CelRuntimeError (no such key, overflow, cost limit, ...)."""
        reset(self._limit)
        BUDGET[0] = 0
        BUDGET[1] = min(self._limit, CHECK_EVERY)
        BUDGET[2] = self._limit
        try:
            with deep_stack():
                return self._fn(activation)
        except EvalError as exc:
            raise CelRuntimeError(self.expression, exc.message) from None
        except RecursionError:
            raise CelRuntimeError(self.expression, "expression too deeply nested to evaluate") from None
        except EvalInterrupted:
            raise CelInterrupted(self.expression) from None

    def __repr__(self) -> str:
        return f"RuleProgram({self.expression!r}, {self.variables!r})"


_rule_cache: OrderedDict[tuple[str, tuple[str, ...]], RuleProgram] = OrderedDict()


def compile_rule(expression: str, variables: tuple[str, ...], cost_limit: int = COST_LIMIT) -> RuleProgram:
    """Compile an expression whose free variables are ``variables`` (typed dyn); any result type.

    Raises CelCompileError for syntax errors, undeclared references and type errors; cached by
    (expression, variables), failures not."""
    key = (expression, variables)
    program = _rule_cache.get(key)
    if program is not None and program._limit == cost_limit:
        _rule_cache.move_to_end(key)
        return program
    with deep_stack():
        root: Node = parse(expression)
        checker = Checker(expression, _FUNCTIONS)
        try:
            result_type = checker.check(root, dict.fromkeys(variables, DYN))
        except RecursionError:
            raise CelCompileError(expression, "expression too deeply nested") from None
        checker.validate_regexes()
        fn = Compiler(checker, variables=variables).compile(root)
    program = RuleProgram(expression, fn, cost_limit, result_type, variables)
    _rule_cache[key] = program
    if len(_rule_cache) > CACHE_SIZE:
        _rule_cache.popitem(last=False)
    return program
