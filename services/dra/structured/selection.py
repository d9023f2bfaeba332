"""Is a device selectable for a (sub)request: class and request CEL selectors, per-device node scope.

Verdicts are cached twice: per (sub)request and device for the current Allocate call, and per
device and expression on the prepared device itself, so a selector runs once per device for as
long as the slice object lives. CEL compile errors are reported on the first device tried (as
upstream); runtime errors, including a device whose attributes cannot be turned into CEL input,
are fatal for the whole call.
"""

from __future__ import annotations

from collections.abc import Callable

from draflow.events.api.resource_v1 import DeviceAttribute, DeviceToleration
from draflow.services.dra import cel
from draflow.services.dra.structured.capacity import CapacityLedger
from draflow.services.dra.structured.model import AllocationTimeout, Features, InvalidInputError
from draflow.services.dra.structured.pools import NodePools
from draflow.services.dra.structured.prepared import PreparedDevice
from draflow.services.dra.structured.requests import RequestData

__all__ = [
    "IF_CAPACITY_FITS",
    "UNUSABLE",
    "USABLE",
    "attribute_value",
    "is_selectable",
    "selectors_match",
    "taint_blocks",
    "tolerates",
    "usability",
]


class _InputError:
    """Building the CEL input failed; every evaluation on the device reports this message."""

    __slots__ = ("message",)

    def __init__(self, message: str) -> None:
        self.message = message


def attribute_value(attr: DeviceAttribute) -> object:
    """The CEL engine's value for an attribute; None (no value set) fails every evaluation."""
    if attr.ints is not None:
        return list(attr.ints)
    if attr.bools is not None:
        return list(attr.bools)
    if attr.strings is not None:
        return list(attr.strings)
    if attr.versions is not None:
        return [cel.Version(v) for v in attr.versions]
    if attr.int_ is not None:
        return attr.int_
    if attr.bool_ is not None:
        return attr.bool_
    if attr.string is not None:
        return attr.string
    if attr.version is not None:
        return cel.Version(attr.version)
    return None


def _cel_input(dev: PreparedDevice) -> cel.DeviceInput | _InputError:
    """The device's CEL input, built on first use and kept on the prepared device."""
    inp = dev.cel_input
    if isinstance(inp, cel.DeviceInput | _InputError):
        return inp
    api = dev.api
    made: cel.DeviceInput | _InputError
    try:
        attributes = {name: attribute_value(a) for name, a in api.attributes.items()}
        capacity = {name: spec.value for name, spec in dev.capacity.items()}
        made = cel.prepare_device(dev.slice.driver, attributes, capacity, dev.allow_multiple)
    except (ValueError, cel.CelRuntimeError) as exc:
        made = _InputError(str(exc))
    dev.cel_input = made
    return made


def _evaluate(expression: str, dev: PreparedDevice, where: str) -> bool | str:
    """Run one selector on a device the first time; the verdict (or runtime error) is remembered."""
    try:
        program = cel.compile_expression(expression)
    except cel.CelCompileError as exc:
        raise InvalidInputError(f"{where}: CEL compile error: {exc}") from None
    inp = _cel_input(dev)
    verdict: bool | str
    if isinstance(inp, _InputError):
        verdict = inp.message
    else:
        try:
            verdict = bool(program.evaluate(inp))
        except cel.CelInterrupted:
            # the allocation's deadline passed: about the clock, not the device (not remembered)
            raise AllocationTimeout(f"{where}: CEL evaluation interrupted at the deadline") from None
        except cel.CelRuntimeError as exc:
            verdict = str(exc)
    dev.remember(expression, verdict)
    return verdict


def selectors_match(
    selectors: tuple[str | None, ...], dev: PreparedDevice, label: Callable[[int], str]
) -> bool:
    """All selectors true? (``label(i)`` names selector i in errors; only built on an error.)"""
    results = dev.cel_results
    for i, expression in enumerate(selectors):
        if expression is None:
            raise InvalidInputError(f"{label(i)}: CEL expression empty (unsupported selector type?)")
        verdict = results.get(expression)
        if verdict is None:
            verdict = _evaluate(expression, dev, label(i))
        if verdict is False:
            return False
        if verdict is not True:
            # upstream's wording: the selector, not the device (the message is the pod's condition)
            raise InvalidInputError(f"{label(i)}: CEL runtime error: {verdict}")
    return True


def is_selectable(
    rd: RequestData, dev: PreparedDevice, claim_ref: str, pools: NodePools, features: Features
) -> bool:
    """Upstream isSelectable: class selectors, request selectors, then per-device node scope."""
    cached = rd.selectable.get(dev)
    if cached is not None:
        return cached
    if dev.binding_conditions and not features.device_binding_and_status:
        return False
    cls = rd.class_
    assert cls is not None
    ok = selectors_match(rd.class_selectors, dev, lambda i: f"class {cls.metadata.name}: selector #{i}")
    if ok and rd.request_selectors:
        ok = selectors_match(rd.request_selectors, dev, lambda i: f"claim {claim_ref}: selector #{i}")
    if ok and dev.slice.per_device and dev.id in pools.device_off_node:
        problem = pools.device_off_node[dev.id]
        if problem is not None:
            raise InvalidInputError(f"failed to parse node selector of device {dev.id}: {problem}")
        ok = False
    rd.selectable[dev] = ok
    return ok


# RequestData.usable verdicts.
UNUSABLE = 0
USABLE = 1
IF_CAPACITY_FITS = 2


def usability(
    rd: RequestData, dev: PreparedDevice, pools: NodePools, features: Features, capacity: CapacityLedger
) -> int:
    """Selectable and, for devices that cannot be shared, within capacity: both fixed for the whole
    Allocate call, so cached per (sub)request. Shareable devices need a live capacity check."""
    usable = rd.usable.get(dev)
    if usable is not None:
        return usable
    usable = UNUSABLE
    if is_selectable(rd, dev, rd.claim_ref, pools, features):
        if not features.consumable_capacity:
            usable = USABLE
        elif dev.allow_multiple:
            usable = IF_CAPACITY_FITS
        elif capacity.fits(dev, rd.capacity):
            usable = USABLE
    rd.usable[dev] = usable
    return usable


def tolerates(toleration: DeviceToleration, key: str, value: str, effect: str) -> bool:
    """resourceclaim.ToleratesTaint: empty effect/key match all; Exists ignores the value."""
    if toleration.effect and toleration.effect != effect:
        return False
    if toleration.key and toleration.key != key:
        return False
    op = toleration.operator
    if op in ("", "Equal"):
        return toleration.value == value
    return op == "Exists"


def taint_blocks(dev: PreparedDevice, tolerations: tuple[DeviceToleration, ...]) -> bool:
    """A NoSchedule/NoExecute taint that no toleration tolerates blocks the device."""
    for taint in dev.taints:
        if not any(tolerates(t, taint.key, taint.value, taint.effect) for t in tolerations):
            return True
    return False
