"""Reducers of the DRA domain events (:mod:`draflow.events.dra`) in the object fold.

Pure functions ``(object | None, event) -> object | None``, listed in ``REDUCERS``;
``draflow.projections.objects`` assembles every table into the one object fold, so every process that
folds objects (the apiserver, watches, the scheduler's snapshot) applies them. An
event on a subject whose object is gone leaves it gone. Reducers never raise: a precondition
(``reservedFor`` empty before ``ClaimDeallocated``, or left empty by its ``released``) is the
writer's to check.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from msgspec.structs import replace

from draflow.events.api.core_v1 import Pod, PodCondition, PodStatus
from draflow.events.api.resource_v1 import ResourceClaim
from draflow.events.dra import (
    DELETE_PROTECTION_FINALIZER,
    ClaimAllocated,
    ClaimDeallocated,
    ClaimReservationsReleased,
    ClaimReserved,
    PodBound,
    PodClaimStatusesRecorded,
    PodExtendedResourceClaimStatusRecorded,
    PodFailed,
    PodStarted,
    PodSucceeded,
    PodUnschedulable,
)
from draflow.events.envelope import Event

__all__ = ["REDUCERS", "set_condition"]


def set_condition(status: PodStatus, cond: PodCondition) -> PodStatus:
    """``status`` with ``cond`` replacing the condition of its type (appended when new); the
    transition time is kept when the condition's status does not change, as upstream."""
    out = []
    found = False
    for c in status.conditions:
        if c.type == cond.type:
            found = True
            if c.status == cond.status and c.last_transition_time:
                cond = replace(cond, last_transition_time=c.last_transition_time)
            out.append(cond)
        else:
            out.append(c)
    if not found:
        out.append(cond)
    return replace(status, conditions=tuple(out))


def _conditions(status: PodStatus, value: str, at: str, *types: str, reason: str = "") -> PodStatus:
    for t in types:
        status = set_condition(
            status, PodCondition(type=t, status=value, last_transition_time=at or None, reason=reason)
        )
    return status


# -- ResourceClaim --------------------------------------------------------------------------------


def _allocated(claim: ResourceClaim | None, ev: ClaimAllocated) -> ResourceClaim | None:
    if claim is None:
        return None
    meta = claim.metadata
    if DELETE_PROTECTION_FINALIZER not in meta.finalizers:
        meta = replace(meta, finalizers=(*meta.finalizers, DELETE_PROTECTION_FINALIZER))
    status = replace(claim.status, allocation=ev.allocation)
    consumer = ev.consumer
    if consumer is not None and not any(r.uid == consumer.uid for r in status.reserved_for):
        status = replace(status, reserved_for=(*status.reserved_for, consumer))
    return replace(claim, metadata=meta, status=status)


def _reserved(claim: ResourceClaim | None, ev: ClaimReserved) -> ResourceClaim | None:
    if claim is None:
        return None
    if any(r.uid == ev.consumer.uid for r in claim.status.reserved_for):
        return claim
    reserved = (*claim.status.reserved_for, ev.consumer)
    return replace(claim, status=replace(claim.status, reserved_for=reserved))


def _released(claim: ResourceClaim | None, ev: ClaimReservationsReleased) -> ResourceClaim | None:
    if claim is None:
        return None
    gone = set(ev.uids)
    reserved = tuple(r for r in claim.status.reserved_for if r.uid not in gone)
    if len(reserved) == len(claim.status.reserved_for):
        return claim
    return replace(claim, status=replace(claim.status, reserved_for=reserved))


def _deallocated(claim: ResourceClaim | None, ev: ClaimDeallocated) -> ResourceClaim | None:
    if claim is None:
        return None
    meta = claim.metadata
    if DELETE_PROTECTION_FINALIZER in meta.finalizers:
        kept = tuple(f for f in meta.finalizers if f != DELETE_PROTECTION_FINALIZER)
        meta = replace(meta, finalizers=kept)
    gone = set(ev.released)  # the last reservations leave in the same fact
    reserved = tuple(r for r in claim.status.reserved_for if r.uid not in gone)
    status = replace(claim.status, allocation=None, devices=(), reserved_for=reserved)
    return replace(claim, metadata=meta, status=status)


# -- Pod ------------------------------------------------------------------------------------------


def _bound(pod: Pod | None, ev: PodBound) -> Pod | None:
    if pod is None:
        return None
    status = set_condition(
        pod.status,
        PodCondition(type="PodScheduled", status="True", last_transition_time=ev.at or None),
    )
    status = replace(status, nominated_node_name="")
    return replace(pod, spec=replace(pod.spec, node_name=ev.node_name), status=status)


def _unschedulable(pod: Pod | None, ev: PodUnschedulable) -> Pod | None:
    if pod is None:
        return None
    cond = PodCondition(
        type="PodScheduled",
        status="False",
        reason=ev.reason,
        message=ev.message,
        last_transition_time=ev.at or None,
        last_probe_time=None,
    )
    status = set_condition(pod.status, cond)
    if not status.phase:
        status = replace(status, phase="Pending")
    return replace(pod, status=status)


def _claim_statuses(pod: Pod | None, ev: PodClaimStatusesRecorded) -> Pod | None:
    if pod is None:
        return None
    return replace(pod, status=replace(pod.status, resource_claim_statuses=tuple(ev.statuses)))


def _extended_claim_status(pod: Pod | None, ev: PodExtendedResourceClaimStatusRecorded) -> Pod | None:
    if pod is None:
        return None
    return replace(pod, status=replace(pod.status, extended_resource_claim_status=ev.status))


def _started(pod: Pod | None, ev: PodStarted) -> Pod | None:
    if pod is None:
        return None
    status = _conditions(pod.status, "True", ev.at, "Initialized", "ContainersReady", "Ready")
    status = replace(
        status,
        phase="Running",
        start_time=pod.status.start_time or ev.at or None,
        host_ip=ev.host_ip or status.host_ip,
        pod_ip=ev.pod_ip or status.pod_ip,
    )
    return replace(pod, status=status)


def _failed(pod: Pod | None, ev: PodFailed) -> Pod | None:
    if pod is None:
        return None
    status = _conditions(pod.status, "False", ev.at, "ContainersReady", "Ready", reason="PodFailed")
    status = replace(status, phase="Failed", reason=ev.reason, message=ev.message)
    return replace(pod, status=status)


def _succeeded(pod: Pod | None, ev: PodSucceeded) -> Pod | None:
    if pod is None:
        return None
    status = _conditions(pod.status, "False", ev.at, "ContainersReady", "Ready", reason="PodCompleted")
    return replace(pod, status=replace(status, phase="Succeeded"))


# The fold's reducers of these events (``draflow.projections.objects`` assembles every table).
REDUCERS: dict[type[Event], Callable[[Any, Any], Any]] = {
    ClaimAllocated: _allocated,
    ClaimReserved: _reserved,
    ClaimReservationsReleased: _released,
    ClaimDeallocated: _deallocated,
    PodBound: _bound,
    PodUnschedulable: _unschedulable,
    PodClaimStatusesRecorded: _claim_statuses,
    PodExtendedResourceClaimStatusRecorded: _extended_claim_status,
    PodStarted: _started,
    PodFailed: _failed,
    PodSucceeded: _succeeded,
}
