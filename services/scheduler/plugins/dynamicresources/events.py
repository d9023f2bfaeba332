"""Which cluster events can make a pod the DRA plugin rejected schedulable (upstream
``EventsToRegister`` and its queueing hints)."""

from __future__ import annotations

from events.api.core_v1 import Pod
from events.api.resource_v1 import ResourceClaim
from services.dra.extended.claim import is_extended_resource_claim
from services.dra.resourceclaim import ClaimProblem, resolve_claims
from services.scheduler.framework.cluster import ClusterState
from services.scheduler.framework.events import ActionType, ClusterEvent, EventResource
from services.scheduler.framework.interface import EventRegistration
from services.scheduler.framework.status import QueueingHint

__all__ = ["claim_hint", "claim_key", "pod_hint", "queue_keys", "registrations", "special_claim_deleted_hint"]


def registrations() -> list[EventRegistration]:
    A = ActionType
    return [
        # Node labels matter for slice/device node selectors; allocatable for KEP-5004.
        EventRegistration(EventResource.NODE, A.ADD | A.UPDATE_NODE_LABEL | A.UPDATE_NODE_ALLOCATABLE),
        EventRegistration(EventResource.RESOURCE_CLAIM, A.ADD | A.UPDATE_OTHER, claim_hint, claim_key),
        # KEP-5004: the pod's stale special claim is gone, or a deleted claim freed devices
        EventRegistration(EventResource.RESOURCE_CLAIM, A.DELETE, special_claim_deleted_hint),
        EventRegistration(EventResource.UNSCHEDULED_POD, A.UPDATE_POD_GENERATED_RESOURCE_CLAIM, pod_hint),
        EventRegistration(EventResource.DEVICE_CLASS, A.ADD | A.UPDATE_OTHER),
        EventRegistration(EventResource.RESOURCE_SLICE, A.ADD | A.UPDATE_OTHER),
        # Upstream sees taint rule changes as slice updates; any change can free devices.
        EventRegistration(EventResource.DEVICE_TAINT_RULE, A.ALL),
    ]


def queue_keys(pod: Pod) -> list[str]:
    """The claims (``namespace/name``) a waiting pod refers to, for ``claim_key`` narrowing."""
    ns = pod.metadata.namespace
    names = [e.resource_claim_name for e in pod.spec.resource_claims if e.resource_claim_name]
    names += [s.resource_claim_name for s in pod.status.resource_claim_statuses if s.resource_claim_name]
    return [f"{ns}/{name}" for name in names]


def claim_key(event: ClusterEvent) -> str | None:
    """Only pods referring to the changed claim can be helped, unless it was deallocated."""
    new: ResourceClaim | None = event.new
    old: ResourceClaim | None = event.old
    if new is None or (
        old is not None and old.status.allocation is not None and new.status.allocation is None
    ):
        return None
    return f"{new.metadata.namespace}/{new.metadata.name}"


def claim_hint(pod: Pod, event: ClusterEvent, cluster: ClusterState) -> QueueingHint:
    """Upstream ``isSchedulableAfterClaimChange``: a claim the pod uses was created or its status
    changed, or any claim was deallocated (devices came free)."""
    modified: ResourceClaim | None = event.new
    original: ResourceClaim | None = event.old
    if modified is None:
        return QueueingHint.SKIP
    deallocated = (
        original is not None and original.status.allocation is not None and modified.status.allocation is None
    )
    if not deallocated and not _names(pod, modified):
        return QueueingHint.SKIP  # not the pod's claim: upstream skips too (cheap, no lookups)
    try:
        claims = resolve_claims(pod, cluster)
    except ClaimProblem:
        return QueueingHint.SKIP
    uses = any(c.metadata.uid == modified.metadata.uid for c in claims)
    if deallocated:
        return QueueingHint.QUEUE
    if not uses:
        return QueueingHint.SKIP
    if original is None:
        return QueueingHint.QUEUE
    if original.status == modified.status:
        return QueueingHint.SKIP
    return QueueingHint.QUEUE


def _names(pod: Pod, claim: ResourceClaim) -> bool:
    """Whether the pod refers to a claim of this namespace and name (directly or generated)."""
    if claim.metadata.namespace != pod.metadata.namespace:
        return False
    name = claim.metadata.name
    return any(e.resource_claim_name == name for e in pod.spec.resource_claims) or any(
        s.resource_claim_name == name for s in pod.status.resource_claim_statuses
    )


def special_claim_deleted_hint(pod: Pod, event: ClusterEvent, cluster: ClusterState) -> QueueingHint:
    """A deleted claim helps the pod whose special extended-resource claim it was (PostFilter
    asked for that), and any pod when it still held devices (the special claim deleted by an
    Unreserve compensation frees its devices without a deallocation)."""
    old: ResourceClaim | None = event.old
    if old is None:
        return QueueingHint.SKIP
    if old.status.allocation is not None:
        return QueueingHint.QUEUE
    if not is_extended_resource_claim(old):
        return QueueingHint.SKIP
    uid = pod.metadata.uid
    mine = any(r.controller and r.uid == uid for r in old.metadata.owner_references)
    return QueueingHint.QUEUE if mine else QueueingHint.SKIP


def pod_hint(pod: Pod, event: ClusterEvent, cluster: ClusterState) -> QueueingHint:
    """Upstream ``isSchedulableAfterPodChange``: the pod's generated claims are all there now."""
    modified: Pod | None = event.new
    if modified is None or modified.metadata.uid != pod.metadata.uid:
        return QueueingHint.SKIP
    try:
        resolve_claims(modified, cluster)
    except ClaimProblem:
        return QueueingHint.SKIP
    return QueueingHint.QUEUE
