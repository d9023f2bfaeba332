"""resource.k8s.io objects: devices, slices, classes, requests, claims, templates, allocations."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import msgspec

from draflow.events.api.core_v1 import Pod
from draflow.events.api.meta import NodeSelector, ObjectMeta
from draflow.events.api.resource_v1 import (
    AllocationResult,
    CELDeviceSelector,
    Device,
    DeviceAllocationConfiguration,
    DeviceAllocationResult,
    DeviceAttribute,
    DeviceClaim,
    DeviceClass,
    DeviceClassSpec,
    DeviceConstraint,
    DeviceRequest,
    DeviceRequestAllocationResult,
    DeviceSelector,
    DeviceSubRequest,
    ExactDeviceRequest,
    ResourceClaim,
    ResourceClaimConsumerReference,
    ResourceClaimSpec,
    ResourceClaimStatus,
    ResourceClaimTemplate,
    ResourceClaimTemplateSpec,
    ResourcePool,
    ResourceSlice,
    ResourceSliceSpec,
)
from draflow.services.dra.resourceclaim import pod_owner_reference
from draflow.services.dra.structured.nodeselector import node_name_selector
from tests.builders.core import DELETED_AT, make_pod

DRIVER = "gpu.example.com"
DEVICE_CLASS = "gpu"


def make_device(name: str, **attrs: Any) -> Device:
    """Attributes by Python type: bool, int, anything else as a string."""
    attributes = {}
    for key, value in attrs.items():
        if isinstance(value, bool):
            attributes[key] = DeviceAttribute(bool_=value)
        elif isinstance(value, int):
            attributes[key] = DeviceAttribute(int_=value)
        else:
            attributes[key] = DeviceAttribute(string=str(value))
    return Device(name=name, attributes=attributes)


def make_slice(
    node: str | None,
    devices: int | Sequence[Device] = 10,
    *,
    driver: str = DRIVER,
    pool: str | None = None,
    name: str | None = None,
    all_nodes: bool = False,
    node_selector: NodeSelector | None = None,
    generation: int = 1,
    count: int = 1,
    **attrs: Any,
) -> ResourceSlice:
    """The slice of ``node`` (pool: the node's name; None and no selector: ``shared``); ``devices``:
    a number of ``dev-<i>`` devices (``index=i`` and ``attrs``) or the devices themselves."""
    if isinstance(devices, int):
        devices = [make_device(f"dev-{i}", index=i, **attrs) for i in range(devices)]
    pool_name = pool or node or "shared"
    return ResourceSlice(
        metadata=ObjectMeta(name=name or f"{pool_name}-{driver}"),
        spec=ResourceSliceSpec(
            driver=driver,
            pool=ResourcePool(name=pool_name, generation=generation, resource_slice_count=count),
            node_name=node if not (all_nodes or node_selector) else None,
            all_nodes=True if all_nodes else None,
            node_selector=node_selector,
            devices=tuple(devices),
        ),
    )


def make_class(
    name: str = DEVICE_CLASS,
    *,
    driver: str = DRIVER,
    selectors: Sequence[str] | None = None,
    extended_resource_name: str | None = None,
    created: str | None = None,
) -> DeviceClass:
    """``selectors``: CEL expressions (None: the driver's devices; empty: every device)."""
    exprs = [f'device.driver == "{driver}"'] if selectors is None else list(selectors)
    return DeviceClass(
        metadata=ObjectMeta(name=name, uid=f"uid-{name}", creation_timestamp=created),
        spec=DeviceClassSpec(
            selectors=tuple(DeviceSelector(cel=CELDeviceSelector(expression=e)) for e in exprs),
            extended_resource_name=extended_resource_name,
        ),
    )


def exact(
    name: str = "gpu",
    *,
    count: int = 1,
    device_class: str = DEVICE_CLASS,
    mode: str = "ExactCount",
    selectors: Iterable[str] = (),
    admin: bool = False,
) -> DeviceRequest:
    """A request for ``count`` devices of a class (``mode="All"``: every matching device)."""
    sels = tuple(DeviceSelector(cel=CELDeviceSelector(expression=e)) for e in selectors)
    return DeviceRequest(
        name=name,
        exactly=ExactDeviceRequest(
            device_class_name=device_class,
            allocation_mode=mode,
            count=count if mode == "ExactCount" else 0,
            selectors=sels,
            admin_access=True if admin else None,
        ),
    )


def first_available(name: str, *subs: tuple[str, str, int | None]) -> DeviceRequest:
    """Subrequests as ``(name, class, count)`` in preference order (count None: ``All``)."""
    return DeviceRequest(
        name=name,
        first_available=tuple(
            DeviceSubRequest(
                name=n,
                device_class_name=c,
                allocation_mode="ExactCount" if k is not None else "All",
                count=k or 0,
            )
            for n, c, k in subs
        ),
    )


def _requests(requests: Sequence[DeviceRequest | str]) -> tuple[DeviceRequest, ...]:
    return tuple(exact(r) if isinstance(r, str) else r for r in requests) or (exact(),)


def pod_ref(pod_name: str, uid: str | None = None) -> ResourceClaimConsumerReference:
    return ResourceClaimConsumerReference(resource="pods", name=pod_name, uid=uid or f"uid-{pod_name}")


def _consumer(c: str | Pod | ResourceClaimConsumerReference) -> ResourceClaimConsumerReference:
    if isinstance(c, str):
        return pod_ref(c)
    if isinstance(c, Pod):
        return pod_ref(c.metadata.name, c.metadata.uid)
    return c


def make_claim(
    name: str = "claim",
    *requests: DeviceRequest | str,
    namespace: str = "default",
    uid: str | None = None,
    constraints: Sequence[DeviceConstraint] = (),
    allocation: AllocationResult | None = None,
    reserved_for: Iterable[str | Pod | ResourceClaimConsumerReference] = (),
    owner: Pod | None = None,
    finalizers: Sequence[str] = (),
    annotations: Mapping[str, str] | None = None,
    deleting: bool = False,
    resource_version: str = "",
) -> ResourceClaim:
    """``requests``: DeviceRequests, or names of one-device requests of the ``gpu`` class (none:
    one request ``gpu``); ``reserved_for``: pods, pod names (uid ``uid-<name>``) or references;
    ``owner``: the pod that owns the claim (a generated claim)."""
    return ResourceClaim(
        metadata=ObjectMeta(
            name=name,
            namespace=namespace,
            uid=uid if uid is not None else f"uid-{name}",
            finalizers=tuple(finalizers),
            owner_references=(pod_owner_reference(owner),) if owner is not None else (),
            annotations=dict(annotations or {}),
            deletion_timestamp=DELETED_AT if deleting else None,
            resource_version=resource_version,
        ),
        spec=ResourceClaimSpec(
            devices=DeviceClaim(requests=_requests(requests), constraints=tuple(constraints))
        ),
        status=ResourceClaimStatus(
            allocation=allocation, reserved_for=tuple(_consumer(c) for c in reserved_for)
        ),
    )


def make_template(
    name: str = "gpu-template",
    *requests: DeviceRequest | str,
    namespace: str = "default",
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> ResourceClaimTemplate:
    """``requests`` as for :func:`make_claim`; ``labels``/``annotations``: the claims' metadata."""
    return ResourceClaimTemplate(
        metadata=ObjectMeta(name=name, namespace=namespace, uid=f"uid-{name}"),
        spec=ResourceClaimTemplateSpec(
            metadata=ObjectMeta(labels=dict(labels or {}), annotations=dict(annotations or {})),
            spec=ResourceClaimSpec(devices=DeviceClaim(requests=_requests(requests))),
        ),
    )


def make_allocation(
    *results: str | tuple[str, str] | tuple[str, str, str],
    node: str | None = None,
    request: str = "gpu",
    driver: str = DRIVER,
    pool: str | None = None,
    config: Sequence[DeviceAllocationConfiguration] = (),
) -> AllocationResult:
    """``results``: device names (for ``request``), ``(request, device)`` or ``(request, device,
    driver)``; ``node``: the allocation is for that node (its node selector; pool: the node's name,
    else ``node-1``)."""
    out = []
    for r in results:
        if isinstance(r, str):
            req, device, drv = request, r, driver
        else:
            req, device, drv = r[0], r[1], r[2] if len(r) == 3 else driver
        out.append(
            DeviceRequestAllocationResult(
                request=req, device=device, driver=drv, pool=pool or node or "node-1"
            )
        )
    return AllocationResult(
        devices=DeviceAllocationResult(results=tuple(out), config=tuple(config)),
        node_selector=node_name_selector(node) if node is not None else None,
    )


def with_status(
    claim: ResourceClaim,
    allocation: AllocationResult | None,
    reserved: Iterable[str | Pod | ResourceClaimConsumerReference] = (),
) -> ResourceClaim:
    """``claim`` with this status (allocation and consumers)."""
    status = ResourceClaimStatus(allocation=allocation, reserved_for=tuple(_consumer(c) for c in reserved))
    return msgspec.structs.replace(claim, status=status)


def pod_with_template_claim(
    name: str, *requests: DeviceRequest | str, namespace: str = "default", **pod_kw: Any
) -> tuple[Pod, ResourceClaim]:
    """A pod with one template claim ``gpu`` and its generated claim ``<name>-gpu``, owned by the pod
    and recorded in its ``resourceClaimStatuses``."""
    claim_name = f"{name}-gpu"
    pod = make_pod(
        name,
        namespace=namespace,
        template_claims={"gpu": "gpu-template"},
        statuses={"gpu": claim_name},
        **pod_kw,
    )
    return pod, make_claim(claim_name, *requests, namespace=namespace, owner=pod)
