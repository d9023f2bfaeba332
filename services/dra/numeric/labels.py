"""metav1.LabelSelector matching for the models' ``selector`` parameters (pure)."""

from __future__ import annotations

from collections.abc import Mapping

from draflow.events.api.meta import LabelSelector

__all__ = ["OPERATORS", "selector_error", "selector_matches"]

OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


def selector_error(sel: LabelSelector | None) -> str | None:
    """Why the selector is malformed (None: fine)."""
    if sel is None:
        return None
    for i, req in enumerate(sel.match_expressions):
        if req.operator not in OPERATORS:
            return f"selector.matchExpressions[{i}].operator: unsupported operator {req.operator!r}"
        if req.operator in ("In", "NotIn") and not req.values:
            return f"selector.matchExpressions[{i}].values: must be non-empty for {req.operator}"
        if req.operator in ("Exists", "DoesNotExist") and req.values:
            return f"selector.matchExpressions[{i}].values: must be empty for {req.operator}"
    return None


def selector_matches(sel: LabelSelector | None, labels: Mapping[str, str]) -> bool:
    """None or empty selects everything (as metav1.LabelSelectorAsSelector)."""
    if sel is None:
        return True
    for key, value in sel.match_labels.items():
        if labels.get(key) != value:
            return False
    for req in sel.match_expressions:
        have = labels.get(req.key)
        if req.operator == "In" and have not in req.values:
            return False
        if req.operator == "NotIn" and have in req.values:
            return False
        if req.operator == "Exists" and have is None:
            return False
        if req.operator == "DoesNotExist" and have is not None:
            return False
    return True
