"""The guard keys of an allocation (pure): devices, counter sets, admin access left out."""

from __future__ import annotations

import msgspec

from draflow.events.api.resource_v1 import Counter, Device, DeviceCounterConsumption, ResourceSlice
from draflow.services.dra.guards import allocation_guard_keys, claim_holder, counter_sets
from tests.builders import exact, make_allocation, make_claim, make_slice


def _partitioned() -> list[ResourceSlice]:
    use = (DeviceCounterConsumption(counter_set="gpu-0", counters={"mem": Counter(value="1")}),)
    return [make_slice("node-1", [Device(name="gpu-0-a", consumes_counters=use), Device(name="gpu-1")])]


def test_every_device_once_sorted_and_its_counter_sets() -> None:
    slices = _partitioned()
    alloc = make_allocation(("a", "gpu-1"), ("b", "gpu-0-a"), ("c", "gpu-1"), node="node-1")
    pools = {("gpu.example.com", "node-1"): slices}
    keys = allocation_guard_keys(alloc, lambda driver, pool: pools.get((driver, pool), []))
    assert keys == [
        ("counters", "gpu.example.com/node-1/gpu-0"),
        ("device", "gpu.example.com/node-1/gpu-0-a"),
        ("device", "gpu.example.com/node-1/gpu-1"),
    ]
    # without the slices only the devices (what a writer that does not know the pool can do)
    assert allocation_guard_keys(alloc) == keys[1:]
    assert counter_sets(slices, "gpu-1") == () and counter_sets(slices, "gone") == ()


def test_admin_access_uses_nothing_up_and_takes_no_guard() -> None:
    alloc = make_allocation("gpu-0", "gpu-1", node="node-1")
    admin = msgspec.structs.replace(alloc.devices.results[0], admin_access=True)
    alloc = msgspec.structs.replace(
        alloc, devices=msgspec.structs.replace(alloc.devices, results=(admin, alloc.devices.results[1]))
    )
    assert allocation_guard_keys(alloc) == [("device", "gpu.example.com/node-1/gpu-1")]
    assert allocation_guard_keys(None) == []


def test_claim_holder() -> None:
    claim = make_claim("c", exact(), namespace="ns")
    assert claim_holder(claim) == ("ResourceClaim ns/c", claim.metadata.uid)
