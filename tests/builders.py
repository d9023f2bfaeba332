"""Builder-style constructors for the API objects controller and kubelet tests need.

Short to call, explicit about what matters in a test: ``make_pod("p", template_claims={"gpu":
"single-gpu"}, node="n1")``. Uids default to ``uid-<name>`` so tests can refer to them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from events.api.core_v1 import (
    Container,
    Pod,
    PodResourceClaim,
    PodResourceClaimStatus,
    PodSpec,
    PodStatus,
    ResourceClaimRef,
    ResourceRequirements,
)
from events.api.meta import ObjectMeta, OwnerReference
from events.api.resource_v1 import (
    AllocationResult,
    DeviceAllocationConfiguration,
    DeviceAllocationResult,
    DeviceClaim,
    DeviceRequest,
    DeviceRequestAllocationResult,
    ExactDeviceRequest,
    ResourceClaim,
    ResourceClaimConsumerReference,
    ResourceClaimSpec,
    ResourceClaimStatus,
    ResourceClaimTemplate,
    ResourceClaimTemplateSpec,
)

DELETED_AT = "2026-01-01T00:00:00Z"


def make_requests(*names: str, device_class: str = "gpu.example.com") -> ResourceClaimSpec:
    requests = tuple(
        DeviceRequest(name=n, exactly=ExactDeviceRequest(device_class_name=device_class)) for n in names
    )
    return ResourceClaimSpec(devices=DeviceClaim(requests=requests))


def make_container(name: str = "ctr0", claims: Iterable[str | tuple[str, str]] = ()) -> Container:
    """``claims``: pod claim names, or ``(name, request)`` pairs."""
    refs = tuple(
        ResourceClaimRef(name=c) if isinstance(c, str) else ResourceClaimRef(name=c[0], request=c[1])
        for c in claims
    )
    return Container(name=name, image="ubuntu:22.04", resources=ResourceRequirements(claims=refs))


def make_pod(
    name: str = "pod",
    *,
    namespace: str = "default",
    uid: str | None = None,
    claims: Mapping[str, str] | None = None,
    template_claims: Mapping[str, str] | None = None,
    statuses: Mapping[str, str | None] | None = None,
    containers: Sequence[Container] | None = None,
    node: str = "",
    phase: str = "Pending",
    deleting: bool = False,
    labels: Mapping[str, str] | None = None,
    owner: OwnerReference | None = None,
    start_time: str | None = None,
) -> Pod:
    """``claims``: pod claim name -> ResourceClaim name; ``template_claims``: -> template name;
    ``statuses``: pod claim name -> generated claim name recorded in ``status.resourceClaimStatuses``.
    """
    pod_claims = [PodResourceClaim(name=k, resource_claim_name=v) for k, v in (claims or {}).items()]
    pod_claims += [
        PodResourceClaim(name=k, resource_claim_template_name=v) for k, v in (template_claims or {}).items()
    ]
    if containers is None:
        containers = [make_container(claims=[c.name for c in pod_claims])]
    return Pod(
        metadata=ObjectMeta(
            name=name,
            namespace=namespace,
            uid=uid if uid is not None else f"uid-{name}",
            labels=dict(labels or {}),
            owner_references=(owner,) if owner else (),
            deletion_timestamp=DELETED_AT if deleting else None,
        ),
        spec=PodSpec(containers=tuple(containers), resource_claims=tuple(pod_claims), node_name=node),
        status=PodStatus(
            phase=phase,
            start_time=start_time,
            resource_claim_statuses=tuple(
                PodResourceClaimStatus(name=k, resource_claim_name=v) for k, v in (statuses or {}).items()
            ),
        ),
    )


def make_template(
    name: str = "single-gpu",
    *,
    namespace: str = "default",
    requests: Sequence[str] = ("gpu",),
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> ResourceClaimTemplate:
    return ResourceClaimTemplate(
        metadata=ObjectMeta(name=name, namespace=namespace, uid=f"uid-{name}"),
        spec=ResourceClaimTemplateSpec(
            metadata=ObjectMeta(labels=dict(labels or {}), annotations=dict(annotations or {})),
            spec=make_requests(*requests),
        ),
    )


def make_allocation(
    *results: tuple[str, str] | tuple[str, str, str],
    driver: str = "gpu.example.com",
    pool: str = "node-1",
    config: Sequence[DeviceAllocationConfiguration] = (),
) -> AllocationResult:
    """``results``: ``(request, device)`` or ``(request, device, driver)`` triples."""
    out = []
    for r in results:
        out.append(
            DeviceRequestAllocationResult(
                request=r[0], device=r[1], driver=r[2] if len(r) == 3 else driver, pool=pool
            )
        )
    return AllocationResult(devices=DeviceAllocationResult(results=tuple(out), config=tuple(config)))


def pod_ref(pod_name: str, uid: str | None = None) -> ResourceClaimConsumerReference:
    return ResourceClaimConsumerReference(resource="pods", name=pod_name, uid=uid or f"uid-{pod_name}")


def make_claim(
    name: str = "claim",
    *,
    namespace: str = "default",
    uid: str | None = None,
    requests: Sequence[str] = ("gpu",),
    allocation: AllocationResult | None = None,
    reserved_for: Iterable[str | ResourceClaimConsumerReference] = (),
    finalizers: Sequence[str] = (),
    owner_pod: Pod | None = None,
    annotations: Mapping[str, str] | None = None,
    deleting: bool = False,
) -> ResourceClaim:
    """``reserved_for``: pod names (uid ``uid-<name>``) or full consumer references."""
    refs = tuple(pod_ref(r) if isinstance(r, str) else r for r in reserved_for)
    owners: tuple[OwnerReference, ...] = ()
    if owner_pod is not None:
        owners = (
            OwnerReference(
                api_version="v1",
                kind="Pod",
                name=owner_pod.metadata.name,
                uid=owner_pod.metadata.uid,
                controller=True,
                block_owner_deletion=True,
            ),
        )
    return ResourceClaim(
        metadata=ObjectMeta(
            name=name,
            namespace=namespace,
            uid=uid if uid is not None else f"uid-{name}",
            finalizers=tuple(finalizers),
            owner_references=owners,
            annotations=dict(annotations or {}),
            deletion_timestamp=DELETED_AT if deleting else None,
        ),
        spec=make_requests(*requests),
        status=ResourceClaimStatus(allocation=allocation, reserved_for=refs),
    )
