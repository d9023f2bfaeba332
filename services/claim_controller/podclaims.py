"""How a pod refers to its claims, shared by the claim controller and the kubelet.

After ``k8s.io/dynamic-resource-allocation/resourceclaim`` (``Name``, ``IsForPod``,
``IsReservedForPod``) and the controller's ``isPodDone`` / ``owningPod``: one place decides which
claim a ``pod.spec.resourceClaims`` entry means, so the controller, the kubelet (and the scheduler)
cannot disagree about it.
"""

from __future__ import annotations

from dataclasses import dataclass

from events.api.core_v1 import Pod, PodResourceClaim
from events.api.meta import ObjectMeta, OwnerReference
from events.api.resource_v1 import ResourceClaim, ResourceClaimConsumerReference

__all__ = [
    "DELETE_PROTECTION_FINALIZER",
    "POD_CLAIM_NAME_ANNOTATION",
    "ClaimName",
    "ClaimNameError",
    "controller_ref",
    "is_for_pod",
    "is_pod_done",
    "is_pod_terminal",
    "is_reserved_for_pod",
    "owning_pod",
    "pod_consumer_ref",
    "pod_owner_reference",
    "resolve_claim_name",
]

POD_CLAIM_NAME_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
DELETE_PROTECTION_FINALIZER = "resource.kubernetes.io/delete-protection"


class ClaimNameError(ValueError):
    """The pod's claim cannot be named yet (template claim not created) or the entry is malformed."""

    def __init__(self, message: str, *, not_created: bool = False) -> None:
        super().__init__(message)
        self.not_created = not_created


@dataclass(frozen=True, slots=True)
class ClaimName:
    """``name`` None: the template's claim was judged unnecessary (nothing to do for this entry).

    ``must_check_owner``: the claim was generated for the pod, so it must be controlled by it.
    """

    name: str | None
    must_check_owner: bool


def resolve_claim_name(pod: Pod, pod_claim: PodResourceClaim) -> ClaimName:
    """Which claim a ``pod.spec.resourceClaims`` entry refers to (upstream ``resourceclaim.Name``)."""
    if pod_claim.resource_claim_name is not None:
        return ClaimName(pod_claim.resource_claim_name, False)
    if pod_claim.resource_claim_template_name is not None:
        for status in pod.status.resource_claim_statuses:
            if status.name == pod_claim.name:
                return ClaimName(status.resource_claim_name, True)
        meta = pod.metadata
        raise ClaimNameError(
            f'pod "{meta.namespace}/{meta.name}": ResourceClaim not created yet', not_created=True
        )
    meta = pod.metadata
    raise ClaimNameError(
        f'pod "{meta.namespace}/{meta.name}", spec.resourceClaim "{pod_claim.name}": '
        "neither resourceClaimName nor resourceClaimTemplateName is set"
    )


def controller_ref(meta: ObjectMeta) -> OwnerReference | None:
    """The owner reference marked ``controller: true`` (at most one is allowed)."""
    for ref in meta.owner_references:
        if ref.controller:
            return ref
    return None


def is_for_pod(pod: Pod, claim: ResourceClaim) -> str | None:
    """None when the claim is controlled by the pod, else upstream's one-line reason."""
    ref = controller_ref(claim.metadata)
    if claim.metadata.namespace == pod.metadata.namespace and ref is not None and ref.uid == pod.metadata.uid:
        return None
    c, p = claim.metadata, pod.metadata
    return (
        f"ResourceClaim {c.namespace}/{c.name} was not created for pod {p.namespace}/{p.name} "
        "(pod is not owner)"
    )


def is_reserved_for_pod(pod: Pod, claim: ResourceClaim) -> bool:
    return any(ref.uid == pod.metadata.uid for ref in claim.status.reserved_for)


def pod_consumer_ref(pod: Pod) -> ResourceClaimConsumerReference:
    """The ``status.reservedFor`` entry for a pod (core group, resource ``pods``)."""
    return ResourceClaimConsumerReference(resource="pods", name=pod.metadata.name, uid=pod.metadata.uid)


def pod_owner_reference(pod: Pod) -> OwnerReference:
    """The owner reference a generated claim carries: the pod, as controller, blocking deletion."""
    return OwnerReference(
        api_version="v1",
        kind="Pod",
        name=pod.metadata.name,
        uid=pod.metadata.uid,
        controller=True,
        block_owner_deletion=True,
    )


def owning_pod(claim: ResourceClaim) -> OwnerReference | None:
    """The controlling pod of a generated claim (apiVersion v1, kind Pod), if any."""
    ref = controller_ref(claim.metadata)
    if ref is not None and ref.api_version == "v1" and ref.kind == "Pod":
        return ref
    return None


def is_pod_terminal(pod: Pod) -> bool:
    return pod.status.phase in ("Succeeded", "Failed")


def is_pod_done(pod: Pod) -> bool:
    """Certain never to run (again): terminal phase, or deleted before it was scheduled."""
    return is_pod_terminal(pod) or (pod.metadata.deletion_timestamp is not None and not pod.spec.node_name)
