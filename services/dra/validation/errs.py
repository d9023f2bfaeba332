"""Collects ``FieldError``s for one object, worded like apimachinery's ``field.Error``.

``Invalid value: 0: must be greater than zero``, ``Required value``, ``Unsupported value: "X":
supported values: "All", "ExactCount"``, ``Too many: 40: must have at most 32 items``, ...
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from events.api.errors import (
    DUPLICATE,
    FORBIDDEN,
    INVALID,
    NOT_SUPPORTED,
    REQUIRED,
    TOO_LONG,
    TOO_MANY,
    FieldError,
)

NOT_FOUND = "Not found"
INTERNAL = "Internal error"
_OMIT = object()


def show(value: Any) -> str:
    """Render a value like Go's %#v for the common cases (strings quoted, numbers bare)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if value is None:
        return "null"
    nested = isinstance(value, tuple | list) and any(isinstance(v, dict) for v in value)
    if isinstance(value, dict) or nested:
        return json.dumps(value, separators=(",", ":"), default=str)  # maps and objects as JSON
    if isinstance(value, tuple | list):
        return "[" + ", ".join(show(v) for v in value) + "]"
    return str(value)


class Errs:
    """An error list bound to one object (kind, namespace, name)."""

    __slots__ = ("items", "kind", "name", "namespace")

    def __init__(self, kind: str, namespace: str, name: str) -> None:
        self.kind = kind
        self.namespace = namespace
        self.name = name
        self.items: list[FieldError] = []

    def add(self, path: str, type_: str, rule: str) -> None:
        self.items.append(
            FieldError(
                kind=self.kind, namespace=self.namespace, name=self.name, path=path, type=type_, rule=rule
            )
        )

    def invalid(self, path: str, value: Any, detail: str) -> None:
        shown = "" if value is _OMIT else f"{show(value)}: "
        self.add(path, INVALID, f"{INVALID}: {shown}{detail}")

    def invalid_detail(self, path: str, detail: str) -> None:
        """An ``Invalid value`` without echoing the value (too large or not meaningful)."""
        self.invalid(path, _OMIT, detail)

    def required(self, path: str, detail: str = "") -> None:
        self.add(path, REQUIRED, f"{REQUIRED}: {detail}" if detail else REQUIRED)

    def forbidden(self, path: str, detail: str) -> None:
        self.add(path, FORBIDDEN, f"{FORBIDDEN}: {detail}")

    def internal(self, path: str, detail: str) -> None:
        """apimachinery's ``field.InternalError`` (no value echoed)."""
        self.add(path, INTERNAL, f"{INTERNAL}: {detail}")

    def duplicate(self, path: str, value: Any) -> None:
        self.add(path, DUPLICATE, f"{DUPLICATE}: {show(value)}")

    def not_found(self, path: str, value: Any, detail: str = "") -> None:
        self.add(path, NOT_FOUND, f"{NOT_FOUND}: {show(value)}" + (f": {detail}" if detail else ""))

    def not_supported(self, path: str, value: Any, supported: Iterable[str]) -> None:
        values = ", ".join(show(s) for s in sorted(supported))
        self.add(path, NOT_SUPPORTED, f"{NOT_SUPPORTED}: {show(value)}: supported values: {values}")

    def too_many(self, path: str, actual: int, limit: int) -> None:
        self.add(path, TOO_MANY, f"{TOO_MANY}: {actual}: must have at most {limit} items")

    def too_long(self, path: str, limit: int, unit: str = "bytes") -> None:
        self.add(path, TOO_LONG, f"{TOO_LONG}: may not be more than {limit} {unit}")

    def messages(self, path: str, value: Any, messages: Iterable[str]) -> None:
        """One ``Invalid value`` per message from a name checker (``names.*``)."""
        for msg in messages:
            self.invalid(path, value, msg)
