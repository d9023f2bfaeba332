"""core/v1 NodeSelector matching (terms ORed, requirements ANDed), for ``availableOnNodes``."""

from __future__ import annotations

from collections.abc import Mapping

from draflow.events.api.meta import NodeSelector, NodeSelectorRequirement, NodeSelectorTerm
from draflow.services.dra.structured.nodeselector import parse_int64

__all__ = ["node_names_selector", "selector_matches"]


def _requirement(req: NodeSelectorRequirement, value: str | None) -> bool:
    op = req.operator
    if op == "In":
        return value is not None and value in req.values
    if op == "NotIn":
        return value is None or value not in req.values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt") and value is not None and len(req.values) == 1:
        have, want = parse_int64(value), parse_int64(req.values[0])
        if have is None or want is None:
            return False
        return have > want if op == "Gt" else have < want
    return False


def selector_matches(selector: NodeSelector | None, node_name: str, labels: Mapping[str, str]) -> bool:
    """None matches every node; an empty term list matches none (as upstream)."""
    if selector is None:
        return True
    for term in selector.node_selector_terms:
        if not term.match_expressions and not term.match_fields:
            continue
        if all(_requirement(r, labels.get(r.key)) for r in term.match_expressions) and all(
            _requirement(r, node_name if r.key == "metadata.name" else None) for r in term.match_fields
        ):
            return True
    return False


def node_names_selector(*names: str) -> NodeSelector:
    """A selector for exactly these nodes: one ``metadata.name In [node]`` term per node (upstream
    allows a single value per matchFields requirement)."""
    terms = tuple(
        NodeSelectorTerm(
            match_fields=(NodeSelectorRequirement(key="metadata.name", operator="In", values=(n,)),)
        )
        for n in names
    )
    return NodeSelector(node_selector_terms=terms)
