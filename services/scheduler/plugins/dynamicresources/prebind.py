"""Pure helpers for the sagas: the claim objects PreBind, Unreserve and reallocation write.

Each takes the claim as currently stored (the saga reads it, appends the result with optimistic
concurrency on the claim's subject, and on a conflict reads again and calls the helper again).
A :class:`PreBindConflict` means retrying cannot help (the claim was deleted, replaced or
allocated differently meanwhile): the saga compensates.
"""

from __future__ import annotations

import msgspec

from events.api.core_v1 import Pod
from events.api.resource_v1 import ResourceClaim, ResourceClaimStatus
from services.dra.resourceclaim import (
    DELETE_PROTECTION_FINALIZER,
    RESERVED_FOR_MAX_SIZE,
    ClaimRef,
)
from services.scheduler.framework.decisions import ClaimBinding

__all__ = ["PreBindConflict", "deallocated", "prebind_claim", "unreserve_claim"]


class PreBindConflict(Exception):
    """The claim changed in a way that invalidates the decision (message says how)."""


def _check_same(current: ResourceClaim, ref: ClaimRef) -> None:
    meta = current.metadata
    if ref.uid and meta.uid != ref.uid:
        raise PreBindConflict(f"claim {ref} was replaced (uid {meta.uid}, expected {ref.uid})")


def prebind_claim(current: ResourceClaim, binding: ClaimBinding) -> ResourceClaim:
    """The claim with the finalizer, the allocation (if this cycle made one) and the pod reserved.

    Returns ``current`` unchanged (same object) when everything is already in place, so a
    retried step appends nothing. Upstream ``bindClaim``.
    """
    ref = binding.claim
    _check_same(current, ref)
    meta = current.metadata
    if meta.deletion_timestamp:
        raise PreBindConflict(f"claim {ref} got deleted in the meantime")
    status = current.status
    allocation = status.allocation
    if binding.allocation is not None:
        if allocation is None:
            allocation = binding.allocation
        elif allocation != binding.allocation:
            raise PreBindConflict(f"claim {ref} got allocated elsewhere in the meantime")
        # else: already written (e.g. by this saga before a crash); keep the stored object so an
        # unchanged claim is returned as itself and a resumed step appends nothing
    elif allocation is None:
        raise PreBindConflict(f"claim {ref} got deallocated in the meantime")
    reserved = status.reserved_for
    uid = binding.consumer.uid
    if not any(r.uid == uid for r in reserved):
        if len(reserved) >= RESERVED_FOR_MAX_SIZE:
            raise PreBindConflict(f"claim {ref} is reserved for {RESERVED_FOR_MAX_SIZE} consumers already")
        reserved = (*reserved, binding.consumer)
    finalizers = (
        meta.finalizers
        if DELETE_PROTECTION_FINALIZER in meta.finalizers
        else (*meta.finalizers, DELETE_PROTECTION_FINALIZER)
    )
    if finalizers is meta.finalizers and allocation is status.allocation and reserved is status.reserved_for:
        return current
    new_meta = msgspec.structs.replace(meta, finalizers=finalizers)
    new_status = msgspec.structs.replace(status, allocation=allocation, reserved_for=reserved)
    return msgspec.structs.replace(current, metadata=new_meta, status=new_status)


def unreserve_claim(current: ResourceClaim, pod: Pod) -> ResourceClaim:
    """Compensation: the pod out of ``reservedFor`` (upstream Unreserve's patch).

    The allocation stays; the claim controller deallocates claims nobody reserves, as upstream.
    Returns ``current`` itself when the pod is not reserved.
    """
    uid = pod.metadata.uid
    reserved = tuple(r for r in current.status.reserved_for if r.uid != uid)
    if len(reserved) == len(current.status.reserved_for):
        return current
    status = msgspec.structs.replace(current.status, reserved_for=reserved)
    return msgspec.structs.replace(current, status=status)


def deallocated(current: ResourceClaim, ref: ClaimRef, pod: Pod) -> ResourceClaim:
    """Reallocation (PostFilter's decision): allocation, reservedFor and devices cleared.

    Refused (PreBindConflict) when the claim is now reserved by someone other than ``pod``.
    """
    _check_same(current, ref)
    reserved = current.status.reserved_for
    if any(r.uid != pod.metadata.uid for r in reserved):
        raise PreBindConflict(f"claim {ref} is in use by another consumer")
    if current.status.allocation is None and not reserved and not current.status.devices:
        return current
    return msgspec.structs.replace(current, status=ResourceClaimStatus())
