"""Builders for quota tests: claims with requests, quotas, special claims."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from events.api.codec import decode_object
from events.api.core_v1 import ContainerExtendedResourceRequest, Pod, ResourceQuota
from events.api.resource_v1 import ResourceClaim
from services.apiserver.admission import admit
from services.dra.extended import (
    ExtendedResourceIndex,
    claim_for_create,
    claim_status,
    decide_node,
    new_in_memory_claim,
)


def claim(name: str, requests: Sequence[Mapping[str, Any]], namespace: str = "default") -> ResourceClaim:
    obj = decode_object(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"devices": {"requests": list(requests)}},
        }
    )
    out = admit(obj)
    assert isinstance(out, ResourceClaim)
    return out


def exact(name: str, cls: str, count: int | None = None, mode: str = "ExactCount") -> dict[str, Any]:
    body: dict[str, Any] = {"deviceClassName": cls, "allocationMode": mode}
    if count is not None:
        body["count"] = count
    return {"name": name, "exactly": body}


def first(name: str, *subs: tuple[str, str, int | None]) -> dict[str, Any]:
    out = []
    for sub, cls, count in subs:
        s: dict[str, Any] = {"name": sub, "deviceClassName": cls}
        if count is None:
            s["allocationMode"] = "All"
        else:
            s["count"] = count
        out.append(s)
    return {"name": name, "firstAvailable": out}


def quota(name: str, hard: Mapping[str, str | int], namespace: str = "default") -> ResourceQuota:
    obj = decode_object(
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"hard": dict(hard)},
        }
    )
    assert isinstance(obj, ResourceQuota)
    return obj


def special_claim(
    p: Pod, index: ExtendedResourceIndex, name: str, created: str = "2025-01-01T00:00:00Z"
) -> tuple[ResourceClaim, tuple[ContainerExtendedResourceRequest, ...]]:
    """The special claim PreBind would create for ``p`` on a DRA node, as stored."""
    d = decide_node(p, new_in_memory_claim(p), {}, index)
    assert d.claim is not None
    c = claim_for_create(d.claim)
    meta = msgspec.structs.replace(c.metadata, name=name, uid=f"uid-{name}", creation_timestamp=created)
    return msgspec.structs.replace(c, metadata=meta), d.mappings


def bound(p: Pod, claim_name: str, mappings: tuple[ContainerExtendedResourceRequest, ...]) -> Pod:
    """The pod after PreBind wrote ``extendedResourceClaimStatus``."""
    status = msgspec.structs.replace(
        p.status, extended_resource_claim_status=claim_status(claim_name, mappings)
    )
    return msgspec.structs.replace(p, status=status)
