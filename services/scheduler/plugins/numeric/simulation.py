"""``NumericResources`` as a ``ClusterAutoScalerPlugin`` (KEP-4381, "Simulation with CA").

The plugin's state is its books (classes, numeric claims, parameter objects, NodeResourceCapacity,
one builtin controller per model), not the scheduler's ClusterState. StartSimulation copies them
into the simulation's cycle state; PreFilter and Filter read that copy when it is there
(``NumericResources.books_of``), so the live books never change and a checkpoint is one more copy.
SimulateBindPod runs the plugin's own PreFilter, Filter and model allocation for the pod on the
chosen node and writes the result into the snapshot's claims as the PodScheduling saga would (the
allocation with class and parameters embedded, the pod in ``reservedFor``); the controller counts
it from there. SimulateEvictPod drops the pod from its claims' ``reservedFor`` and deallocates the
delayed claims nobody else uses, as the numeric reallocation would. Fictional nodes bring clones
of a template node's NodeResourceCapacity objects (``add_capacity``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import msgspec

from draflow.events.api import classic_v1alpha1 as cv
from draflow.events.api import numeric_v1alpha2 as nv
from draflow.events.api.core_v1 import Pod
from draflow.services.dra.classic.podclaims import pod_claim_refs
from draflow.services.dra.numeric.claims import build_allocation
from draflow.services.dra.numeric.model import ModelDecodeError, decode_model_object
from draflow.services.dra.resourceclaim import pod_owner_reference
from draflow.services.scheduler.framework.interface import CycleState
from draflow.services.scheduler.framework.nodeinfo import NodeInfo
from draflow.services.scheduler.framework.simulation import decide_again, reserved_with, reserved_without
from draflow.services.scheduler.framework.status import Status, error

if TYPE_CHECKING:
    from draflow.services.scheduler.plugins.numeric.books import NumericBooks
    from draflow.services.scheduler.plugins.numeric.plugin import NumericResources, NumericState

__all__ = [
    "SIMULATED",
    "add_capacity",
    "feed",
    "instances_of",
    "opaque_reason",
    "remove_capacity",
    "simulate_bind",
    "simulate_evict",
    "start",
]

SIMULATED = "NumericResources/simulation"


def feed(books: NumericBooks, objects: Iterable[object]) -> None:
    """Load the books from snapshot objects (what the scheduler's feed does from the log):
    classes, classic claims, NodeResourceCapacity, and any other object as a possible vendor
    parameter object (the books keep what carries an apiVersion, kind and name)."""
    for obj in objects:
        if isinstance(obj, cv.ResourceClass):
            books.upsert_class(obj)
        elif isinstance(obj, cv.ResourceClaim):
            books.upsert_claim(obj)
        elif isinstance(obj, nv.NodeResourceCapacity):
            books.upsert_capacity(obj)
        else:
            books.upsert_param(obj)


def start(plugin: NumericResources, state: CycleState) -> Status | None:
    """The simulation decides on the log alone: no decision of a live scheduler may be in flight."""
    if plugin.books.assumed:
        return error("the snapshot holds numeric allocations in flight; build it from the log alone")
    state.data[SIMULATED] = plugin.books.copy()
    return None


def _books(state: CycleState) -> NumericBooks:
    books: NumericBooks = state.data[SIMULATED]
    return books


def _with_status(
    claim: cv.ResourceClaim, allocation: cv.NumericAllocation | None, reserved: tuple[object, ...]
) -> cv.ResourceClaim:
    status = msgspec.structs.replace(claim.status, numeric_allocation=allocation, reserved_for=reserved)
    return msgspec.structs.replace(claim, status=status)


def simulate_bind(plugin: NumericResources, sim: CycleState, pod: Pod, node: NodeInfo) -> Status | None:
    from draflow.services.scheduler.plugins.numeric.plugin import NAME

    state = decide_again(plugin, sim, pod, node)
    if not isinstance(state, CycleState):
        return state
    data: NumericState = state.data[NAME]
    results = data.results.get(node.name, [])
    if len(results) != len(data.pending):
        return error("numeric allocation not found for node", plugin=NAME)
    books = _books(sim)
    consumer = pod_owner_reference(pod)
    for p, alloc in zip(data.pending, results, strict=True):
        reserved = (*p.claim.status.reserved_for, consumer)
        books.upsert_claim(
            _with_status(p.claim, build_allocation(p.cls, p.resolved, node.name, alloc), reserved)
        )
    for claim in data.allocated:
        reserved = reserved_with(claim.status.reserved_for, consumer)
        if reserved is not claim.status.reserved_for:  # the pod was not among its consumers yet
            books.upsert_claim(_with_status(claim, claim.status.numeric_allocation, reserved))
    return None


def simulate_evict(sim: CycleState, pod: Pod) -> Status | None:
    books = _books(sim)
    uid, ns = pod.metadata.uid, pod.metadata.namespace
    for ref in pod_claim_refs(pod):
        claim = books.claims.get((ns, ref.claim_name))
        if claim is None or not books.is_numeric(claim):
            continue
        reserved = reserved_without(claim.status.reserved_for, uid)
        if reserved is None:
            continue  # not this pod's reservation
        allocation = claim.status.numeric_allocation
        if not reserved and claim.spec.allocation_mode != cv.IMMEDIATE:
            allocation = None
        books.upsert_claim(_with_status(claim, allocation, reserved))
    return None


def add_capacity(state: CycleState, obj: object) -> bool:
    """A fictional node's NodeResourceCapacity joins the snapshot (True: it was one)."""
    if not isinstance(obj, nv.NodeResourceCapacity):
        return False
    _books(state).upsert_capacity(obj)
    return True


def remove_capacity(state: CycleState, name: str) -> None:
    _books(state).delete_capacity(name)


def opaque_reason(state: CycleState, pod: Pod, opaque: str) -> str | None:
    """Why a pod with classic claims cannot be simulated (None: every claim is numeric): a claim
    the snapshot lacks, or ``opaque`` for one with opaque parameters only its driver allocates."""
    books: NumericBooks | None = state.data.get(SIMULATED)
    if books is None:
        return opaque
    for ref in pod_claim_refs(pod):
        claim = books.claims.get((pod.metadata.namespace, ref.claim_name))
        if claim is None:
            return f"classic resourceclaim {ref.claim_name} not found"
        if not books.is_numeric(claim):
            return opaque
    return None


def instances_of(state: CycleState, pod: Pod) -> list[tuple[str, str, str, str]]:
    """(claim, pod claim name, driver, node/instance) the pod's numeric claims hold in the snapshot."""
    books: NumericBooks | None = state.data.get(SIMULATED)
    if books is None:
        return []
    out: list[tuple[str, str, str, str]] = []
    for ref in pod_claim_refs(pod):
        claim = books.claims.get((pod.metadata.namespace, ref.claim_name))
        alloc = None if claim is None else claim.status.numeric_allocation
        model = None if alloc is None else books.models.for_api_version(alloc.api_version)
        if alloc is None or model is None:
            continue
        try:
            ids = books.controllers[model.group].instance_ids(
                decode_model_object(model.allocation_type, alloc.data)
            )
        except ModelDecodeError:
            ids = ()
        for instance in ids or ("",):
            out.append(
                (ref.claim_name, ref.pod_claim_name, alloc.driver_name, f"{alloc.node_name}/{instance}")
            )
    return out
