"""Upcasters: read events stored with an older schema version as the current version.

History is never rewritten. When an event's shape changes, bump its ``SCHEMA`` and register one
function per step (``from_version`` -> ``from_version + 1``) that rewrites the event's JSON object
(a plain dict, as decoded from the wire). Decoding chains the steps up to the current version.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["UpcastError", "upcast", "upcaster"]

Upcaster = Callable[[dict[str, Any]], dict[str, Any]]

_UPCASTERS: dict[tuple[str, int], Upcaster] = {}


class UpcastError(Exception):
    """A stored event cannot be brought to the current schema (a missing step)."""


def upcaster(type_name: str, from_version: int) -> Callable[[Upcaster], Upcaster]:
    """Register ``fn`` as the step from ``from_version`` to ``from_version + 1`` of ``type_name``."""

    def deco(fn: Upcaster) -> Upcaster:
        key = (type_name, from_version)
        if key in _UPCASTERS and _UPCASTERS[key] is not fn:
            raise TypeError(f"upcaster {type_name} v{from_version} is already registered")
        _UPCASTERS[key] = fn
        return fn

    return deco


def upcast(type_name: str, data: dict[str, Any], version: int, target: int) -> dict[str, Any]:
    """Apply the registered steps ``version -> ... -> target`` to an event's JSON object."""
    while version < target:
        step = _UPCASTERS.get((type_name, version))
        if step is None:
            raise UpcastError(f"event {type_name}: no upcaster from schema {version} to {version + 1}")
        data = step(dict(data))
        data["type"] = type_name
        version += 1
    return data
