"""Function declarations of the Kubernetes CEL environment, grouped by library.

Every function is a list of :class:`Overload` (signature for the checker + Python implementation).
Implementations receive evaluated arguments (the receiver first for member functions) and raise
:class:`~services.dra.cel.errors.EvalError` for CEL runtime errors.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..types import Type

__all__ = ["FUNCTIONS", "Overload", "register"]


class Overload:
    """One signature of a function: ``member`` functions are called as ``target.name(args)``."""

    __slots__ = ("id", "impl", "member", "params", "result")

    def __init__(
        self, id: str, member: bool, params: tuple[Type, ...], result: Type, impl: Callable[..., Any]
    ) -> None:
        self.id = id
        self.member = member
        self.params = params
        self.result = result
        self.impl = impl

    def __repr__(self) -> str:
        return f"Overload({self.id})"


FUNCTIONS: dict[str, list[Overload]] = {}


def register(
    name: str, overload_id: str, member: bool, params: tuple[Type, ...], result: Type
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator adding an overload of ``name`` to :data:`FUNCTIONS`."""

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        FUNCTIONS.setdefault(name, []).append(Overload(overload_id, member, params, result, fn))
        return fn

    return wrap


def load() -> dict[str, list[Overload]]:
    """Import every library module (each registers its functions) and return the registry."""
    from . import core, dra, lists, net, optional, quantity, semver, strings  # noqa: F401

    return FUNCTIONS
