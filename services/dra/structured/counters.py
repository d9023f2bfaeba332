"""Shared counters of partitionable devices: what is left per pool and what the search consumed.

Counter values are exact nano-unit integers. Availability per pool = counter-set values minus the
consumption of every device of the pool that is already allocated in any way (it may go negative;
then no counter-consuming device of that pool fits). It is computed once per pool per allocator.

Deviation: upstream does not give a device's consumption back when the device is rejected later
(taint, constraint) or when a multi-allocatable device is rolled back; here it always is.
"""

from __future__ import annotations

from services.dra.structured.model import AllocatedState
from services.dra.structured.pools import Pool
from services.dra.structured.prepared import PreparedDevice

__all__ = ["CounterLedger"]

_Key = tuple[str, str]  # (counter set, counter)


class CounterLedger:
    """Availability (cached per pool) plus the in-flight consumption of one Allocate call."""

    __slots__ = ("_available", "consumed", "state")

    def __init__(self, state: AllocatedState, cache: dict[Pool, tuple[dict[_Key, int], bool]]) -> None:
        self.state = state
        self._available = cache
        self.consumed: dict[tuple[str, str], dict[_Key, int]] = {}

    def available(self, pool: Pool) -> tuple[dict[_Key, int], bool]:
        """(counter -> available nanos, whether any counter is negative)."""
        hit = self._available.get(pool)
        if hit is not None:
            return hit
        avail: dict[_Key, int] = {}
        for set_name, counters in pool.counter_sets.items():
            for name, value in counters.items():
                avail[(set_name, name)] = value
        allocated = self.state.allocated_any
        if allocated:
            for dev in (*pool.devices, *pool.other_devices):
                if dev.consumes and dev.id in allocated:
                    for key, value in dev.counter_need:
                        if key in avail:
                            avail[key] -= value
        result = (avail, any(v < 0 for v in avail.values()))
        self._available[pool] = result
        return result

    def try_consume(self, dev: PreparedDevice, pool: Pool) -> bool:
        """Add the device's consumption if every counter of the pool stays within availability."""
        avail, negative = self.available(pool)
        if negative:
            return False
        consumed = self.consumed.get(pool.id)
        if consumed is None:
            consumed = self.consumed[pool.id] = {}
        for key, value in dev.counter_need:
            if consumed.get(key, 0) + value > avail.get(key, 0):
                return False
        for key, value in dev.counter_need:
            consumed[key] = consumed.get(key, 0) + value
        return True

    def release(self, dev: PreparedDevice, pool: Pool) -> None:
        consumed = self.consumed[pool.id]
        for key, value in dev.counter_need:
            consumed[key] -= value
