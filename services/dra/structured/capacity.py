"""Consumable capacity (KEP-5075): what a request consumes of a device and whether it still fits.

For every capacity a device declares, the consumed amount is the request's value if it names the
capacity, else the policy default, else the whole capacity. A validRange raises the value to min
and rounds it up to min + k*step (in whole units, as upstream's Value()); validValues raise it to
the first listed value that is not smaller. A value breaking the policy (over max, off-step, not
a listed value) refuses the device unless it equals the default; so does exceeding the capacity
together with what allocated claims and this search already consume. Requesting a capacity the
device does not declare skips the device.
"""

from __future__ import annotations

from collections.abc import Mapping

from events.quantity import BINARY_SI, Quantity
from services.dra.structured.model import AllocatedState
from services.dra.structured.prepared import CapacitySpec, PreparedDevice

__all__ = ["CapacityLedger", "consumed_amount", "violates_policy"]


def _round_up_range(requested: Quantity, spec: CapacitySpec) -> Quantity:
    assert spec.min is not None
    if requested < spec.min:
        return spec.min
    if spec.step is None or spec.step.value() == 0:
        return requested
    step, low = spec.step.value(), spec.min.value()
    n = -(-(requested.value() - low) // step)  # ceiling division; requested >= min here
    return Quantity.from_int(low + step * n, BINARY_SI)


def consumed_amount(requested: Quantity | None, spec: CapacitySpec) -> Quantity:
    """How much of one capacity a request consumes (upstream calculateConsumedCapacity)."""
    if requested is None:
        return spec.default if spec.default is not None else spec.value
    if spec.has_range and spec.min is not None:
        return _round_up_range(requested, spec)
    if spec.valid_values:
        for valid in spec.valid_values:
            if requested <= valid:
                return valid
    return requested


def violates_policy(consumed: Quantity, spec: CapacitySpec) -> bool:
    """Upstream violatesPolicy; the default is always allowed (compared by value here)."""
    if spec.default is not None and consumed == spec.default:
        return False
    if spec.has_range:
        if spec.max is not None and consumed > spec.max:
            return True
        if spec.step is not None and spec.step.value() != 0:
            low = spec.min.value() if spec.min is not None else 0
            if abs(consumed.value() - low) % spec.step.value() != 0:
                return True
        return False
    if spec.valid_values:
        return consumed not in spec.valid_values
    return False


class CapacityLedger:
    """Capacity consumed by allocated shares plus what the running search has taken."""

    __slots__ = ("allocated", "inflight", "shares")

    def __init__(self, state: AllocatedState) -> None:
        self.allocated = state.consumed
        self.inflight: dict[tuple[str, str, str], dict[str, Quantity]] = {}
        # In-flight shares per multi-allocatable device (counts devices without capacities too).
        self.shares: dict[tuple[str, str, str], int] = {}

    def fits(self, dev: PreparedDevice, requests: Mapping[str, Quantity] | None) -> bool:
        """Upstream CmpRequestOverCapacity; a request for an undeclared capacity is a miss."""
        caps = dev.capacity
        if requests:
            for name in requests:
                if name not in caps:
                    return False
        if not caps:
            return True
        allocated = self.allocated.get(dev.id)
        inflight = self.inflight.get(dev.id)
        for name, spec in caps.items():
            consumed = consumed_amount(requests.get(name) if requests else None, spec)
            if violates_policy(consumed, spec):
                return False
            total = consumed.nanos
            if allocated is not None and name in allocated:
                total += allocated[name].nanos
            if inflight is not None and name in inflight:
                total += inflight[name].nanos
            if total > spec.value.nanos:
                return False
        return True

    def consumption(
        self, dev: PreparedDevice, requests: Mapping[str, Quantity] | None
    ) -> dict[str, Quantity]:
        """What one share of the device records as consumedCapacity (every declared capacity)."""
        return {
            name: consumed_amount(requests.get(name) if requests else None, spec)
            for name, spec in dev.capacity.items()
        }

    def in_use(self, dev: PreparedDevice, state: AllocatedState) -> bool:
        """True when the device already has shares, so its counters are already charged."""
        return dev.id in state.shared_devices or self.shares.get(dev.id, 0) > 0

    def take(self, dev: PreparedDevice, consumed: dict[str, Quantity]) -> None:
        self.shares[dev.id] = self.shares.get(dev.id, 0) + 1
        acc = self.inflight.setdefault(dev.id, {})
        for name, q in consumed.items():
            acc[name] = acc[name] + q if name in acc else q

    def give_back(self, dev: PreparedDevice, consumed: dict[str, Quantity]) -> None:
        self.shares[dev.id] -= 1
        acc = self.inflight[dev.id]
        for name, q in consumed.items():
            acc[name] = acc[name] - q
