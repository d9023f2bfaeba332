"""kubectl's JSONPath templates (``-o jsonpath=…``, ``-o custom-columns=…``, ``--sort-by``).

The subset kubectl users type: text with ``{…}`` expressions; ``.field``, ``['key']``,
``[n]``, ``[-1]``, ``[n:m]``, ``[*]``, ``..field`` (recursive), filters ``[?(@.a=="x")]``
(``==``, ``!=``, ``<``, ``<=``, ``>``, ``>=``, or just ``@.a`` for "is set"), ``range …``/``end``
and quoted literals (``{"\\n"}``). Several results print space-separated; strings raw, numbers and
booleans as JSON, maps and lists as JSON. A path that matches nothing is an error (``<name> is not
found``), as kubectl's ``-o jsonpath`` reports it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

__all__ = ["JSONPathError", "Template", "evaluate", "render_value"]


class JSONPathError(ValueError):
    pass


# -- paths -------------------------------------------------------------------------------------------

_FILTER = re.compile(r"^\?\((.*)\)$", re.S)
_COMPARE = re.compile(r"^(.*?)\s*(==|!=|<=|>=|<|>)\s*(.*)$", re.S)


def _literal(text: str) -> Any:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    try:
        return json.loads(text)
    except ValueError:
        return text


def _steps(path: str) -> list[tuple[str, Any]]:
    """``.a[0]..b[*]`` -> [("field", "a"), ("index", 0), ("recurse", "b"), ("all", None)]."""
    steps: list[tuple[str, Any]] = []
    i, n = 0, len(path)
    if path.startswith("$"):
        i = 1
    elif path.startswith("@"):
        i = 1
    while i < n:
        c = path[i]
        if c == ".":
            recurse = path.startswith("..", i)
            i += 2 if recurse else 1
            j = i
            while j < n and path[j] not in ".[":
                j += 1
            name = path[i:j]
            if recurse:
                steps.append(("recurse", name or None))
            elif name == "*":
                steps.append(("all", None))
            elif name:
                steps.append(("field", name))
            i = j
        elif c == "[":
            depth, j = 0, i
            while j < n:
                if path[j] == "[":
                    depth += 1
                elif path[j] == "]":
                    depth -= 1
                    if depth == 0:
                        break
                j += 1
            if j >= n:
                raise JSONPathError(f"unterminated [ in {path!r}")
            inner = path[i + 1 : j].strip()
            i = j + 1
            if inner == "*":
                steps.append(("all", None))
            elif m := _FILTER.match(inner):
                steps.append(("filter", m[1]))
            elif inner[:1] in "'\"":
                steps.append(("field", _literal(inner)))
            elif ":" in inner:
                start, _, end = inner.partition(":")
                steps.append(
                    ("slice", (int(start) if start.strip() else None, int(end) if end.strip() else None))
                )
            else:
                try:
                    steps.append(("index", int(inner)))
                except ValueError:
                    raise JSONPathError(f"invalid array index {inner!r}") from None
        else:
            j = i
            while j < n and path[j] not in ".[":
                j += 1
            steps.append(("field", path[i:j]))
            i = j
    return steps


def _recurse(value: Any, name: str | None) -> list[Any]:
    out: list[Any] = []
    if isinstance(value, dict):
        if name is None:
            out.extend(value.values())
        elif name in value:
            out.append(value[name])
        for v in value.values():
            out.extend(_recurse(v, name))
    elif isinstance(value, list):
        for v in value:
            out.extend(_recurse(v, name))
    return out


def _holds(item: Any, expr: str) -> bool:
    m = _COMPARE.match(expr)
    if m is None:
        return bool(evaluate(expr.strip(), item))
    left = evaluate(m[1].strip(), item) if m[1].strip().startswith("@") else [_literal(m[1])]
    right = evaluate(m[3].strip(), item) if m[3].strip().startswith("@") else [_literal(m[3])]
    if not left or not right:
        return m[2] == "!=" and bool(left) != bool(right)
    a, b = left[0], right[0]
    op = m[2]
    try:
        return bool(
            {"==": a == b, "!=": a != b}.get(op)
            if op in ("==", "!=")
            else {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]
        )
    except TypeError:
        return False


def evaluate(path: str, data: Any) -> list[Any]:
    """Every value ``path`` selects in ``data``."""
    current = [data]
    for kind, arg in _steps(path.strip()):
        nxt: list[Any] = []
        for value in current:
            if kind == "field":
                if isinstance(value, dict) and arg in value:
                    nxt.append(value[arg])
            elif kind == "index":
                if isinstance(value, list) and -len(value) <= arg < len(value):
                    nxt.append(value[arg])
            elif kind == "slice":
                if isinstance(value, list):
                    nxt.extend(value[arg[0] : arg[1]])
            elif kind == "all":
                if isinstance(value, list):
                    nxt.extend(value)
                elif isinstance(value, dict):
                    nxt.extend(value.values())
            elif kind == "recurse":
                nxt.extend(_recurse(value, arg))
            elif kind == "filter":
                items = value if isinstance(value, list) else [value]
                nxt.extend(i for i in items if _holds(i, arg))
        current = nxt
    return current


def render_value(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    return json.dumps(value, separators=(",", ":"))


# -- templates -----------------------------------------------------------------------------------------


@dataclass
class _Node:
    kind: str  # text | expr | range
    text: str = ""
    body: list[_Node] = field(default_factory=list)


def _split(template: str) -> list[tuple[str, str]]:
    """[("text", "..."), ("expr", "...")] of a template (``{`` inside quotes does not count)."""
    parts: list[tuple[str, str]] = []
    i, n = 0, len(template)
    while i < n:
        j = template.find("{", i)
        if j < 0:
            parts.append(("text", template[i:]))
            break
        if j > i:
            parts.append(("text", template[i:j]))
        k, quote = j + 1, ""
        while k < n:
            ch = template[k]
            if quote:
                if ch == "\\":
                    k += 1
                elif ch == quote:
                    quote = ""
            elif ch in "'\"":
                quote = ch
            elif ch == "}":
                break
            k += 1
        if k >= n:
            raise JSONPathError(f"unclosed action in template {template!r}")
        parts.append(("expr", template[j + 1 : k].strip()))
        i = k + 1
    return parts


class Template:
    def __init__(self, template: str) -> None:
        self.source = template
        root: list[_Node] = []
        stack = [root]
        for kind, text in _split(template):
            if kind == "text":
                stack[-1].append(_Node("text", text))
            elif text.startswith("range "):
                node = _Node("range", text[len("range ") :].strip())
                stack[-1].append(node)
                stack.append(node.body)
            elif text == "end":
                if len(stack) == 1:
                    raise JSONPathError("{end} without {range}")
                stack.pop()
            else:
                stack[-1].append(_Node("expr", text))
        if len(stack) != 1:
            raise JSONPathError("{range} without {end}")
        self.nodes = root

    def render(self, data: Any) -> str:
        return "".join(self._render(self.nodes, data))

    def _render(self, nodes: list[_Node], data: Any) -> list[str]:
        out: list[str] = []
        for node in nodes:
            if node.kind == "text":
                out.append(node.text)
            elif node.kind == "range":
                for item in evaluate(node.text, data):
                    out.extend(self._render(node.body, item))
            else:
                text = node.text
                if text[:1] in "'\"" and text[-1:] == text[:1]:
                    out.append(json.loads(f'"{text[1:-1]}"', strict=False) if text[0] == '"' else text[1:-1])
                    continue
                values = evaluate(text, data)
                if not values:
                    raise JSONPathError(f"{_last_name(text)} is not found")
                out.append(" ".join(render_value(v) for v in values))
        return out


def _last_name(path: str) -> str:
    names = [a for k, a in _steps(path) if k in ("field", "recurse") and isinstance(a, str)]
    return names[-1] if names else path
