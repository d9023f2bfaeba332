"""Which ResourceClaims a pod uses, resolved the way kube-scheduler's DRA plugin does.

``pod.spec.resourceClaims`` entries name a claim directly or a template; for a template the
claim's name is in ``pod.status.resourceClaimStatuses`` (written by the claim controller; a
null name means "no claim needed", skipped). A template claim must be controlled by the pod.
Any problem is a one-line reason, the same text PreEnqueue and PreFilter report.
"""

from __future__ import annotations

from events.api.core_v1 import Pod
from events.api.resource_v1 import ResourceClaim
from services.scheduler.framework.cluster import ClusterState

__all__ = [
    "FINALIZER",
    "RESERVED_FOR_MAX",
    "ClaimProblem",
    "is_reserved_for",
    "owned_by",
    "resolve_claims",
]

FINALIZER = "resource.kubernetes.io/delete-protection"
RESERVED_FOR_MAX = 256  # ResourceClaimReservedForMaxSize


class ClaimProblem(Exception):
    """A pod's claims are not ready; ``str()`` is the reason."""


def owned_by(claim: ResourceClaim, pod: Pod) -> bool:
    """The pod is the claim's controller (upstream ``metav1.IsControlledBy``)."""
    return any(ref.controller and ref.uid == pod.metadata.uid for ref in claim.metadata.owner_references)


def is_reserved_for(claim: ResourceClaim, pod: Pod) -> bool:
    uid = pod.metadata.uid
    return any(ref.uid == uid and ref.resource == "pods" for ref in claim.status.reserved_for)


def resolve_claims(pod: Pod, cluster: ClusterState) -> list[ResourceClaim]:
    """The pod's claims in ``spec.resourceClaims`` order; raises ClaimProblem."""
    meta = pod.metadata
    namespace = meta.namespace
    claims: list[ResourceClaim] = []
    for entry in pod.spec.resource_claims:
        must_own = False
        if entry.resource_claim_name:
            name: str | None = entry.resource_claim_name
        elif entry.resource_claim_template_name:
            for status in pod.status.resource_claim_statuses:
                if status.name == entry.name:
                    name = status.resource_claim_name
                    must_own = True
                    break
            else:
                raise ClaimProblem(f'pod "{namespace}/{meta.name}": ResourceClaim not created yet')
            if not name:
                continue
        else:
            raise ClaimProblem(
                f'pod "{namespace}/{meta.name}", spec.resourceClaim {entry.name}: '
                "none of the supported fields are set"
            )
        assert name is not None
        claim = cluster.claim(namespace, name)
        if claim is None:
            raise ClaimProblem(f'could not find ResourceClaim "{namespace}/{name}"')
        if claim.metadata.deletion_timestamp:
            raise ClaimProblem(f'resourceclaim "{name}" is being deleted')
        if must_own and not owned_by(claim, pod):
            raise ClaimProblem(
                f"ResourceClaim {namespace}/{name} was not created for pod {namespace}/{meta.name} "
                "(pod is not owner)"
            )
        claims.append(claim)
    return claims
