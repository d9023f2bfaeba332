"""The scheduler's classic DRA plugin as pure decisions (KEP-3063 "kube-scheduler" section).

The scheduler engineer calls these from the framework's extension points; claim writes come back
as new claim values to append with optimistic concurrency (expected last sequence of the claim's
aggregate). A conflict means another scheduler or the driver changed the claim: reload it and
call the same function again. That is how ``reservedFor`` stays within ``userLimit`` when
several schedulers race: :func:`reserve_claim` decides on the latest claim, and only one append
per claim version can win.

* :func:`pre_filter`: no classic claims -> skip; a missing claim, a template claim the pod does
  not own, a claim being deleted or reallocated, an Immediate claim not allocated yet, or an
  allocated claim already used by ``userLimit`` other users -> unschedulable (retried when the
  claim changes).
* :func:`filter_node`: allocated claims must be available on the node (``availableOnNodes``);
  pending delayed claims reject nodes in ``unsuitableNodes`` or outside ``availableOnNodes``.
  The allocated claims that rejected a node are remembered for PostFilter.
* :func:`pre_score`: publish the nodes that passed as ``potentialNodes`` of pending delayed
  claims (sorted, at most 128), only when they differ.
* :func:`reserve`: pending delayed claims get ``selectedNode`` and the attempt stops (``WAIT``)
  until a claim changes; when all are allocated the pod is added to every ``reservedFor``.
* :func:`unreserve`: the pod leaves ``reservedFor`` again.
* :func:`post_filter`: pick one allocated, unused, delayed claim that rejected some node and set
  phase Reallocate; never while one of the pod's claims is already being reallocated.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

import msgspec

from draflow.events.api import classic_v1alpha1 as cv
from draflow.events.api import core_v1 as c1
from draflow.services.dra.classic import claims as cl
from draflow.services.dra.classic.nodeselect import selector_matches
from draflow.services.dra.classic.podclaims import pod_claim_refs
from draflow.services.dra.resourceclaim import is_controlled_by, pod_owner_reference

__all__ = [
    "MAX_POTENTIAL_NODES",
    "OK",
    "RESERVED",
    "SKIP",
    "UNSCHEDULABLE",
    "WAIT",
    "ClaimInfo",
    "FilterResult",
    "PostFilterResult",
    "PreFilterResult",
    "ReserveResult",
    "filter_node",
    "post_filter",
    "pre_filter",
    "pre_score",
    "reserve",
    "reserve_claim",
    "unreserve",
]

OK, SKIP, UNSCHEDULABLE, WAIT, RESERVED = "Success", "Skip", "Unschedulable", "Wait", "Reserved"
MAX_POTENTIAL_NODES = 128


class ClaimInfo(msgspec.Struct, frozen=True, kw_only=True):
    pod_claim_name: str
    claim: cv.ResourceClaim


class PreFilterResult(msgspec.Struct, frozen=True, kw_only=True):
    code: str
    reason: str = ""
    claims: tuple[ClaimInfo, ...] = ()


def _user_count_full(claim: cv.ResourceClaim, pod_uid: str) -> bool:
    limit = claim.status.user_limit if claim.status.user_limit is not None else 1
    users = claim.status.reserved_for
    if any(u.uid == pod_uid for u in users):
        return False
    return limit != cv.UNLIMITED and len(users) >= limit


def pre_filter(
    pod: c1.Pod, claims: Mapping[str, cv.ResourceClaim], ignore: Callable[[str], bool] | None = None
) -> PreFilterResult:
    """``claims``: the classic claims of the pod's namespace by name; ``ignore``: claim names
    another plugin handles (numeric claims, KEP-4381)."""
    refs = pod_claim_refs(pod)
    if ignore is not None:
        refs = tuple(r for r in refs if not ignore(r.claim_name))
    if not refs:
        return PreFilterResult(code=SKIP)
    infos = []
    for ref in refs:
        claim = claims.get(ref.claim_name)
        if claim is None:
            what = "waiting for resourceclaim" if ref.from_template else "resourceclaim not found:"
            return PreFilterResult(code=UNSCHEDULABLE, reason=f"{what} {ref.claim_name}")
        if ref.from_template and not is_controlled_by(claim.metadata, pod.metadata.uid):
            pod_name = pod.metadata.name
            reason = f"resourceclaim {ref.claim_name} was not created for pod {pod_name} (pod is not owner)"
            return PreFilterResult(code=UNSCHEDULABLE, reason=reason)
        phase = cl.phase(claim)
        if cl.is_deleting(claim):
            return PreFilterResult(
                code=UNSCHEDULABLE, reason=f"resourceclaim {ref.claim_name} is being deleted"
            )
        if phase == cv.REALLOCATE:
            reason = f"resourceclaim {ref.claim_name} is being reallocated"
            return PreFilterResult(code=UNSCHEDULABLE, reason=reason)
        if claim.spec.allocation_mode == cv.IMMEDIATE and phase != cv.ALLOCATED:
            reason = f"unallocated immediate resourceclaim {ref.claim_name}"
            return PreFilterResult(code=UNSCHEDULABLE, reason=reason)
        if phase == cv.ALLOCATED and _user_count_full(claim, pod.metadata.uid):
            reason = f"resourceclaim {ref.claim_name} is in use (userLimit {claim.status.user_limit})"
            return PreFilterResult(code=UNSCHEDULABLE, reason=reason)
        infos.append(ClaimInfo(pod_claim_name=ref.pod_claim_name, claim=claim))
    return PreFilterResult(code=OK, claims=tuple(infos))


class FilterResult(msgspec.Struct, frozen=True, kw_only=True):
    ok: bool
    reasons: tuple[str, ...] = ()
    # Allocated claims (by claim name) that made this node unusable: PostFilter's candidates.
    rejected_by_allocated: tuple[str, ...] = ()


def filter_node(state: PreFilterResult, node: c1.Node) -> FilterResult:
    name, labels = node.metadata.name, node.metadata.labels
    reasons: list[str] = []
    allocated: list[str] = []
    for info in state.claims:
        claim = info.claim
        sched = cl.scheduling(claim)
        available = selector_matches(sched.driver.available_on_nodes, name, labels)
        if cl.phase(claim) == cv.ALLOCATED:
            if not available:
                reasons.append(f"resourceclaim {claim.metadata.name} not available on the node")
                allocated.append(claim.metadata.name)
        elif name in sched.driver.unsuitable_nodes or not available:
            reasons.append(
                f"resourceclaim {claim.metadata.name} cannot be allocated for the node (unsuitable)"
            )
    return FilterResult(ok=not reasons, reasons=tuple(reasons), rejected_by_allocated=tuple(allocated))


def _pending_delayed(state: PreFilterResult) -> list[cv.ResourceClaim]:
    return [
        i.claim
        for i in state.claims
        if cl.phase(i.claim) == cv.PENDING and i.claim.spec.allocation_mode != cv.IMMEDIATE
    ]


def pre_score(state: PreFilterResult, nodes: Iterable[str]) -> list[cv.ResourceClaim]:
    """Claims whose ``potentialNodes`` must be (re)published."""
    potential = tuple(sorted(set(nodes))[:MAX_POTENTIAL_NODES])
    return [
        cl.with_potential_nodes(c, potential)
        for c in _pending_delayed(state)
        if cl.scheduling(c).scheduler.potential_nodes != potential
    ]


class ReserveResult(msgspec.Struct, frozen=True, kw_only=True):
    code: str  # WAIT (selected node published), RESERVED, UNSCHEDULABLE
    reason: str = ""
    updates: tuple[cv.ResourceClaim, ...] = ()


def reserve_claim(claim: cv.ResourceClaim, pod: c1.Pod) -> cv.ResourceClaim | str:
    """Add the pod to ``reservedFor`` of the latest claim, or say why not (a one-line reason)."""
    if cl.phase(claim) != cv.ALLOCATED:
        return f"resourceclaim {claim.metadata.name} is not allocated"
    if cl.is_deleting(claim):
        return f"resourceclaim {claim.metadata.name} is being deleted"
    if any(u.uid == pod.metadata.uid for u in claim.status.reserved_for):
        return claim
    if _user_count_full(claim, pod.metadata.uid):
        users, limit = len(claim.status.reserved_for), claim.status.user_limit
        return f"resourceclaim {claim.metadata.name} is in use by {users} (userLimit {limit})"
    return cl.reserved(claim, pod_owner_reference(pod))


def reserve(state: PreFilterResult, pod: c1.Pod, node: str) -> ReserveResult:
    pending = _pending_delayed(state)
    if pending:
        updates = tuple(
            cl.with_selected_node(c, node)
            for c in pending
            if cl.scheduling(c).scheduler.selected_node != node
        )
        reason = "waiting for resource driver to allocate resource"
        return ReserveResult(code=WAIT, reason=reason, updates=updates)
    out = []
    for info in state.claims:
        new = reserve_claim(info.claim, pod)
        if isinstance(new, str):
            return ReserveResult(code=UNSCHEDULABLE, reason=new)
        if new is not info.claim:
            out.append(new)
    return ReserveResult(code=RESERVED, updates=tuple(out))


def unreserve(claims: Sequence[cv.ResourceClaim], pod: c1.Pod) -> list[cv.ResourceClaim]:
    uid = pod.metadata.uid
    return [cl.unreserved(c, uid) for c in claims if any(u.uid == uid for u in c.status.reserved_for)]


class PostFilterResult(msgspec.Struct, frozen=True, kw_only=True):
    reallocate: cv.ResourceClaim | None = None  # the claim to write (phase Reallocate)
    reason: str = ""


def post_filter(
    state: PreFilterResult, rejected: Iterable[FilterResult], pod_uid: str = ""
) -> PostFilterResult:
    """Choose at most one claim to reallocate (deterministic: the first by name, where the KEP
    picks at random; draflow's deciders must not use unseeded randomness).

    "Unused" means no users, or only this pod (``pod_uid``: reserved in an earlier attempt that
    then found no node, as upstream's PostFilter allows); the written claim drops that entry."""
    if any(cl.phase(i.claim) == cv.REALLOCATE for i in state.claims):
        return PostFilterResult(reason="a deallocation is already running for this pod")
    culprits = {name for r in rejected for name in r.rejected_by_allocated}
    candidates = sorted(
        (
            i.claim
            for i in state.claims
            if i.claim.metadata.name in culprits
            and i.claim.spec.allocation_mode != cv.IMMEDIATE
            and cl.phase(i.claim) == cv.ALLOCATED
            and all(u.uid == pod_uid and pod_uid for u in i.claim.status.reserved_for)
        ),
        key=lambda c: c.metadata.name,
    )
    if not candidates:
        return PostFilterResult(reason="no allocated, unused delayed claim caused a rejection")
    chosen = candidates[0]
    freed = cl.reallocate(cl.unreserved(chosen, pod_uid) if pod_uid else chosen)
    return PostFilterResult(reallocate=freed, reason=f"reallocating {chosen.metadata.name}")
