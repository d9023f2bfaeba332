"""Extended resources backed by DRA (KEP 5004): the special claim PreBind creates, as stored."""

from __future__ import annotations

import msgspec

from draflow.events.api.core_v1 import ContainerExtendedResourceRequest, Pod
from draflow.events.api.resource_v1 import ResourceClaim
from draflow.services.dra.extended import (
    ExtendedResourceIndex,
    claim_for_create,
    claim_status,
    decide_node,
    new_in_memory_claim,
)


def special_claim(
    p: Pod, index: ExtendedResourceIndex, name: str, created: str = "2025-01-01T00:00:00Z"
) -> tuple[ResourceClaim, tuple[ContainerExtendedResourceRequest, ...]]:
    """The special claim PreBind would create for ``p`` on a DRA node, as stored."""
    d = decide_node(p, new_in_memory_claim(p), {}, index)
    assert d.claim is not None
    c = claim_for_create(d.claim)
    meta = msgspec.structs.replace(c.metadata, name=name, uid=f"uid-{name}", creation_timestamp=created)
    return msgspec.structs.replace(c, metadata=meta), d.mappings


def with_extended_claim(
    p: Pod, claim_name: str, mappings: tuple[ContainerExtendedResourceRequest, ...]
) -> Pod:
    """The pod after PreBind wrote ``extendedResourceClaimStatus``."""
    status = msgspec.structs.replace(
        p.status, extended_resource_claim_status=claim_status(claim_name, mappings)
    )
    return msgspec.structs.replace(p, status=status)
