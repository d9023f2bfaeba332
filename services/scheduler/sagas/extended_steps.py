"""Pure helpers for the PodScheduling saga's special-claim steps and compensations.

Same contract as ``draflow.services.scheduler.plugins.dynamicresources.prebind``: each helper takes the
object as currently stored and returns what to append, or the *same object* when nothing is left
to do, so a retried step appends nothing.

Steps (upstream ``bindClaim`` / ``patchPodExtendedResourceClaimStatus``):
  1. ``persisted_claim``: the claim to create, with a deterministic generated name (a retried
     create hits the same name instead of making a second claim);
  2. the ordinary claim PreBind (finalizer, allocation, reservedFor) on the created claim;
  3. ``pod_with_claim_status``: ``pod.status.extendedResourceClaimStatus``.
Compensations (Unreserve, and PostFilter for a stale claim; upstream ``deleteClaim``):
  ``pod_without_claim_status``, ``claim_before_delete`` (finalizer removed), then delete —
  only when ``must_delete(claim)`` (an in-memory claim was never written).
"""

from __future__ import annotations

from collections.abc import Container

import msgspec

from draflow.events.api.core_v1 import ContainerExtendedResourceRequest, Pod
from draflow.events.api.resource_v1 import ResourceClaim
from draflow.services.dra.extended.claim import claim_for_create, claim_status, is_in_memory
from draflow.services.dra.resourceclaim import DELETE_PROTECTION_FINALIZER
from draflow.services.runtime.naming import unique_generated_name

__all__ = [
    "claim_before_delete",
    "must_delete",
    "persisted_claim",
    "pod_with_claim_status",
    "pod_without_claim_status",
]


def persisted_claim(node_claim: ResourceClaim, taken: Container[str]) -> ResourceClaim:
    """The claim PreBind creates: generated name (not in ``taken``), no uid, no status.

    The suffix is a hash of the owning pod's uid, so replaying the decision gives the same name.
    """
    claim = claim_for_create(node_claim)
    meta = claim.metadata
    owner = next((r.uid for r in meta.owner_references if r.controller), meta.generate_name)
    name = unique_generated_name(meta.generate_name, f"{owner}/extended-resources", taken)
    return msgspec.structs.replace(claim, metadata=msgspec.structs.replace(meta, name=name))


def pod_with_claim_status(
    current: Pod, claim_name: str, mappings: tuple[ContainerExtendedResourceRequest, ...]
) -> Pod:
    """The pod with ``extendedResourceClaimStatus`` naming the created claim (overwrites, as upstream)."""
    status = claim_status(claim_name, mappings)
    if current.status.extended_resource_claim_status == status:
        return current
    new_status = msgspec.structs.replace(current.status, extended_resource_claim_status=status)
    return msgspec.structs.replace(current, status=new_status)


def pod_without_claim_status(current: Pod, claim_name: str) -> Pod:
    """Compensation: the status entry dropped if it still names ``claim_name``."""
    status = current.status.extended_resource_claim_status
    if status is None or status.resource_claim_name != claim_name:
        return current
    new_status = msgspec.structs.replace(current.status, extended_resource_claim_status=None)
    return msgspec.structs.replace(current, status=new_status)


def must_delete(claim: ResourceClaim) -> bool:
    """Unreserve/PostFilter delete only claims that were written to the log."""
    return not is_in_memory(claim)


def claim_before_delete(current: ResourceClaim) -> ResourceClaim:
    """The claim without the delete-protection finalizer, so the delete completes at once."""
    finalizers = tuple(f for f in current.metadata.finalizers if f != DELETE_PROTECTION_FINALIZER)
    if len(finalizers) == len(current.metadata.finalizers):
        return current
    return msgspec.structs.replace(
        current, metadata=msgspec.structs.replace(current.metadata, finalizers=finalizers)
    )
