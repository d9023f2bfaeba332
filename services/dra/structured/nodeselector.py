"""core/v1 NodeSelector matching (node affinity rules) and the result node selector of a claim.

Selectors are compiled once per slice/device (they never change while the slice is cached), so
matching a node is a few dict lookups. Parse rules follow component-helpers' nodeaffinity: bad
operators, wrong value counts and non-integer Gt/Lt values are errors, reported when the
selector is first used for a node, as upstream.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

from draflow.events.api.meta import NodeSelector, NodeSelectorRequirement, NodeSelectorTerm

__all__ = [
    "CompiledNodeSelector",
    "NodeSelectorParseError",
    "merge_result_selector",
    "node_name_selector",
    "parse_int64",
]

_NAME_RE = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")

_IN: Final = 0
_NOT_IN: Final = 1
_EXISTS: Final = 2
_NOT_EXISTS: Final = 3
_GT: Final = 4
_LT: Final = 5
_LABEL_OPS: Final = {
    "In": _IN,
    "NotIn": _NOT_IN,
    "Exists": _EXISTS,
    "DoesNotExist": _NOT_EXISTS,
    "Gt": _GT,
    "Lt": _LT,
}


class NodeSelectorParseError(ValueError):
    """The selector cannot be parsed (upstream: nodeaffinity.NewNodeSelector error)."""


def _key_error(key: str) -> str | None:
    prefix, sep, name = key.rpartition("/")
    if sep and (not prefix or len(prefix) > 253 or not _DNS1123_SUBDOMAIN.match(prefix)):
        return f"key: Invalid value: {key!r}: prefix part must be a DNS-1123 subdomain"
    if not name or len(name) > 63 or not _NAME_RE.match(name):
        return (
            f"key: Invalid value: {key!r}: name part must consist of alphanumeric characters, '-', '_' "
            "or '.', and must start and end with an alphanumeric character"
        )
    return None


_INT_RE = re.compile(r"^[+-]?[0-9]+$")


def parse_int64(text: str) -> int | None:
    """A Gt/Lt value as Go's ``strconv.ParseInt(v, 10, 64)`` reads it (None: not one): ASCII
    digits with an optional sign — not Python's ``int`` (which also takes ``1_0``, spaces and
    other scripts' digits) — within 64 bits."""
    if not _INT_RE.match(text):
        return None
    value = int(text)
    return value if -(2**63) <= value < 2**63 else None


# A compiled requirement: (key, op, values-as-frozenset, integer bound for Gt/Lt).
_Req = tuple[str, int, frozenset[str], int]


def _compile_labels(reqs: tuple[NodeSelectorRequirement, ...], errors: list[str]) -> list[_Req]:
    out: list[_Req] = []
    for r in reqs:
        op = _LABEL_OPS.get(r.operator)
        if op is None:
            errors.append(f"{r.operator!r} is not a valid label selector operator")
            continue
        problem = _key_error(r.key)
        bound = 0
        if problem is None:
            if op in (_IN, _NOT_IN) and not r.values:
                problem = "values: Invalid value: for 'in', 'notin' operators, values set can't be empty"
            elif op in (_EXISTS, _NOT_EXISTS) and r.values:
                problem = "values: Invalid value: values set must be empty for exists and does not exist"
            elif op in (_GT, _LT):
                parsed = parse_int64(r.values[0]) if len(r.values) == 1 else None
                if len(r.values) != 1:
                    problem = "values: Invalid value: for 'Gt', 'Lt' operators, exactly one value is required"
                elif parsed is None:
                    problem = (
                        f"values[0]: Invalid value: {r.values[0]!r}: "
                        "for 'Gt', 'Lt' operators, the value must be an integer"
                    )
                else:
                    bound = parsed
            if problem is None:
                for v in r.values:
                    if len(v) > 63 or not _LABEL_VALUE_RE.match(v):
                        problem = (
                            f"values: Invalid value: {v!r}: a valid label must be an empty string "
                            "or consist of alphanumeric characters"
                        )
                        break
        if problem is not None:
            errors.append(problem)
            continue
        out.append((r.key, op, frozenset(r.values), bound))
    return out


def _compile_fields(reqs: tuple[NodeSelectorRequirement, ...], errors: list[str]) -> list[_Req]:
    out: list[_Req] = []
    for r in reqs:
        if r.operator not in ("In", "NotIn"):
            errors.append(f'operator: Unsupported value: {r.operator!r}: supported values: "In", "NotIn"')
        elif len(r.values) != 1:
            errors.append("values: Invalid value: must have one element")
        else:
            out.append((r.key, _IN if r.operator == "In" else _NOT_IN, frozenset(r.values), 0))
    return out


def _label_matches(req: _Req, labels: Mapping[str, str]) -> bool:
    key, op, values, bound = req
    if op == _IN:
        return key in labels and labels[key] in values
    if op == _NOT_IN:
        return key not in labels or labels[key] not in values
    if op == _EXISTS:
        return key in labels
    if op == _NOT_EXISTS:
        return key not in labels
    if key not in labels:
        return False
    have = parse_int64(labels[key])
    if have is None:
        return False
    return have > bound if op == _GT else have < bound


class CompiledNodeSelector:
    """A NodeSelector ready to match nodes: terms ORed, requirements ANDed, empty terms match nothing."""

    __slots__ = ("error", "selector", "terms")

    def __init__(self, selector: NodeSelector) -> None:
        self.selector = selector
        errors: list[str] = []
        terms: list[tuple[list[_Req] | None, list[_Req] | None]] = []
        for term in selector.node_selector_terms:
            if not term.match_expressions and not term.match_fields:
                continue  # an empty term never matches
            labels = _compile_labels(term.match_expressions, errors) if term.match_expressions else None
            fields = _compile_fields(term.match_fields, errors) if term.match_fields else None
            terms.append((labels, fields))
        self.terms = terms
        self.error = "; ".join(errors) if errors else None

    def matches(self, node_name: str, labels: Mapping[str, str]) -> bool:
        """Raises NodeSelectorParseError when the selector is malformed (like upstream)."""
        if self.error is not None:
            raise NodeSelectorParseError(self.error)
        for label_reqs, field_reqs in self.terms:
            if label_reqs is not None and not all(_label_matches(r, labels) for r in label_reqs):
                continue
            # The only node field is metadata.name; any other key reads as "".
            if field_reqs is not None and not all(
                ((node_name if r[0] == "metadata.name" else "") in r[2]) == (r[1] == _IN) for r in field_reqs
            ):
                continue
            return True
        return False


def node_name_selector(node_name: str) -> NodeSelector:
    """``matchFields metadata.name In [node]``: the result selector of node-local devices."""
    req = NodeSelectorRequirement(key="metadata.name", operator="In", values=(node_name,))
    return NodeSelector(node_selector_terms=(NodeSelectorTerm(match_fields=(req,)),))


def _add_new(into: list[NodeSelectorRequirement], reqs: tuple[NodeSelectorRequirement, ...]) -> None:
    for req in reqs:
        values = set(req.values)
        if not any(r.key == req.key and r.operator == req.operator and set(r.values) == values for r in into):
            into.append(req)


def merge_result_selector(selectors: list[NodeSelector]) -> NodeSelector | None:
    """Merge single-term selectors into one term, dropping duplicate requirements (None = anywhere).

    Raises ValueError for a selector with more than one term (upstream refuses those too).
    """
    fields: list[NodeSelectorRequirement] = []
    exprs: list[NodeSelectorRequirement] = []
    for sel in selectors:
        n = len(sel.node_selector_terms)
        if n == 0:
            continue
        if n > 1:
            raise ValueError(f"unsupported ResourceSlice.NodeSelector with {n} terms")
        term = sel.node_selector_terms[0]
        _add_new(fields, term.match_fields)
        _add_new(exprs, term.match_expressions)
    if not fields and not exprs:
        return None
    return NodeSelector(
        node_selector_terms=(NodeSelectorTerm(match_expressions=tuple(exprs), match_fields=tuple(fields)),)
    )
