"""Deallocation of numeric claims (KEP-4381 "Deallocation"), the claim controller's pure decider.

A numeric claim carries the ``numeric.dra.k8s.io/delete-protection`` finalizer while allocated.
That finalizer tells the claim controller it may clear the allocation itself instead of asking a
driver to (there is no driver controller): once no pod uses the claim any more (users gone or
finished are dropped from ``reservedFor`` first), a delayed claim, or any claim being deleted, is
deallocated (``NumericClaimDeallocated``: allocation cleared, finalizer removed), which the
scheduler's books observe as capacity freed. Immediate claims stay allocated while they exist
(KEP "Immediate allocation"). The controller needs no knowledge of any numeric model.
"""

from __future__ import annotations

from collections.abc import Mapping

from draflow.events.api import classic_v1alpha1 as cv
from draflow.events.api.core_v1 import Pod
from draflow.events.envelope import Event
from draflow.events.numeric import (
    NUMERIC_FINALIZER,
    NumericClaimDeallocated,
    NumericClaimReservationsReleased,
)
from draflow.services.dra.resourceclaim import is_pod_terminal

__all__ = ["is_numeric_allocated", "sync_numeric_claim"]


def is_numeric_allocated(claim: cv.ResourceClaim) -> bool:
    return claim.status.numeric_allocation is not None or NUMERIC_FINALIZER in claim.metadata.finalizers


def sync_numeric_claim(claim: cv.ResourceClaim, pods: Mapping[str, Pod | None]) -> list[Event]:
    """The events that move the claim on (empty: nothing to do). ``pods``: the pods named in
    ``reservedFor`` by name (None: no such pod)."""
    if not is_numeric_allocated(claim):
        return []
    stale: list[str] = []
    for user in claim.status.reserved_for:
        pod = pods.get(user.name)
        if pod is None or pod.metadata.uid != user.uid or is_pod_terminal(pod):
            stale.append(user.uid)
    left = [u for u in claim.status.reserved_for if u.uid not in stale]
    deleting = claim.metadata.deletion_timestamp is not None
    if not left and (deleting or claim.spec.allocation_mode != cv.IMMEDIATE):
        return [NumericClaimDeallocated(reason="Deleted" if deleting else "NoConsumers")]
    if stale:
        return [NumericClaimReservationsReleased(uids=tuple(stale))]
    return []
