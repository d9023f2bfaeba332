"""Label and field selectors with Kubernetes' syntax (``-l app=x,tier!=db,env in (a,b),!legacy``).

Label selectors: ``k``, ``!k``, ``k=v``, ``k==v``, ``k!=v``, ``k in (a,b)``, ``k notin (a,b)``,
``k>N``, ``k<N``; requirements separated by commas and all must hold. Field selectors:
``path=v``, ``path==v``, ``path!=v`` on the object's JSON fields (``metadata.name``,
``spec.nodeName``, ``involvedObject.uid``...); a missing field reads as "".
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["SelectorError", "field_value", "parse_field_selector", "parse_label_selector"]

LabelMatcher = Callable[[Mapping[str, str]], bool]
FieldMatcher = Callable[[Mapping[str, Any]], bool]

_KEY = r"[A-Za-z0-9](?:[-A-Za-z0-9_./]*[A-Za-z0-9])?"
_VALUE = r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
_EXISTS = re.compile(rf"^(!?)\s*({_KEY})$")
_EQUALS = re.compile(rf"^({_KEY})\s*(==|=|!=)\s*({_VALUE})$")
_SET = re.compile(rf"^({_KEY})\s+(in|notin)\s*\((.*)\)$")
_CMP = re.compile(rf"^({_KEY})\s*([<>])\s*(-?\d+)$")
_VALUE_RX = re.compile(rf"^{_VALUE}$")
_FIELD = re.compile(r"^([A-Za-z0-9_.\[\]-]+)\s*(==|=|!=)\s*(.*)$")


class SelectorError(ValueError):
    pass


def _split(text: str) -> list[str]:
    """Split on commas outside parentheses."""
    parts: list[str] = []
    depth, start = 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts]


def _requirement(text: str, whole: str) -> LabelMatcher:
    if m := _EXISTS.match(text):
        key, negate = m[2], bool(m[1])
        return (lambda labels: key not in labels) if negate else (lambda labels: key in labels)
    if m := _EQUALS.match(text):
        key, op, value = m[1], m[2], m[3]
        if op == "!=":
            return lambda labels: labels.get(key) != value
        return lambda labels: labels.get(key) == value
    if m := _SET.match(text):
        key, op = m[1], m[2]
        values = frozenset(v.strip() for v in m[3].split(","))
        if not m[3].strip() or not all(_VALUE_RX.match(v) for v in values):
            raise SelectorError(f'couldn\'t parse the selector string "{whole}": invalid values in "{text}"')
        if op == "in":
            return lambda labels: labels.get(key) in values
        return lambda labels: labels.get(key) not in values
    if m := _CMP.match(text):
        key, op, bound = m[1], m[2], int(m[3])

        def compare(labels: Mapping[str, str]) -> bool:
            try:
                have = int(labels[key])
            except (KeyError, ValueError):
                return False
            return have > bound if op == ">" else have < bound

        return compare
    raise SelectorError(
        f'couldn\'t parse the selector string "{whole}": unable to parse requirement "{text}"'
    )


def parse_label_selector(text: str) -> LabelMatcher:
    """A predicate over a label map; SelectorError for bad syntax. Empty selects everything."""
    if not text.strip():
        return lambda labels: True
    reqs = [_requirement(part, text) for part in _split(text)]
    return lambda labels: all(r(labels) for r in reqs)


def field_value(obj: Mapping[str, Any], path: str) -> str:
    """The string form of a dotted JSON path in an encoded object ("" when absent)."""
    value: Any = obj
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return ""
        value = value[part]
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None or isinstance(value, Mapping | list) else str(value)


def parse_field_selector(text: str) -> tuple[list[tuple[str, bool, str]], FieldMatcher]:
    """(requirements as (path, equal?, value), predicate over the encoded object)."""
    if not text.strip():
        return [], lambda obj: True
    reqs: list[tuple[str, bool, str]] = []
    for part in _split(text):
        m = _FIELD.match(part)
        if not m:
            raise SelectorError(f'invalid field selector "{text}": unable to parse requirement "{part}"')
        reqs.append((m[1], m[2] != "!=", m[3].strip()))

    def matches(obj: Mapping[str, Any]) -> bool:
        return all((field_value(obj, path) == value) == eq for path, eq, value in reqs)

    return reqs, matches
