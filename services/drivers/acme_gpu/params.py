"""Opaque parameters of gpu.acme.com.

Class (administrator): ``initCommand``, a list of strings run for each allocation (the KEP's
example class). Claim (user): ``memory``, a positive quantity (the KEP's ``memory: "2Gi"``).
Unknown fields are refused so a typo does not silently allocate the wrong thing.
"""

from __future__ import annotations

from typing import Any

import msgspec

from draflow.events.quantity import Quantity, QuantityError

__all__ = ["AcmeParameters", "parse_parameters"]


class AcmeParameters(msgspec.Struct, frozen=True, kw_only=True):
    memory: str  # canonical quantity
    init_command: tuple[str, ...] = ()

    def memory_quantity(self) -> Quantity:
        return Quantity.parse(self.memory)


def parse_parameters(class_parameters: Any, claim_parameters: Any) -> AcmeParameters | str:
    """Parsed parameters or one line saying what is wrong."""
    cls = class_parameters if class_parameters is not None else {}
    if not isinstance(cls, dict):
        return "class parameters: must be an object"
    unknown = sorted(set(cls) - {"initCommand"})
    if unknown:
        return f"class parameters: unknown field {unknown[0]!r} (known: initCommand)"
    init = cls.get("initCommand", [])
    if not isinstance(init, list) or not all(isinstance(a, str) for a in init):
        return "class parameters.initCommand: must be a list of strings"
    if not isinstance(claim_parameters, dict):
        return "claim parameters: must be an object with memory (for example memory: 2Gi)"
    unknown = sorted(set(claim_parameters) - {"memory"})
    if unknown:
        return f"claim parameters: unknown field {unknown[0]!r} (known: memory)"
    memory = claim_parameters.get("memory")
    if memory is None:
        return "claim parameters.memory: required (for example 2Gi)"
    try:
        q = Quantity.parse(memory)
    except (QuantityError, TypeError) as exc:
        return f"claim parameters.memory: {exc}"
    if q.sign <= 0:
        return f"claim parameters.memory: {memory!r} must be greater than zero"
    return AcmeParameters(memory=str(q), init_command=tuple(init))
