"""resource.k8s.io/v1 objects: DeviceClass, ResourceSlice, ResourceClaim(+Template), DeviceTaintRule.

Field for field the Go types of ``k8s.io/api/resource/v1`` (read at kubernetes/api 10b39a39, plus
KEP-5963 ``compatibilityGroups``). Go pointers become ``X | None``, ``omitempty`` scalars default
to their zero value, lists are tuples. Defaults the API server fills in (allocationMode, count,
toleration operator) are NOT applied here but by ``draflow.services.apiserver.admission.defaults``.
Quantity fields hold the canonical Kubernetes string after decoding (see ``base.QuantityValue``).
Opaque driver parameters (runtime.RawExtension) are kept as decoded JSON (``Any``).
"""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec

from draflow.events.api.base import ApiStruct, Int64, QuantityValue, normalize_quantities
from draflow.events.api.meta import Condition, NodeSelector, ObjectMeta

GROUP = "resource.k8s.io"
VERSION = "v1"
API_VERSION = f"{GROUP}/{VERSION}"

# -- shared pieces ------------------------------------------------------------------------------


class CELDeviceSelector(ApiStruct, frozen=True):
    expression: str = ""


class DeviceSelector(ApiStruct, frozen=True):
    cel: CELDeviceSelector | None = None


class OpaqueDeviceConfiguration(ApiStruct, frozen=True):
    driver: str = ""
    parameters: Any = None


class DeviceTaint(ApiStruct, frozen=True):
    key: str = ""
    value: str = ""
    effect: str = ""
    time_added: str | None = None


class DeviceToleration(ApiStruct, frozen=True):
    key: str = ""
    operator: str = ""
    value: str = ""
    effect: str = ""
    toleration_seconds: Int64 | None = None


# -- DeviceClass ---------------------------------------------------------------------------------


class DeviceClassConfiguration(ApiStruct, frozen=True):
    opaque: OpaqueDeviceConfiguration | None = None


class DeviceClassSpec(ApiStruct, frozen=True):
    selectors: tuple[DeviceSelector, ...] = ()
    config: tuple[DeviceClassConfiguration, ...] = ()
    extended_resource_name: str | None = None


class DeviceClass(ApiStruct, frozen=True):
    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "DeviceClass"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: DeviceClassSpec = msgspec.field(default_factory=DeviceClassSpec)


# -- ResourceSlice -------------------------------------------------------------------------------


class ResourcePool(ApiStruct, frozen=True):
    name: str = ""
    generation: Int64 = 0
    resource_slice_count: Int64 = 0


class Counter(ApiStruct, frozen=True):
    value: QuantityValue = "0"

    def __post_init__(self) -> None:
        normalize_quantities(self, "value")


class CounterSet(ApiStruct, frozen=True):
    name: str = ""
    counters: dict[str, Counter] = {}


class DeviceCounterConsumption(ApiStruct, frozen=True):
    counter_set: str = ""
    counters: dict[str, Counter] = {}
    compatibility_groups: tuple[str, ...] = ()


class CapacityRequestPolicyRange(ApiStruct, frozen=True):
    min: QuantityValue | None = None
    max: QuantityValue | None = None
    step: QuantityValue | None = None

    def __post_init__(self) -> None:
        normalize_quantities(self, "min", "max", "step")


class CapacityRequestPolicy(ApiStruct, frozen=True):
    default: QuantityValue | None = None
    valid_values: tuple[QuantityValue, ...] = ()
    valid_range: CapacityRequestPolicyRange | None = None

    def __post_init__(self) -> None:
        normalize_quantities(self, "default", "valid_values")


class DeviceCapacity(ApiStruct, frozen=True):
    value: QuantityValue = "0"
    request_policy: CapacityRequestPolicy | None = None

    def __post_init__(self) -> None:
        normalize_quantities(self, "value")


class DeviceAttribute(ApiStruct, frozen=True):
    """Exactly one member is set (checked by validation); list forms need DRAListTypeAttributes."""

    int_: Int64 | None = msgspec.field(default=None, name="int")
    bool_: bool | None = msgspec.field(default=None, name="bool")
    string: str | None = None
    version: str | None = None
    ints: tuple[Int64, ...] | None = None
    bools: tuple[bool, ...] | None = None
    strings: tuple[str, ...] | None = None
    versions: tuple[str, ...] | None = None


class NodeAllocatableMapping(ApiStruct, frozen=True):
    capacity_key: str | None = None
    capacity_multiplier: QuantityValue | None = None
    device_multiplier: QuantityValue | None = None

    def __post_init__(self) -> None:
        normalize_quantities(self, "capacity_multiplier", "device_multiplier")


class NodeAllocatableOverhead(ApiStruct, frozen=True):
    per_pod: QuantityValue | None = None
    per_container: QuantityValue | None = None

    def __post_init__(self) -> None:
        normalize_quantities(self, "per_pod", "per_container")


class NodeAllocatableResource(ApiStruct, frozen=True):
    mapping: NodeAllocatableMapping | None = None
    overhead: NodeAllocatableOverhead | None = None


class Device(ApiStruct, frozen=True):
    name: str = ""
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


class ResourceSliceSpec(ApiStruct, frozen=True):
    driver: str = ""
    pool: ResourcePool = msgspec.field(default_factory=ResourcePool)
    node_name: str | None = None
    node_selector: NodeSelector | None = None
    all_nodes: bool | None = None
    devices: tuple[Device, ...] = ()
    per_device_node_selection: bool | None = None
    shared_counters: tuple[CounterSet, ...] = ()
    partition_type_attribute: str | None = None
    skip_node_operations: tuple[str, ...] = ()


class ResourceSlice(ApiStruct, frozen=True):
    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "ResourceSlice"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: ResourceSliceSpec = msgspec.field(default_factory=ResourceSliceSpec)


# -- ResourceClaim -------------------------------------------------------------------------------


class CapacityRequirements(ApiStruct, frozen=True):
    requests: dict[str, QuantityValue] = {}

    def __post_init__(self) -> None:
        normalize_quantities(self, "requests")


class ExactDeviceRequest(ApiStruct, frozen=True):
    device_class_name: str = ""
    selectors: tuple[DeviceSelector, ...] = ()
    allocation_mode: str = ""
    count: Int64 = 0
    admin_access: bool | None = None
    tolerations: tuple[DeviceToleration, ...] = ()
    capacity: CapacityRequirements | None = None


class DeviceSubRequest(ApiStruct, frozen=True):
    name: str = ""
    device_class_name: str = ""
    selectors: tuple[DeviceSelector, ...] = ()
    allocation_mode: str = ""
    count: Int64 = 0
    tolerations: tuple[DeviceToleration, ...] = ()
    capacity: CapacityRequirements | None = None


class DeviceRequest(ApiStruct, frozen=True):
    """Exactly one of ``exactly`` and ``first_available`` is set (checked by validation)."""

    name: str = ""
    exactly: ExactDeviceRequest | None = None
    first_available: tuple[DeviceSubRequest, ...] = ()


class DeviceConstraint(ApiStruct, frozen=True):
    requests: tuple[str, ...] = ()
    match_attribute: str | None = None
    distinct_attribute: str | None = None


class DeviceClaimConfiguration(ApiStruct, frozen=True):
    requests: tuple[str, ...] = ()
    opaque: OpaqueDeviceConfiguration | None = None


class DeviceClaim(ApiStruct, frozen=True):
    requests: tuple[DeviceRequest, ...] = ()
    constraints: tuple[DeviceConstraint, ...] = ()
    config: tuple[DeviceClaimConfiguration, ...] = ()


class ResourceClaimSpec(ApiStruct, frozen=True):
    devices: DeviceClaim = msgspec.field(default_factory=DeviceClaim)


class DeviceRequestAllocationResult(ApiStruct, frozen=True):
    request: str = ""
    driver: str = ""
    pool: str = ""
    device: str = ""
    admin_access: bool | None = None
    tolerations: tuple[DeviceToleration, ...] = ()
    binding_conditions: tuple[str, ...] = ()
    binding_failure_conditions: tuple[str, ...] = ()
    share_id: str | None = msgspec.field(default=None, name="shareID")
    consumed_capacity: dict[str, QuantityValue] = {}
    skip_node_operations: tuple[str, ...] = ()
    compatibility_groups: dict[str, tuple[str, ...]] = {}

    def __post_init__(self) -> None:
        normalize_quantities(self, "consumed_capacity")


class DeviceAllocationConfiguration(ApiStruct, frozen=True):
    source: str = ""
    requests: tuple[str, ...] = ()
    opaque: OpaqueDeviceConfiguration | None = None


class DeviceAllocationResult(ApiStruct, frozen=True):
    results: tuple[DeviceRequestAllocationResult, ...] = ()
    config: tuple[DeviceAllocationConfiguration, ...] = ()


class AllocationResult(ApiStruct, frozen=True):
    devices: DeviceAllocationResult = msgspec.field(default_factory=DeviceAllocationResult)
    node_selector: NodeSelector | None = None
    allocation_timestamp: str | None = None


class ResourceClaimConsumerReference(ApiStruct, frozen=True):
    api_group: str = ""
    resource: str = ""
    name: str = ""
    uid: str = ""


class NetworkDeviceData(ApiStruct, frozen=True):
    interface_name: str = ""
    ips: tuple[str, ...] = ()
    hardware_address: str = ""


class AllocatedDeviceStatus(ApiStruct, frozen=True):
    driver: str = ""
    pool: str = ""
    device: str = ""
    share_id: str | None = msgspec.field(default=None, name="shareID")
    conditions: tuple[Condition, ...] = ()
    data: Any = None
    network_data: NetworkDeviceData | None = None


class ResourceClaimStatus(ApiStruct, frozen=True):
    allocation: AllocationResult | None = None
    reserved_for: tuple[ResourceClaimConsumerReference, ...] = ()
    devices: tuple[AllocatedDeviceStatus, ...] = ()


class ResourceClaim(ApiStruct, frozen=True):
    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "ResourceClaim"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: ResourceClaimSpec = msgspec.field(default_factory=ResourceClaimSpec)
    status: ResourceClaimStatus = msgspec.field(default_factory=ResourceClaimStatus)


class ResourceClaimTemplateSpec(ApiStruct, frozen=True):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: ResourceClaimSpec = msgspec.field(default_factory=ResourceClaimSpec)


class ResourceClaimTemplate(ApiStruct, frozen=True):
    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "ResourceClaimTemplate"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: ResourceClaimTemplateSpec = msgspec.field(default_factory=ResourceClaimTemplateSpec)


# -- DeviceTaintRule -----------------------------------------------------------------------------


class DeviceTaintSelector(ApiStruct, frozen=True):
    driver: str | None = None
    pool: str | None = None
    device: str | None = None


class DeviceTaintRuleSpec(ApiStruct, frozen=True):
    device_selector: DeviceTaintSelector | None = None
    taint: DeviceTaint = msgspec.field(default_factory=DeviceTaint)


class DeviceTaintRuleStatus(ApiStruct, frozen=True):
    conditions: tuple[Condition, ...] = ()


class DeviceTaintRule(ApiStruct, frozen=True):
    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "DeviceTaintRule"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: DeviceTaintRuleSpec = msgspec.field(default_factory=DeviceTaintRuleSpec)
    status: DeviceTaintRuleStatus = msgspec.field(default_factory=DeviceTaintRuleStatus)


RESOURCE_V1_KINDS: dict[str, type[ApiStruct]] = {
    cls.KIND: cls
    for cls in (DeviceClass, ResourceSlice, ResourceClaim, ResourceClaimTemplate, DeviceTaintRule)
}
