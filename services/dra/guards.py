"""What an allocation hands out that another scheduler could hand out too: its guard keys.

Two scheduler instances decide on their own snapshots and write different claims, so the claims'
optimistic concurrency cannot stop both from giving one device away. Each allocation therefore
also takes a guard (``draflow.infra.guard``) per thing it uses up, and deallocation releases them:

* every allocated device (``device``, ``<driver>/<pool>/<device>``), except admin access, which
  uses nothing up. A shared device (``allowMultipleAllocations``, consumable capacity) is guarded
  the same way: two shares decided on the same state are serialised, so its capacity cannot be
  over-committed either;
* every counter set the device consumes from (``counters``, ``<driver>/<pool>/<counter set>``):
  two partitions of one physical device are different devices drawing on the same counters.

Pure: the caller says where a pool's slices are (the scheduler's snapshot, the object cache).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from draflow.events.api.resource_v1 import AllocationResult, ResourceClaim, ResourceSlice

__all__ = ["COUNTERS", "DEVICE", "PoolSlices", "allocation_guard_keys", "claim_holder", "counter_sets"]

DEVICE = "device"
COUNTERS = "counters"

PoolSlices = Callable[[str, str], Iterable[ResourceSlice]]  # (driver, pool) -> that pool's slices


def counter_sets(slices: Iterable[ResourceSlice], device: str) -> tuple[str, ...]:
    """The counter sets ``device`` consumes from, as its pool's slices publish it."""
    for s in slices:
        for d in s.spec.devices:
            if d.name == device:
                return tuple(c.counter_set for c in d.consumes_counters)
    return ()


def allocation_guard_keys(
    allocation: AllocationResult | None, pool_slices: PoolSlices | None = None
) -> list[tuple[str, str]]:
    """(scope, key) of every guard the allocation takes, sorted, each once."""
    if allocation is None:
        return []
    keys: set[tuple[str, str]] = set()
    for r in allocation.devices.results:
        if r.admin_access:
            continue
        keys.add((DEVICE, f"{r.driver}/{r.pool}/{r.device}"))
        if pool_slices is not None:
            for name in counter_sets(pool_slices(r.driver, r.pool), r.device):
                keys.add((COUNTERS, f"{r.driver}/{r.pool}/{name}"))
    return sorted(keys)


def claim_holder(claim: ResourceClaim) -> tuple[str, str]:
    """How guard messages name a claim: (``ResourceClaim <ns>/<name>``, its uid)."""
    meta = claim.metadata
    return f"ResourceClaim {meta.namespace}/{meta.name}", meta.uid
