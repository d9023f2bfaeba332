"""Older resource.k8s.io wire versions that differ from v1: v1beta1 and (historic) v1alpha3.

Only the Structs whose shape differs are defined here; everything else is the v1 Struct (v1beta2
is identical to v1 and needs no types at all). Differences, from ``k8s.io/api``:

* v1beta1: a device's fields are wrapped in ``basic:``; the slice's ``nodeName`` and
  ``allNodes`` are plain values, not pointers; a request carries ``deviceClassName``,
  ``selectors``, ``allocationMode``, ``count``, ``adminAccess``, ``tolerations`` and ``capacity``
  directly instead of under ``exactly:``.
* v1alpha3 (Kubernetes 1.31-1.33; ResourceSlice/Claim/Class/Template were removed in 1.34):
  like v1beta1 but a device's ``capacity`` maps names straight to quantities (no ``value:``).
  Claims, templates and classes are decoded with the v1beta1 Structs (a superset); DeviceTaintRule
  with the v1 Struct, which is its current v1alpha3 shape.
"""

from __future__ import annotations

from typing import ClassVar

import msgspec

from draflow.events.api.base import ApiStruct, Int64, QuantityValue, normalize_quantities
from draflow.events.api.meta import NodeSelector, ObjectMeta
from draflow.events.api.resource_v1 import (
    CapacityRequirements,
    CounterSet,
    DeviceAttribute,
    DeviceCapacity,
    DeviceClaimConfiguration,
    DeviceConstraint,
    DeviceCounterConsumption,
    DeviceSelector,
    DeviceSubRequest,
    DeviceTaint,
    DeviceToleration,
    NodeAllocatableResource,
    ResourceClaimStatus,
    ResourcePool,
)

# -- v1beta1 -------------------------------------------------------------------------------------


class BasicDeviceV1beta1(ApiStruct, frozen=True):
    attributes: dict[str, DeviceAttribute] = {}
    capacity: dict[str, DeviceCapacity] = {}
    consumes_counters: tuple[DeviceCounterConsumption, ...] = ()
    node_name: str | None = None
    node_selector: NodeSelector | None = None
    all_nodes: bool | None = None
    taints: tuple[DeviceTaint, ...] = ()
    binds_to_node: bool | None = None
    binding_conditions: tuple[str, ...] = ()
    binding_failure_conditions: tuple[str, ...] = ()
    allow_multiple_allocations: bool | None = None
    node_allocatable_resources: dict[str, NodeAllocatableResource] = {}


class DeviceV1beta1(ApiStruct, frozen=True):
    name: str = ""
    basic: BasicDeviceV1beta1 | None = None


class ResourceSliceSpecV1beta1(ApiStruct, frozen=True):
    driver: str = ""
    pool: ResourcePool = msgspec.field(default_factory=ResourcePool)
    node_name: str = ""
    node_selector: NodeSelector | None = None
    all_nodes: bool = False
    devices: tuple[DeviceV1beta1, ...] = ()
    per_device_node_selection: bool | None = None
    shared_counters: tuple[CounterSet, ...] = ()
    partition_type_attribute: str | None = None
    skip_node_operations: tuple[str, ...] = ()


class ResourceSliceV1beta1(ApiStruct, frozen=True):
    API_VERSION: ClassVar[str] = "resource.k8s.io/v1beta1"
    KIND: ClassVar[str] = "ResourceSlice"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: ResourceSliceSpecV1beta1 = msgspec.field(default_factory=ResourceSliceSpecV1beta1)


class DeviceRequestV1beta1(ApiStruct, frozen=True):
    name: str = ""
    device_class_name: str = ""
    selectors: tuple[DeviceSelector, ...] | None = None  # None vs () matters for conversion
    allocation_mode: str = ""
    count: Int64 = 0
    admin_access: bool | None = None
    first_available: tuple[DeviceSubRequest, ...] = ()
    tolerations: tuple[DeviceToleration, ...] | None = None
    capacity: CapacityRequirements | None = None


class DeviceClaimV1beta1(ApiStruct, frozen=True):
    requests: tuple[DeviceRequestV1beta1, ...] = ()
    constraints: tuple[DeviceConstraint, ...] = ()
    config: tuple[DeviceClaimConfiguration, ...] = ()


class ResourceClaimSpecV1beta1(ApiStruct, frozen=True):
    devices: DeviceClaimV1beta1 = msgspec.field(default_factory=DeviceClaimV1beta1)


class ResourceClaimV1beta1(ApiStruct, frozen=True):
    API_VERSION: ClassVar[str] = "resource.k8s.io/v1beta1"
    KIND: ClassVar[str] = "ResourceClaim"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: ResourceClaimSpecV1beta1 = msgspec.field(default_factory=ResourceClaimSpecV1beta1)
    status: ResourceClaimStatus = msgspec.field(default_factory=ResourceClaimStatus)


class ResourceClaimTemplateSpecV1beta1(ApiStruct, frozen=True):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: ResourceClaimSpecV1beta1 = msgspec.field(default_factory=ResourceClaimSpecV1beta1)


class ResourceClaimTemplateV1beta1(ApiStruct, frozen=True):
    API_VERSION: ClassVar[str] = "resource.k8s.io/v1beta1"
    KIND: ClassVar[str] = "ResourceClaimTemplate"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: ResourceClaimTemplateSpecV1beta1 = msgspec.field(default_factory=ResourceClaimTemplateSpecV1beta1)


# -- v1alpha3 (historic) -------------------------------------------------------------------------


class BasicDeviceV1alpha3(ApiStruct, frozen=True):
    attributes: dict[str, DeviceAttribute] = {}
    capacity: dict[str, QuantityValue] = {}
    consumes_counters: tuple[DeviceCounterConsumption, ...] = ()
    node_name: str | None = None
    node_selector: NodeSelector | None = None
    all_nodes: bool | None = None
    taints: tuple[DeviceTaint, ...] = ()

    def __post_init__(self) -> None:
        normalize_quantities(self, "capacity")


class DeviceV1alpha3(ApiStruct, frozen=True):
    name: str = ""
    basic: BasicDeviceV1alpha3 | None = None


class ResourceSliceSpecV1alpha3(ApiStruct, frozen=True):
    driver: str = ""
    pool: ResourcePool = msgspec.field(default_factory=ResourcePool)
    node_name: str = ""
    node_selector: NodeSelector | None = None
    all_nodes: bool = False
    devices: tuple[DeviceV1alpha3, ...] = ()
    per_device_node_selection: bool | None = None
    shared_counters: tuple[CounterSet, ...] = ()


class ResourceSliceV1alpha3(ApiStruct, frozen=True):
    API_VERSION: ClassVar[str] = "resource.k8s.io/v1alpha3"
    KIND: ClassVar[str] = "ResourceSlice"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: ResourceSliceSpecV1alpha3 = msgspec.field(default_factory=ResourceSliceSpecV1alpha3)
