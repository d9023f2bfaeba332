"""``DynamicResources`` as a ``ClusterAutoScalerPlugin`` (KEP-4381, "Simulation with CA").

The snapshot is the simulation's own ClusterState (its claims carry the allocations, the device
ledger counts them); StartSimulation records in the cycle state which claims the simulation
allocated, so it can tell a simulated allocation from one the log holds. SimulateBindPod runs the
plugin's own PreFilter, Filter and allocator for the pod on the chosen node (the KEP hands it the
simulation's state, not the one Filter filled, so it decides again: the same code, the same
snapshot, the same answer) and writes the result into the snapshot's claims as PreBind would:
``status.allocation`` for a claim used for the first time, the pod added to ``reservedFor`` (a
shared claim is allocated once and gains a consumer). A special claim for extended resources
backed by DRA (KEP-5004) is created in the snapshot as PreBind would create it. SimulateEvictPod
drops the pod from its claims' ``reservedFor`` and deallocates the claims nobody else uses, as the
claim controller would once the pod is gone (its special claim is deleted).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from draflow.events.api.core_v1 import Pod
from draflow.events.api.resource_v1 import AllocationResult, ResourceClaim
from draflow.services.dra.extended.claim import is_extended_resource_claim
from draflow.services.dra.resourceclaim import ClaimProblem, pod_consumer_ref, resolve_claims
from draflow.services.scheduler.framework.assume import ClaimKey
from draflow.services.scheduler.framework.cluster import ClusterState
from draflow.services.scheduler.framework.interface import CycleState
from draflow.services.scheduler.framework.nodeinfo import NodeInfo
from draflow.services.scheduler.framework.simulation import decide_again, reserved_with, reserved_without
from draflow.services.scheduler.framework.status import Status, error

if TYPE_CHECKING:
    from draflow.services.scheduler.plugins.dynamicresources.plugin import DRAState, DynamicResources

__all__ = ["SIMULATED", "DRASimulation", "claims_of", "simulate_bind", "simulate_evict", "start"]

SIMULATED = "DynamicResources/simulation"


class DRASimulation:
    """What the plugin keeps in the simulation's cycle state: the claims it allocated there."""

    __slots__ = ("allocated",)

    def __init__(self, allocated: set[ClaimKey] | None = None) -> None:
        self.allocated: set[ClaimKey] = allocated if allocated is not None else set()

    def copy(self) -> DRASimulation:
        return DRASimulation(set(self.allocated))


def start(state: CycleState, name: str) -> Status | None:
    """A simulation decides on the log alone: no decision of a live scheduler may be in flight
    in its snapshot (the assume cache holds allocations no claim shows yet)."""
    if state.cluster.assumed.claims:
        return error("the snapshot holds allocations in flight; build it from the log alone", plugin=name)
    state.data[SIMULATED] = DRASimulation()
    return None


def _key(claim: ResourceClaim) -> ClaimKey:
    return (claim.metadata.namespace, claim.metadata.name)


def _with_status(
    claim: ResourceClaim, allocation: AllocationResult | None, reserved: tuple[object, ...]
) -> ResourceClaim:
    status = msgspec.structs.replace(claim.status, allocation=allocation, reserved_for=reserved)
    return msgspec.structs.replace(claim, status=status)


def simulate_bind(plugin: DynamicResources, sim: CycleState, pod: Pod, node: NodeInfo) -> Status | None:
    from draflow.services.scheduler.plugins.dynamicresources.plugin import NAME

    record: DRASimulation = sim.data[SIMULATED]
    cluster = sim.cluster
    state = decide_again(plugin, sim, pod, node)
    if not isinstance(state, CycleState):
        return state
    data: DRAState = state.data[NAME]
    claims = data.allocating(node.name)
    results = data.node_allocations.get(node.name, [])
    if len(results) != len(claims):
        return error("claim allocation not found for node", plugin=NAME)
    new = dict(zip(map(id, claims), results, strict=True))
    consumer = pod_consumer_ref(pod)
    for claim in data.claims:
        allocation = claim.status.allocation
        if allocation is None:
            allocation = new[id(claim)]
            record.allocated.add(_key(claim))
        cluster.upsert_claim(
            _with_status(claim, allocation, reserved_with(claim.status.reserved_for, consumer))
        )
    ext = data.ext_nodes.get(node.name)
    if ext is not None and ext.claim is not None:
        special = plugin.simulated_special_claim(state, pod, ext.claim)
        cluster.upsert_claim(_with_status(special, new[id(ext.claim)], (consumer,)))
        record.allocated.add(_key(special))
    return None


def claims_of(pod: Pod, cluster: ClusterState) -> list[ResourceClaim]:
    """The claims the pod uses in the snapshot: its own (spec order), then its special claims."""
    try:
        claims = resolve_claims(pod, cluster)
    except ClaimProblem:
        ns = pod.metadata.namespace
        claims = []
        for pc in pod.spec.resource_claims:
            status = next((s for s in pod.status.resource_claim_statuses if s.name == pc.name), None)
            name = pc.resource_claim_name or (status.resource_claim_name if status else None)
            found = cluster.claim(ns, name) if name else None
            if found is not None:
                claims.append(found)
    return [*claims, *cluster.special_claims_of(pod)]


def simulate_evict(sim: CycleState, pod: Pod) -> Status | None:
    record: DRASimulation = sim.data[SIMULATED]
    cluster = sim.cluster
    uid = pod.metadata.uid
    for claim in claims_of(pod, cluster):
        reserved = reserved_without(claim.status.reserved_for, uid)
        if reserved is None:
            continue  # not this pod's reservation
        key = _key(claim)
        if reserved:
            cluster.upsert_claim(_with_status(claim, claim.status.allocation, reserved))
        elif is_extended_resource_claim(claim):
            cluster.delete_claim(*key)  # the pod's special claim goes with the pod
            record.allocated.discard(key)
        else:
            cluster.upsert_claim(_with_status(claim, None, ()))
            record.allocated.discard(key)
    return None
