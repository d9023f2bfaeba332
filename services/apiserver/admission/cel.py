"""CEL selector checks for admission, run off the event loop.

Admission only *checks* an expression (:func:`draflow.services.dra.cel.check_expression`: parse,
types, regex literals, bool result) as the API server's validation does: nothing is evaluated,
no constant folded. Still, a request may carry many selectors of up to 10 KiB each (tens of ms
of checking each), so the API server checks them on one worker thread before it takes its write
lock (:func:`precheck`, awaited) and remembers each result; the synchronous validation code then
finds the answer in that memo (:func:`check_cel`). Meanwhile the event loop keeps serving every
other request. A miss (an expression that was not prechecked) is checked inline.

The expression length limit (10 KiB, ``CELSelectorExpressionMaxLength``) is checked by the caller
before checking, as upstream does.
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final, NamedTuple

from draflow.services.dra.cel import CelCompileError, check_expression
from draflow.services.dra.cel.cost import COST_LIMIT

__all__ = ["CEL_MAX_LENGTH", "CelProblem", "cel_expressions", "cel_problem", "check_cel", "precheck"]

CEL_MAX_LENGTH: Final = 10 * 1024
TOO_COMPLEX: Final = "too complex, exceeds cost limit"
MEMO_SIZE: Final = 8192
# how long one request may wait for its selectors to be checked (the worker is shared)
PRECHECK_TIMEOUT_S: Final = 30.0


class CelProblem(NamedTuple):
    """Why an expression is refused; ``internal`` is Kubernetes' ``field.InternalError`` kind,
    ``forbidden`` its ``field.Forbidden`` (an estimated cost over the limit)."""

    message: str
    internal: bool = False
    forbidden: bool = False


_memo: OrderedDict[str, CelProblem | None] = OrderedDict()
_memo_lock = threading.Lock()
_executor: ThreadPoolExecutor | None = None


def _check(expr: str) -> CelProblem | None:
    if not expr.strip():
        return CelProblem("compilation failed: expression must not be empty")
    try:
        cost = check_expression(expr)
    except CelCompileError as exc:
        # One line: the compiler's caret diagram follows the first line, which has the position.
        text = str(exc).split("\n", 1)[0]
        if exc.internal:
            return CelProblem(text, internal=True)
        return CelProblem(text if text.startswith("compilation failed") else f"compilation failed: {text}")
    except (ValueError, TypeError) as exc:
        return CelProblem(f"compilation failed: {exc}")
    except Exception as exc:  # an engine bug must not become a stack trace for the user
        return CelProblem(f"compilation failed: internal error: {type(exc).__name__}: {exc}")
    if cost > COST_LIMIT:  # resource.k8s.io CELSelectorExpressionMaxCost, against the static estimate
        return CelProblem(TOO_COMPLEX, forbidden=True)
    return None


def _remember(expr: str, problem: CelProblem | None) -> None:
    with _memo_lock:
        _memo[expr] = problem
        _memo.move_to_end(expr)
        while len(_memo) > MEMO_SIZE:
            _memo.popitem(last=False)


def _check_all(exprs: list[str]) -> None:
    for expr in exprs:
        _remember(expr, _check(expr))


def cel_problem(expr: str) -> CelProblem | None:
    """None when ``expr`` is a valid selector; otherwise the reason, worded like the API server's."""
    with _memo_lock:
        if expr in _memo:
            return _memo[expr]
    problem = _check(expr)
    _remember(expr, problem)
    return problem


def check_cel(expr: str) -> str | None:
    """None when ``expr`` is a valid selector; otherwise the reason's text."""
    problem = cel_problem(expr)
    return None if problem is None else problem.message


async def precheck(exprs: Iterable[str]) -> None:
    """Check ``exprs`` on the CEL worker thread (the event loop stays free) and remember the
    results for :func:`check_cel`. Expressions already known or too long to check are skipped."""
    global _executor
    with _memo_lock:
        todo = [e for e in dict.fromkeys(exprs) if e not in _memo and len(e) <= CEL_MAX_LENGTH]
    if not todo:
        return
    if _executor is None:
        _executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="admission-cel")
    loop = asyncio.get_running_loop()
    async with asyncio.timeout(PRECHECK_TIMEOUT_S):
        await loop.run_in_executor(_executor, _check_all, todo)


# kinds whose schema has no ``cel.expression`` anywhere: their manifests (pods above all, on every
# scheduling write path) are not walked. Only a saving: an expression not prechecked is checked
# on the loop instead.
_NO_CEL_KINDS = frozenset({"Pod", "Node", "Namespace", "Event", "ResourceSlice", "Lease"})


def _kind(manifest: dict[str, Any]) -> str:
    """The manifest's kind, or "" when it is not a string (validation names that error later)."""
    kind = manifest.get("kind")
    return kind if isinstance(kind, str) else ""


def cel_expressions(data: Any) -> list[str]:
    """Every ``cel.expression`` string in a manifest (JSON-like data), wherever it sits:
    DeviceClass, ResourceClaim and template selectors, prioritized-list subrequests. Manifests of
    kinds that have none (``Pod``...) are skipped."""
    found: list[str] = []
    items = data if isinstance(data, list) else [data]
    stack = [i for i in items if not (isinstance(i, dict) and _kind(i) in _NO_CEL_KINDS)]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            cel = item.get("cel")
            if isinstance(cel, dict) and isinstance(cel.get("expression"), str):
                found.append(cel["expression"])
            stack.extend(v for v in item.values() if isinstance(v, dict | list))
        elif isinstance(item, list):
            stack.extend(v for v in item if isinstance(v, dict | list))
    return found
