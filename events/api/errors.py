"""Errors about user objects: one shape for decode errors and validation errors.

Every rejection names the object (kind, namespace/name), the field path in Kubernetes notation
(``spec.devices.requests[0].exactly.count``) and the rule, worded like the API server does
(``Invalid value: 0: must be greater than or equal to 1``).
"""

from __future__ import annotations

import msgspec

__all__ = [
    "DUPLICATE",
    "FORBIDDEN",
    "INVALID",
    "NOT_SUPPORTED",
    "REQUIRED",
    "TOO_LONG",
    "TOO_MANY",
    "UNKNOWN_FIELD",
    "ApiError",
    "FieldError",
    "object_ref",
]

# Kubernetes field.ErrorType wording.
INVALID = "Invalid value"
REQUIRED = "Required value"
NOT_SUPPORTED = "Unsupported value"
DUPLICATE = "Duplicate value"
FORBIDDEN = "Forbidden"
TOO_LONG = "Too long"
TOO_MANY = "Too many"
UNKNOWN_FIELD = "unknown field"
DECODE = "decoding error"


def object_ref(namespace: str, name: str) -> str:
    """``ns/name`` for namespaced objects, ``name`` for cluster-scoped ones."""
    shown = name or "<unnamed>"
    return f"{namespace}/{shown}" if namespace else shown


class FieldError(msgspec.Struct, frozen=True, kw_only=True):
    """One problem with one field of one object.

    ``rule`` is the text after the path, e.g. ``Invalid value: 0: must be greater than or equal
    to 1``; ``type`` is the Kubernetes error type (``Invalid value``, ``Required value``, ...).
    """

    kind: str
    namespace: str = ""
    name: str = ""
    path: str = ""
    type: str = INVALID
    rule: str = ""

    def __str__(self) -> str:
        head = (
            f"{self.kind} {object_ref(self.namespace, self.name)}"
            if self.kind
            else object_ref(self.namespace, self.name)
        )
        if self.type == UNKNOWN_FIELD:
            return f'{head}: strict decoding error: unknown field "{self.path}"{self.rule}'
        if not self.path:
            return f"{head}: {self.rule}"
        return f"{head}: {self.path}: {self.rule}"


class ApiError(ValueError):
    """A rejected object (or document): carries the field errors; ``str`` is one line per error."""

    def __init__(self, errors: list[FieldError], source: str = "") -> None:
        self.errors = errors
        self.source = source
        text = "; ".join(str(e) for e in errors) if errors else "invalid object"
        super().__init__(f"{source}: {text}" if source else text)
