"""What the classic plugin asks to write into a claim's status, and the pure meaning of each ask.

The scheduling cycle is pure, so the plugin does not write: it emits :class:`ClaimWrite` values.
The scheduler shell (:mod:`services.scheduler.plugins.classic.feed`) loads the claim's latest
version from the log, applies :func:`apply_write` to *that* claim and appends the result with the
claim's expected last sequence; on a conflict it reloads and applies again. Because the decision
is re-made on the latest claim, ``reserve`` keeps ``reservedFor`` within ``userLimit`` even when
several schedulers race for one claim version: only one append per version can win, the loser
re-decides on the winner's claim (KEP-3063: "add the pod to reservedFor ... atomically").
"""

from __future__ import annotations

import msgspec

from events.api import classic_v1alpha1 as cv
from events.api.meta import OwnerReference
from services.dra.classic import claims as cl
from services.scheduler.plugins.classic.scheduling import MAX_POTENTIAL_NODES

__all__ = ["POTENTIAL", "REALLOCATE", "RESERVE", "SELECT", "UNRESERVE", "ClaimWrite", "apply_write"]

POTENTIAL, SELECT, RESERVE = "potential", "select", "reserve"
UNRESERVE, REALLOCATE = "unreserve", "reallocate"


class ClaimWrite(msgspec.Struct, frozen=True, kw_only=True):
    """One ask: ``op`` with the claim (uid guards against a replaced claim) and its arguments."""

    op: str
    namespace: str
    name: str
    uid: str = ""
    nodes: tuple[str, ...] = ()  # POTENTIAL
    node: str = ""  # SELECT
    pod: OwnerReference | None = None  # RESERVE, UNRESERVE, REALLOCATE (the pod asking)


def _pod_uid(w: ClaimWrite) -> str:
    return w.pod.uid if w.pod is not None else ""


def apply_write(claim: cv.ResourceClaim, w: ClaimWrite) -> cv.ResourceClaim | str:
    """The claim as it must be written, or why nothing is written (the ask no longer applies)."""
    if w.uid and claim.metadata.uid != w.uid:
        return "the claim was replaced"
    if cl.is_deleting(claim):
        return "the claim is being deleted"
    phase = cl.phase(claim)
    pending_delayed = phase == cv.PENDING and claim.spec.allocation_mode != cv.IMMEDIATE
    if w.op == POTENTIAL:
        if not pending_delayed:
            return "the claim is not a pending delayed claim"
        return cl.with_potential_nodes(claim, tuple(sorted(set(w.nodes)))[:MAX_POTENTIAL_NODES])
    if w.op == SELECT:
        if not pending_delayed:
            return "the claim is not a pending delayed claim"
        return cl.with_selected_node(claim, w.node)
    if w.op == RESERVE:
        if phase != cv.ALLOCATED:
            return "the claim is not allocated"
        assert w.pod is not None
        users = claim.status.reserved_for
        if any(u.uid == w.pod.uid for u in users):
            return claim
        limit = claim.status.user_limit if claim.status.user_limit is not None else 1
        if limit != cv.UNLIMITED and len(users) >= limit:
            return f"in use by {len(users)} (userLimit {limit})"
        return cl.reserved(claim, w.pod)
    if w.op == UNRESERVE:
        return cl.unreserved(claim, _pod_uid(w))
    if w.op == REALLOCATE:
        uid = _pod_uid(w)
        if phase != cv.ALLOCATED:
            return "the claim is not allocated"
        if any(u.uid != uid for u in claim.status.reserved_for):
            return "the claim is in use by another consumer"
        return cl.reallocate(cl.unreserved(claim, uid))
    raise ValueError(f"unknown claim write {w.op!r}")
