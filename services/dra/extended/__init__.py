"""Extended resources backed by DRA (KEP-5004): pure logic for the scheduler plugin.

Public API::

    from services.dra.extended import ExtendedResourceIndex, decide_node, ...

    index = ExtendedResourceIndex()           # long-lived; fed DeviceClass events
    index.apply(device_class); index.delete(name)
    NodeResourcesFit(dra_backed=index.is_dra_backed)

    # PreFilter
    if wants_dra(pod, index):
        claim = find_extended_resource_claim(pod, claims) or new_in_memory_claim(pod)
    # Filter (per node)
    d = decide_node(pod, claim, node.status.allocatable, index)
    # d.status: "skip" | "dra" (allocate d.claim with the user's claims) |
    #           "unschedulable" (d.reason) | "error" (d.reason; over the 32-device limit)
    # PreBind / Unreserve / PostFilter: see services.scheduler.sagas.extended_steps
    created = persisted_claim(d.claim, taken_names)     # deterministic generated name
    pod = pod_with_claim_status(pod, created.metadata.name, d.mappings)

See docs/extended-resources.md.
"""

from services.dra.extended.claim import (
    CLAIM_LIMIT,
    MSG_CANNOT_FIT,
    MSG_STALE_CLAIM,
    NodeDecision,
    build_requests,
    claim_for_create,
    claim_status,
    decide_node,
    find_extended_resource_claim,
    is_extended_resource_claim,
    is_in_memory,
    new_in_memory_claim,
    node_resources,
    wants_dra,
)
from services.dra.extended.demand import container_requests, pod_requests
from services.dra.extended.mapping import ExtendedResourceIndex
from services.dra.extended.names import (
    DEVICE_CLASS_PREFIX,
    EXTENDED_RESOURCE_CLAIM_ANNOTATION,
    IN_MEMORY_CLAIM_NAME,
    implicit_name,
    is_dra_extended_resource_name,
    is_extended_resource_name,
)

__all__ = [
    "CLAIM_LIMIT",
    "DEVICE_CLASS_PREFIX",
    "EXTENDED_RESOURCE_CLAIM_ANNOTATION",
    "IN_MEMORY_CLAIM_NAME",
    "MSG_CANNOT_FIT",
    "MSG_STALE_CLAIM",
    "ExtendedResourceIndex",
    "NodeDecision",
    "build_requests",
    "claim_for_create",
    "claim_status",
    "container_requests",
    "decide_node",
    "find_extended_resource_claim",
    "implicit_name",
    "is_dra_extended_resource_name",
    "is_extended_resource_claim",
    "is_extended_resource_name",
    "is_in_memory",
    "new_in_memory_claim",
    "node_resources",
    "pod_requests",
    "wants_dra",
]
