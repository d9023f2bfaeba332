"""Pure status and metadata transitions of a classic claim, one function per fact.

The sagas and the scheduler write claims only through these, so every writer agrees on the
KEP's rules: after a successful allocation the scheduling negotiation fields are cleared and only
``availableOnNodes`` stays (it says where the allocated resource can be used); a definite
failure on the selected node clears ``selectedNode`` and lists the node as unsuitable so the
scheduler picks another; freeing returns the claim to Pending without attributes.
"""

from __future__ import annotations

from msgspec.structs import replace

from draflow.events.api import classic_v1alpha1 as cv
from draflow.events.api.meta import OwnerReference
from draflow.services.dra.classic.plugin import AllocationResult

__all__ = [
    "allocated",
    "allocation_failed_on",
    "deallocated",
    "driver_answered",
    "finalizer_for",
    "has_finalizer",
    "is_deleting",
    "owned_by_driver",
    "phase",
    "reallocate",
    "reserved",
    "scheduling",
    "unreserved",
    "with_driver_answer",
    "with_finalizer",
    "with_potential_nodes",
    "with_selected_node",
    "with_unsuitable_nodes",
    "without_finalizer",
]


def finalizer_for(driver_name: str) -> str:
    """The driver's finalizer (upstream's ``<driver>/deletion-protection``)."""
    return f"{driver_name}/deletion-protection"


def phase(claim: cv.ResourceClaim) -> str:
    return claim.status.phase or cv.PENDING


def is_deleting(claim: cv.ResourceClaim) -> bool:
    return claim.metadata.deletion_timestamp is not None


def has_finalizer(claim: cv.ResourceClaim, driver_name: str) -> bool:
    return finalizer_for(driver_name) in claim.metadata.finalizers


def owned_by_driver(
    claim: cv.ResourceClaim, resource_class: cv.ResourceClass | None, driver_name: str
) -> bool:
    """The status' driver name once allocation started, else the class' (the class may be gone)."""
    if claim.status.driver_name:
        return claim.status.driver_name == driver_name
    return resource_class is not None and resource_class.driver_name == driver_name


def scheduling(claim: cv.ResourceClaim) -> cv.SchedulingStatus:
    return claim.status.scheduling or cv.SchedulingStatus()


def _with_status(claim: cv.ResourceClaim, **changes: object) -> cv.ResourceClaim:
    return replace(claim, status=replace(claim.status, **changes))


def _with_scheduling(claim: cv.ResourceClaim, sched: cv.SchedulingStatus) -> cv.ResourceClaim:
    empty = sched == cv.SchedulingStatus()
    return _with_status(claim, scheduling=None if empty else sched)


def with_finalizer(claim: cv.ResourceClaim, driver_name: str) -> cv.ResourceClaim:
    fin = finalizer_for(driver_name)
    if fin in claim.metadata.finalizers:
        return claim
    return replace(claim, metadata=replace(claim.metadata, finalizers=(*claim.metadata.finalizers, fin)))


def without_finalizer(claim: cv.ResourceClaim, driver_name: str) -> cv.ResourceClaim:
    fin = finalizer_for(driver_name)
    kept = tuple(f for f in claim.metadata.finalizers if f != fin)
    return replace(claim, metadata=replace(claim.metadata, finalizers=kept))


def allocated(claim: cv.ResourceClaim, driver_name: str, result: AllocationResult) -> cv.ResourceClaim:
    """Phase Allocated; negotiation fields cleared, ``availableOnNodes`` kept from the driver."""
    sched = cv.SchedulingStatus(
        driver=cv.DriverSchedulingStatus(available_on_nodes=result.available_on_nodes)
    )
    claim = _with_scheduling(claim, sched)
    return _with_status(
        claim,
        phase=cv.ALLOCATED,
        driver_name=driver_name,
        attributes=dict(result.attributes),
        user_limit=result.user_limit,
    )


def allocation_failed_on(claim: cv.ResourceClaim, node: str | None) -> cv.ResourceClaim:
    """A definite failure: forget the selected node and mark it unsuitable (KEP: "unset the
    selected node field to trigger another allocation attempt elsewhere")."""
    sched = scheduling(claim)
    unsuitable = sched.driver.unsuitable_nodes
    if node and node not in unsuitable:
        unsuitable = (*unsuitable, node)
    sched = replace(
        sched,
        scheduler=replace(sched.scheduler, selected_node=""),
        driver=replace(sched.driver, unsuitable_nodes=unsuitable),
    )
    return _with_scheduling(claim, sched)


def reallocation_cancelled(claim: cv.ResourceClaim) -> cv.ResourceClaim:
    """The driver could not free the claim: it stays Allocated (the Reallocate request is undone,
    so the scheduler decides again instead of waiting for a deallocation that will not come)."""
    return claim if claim.status.phase != cv.REALLOCATE else _with_status(claim, phase=cv.ALLOCATED)


def deallocated(claim: cv.ResourceClaim) -> cv.ResourceClaim:
    """Freed: back to Pending, no attributes, no users, no scheduling data; driverName kept."""
    return _with_status(
        claim, phase=cv.PENDING, attributes={}, scheduling=None, reserved_for=(), user_limit=1
    )


def with_unsuitable_nodes(claim: cv.ResourceClaim, nodes: tuple[str, ...]) -> cv.ResourceClaim:
    sched = scheduling(claim)
    return _with_scheduling(claim, replace(sched, driver=replace(sched.driver, unsuitable_nodes=nodes)))


def with_driver_answer(
    claim: cv.ResourceClaim, potential: tuple[str, ...], unsuitable: tuple[str, ...]
) -> cv.ResourceClaim:
    """The driver's answer to ``potential``: its unsuitable nodes, and which list they answer."""
    sched = scheduling(claim)
    driver = replace(sched.driver, unsuitable_nodes=unsuitable, answered_potential_nodes=potential)
    return _with_scheduling(claim, replace(sched, driver=driver))


def driver_answered(claim: cv.ResourceClaim) -> bool:
    """The driver answered the claim's current ``potentialNodes`` (upstream: the claim has an
    entry in the PodSchedulingContext's status). Nothing published: nothing to answer."""
    sched = scheduling(claim)
    potential = sched.scheduler.potential_nodes
    return bool(potential) and sched.driver.answered_potential_nodes == potential


def with_potential_nodes(claim: cv.ResourceClaim, nodes: tuple[str, ...]) -> cv.ResourceClaim:
    sched = scheduling(claim)
    return _with_scheduling(claim, replace(sched, scheduler=replace(sched.scheduler, potential_nodes=nodes)))


def with_selected_node(claim: cv.ResourceClaim, node: str) -> cv.ResourceClaim:
    sched = scheduling(claim)
    return _with_scheduling(claim, replace(sched, scheduler=replace(sched.scheduler, selected_node=node)))


def reallocate(claim: cv.ResourceClaim) -> cv.ResourceClaim:
    return _with_status(claim, phase=cv.REALLOCATE)


def reserved(claim: cv.ResourceClaim, user: OwnerReference) -> cv.ResourceClaim:
    if any(r.uid == user.uid for r in claim.status.reserved_for):
        return claim
    return _with_status(claim, reserved_for=(*claim.status.reserved_for, user))


def unreserved(claim: cv.ResourceClaim, uid: str) -> cv.ResourceClaim:
    return _with_status(claim, reserved_for=tuple(r for r in claim.status.reserved_for if r.uid != uid))
