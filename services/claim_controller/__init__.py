"""The resource claim controller: claims from templates, reservation cleanup, deallocation.

Pure deciders (``sync_pod``, ``sync_claim``) returning actions as data; the service shell
(``service``, ``python -m services.claim_controller``) runs them over the log-fed cache of
``runtime`` (shared by every controller shell) and appends the resulting events.
"""

from services.claim_controller.controller import (
    find_pod_resource_claim,
    release_reservations,
    sync_claim,
    sync_pod,
)
from services.dra.claimactions import (
    AddReservedFor,
    ClaimAction,
    CreateClaim,
    Deallocate,
    DeleteClaim,
    RecordEvent,
    RecordPodClaimStatus,
    RemoveFinalizer,
    RemoveReservedFor,
    apply_to_claim,
    apply_to_pod,
)
from services.dra.resourceclaim import generate_claim_name_prefix
from services.runtime.naming import SeededSuffixes, SuffixSource, generate_name, hash_suffix

__all__ = [
    "AddReservedFor",
    "ClaimAction",
    "CreateClaim",
    "Deallocate",
    "DeleteClaim",
    "RecordEvent",
    "RecordPodClaimStatus",
    "RemoveFinalizer",
    "RemoveReservedFor",
    "SeededSuffixes",
    "SuffixSource",
    "apply_to_claim",
    "apply_to_pod",
    "find_pod_resource_claim",
    "generate_claim_name_prefix",
    "generate_name",
    "hash_suffix",
    "release_reservations",
    "sync_claim",
    "sync_pod",
]
