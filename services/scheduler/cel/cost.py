"""Runtime cost accounting (Kubernetes: 1,000,000 per selector evaluation).

One budget for the whole process: evaluation is single-threaded and not re-entrant, and only
programs that contain a comprehension or a size-dependent function reset and use it. Charges are
the number of loop iterations times the static size of the loop body, and the size of strings
and lists that functions create (string concatenation counts a tenth per character, as cel-go's
traversal factor), so neither nested loops nor repeated doubling can run away.
"""

from __future__ import annotations

from typing import Final

from .errors import EvalError

__all__ = ["BUDGET", "COSTLY_OVERLOADS", "COST_LIMIT", "charge", "charge_text"]

# resource.k8s.io CELSelectorExpressionMaxCost
COST_LIMIT: Final = 1_000_000
# [used, limit]
BUDGET: Final[list[int]] = [0, COST_LIMIT]

# overloads whose implementation charges the budget (their presence makes a program "costly")
COSTLY_OVERLOADS: Final[set[str]] = set()


def charge(amount: int) -> None:
    BUDGET[0] += amount
    if BUDGET[0] > BUDGET[1]:
        raise EvalError("operation cancelled: actual cost limit exceeded")


def charge_text(length: int) -> None:
    charge(1 + length // 10)
