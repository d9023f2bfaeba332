"""Convert older resource.k8s.io wire objects to the v1 storage Structs (what ``get`` shows).

Follows upstream's conversion functions (pkg/apis/resource/v1beta1/conversion.go): a v1beta1
request becomes ``firstAvailable`` when it has subrequests and ``exactly`` when any of the flat
request fields is set; both may result, and validation then rejects the request ("exactly one
of"), as upstream does. A v1beta1/v1alpha3 device's ``basic`` fields move up to the device.
"""

from __future__ import annotations

from typing import Any

from draflow.events.api import resource_old as old
from draflow.events.api import resource_v1 as v1
from draflow.events.api.base import ApiStruct


def _slice_spec_fields(spec: Any) -> dict[str, Any]:
    return {
        "driver": spec.driver,
        "pool": spec.pool,
        "node_name": spec.node_name or None,
        "node_selector": spec.node_selector,
        "all_nodes": True if spec.all_nodes else None,
        "per_device_node_selection": spec.per_device_node_selection,
        "shared_counters": spec.shared_counters,
    }


def _device_v1beta1(dev: old.DeviceV1beta1) -> v1.Device:
    b = dev.basic
    if b is None:
        return v1.Device(name=dev.name)
    return v1.Device(
        name=dev.name,
        attributes=b.attributes,
        capacity=b.capacity,
        consumes_counters=b.consumes_counters,
        node_name=b.node_name,
        node_selector=b.node_selector,
        all_nodes=b.all_nodes,
        taints=b.taints,
        binds_to_node=b.binds_to_node,
        binding_conditions=b.binding_conditions,
        binding_failure_conditions=b.binding_failure_conditions,
        allow_multiple_allocations=b.allow_multiple_allocations,
        node_allocatable_resources=b.node_allocatable_resources,
    )


def _device_v1alpha3(dev: old.DeviceV1alpha3) -> v1.Device:
    b = dev.basic
    if b is None:
        return v1.Device(name=dev.name)
    return v1.Device(
        name=dev.name,
        attributes=b.attributes,
        capacity={k: v1.DeviceCapacity(value=q) for k, q in b.capacity.items()},
        consumes_counters=b.consumes_counters,
        node_name=b.node_name,
        node_selector=b.node_selector,
        all_nodes=b.all_nodes,
        taints=b.taints,
    )


def slice_from_v1beta1(obj: ApiStruct) -> ApiStruct:
    assert isinstance(obj, old.ResourceSliceV1beta1)
    s = obj.spec
    spec = v1.ResourceSliceSpec(
        **_slice_spec_fields(s),
        devices=tuple(_device_v1beta1(d) for d in s.devices),
        partition_type_attribute=s.partition_type_attribute,
        skip_node_operations=s.skip_node_operations,
    )
    return v1.ResourceSlice(metadata=obj.metadata, spec=spec)


def slice_from_v1alpha3(obj: ApiStruct) -> ApiStruct:
    assert isinstance(obj, old.ResourceSliceV1alpha3)
    s = obj.spec
    spec = v1.ResourceSliceSpec(
        **_slice_spec_fields(s), devices=tuple(_device_v1alpha3(d) for d in s.devices)
    )
    return v1.ResourceSlice(metadata=obj.metadata, spec=spec)


def _request(req: old.DeviceRequestV1beta1) -> v1.DeviceRequest:
    flat_set = (
        req.device_class_name != ""
        or req.selectors is not None
        or req.allocation_mode != ""
        or req.count != 0
        or req.admin_access is not None
        or req.tolerations is not None
        or req.capacity is not None
    )
    exactly = None
    if flat_set:
        exactly = v1.ExactDeviceRequest(
            device_class_name=req.device_class_name,
            selectors=req.selectors or (),
            allocation_mode=req.allocation_mode,
            count=req.count,
            admin_access=req.admin_access,
            tolerations=req.tolerations or (),
            capacity=req.capacity,
        )
    return v1.DeviceRequest(name=req.name, exactly=exactly, first_available=req.first_available)


def _claim_spec(spec: old.ResourceClaimSpecV1beta1) -> v1.ResourceClaimSpec:
    d = spec.devices
    return v1.ResourceClaimSpec(
        devices=v1.DeviceClaim(
            requests=tuple(_request(r) for r in d.requests), constraints=d.constraints, config=d.config
        )
    )


def claim_from_v1beta1(obj: ApiStruct) -> ApiStruct:
    assert isinstance(obj, old.ResourceClaimV1beta1)
    return v1.ResourceClaim(metadata=obj.metadata, spec=_claim_spec(obj.spec), status=obj.status)


def template_from_v1beta1(obj: ApiStruct) -> ApiStruct:
    assert isinstance(obj, old.ResourceClaimTemplateV1beta1)
    spec = v1.ResourceClaimTemplateSpec(metadata=obj.spec.metadata, spec=_claim_spec(obj.spec.spec))
    return v1.ResourceClaimTemplate(metadata=obj.metadata, spec=spec)
