"""The special extended-resource claim: per-node split, requests, mappings, pod status.

Mirrors kube-scheduler's ``dynamicresources`` plugin (``extendeddynamicresources.go``):

* PreFilter: ``wants_dra`` (any non-zero requested extended resource some class maps?), then
  ``find_extended_resource_claim`` (a claim from an earlier cycle) or ``new_in_memory_claim``.
* Filter, per node: ``decide_node`` splits the demand — resources the node's allocatable
  advertises are device-plugin resources, left to NodeResourcesFit; mapped ones the node lacks
  (or advertises as 0) come from DRA through the node-specific claim; neither → does not fit.
* Reserve/PreBind: ``claim_for_create`` (what PreBind appends) and ``claim_status``
  (``pod.status.extendedResourceClaimStatus``).

Pure: no clock, no randomness (the in-memory claim's temporary uid derives from the pod's).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import msgspec

from events.api.core_v1 import (
    ContainerExtendedResourceRequest,
    Node,
    Pod,
    PodExtendedResourceClaimStatus,
)
from events.api.meta import ObjectMeta, OwnerReference
from events.api.resource_v1 import (
    DeviceClaim,
    DeviceRequest,
    ExactDeviceRequest,
    ResourceClaim,
    ResourceClaimSpec,
    ResourceClaimStatus,
)
from services.dra.extended.demand import all_containers, container_requests, is_sidecar, pod_requests, whole
from services.dra.extended.mapping import ExtendedResourceIndex
from services.dra.extended.names import (
    EXTENDED_RESOURCE_CLAIM_ANNOTATION,
    IN_MEMORY_CLAIM_NAME,
    is_dra_extended_resource_name,
)

__all__ = [
    "CLAIM_LIMIT",
    "MSG_CANNOT_FIT",
    "MSG_STALE_CLAIM",
    "NodeDecision",
    "build_requests",
    "claim_for_create",
    "claim_status",
    "decide_node",
    "find_extended_resource_claim",
    "is_extended_resource_claim",
    "is_in_memory",
    "new_in_memory_claim",
    "node_resources",
    "wants_dra",
]

# resource/v1 AllocationResultsMaxSize: one claim holds at most this many devices.
CLAIM_LIMIT = 32
MSG_STALE_CLAIM = "cannot schedule extended resource claim"
MSG_CANNOT_FIT = "cannot fit resource"

Mappings = tuple[ContainerExtendedResourceRequest, ...]


class NodeDecision(msgspec.Struct, frozen=True, kw_only=True):
    """What the extended resources of one pod mean on one node.

    ``status``: ``"skip"`` (nothing for DRA here: all device-plugin or nothing requested),
    ``"dra"`` (``claim`` + ``mappings`` must be allocated on this node), ``"unschedulable"``
    (``reason`` says why, like upstream's status message; ``resource`` names the culprit) or
    ``"error"`` (the claim is invalid everywhere — over the 32-device limit; upstream's
    allocator error aborts the attempt, the pod stays Pending and is retried with backoff).
    ``device_plugin`` lists the resources left to NodeResourcesFit on this node.
    """

    status: str
    reason: str = ""
    resource: str = ""
    claim: ResourceClaim | None = None
    mappings: Mappings = ()
    dra: dict[str, int] = {}
    device_plugin: tuple[str, ...] = ()


# -- PreFilter ------------------------------------------------------------------------------


def wants_dra(pod: Pod, index: ExtendedResourceIndex) -> bool:
    """Upstream ``hasDeviceClassMappedExtendedResource`` over the pod's PodRequests."""
    return any(q > 0 and index.is_dra_backed(n) for n, q in pod_requests(pod).items())


def is_extended_resource_claim(claim: ResourceClaim) -> bool:
    return claim.metadata.annotations.get(EXTENDED_RESOURCE_CLAIM_ANNOTATION) == "true"


def find_extended_resource_claim(pod: Pod, claims: Iterable[ResourceClaim]) -> ResourceClaim | None:
    """The pod's special claim from an earlier cycle: annotated and controlled by this pod."""
    for c in claims:
        if not is_extended_resource_claim(c) or c.metadata.namespace != pod.metadata.namespace:
            continue
        for ref in c.metadata.owner_references:
            if ref.name == pod.metadata.name and ref.uid == pod.metadata.uid and ref.controller:
                return c
    return None


def new_in_memory_claim(pod: Pod) -> ResourceClaim:
    """The claim PreFilter starts from: no requests yet, placeholder name, generateName set."""
    meta = pod.metadata
    return ResourceClaim(
        metadata=ObjectMeta(
            name=IN_MEMORY_CLAIM_NAME,
            namespace=meta.namespace,
            uid=f"{meta.uid}/extended-resources",
            generate_name=f"{meta.name}-extended-resources-",
            annotations={EXTENDED_RESOURCE_CLAIM_ANNOTATION: "true"},
            owner_references=(
                OwnerReference(
                    api_version="v1",
                    kind="Pod",
                    name=meta.name,
                    uid=meta.uid,
                    controller=True,
                    block_owner_deletion=True,
                ),
            ),
        ),
    )


def is_in_memory(claim: ResourceClaim) -> bool:
    """Not yet persisted: Unreserve/PostFilter have nothing to delete for it."""
    return claim.metadata.name == IN_MEMORY_CLAIM_NAME


# -- Filter ---------------------------------------------------------------------------------


def node_resources(node: Node) -> dict[str, str | int | float]:
    """What the node offers: ``status.allocatable``, or ``capacity`` when allocatable is unset.

    The kubelet fills allocatable from capacity; hand-written Node manifests (the KEP's) only
    carry capacity, and would otherwise offer nothing.
    """
    return dict(node.status.allocatable or node.status.capacity)


def _allocatable(values: Mapping[str, str | int | float], name: str) -> int | None:
    if name not in values:
        return None
    n = whole(values[name])
    return n if n is not None else 0


def decide_node(
    pod: Pod,
    claim: ResourceClaim | None,
    allocatable: Mapping[str, str | int | float],
    index: ExtendedResourceIndex,
) -> NodeDecision:
    """Upstream ``filterExtendedResources`` for one node (``allocatable`` = node status).

    ``claim`` is what PreFilter found or created (None: the pod wants no DRA extended
    resources). The result's claim is a node-specific copy with the requests filled in.
    """
    if claim is None:
        return NodeDecision(status="skip")
    if claim.spec.devices.requests:
        # Left over from an earlier cycle: PostFilter deletes it and the pod is retried.
        return NodeDecision(status="unschedulable", reason=MSG_STALE_CLAIM)
    dra: dict[str, int] = {}
    plugin: list[str] = []
    for name, amount in pod_requests(pod).items():
        if amount == 0:
            continue
        have = _allocatable(allocatable, name)
        if index.is_dra_backed(name) and not have:
            dra[name] = amount
        elif have is None:
            return NodeDecision(status="unschedulable", reason=MSG_CANNOT_FIT, resource=name)
        else:
            plugin.append(name)
    if not dra or claim.status.allocation is not None:
        return NodeDecision(status="skip", device_plugin=tuple(plugin))
    requests, mappings = build_requests(pod, dra, index)
    total = sum(r.exactly.count for r in requests if r.exactly is not None)
    if total > CLAIM_LIMIT:
        meta = pod.metadata
        return NodeDecision(
            status="error",
            reason=(
                f"pod {meta.namespace}/{meta.name}: extended resources backed by DRA: "
                f"number of requested devices {total} exceeds the claim limit of {CLAIM_LIMIT}"
            ),
            dra=dra,
            device_plugin=tuple(plugin),
        )
    node_claim = msgspec.structs.replace(
        claim, spec=ResourceClaimSpec(devices=DeviceClaim(requests=requests))
    )
    return NodeDecision(
        status="dra", claim=node_claim, mappings=mappings, dra=dra, device_plugin=tuple(plugin)
    )


def _request_for(
    index_in_pod: int,
    container_name: str,
    requests: Mapping[str, str | int | float],
    resource: str,
    class_name: str,
    reusable: Sequence[DeviceRequest | None],
) -> tuple[DeviceRequest | None, list[ContainerExtendedResourceRequest]]:
    """One container's request for ``resource``; short-lived init containers first reuse the
    devices of long-lived containers that run after them (``reusable``) and ask for the rest."""
    if resource not in requests:
        return None, []
    wanted = whole(requests[resource])
    if not wanted:
        return None, []
    mappings: list[ContainerExtendedResourceRequest] = []
    covered = 0
    for r in reusable:
        if r is None or r.exactly is None:
            continue
        covered += r.exactly.count
        mappings.append(
            ContainerExtendedResourceRequest(
                container_name=container_name, resource_name=resource, request_name=r.name
            )
        )
        if covered >= wanted:
            return None, mappings
    position = sorted(requests).index(resource)
    name = f"container-{index_in_pod}-request-{position}"
    request = DeviceRequest(
        name=name,
        exactly=ExactDeviceRequest(
            device_class_name=class_name, allocation_mode="ExactCount", count=wanted - covered
        ),
    )
    mappings.append(
        ContainerExtendedResourceRequest(
            container_name=container_name, resource_name=resource, request_name=name
        )
    )
    return request, mappings


def build_requests(
    pod: Pod, dra: Mapping[str, int], index: ExtendedResourceIndex
) -> tuple[tuple[DeviceRequest, ...], Mappings]:
    """Upstream ``createRequestsAndMappings``: requests sorted by name, mappings per resource.

    Long-lived containers (regular ones and sidecar init containers) each get their own request
    ``container-<i>-request-<j>``. A plain init container finishes before the long-lived ones
    after it start, so it reuses their devices and only asks for what they do not cover; of
    all plain init containers' own requests only the largest is kept and the others' mappings
    point at it — so the claim holds exactly the pod's PodRequests for each resource.
    """
    containers = all_containers(pod)
    n_init = len(pod.spec.init_containers)
    reqs_of = [container_requests(c) for c in containers]
    long_lived = [i for i, c in enumerate(containers) if i >= n_init or is_sidecar(c)]
    short_lived = [i for i in range(n_init) if not is_sidecar(containers[i])]
    out: list[DeviceRequest] = []
    mappings: list[ContainerExtendedResourceRequest] = []
    for resource in sorted(dra):
        if not is_dra_extended_resource_name(resource):
            continue
        class_name = index.class_for(resource)
        if class_name is None:
            continue
        long_reqs: list[DeviceRequest | None] = [None] * len(containers)
        long_maps: list[ContainerExtendedResourceRequest] = []
        for i in long_lived:
            r, m = _request_for(i, containers[i].name, reqs_of[i], resource, class_name, ())
            long_reqs[i] = r
            long_maps.extend(m)
        biggest: DeviceRequest | None = None
        short_names: set[str] = set()
        short_maps: list[ContainerExtendedResourceRequest] = []
        for i in short_lived:
            r, m = _request_for(i, containers[i].name, reqs_of[i], resource, class_name, long_reqs[i:])
            if r is not None and r.exactly is not None:
                short_names.add(r.name)
                if biggest is None or (biggest.exactly and biggest.exactly.count < r.exactly.count):
                    biggest = r
            short_maps.extend(m)
        if biggest is not None and len(short_names) > 1:
            short_names.discard(biggest.name)
            short_maps = [
                msgspec.structs.replace(m, request_name=biggest.name) if m.request_name in short_names else m
                for m in short_maps
            ]
        if biggest is not None:
            out.append(biggest)
        out.extend(r for r in long_reqs if r is not None)
        mappings.extend(long_maps)
        mappings.extend(short_maps)
    out.sort(key=lambda r: r.name)
    return tuple(out), tuple(mappings)


# -- PreBind --------------------------------------------------------------------------------


def claim_for_create(node_claim: ResourceClaim) -> ResourceClaim:
    """What PreBind creates: name/uid/status cleared so the API server generates them."""
    meta = msgspec.structs.replace(node_claim.metadata, name="", uid="")
    return msgspec.structs.replace(node_claim, metadata=meta, status=ResourceClaimStatus())


def claim_status(claim_name: str, mappings: Mappings) -> PodExtendedResourceClaimStatus:
    """``pod.status.extendedResourceClaimStatus`` once the claim has its generated name."""
    if not mappings:
        raise ValueError("extendedResourceClaimStatus needs at least one request mapping")
    return PodExtendedResourceClaimStatus(resource_claim_name=claim_name, request_mappings=mappings)
