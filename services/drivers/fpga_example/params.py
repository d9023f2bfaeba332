"""Opaque parameters of fpga.example.com, validated by the driver (KEP: drivers own their
parameter validation, at admission or at allocation time).

Claim: ``bitstream`` (required, a ``.bit`` / ``.xclbin`` path or URL), ``memory`` (optional
quantity, the FPGA's memory must be at least this), ``users`` (optional userLimit, default 1,
-1 unlimited: a programmed FPGA can be shared by several pods one after the other or at once).
Class: ``fabricLabel`` (optional node label value to require, default ``"true"``).
"""

from __future__ import annotations

from typing import Any

import msgspec

from draflow.events.quantity import Quantity, QuantityError

__all__ = ["BITSTREAM_SUFFIXES", "FpgaParameters", "parse_parameters"]

BITSTREAM_SUFFIXES = (".bit", ".bin", ".xclbin", ".aocx")


class FpgaParameters(msgspec.Struct, frozen=True, kw_only=True):
    bitstream: str
    memory: str | None = None  # canonical quantity
    users: int = 1
    fabric_label: str = "true"


_CLAIM_KEYS = {"bitstream", "memory", "users"}
_CLASS_KEYS = {"fabricLabel"}


def parse_parameters(class_parameters: Any, claim_parameters: Any) -> FpgaParameters | str:
    """The parsed parameters or one line saying what is wrong (``claim parameters.memory: ...``)."""
    cls = class_parameters if class_parameters is not None else {}
    if not isinstance(cls, dict):
        return "class parameters: must be an object"
    unknown = sorted(set(cls) - _CLASS_KEYS)
    if unknown:
        return f"class parameters: unknown field {unknown[0]!r} (known: fabricLabel)"
    fabric = cls.get("fabricLabel", "true")
    if not isinstance(fabric, str) or not fabric:
        return "class parameters.fabricLabel: must be a non-empty string"
    if not isinstance(claim_parameters, dict):
        return "claim parameters: must be an object with a bitstream"
    unknown = sorted(set(claim_parameters) - _CLAIM_KEYS)
    if unknown:
        return f"claim parameters: unknown field {unknown[0]!r} (known: bitstream, memory, users)"
    bitstream = claim_parameters.get("bitstream")
    if not isinstance(bitstream, str) or not bitstream:
        return "claim parameters.bitstream: required (path or URL of the FPGA image)"
    if not bitstream.endswith(BITSTREAM_SUFFIXES):
        return (
            f"claim parameters.bitstream: {bitstream!r} must end with one of {', '.join(BITSTREAM_SUFFIXES)}"
        )
    memory = claim_parameters.get("memory")
    canonical = None
    if memory is not None:
        try:
            q = Quantity.parse(memory)
        except (QuantityError, TypeError) as exc:
            return f"claim parameters.memory: {exc}"
        if q.sign <= 0:
            return f"claim parameters.memory: {memory!r} must be greater than zero"
        canonical = str(q)
    users = claim_parameters.get("users", 1)
    if not isinstance(users, int) or isinstance(users, bool) or (users != -1 and users < 1):
        return "claim parameters.users: must be -1 (unlimited) or a positive integer"
    return FpgaParameters(bitstream=bitstream, memory=canonical, users=users, fabric_label=fabric)
