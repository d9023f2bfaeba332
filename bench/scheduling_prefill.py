"""``bench.scheduling --prefill claims``: occupancy as scheduler_perf's ``allocResourceClaims`` makes
it, fast enough for 5,000 nodes.

Upstream pre-fills its steady-state cases with ``initClaims`` standalone ResourceClaims in namespace
``init``, allocated directly (its op runs the allocator and writes each claim's status; no pod, no
scheduler). Here the claims are created through the apiserver (``ResourceClaimApplied``, as any
client's claim) and allocated by the bench, node after node, device after device (as upstream's op
fills nodes in order), with the messages the scheduler's PreBind appends for an allocation, minus
the pod: ``ClaimAllocated`` (``node_name`` set, ``pod_uid`` empty, no ``consumer``) on the claim at
its version, and the device's ``GuardTaken`` (holder the claim) on the guard subject at its last
sequence (read first, as the scheduler's snapshot holds it), actor ``bench``. PreBind sends the take
first and waits for it; the bench pipelines both (the claim's first: a snapshot counts the take at
once), each with its own expectation; nothing else writes these subjects while the bench fills, so
the log holds the same messages either way. Nothing ever releases them: an allocated claim nobody
reserves and nobody deletes stays allocated, as upstream's do.
"""

from __future__ import annotations

import time
from typing import Any

from bench.scheduling_cluster import DRIVER, node_name
from draflow.events.api.resource_v1 import (
    AllocationResult,
    DeviceAllocationResult,
    DeviceRequestAllocationResult,
)
from draflow.events.dra import ClaimAllocated
from draflow.infra.eventstore import AppendRequest, EventStore
from draflow.infra.guard import guard_prefix, guard_subject
from draflow.services.dra.guards import allocation_guard_keys
from draflow.services.dra.structured.nodeselector import node_name_selector
from draflow.services.runtime.client import ApiClient
from draflow.services.runtime.guards import take_guards

__all__ = ["INIT_NS", "prefill_claims"]

INIT_NS = "init"


def _claim(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": f"init-{i:06d}", "namespace": INIT_NS},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}},
    }


def allocation(slot: int, devices_per_node: int) -> tuple[str, AllocationResult]:
    """The ``slot``-th device in node order: (node, its allocation for request ``gpu``)."""
    node = node_name(slot // devices_per_node)
    result = DeviceRequestAllocationResult(
        request="gpu", driver=DRIVER, pool=node, device=f"gpu-{slot % devices_per_node}"
    )
    return node, AllocationResult(
        devices=DeviceAllocationResult(results=(result,)), node_selector=node_name_selector(node)
    )


async def prefill_claims(
    api: ApiClient, store: EventStore, first: int, upto: int, devices_per_node: int
) -> float:
    """Create and allocate claims ``first`` .. ``upto - 1`` (the devices in those slots, which
    must be free); returns the seconds it took."""
    began = time.monotonic()
    if first == 0:
        ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": INIT_NS}}
        await api.apply([ns])
    results = await api.apply([_claim(i) for i in range(first, upto)], create_only=True)
    bad = [r.error for r in results if r.error is not None]
    if bad:
        raise RuntimeError(f"creating the pre-fill claims failed: {bad[0]}")
    listed, _ = await api.list("ResourceClaim", namespace=INIT_NS)
    meta = {c["metadata"]["name"]: c["metadata"] for c in listed}
    heads: dict[str, int] = {}  # guard subject -> its last sequence (devices used by earlier phases)
    async for records in store.last_per_subject(guard_prefix(store.root) + ">"):
        heads.update((r.subject, r.seq) for r in records)
    reqs: list[AppendRequest] = []
    for i in range(first, upto):
        m = meta[f"init-{i:06d}"]
        node, alloc = allocation(i, devices_per_node)
        holder = f"ResourceClaim {INIT_NS}/{m['name']}"
        keys = allocation_guard_keys(alloc)
        seen = [(s, k, heads.get(guard_subject(store.root, s, k), 0)) for s, k in keys]
        subject = store.subject("ResourceClaim", INIT_NS, m["name"])
        event = ClaimAllocated(allocation=alloc, node_name=node)
        reqs.append(AppendRequest(subject, [event], int(m["resourceVersion"]), f"prefill:{m['uid']}"))
        for j, g in enumerate(take_guards(store.root, holder, m["uid"], seen)):
            reqs.append(AppendRequest(g.subject, [g.event], g.expected_last_seq, f"prefill:{m['uid']}#g{j}"))
    for chunk in range(0, len(reqs), 10_000):
        await store.append_many(reqs[chunk : chunk + 10_000], wait_s=30.0)
        print(f"pre-fill: {min(len(reqs), chunk + 10_000)} of {len(reqs)} messages appended", flush=True)
    return time.monotonic() - began
