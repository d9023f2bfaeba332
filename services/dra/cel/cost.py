"""Runtime cost accounting (Kubernetes: 1,000,000 per selector evaluation) and a wall-time bound.

One budget for the whole process: evaluation is single-threaded and not re-entrant, and only
programs that contain a comprehension or a size-dependent function reset and use it. Charges are
the number of loop iterations times the static size of the loop body, the size of strings and
lists that functions create (string concatenation counts a tenth per character, as cel-go's
traversal factor), and for regex calls cel-go's text-length x pattern-length product, so neither
nested loops, repeated doubling nor regexes can run away.

``BUDGET`` is ``[used, checkpoint, limit]``: a charge only compares ``used`` with ``checkpoint``;
every ``CHECK_EVERY`` units the slow path checks the real limit and the clock against
``DEADLINE`` (a ``time.monotonic()`` value, set by :func:`time_limit` around an allocation or an
admission check), so the wall-time bound costs nothing on the fast path. Running past the
deadline raises :class:`EvalInterrupted`, which no ``&&``/``||`` absorbs (cel-go's "operation
interrupted").
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator
from typing import Final

from .errors import EvalError

__all__ = [
    "BUDGET",
    "CHECK_EVERY",
    "COSTLY_OVERLOADS",
    "COST_LIMIT",
    "DEADLINE",
    "EvalInterrupted",
    "charge",
    "charge_text",
    "over_budget",
    "reset",
    "time_limit",
]

# resource.k8s.io CELSelectorExpressionMaxCost
COST_LIMIT: Final = 1_000_000
# cost units between two looks at the clock (a few milliseconds of evaluation at most)
CHECK_EVERY: Final = 10_000
# [used, checkpoint, limit]
BUDGET: Final[list[int]] = [0, min(COST_LIMIT, CHECK_EVERY), COST_LIMIT]
# [monotonic deadline]; inf = no wall-time bound
DEADLINE: Final[list[float]] = [math.inf]

COST_EXCEEDED: Final = "operation cancelled: actual cost limit exceeded"
INTERRUPTED: Final = "operation interrupted"

# overloads whose implementation charges the budget (their presence makes a program "costly")
COSTLY_OVERLOADS: Final[set[str]] = set()


class EvalInterrupted(Exception):
    """The wall-time deadline passed during an evaluation: abort it (never absorbed by ``||``)."""

    def __init__(self) -> None:
        super().__init__(INTERRUPTED)


def reset(limit: int = COST_LIMIT) -> None:
    """Start counting a new evaluation with ``limit``."""
    BUDGET[0] = 0
    BUDGET[1] = min(limit, CHECK_EVERY)
    BUDGET[2] = limit


def over_budget() -> None:
    """The slow path of a charge: the real limit, then the clock; sets the next checkpoint."""
    used, _, limit = BUDGET
    if used > limit:
        raise EvalError(COST_EXCEEDED)
    if DEADLINE[0] != math.inf and time.monotonic() > DEADLINE[0]:
        raise EvalInterrupted()
    BUDGET[1] = min(limit, used + CHECK_EVERY)


def charge(amount: int) -> None:
    BUDGET[0] += amount
    if BUDGET[0] > BUDGET[1]:
        over_budget()


def charge_text(length: int) -> None:
    charge(1 + length // 10)


@contextlib.contextmanager
def time_limit(deadline: float | None) -> Iterator[None]:
    """Evaluations inside stop with :class:`EvalInterrupted` once ``time.monotonic()`` passes
    ``deadline`` (None: no bound). Nested limits keep the earlier deadline."""
    previous = DEADLINE[0]
    if deadline is not None and deadline < previous:
        DEADLINE[0] = deadline
    try:
        yield
    finally:
        DEADLINE[0] = previous
