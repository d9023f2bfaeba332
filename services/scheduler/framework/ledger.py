"""Which devices are in use, kept incrementally from claim allocations (real and assumed).

kube-scheduler rebuilds its allocated-device set from every claim in each cycle; with thousands
of allocated claims that is the dominant cost of a cycle, so draflow keeps reference counts that
change only when a claim's effective allocation changes, and hands the allocator live views of
them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import cast

from events.api.resource_v1 import AllocationResult
from events.quantity import Quantity
from services.dra.structured import AllocatedState, DeviceID, SharedDeviceID

__all__ = ["Contribution", "DeviceLedger", "contribution"]


class Contribution:
    """What one claim's allocation takes: exclusive devices, shares, consumed capacity."""

    __slots__ = ("consumed", "exclusive", "shared")

    def __init__(
        self,
        exclusive: tuple[DeviceID, ...],
        shared: tuple[SharedDeviceID, ...],
        consumed: tuple[tuple[DeviceID, str, Quantity], ...],
    ) -> None:
        self.exclusive = exclusive
        self.shared = shared
        self.consumed = consumed

    def devices(self) -> Iterable[DeviceID]:
        yield from self.exclusive
        for s in self.shared:
            yield s.device_id
        for did, _, _ in self.consumed:
            yield did


def contribution(allocation: AllocationResult) -> Contribution:
    """As ``AllocatedState.with_allocations``: adminAccess results do not count."""
    exclusive: list[DeviceID] = []
    shared: list[SharedDeviceID] = []
    consumed: list[tuple[DeviceID, str, Quantity]] = []
    for res in allocation.devices.results:
        if res.admin_access:
            continue
        did = DeviceID(res.driver, res.pool, res.device)
        if res.share_id is None:
            exclusive.append(did)
            continue
        shared.append(SharedDeviceID(res.driver, res.pool, res.device, res.share_id))
        for name, value in res.consumed_capacity.items():
            consumed.append((did, name, Quantity.parse(value)))
    return Contribution(tuple(exclusive), tuple(shared), tuple(consumed))


def _inc(counts: dict[DeviceID, int], did: DeviceID) -> None:
    counts[did] = counts.get(did, 0) + 1


def _dec(counts: dict[DeviceID, int], did: DeviceID) -> None:
    left = counts.get(did, 0) - 1
    if left > 0:
        counts[did] = left
    else:
        counts.pop(did, None)


class DeviceLedger:
    """Reference-counted device usage, exposed to the allocator as live read-only views.

    ``allocated_state()`` hands the allocator an ``AllocatedState`` whose sets are live views of
    the counts below (dict key views: membership, iteration, length — all the allocator reads)
    instead of frozensets copied every cycle, which cost O(allocated devices) per decision. The
    views only change between cycles (Reserve runs after the allocator is done), and an
    allocator is built per cycle, so it never sees a change mid-search.
    """

    __slots__ = ("_state", "any_device", "consumed", "exclusive", "shared", "shared_device")

    def __init__(self) -> None:
        self.exclusive: dict[DeviceID, int] = {}
        self.shared: dict[SharedDeviceID, int] = {}
        self.consumed: dict[DeviceID, dict[str, Quantity]] = {}
        self.shared_device: dict[DeviceID, int] = {}  # devices with at least one share
        self.any_device: dict[DeviceID, int] = {}  # exclusive or shared
        self._state: AllocatedState | None = None

    def add(self, c: Contribution) -> None:
        for did in c.exclusive:
            _inc(self.exclusive, did)
            _inc(self.any_device, did)
        for sid in c.shared:
            self.shared[sid] = self.shared.get(sid, 0) + 1
            _inc(self.shared_device, sid.device_id)
            _inc(self.any_device, sid.device_id)
        for did, name, q in c.consumed:
            acc = self.consumed.setdefault(did, {})
            acc[name] = acc[name] + q if name in acc else q

    def remove(self, c: Contribution) -> None:
        for did in c.exclusive:
            _dec(self.exclusive, did)
            _dec(self.any_device, did)
        for sid in c.shared:
            left = self.shared.get(sid, 0) - 1
            if left > 0:
                self.shared[sid] = left
            else:
                self.shared.pop(sid, None)
            _dec(self.shared_device, sid.device_id)
            _dec(self.any_device, sid.device_id)
        for did, name, q in c.consumed:
            acc = self.consumed.get(did)
            if acc is None or name not in acc:
                continue
            rest = acc[name] - q
            if rest.is_zero():
                del acc[name]
                if not acc:
                    del self.consumed[did]
            else:
                acc[name] = rest

    def allocated_state(self) -> AllocatedState:
        """The allocator's view (live; see the class docstring)."""
        state = self._state
        if state is None:
            consumed = cast(Mapping[tuple[str, str, str], Mapping[str, Quantity]], self.consumed)
            state = AllocatedState(
                exclusive=cast(frozenset[tuple[str, str, str]], self.exclusive.keys()),
                shared=cast(frozenset[tuple[str, str, str, str]], self.shared.keys()),
                consumed=consumed,
                allocated_any=cast(frozenset[tuple[str, str, str]], self.any_device.keys()),
                shared_devices=cast(frozenset[tuple[str, str, str]], self.shared_device.keys()),
            )
            self._state = state
        return state
