"""Reducers of the numeric-claim facts (:mod:`draflow.events.numeric`), listed in ``REDUCERS``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from msgspec.structs import replace

from draflow.events.api import classic_v1alpha1 as cv
from draflow.events.api.meta import NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, OwnerReference
from draflow.events.envelope import Event
from draflow.events.numeric import (
    NUMERIC_FINALIZER,
    NumericClaimAllocated,
    NumericClaimConditionRecorded,
    NumericClaimDeallocated,
    NumericClaimReservationsReleased,
    NumericClaimReserved,
)

__all__ = ["REDUCERS", "node_selector_for"]


def node_selector_for(node: str) -> NodeSelector:
    """``availableOnNodes`` of a node-local allocation: that node by name."""
    req = NodeSelectorRequirement(key="metadata.name", operator="In", values=(node,))
    return NodeSelector(node_selector_terms=(NodeSelectorTerm(match_fields=(req,)),))


def _with_consumer(
    users: tuple[OwnerReference, ...], consumer: OwnerReference | None
) -> tuple[OwnerReference, ...]:
    if consumer is None or any(u.uid == consumer.uid for u in users):
        return users
    return (*users, consumer)


def _allocated(claim: cv.ResourceClaim | None, ev: NumericClaimAllocated) -> cv.ResourceClaim | None:
    if claim is None:
        return None
    alloc = ev.allocation
    meta = claim.metadata
    if NUMERIC_FINALIZER not in meta.finalizers:
        meta = replace(meta, finalizers=(*meta.finalizers, NUMERIC_FINALIZER))
    driver = cv.DriverSchedulingStatus(available_on_nodes=node_selector_for(alloc.node_name))
    status = replace(
        claim.status,
        phase=cv.ALLOCATED,
        driver_name=alloc.driver_name,
        numeric_allocation=alloc,
        user_limit=cv.UNLIMITED if alloc.shareable else 1,
        scheduling=cv.SchedulingStatus(driver=driver),
        reserved_for=_with_consumer(claim.status.reserved_for, ev.consumer),
        conditions=tuple(c for c in claim.status.conditions if c.type != "NumericParameters"),
    )
    return replace(claim, metadata=meta, status=status)


def _reserved(claim: cv.ResourceClaim | None, ev: NumericClaimReserved) -> cv.ResourceClaim | None:
    if claim is None:
        return None
    users = _with_consumer(claim.status.reserved_for, ev.consumer)
    return (
        claim
        if users is claim.status.reserved_for
        else replace(claim, status=replace(claim.status, reserved_for=users))
    )


def _released(
    claim: cv.ResourceClaim | None, ev: NumericClaimReservationsReleased
) -> cv.ResourceClaim | None:
    if claim is None:
        return None
    users = tuple(u for u in claim.status.reserved_for if u.uid not in ev.uids)
    return replace(claim, status=replace(claim.status, reserved_for=users))


def _deallocated(claim: cv.ResourceClaim | None, ev: NumericClaimDeallocated) -> cv.ResourceClaim | None:
    if claim is None:
        return None
    meta = replace(
        claim.metadata, finalizers=tuple(f for f in claim.metadata.finalizers if f != NUMERIC_FINALIZER)
    )
    status = replace(
        claim.status,
        phase=cv.PENDING,
        driver_name="",
        numeric_allocation=None,
        scheduling=None,
        reserved_for=(),
        user_limit=1,
    )
    return replace(claim, metadata=meta, status=status)


def _condition(claim: cv.ResourceClaim | None, ev: NumericClaimConditionRecorded) -> cv.ResourceClaim | None:
    if claim is None:
        return None
    cond = ev.condition
    others = tuple(c for c in claim.status.conditions if c.type != cond.type)
    return replace(claim, status=replace(claim.status, conditions=(*others, cond)))


REDUCERS: dict[type[Event], Callable[[Any, Any], Any]] = {
    NumericClaimAllocated: _allocated,
    NumericClaimReserved: _reserved,
    NumericClaimReservationsReleased: _released,
    NumericClaimDeallocated: _deallocated,
    NumericClaimConditionRecorded: _condition,
}
