"""Core ``v1`` kinds draflow models: Namespace, Node, Pod, ResourceQuota (+ PodTemplateSpec).

The parts DRA and scheduling look at are typed field for field after ``k8s.io/api/core/v1``
(containers, resources incl. claims, resourceClaims, nodeName, tolerations, status phase /
conditions / resourceClaimStatuses / extendedResourceClaimStatus, node capacity). Sub-objects
draflow never interprets (volumes, probes, env, securityContext, affinity, ...) are kept as
decoded JSON (``dict``), so their inner fields are not checked for unknown names; every other
level rejects unknown fields like the API server does.
"""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec

from draflow.events.api.base import ApiStruct, Int32, Int64, QuantityValue, normalize_quantities
from draflow.events.api.meta import ObjectMeta

API_VERSION = "v1"

Obj = dict[str, Any]
Objs = tuple[dict[str, Any], ...]

# -- resources -----------------------------------------------------------------------------------


class ResourceClaimRef(ApiStruct, frozen=True):
    """core/v1 ResourceClaim: a container's reference to one of the pod's claims."""

    name: str = ""
    request: str = ""


class ResourceRequirements(ApiStruct, frozen=True):
    limits: dict[str, QuantityValue] = {}
    requests: dict[str, QuantityValue] = {}
    claims: tuple[ResourceClaimRef, ...] = ()

    def __post_init__(self) -> None:
        normalize_quantities(self, "limits", "requests")


class Taint(ApiStruct, frozen=True):
    key: str = ""
    value: str = ""
    effect: str = ""
    time_added: str | None = None


class Toleration(ApiStruct, frozen=True):
    key: str = ""
    operator: str = ""
    value: str = ""
    effect: str = ""
    toleration_seconds: Int64 | None = None

    def tolerates(self, taint: Taint) -> bool:
        """core/v1 ``Toleration.ToleratesTaint``: an empty effect or key matches all; ``Exists``
        ignores the value; an empty operator means ``Equal``."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator in ("", "Equal"):
            return self.value == taint.value
        return self.operator == "Exists"


# -- Pod -----------------------------------------------------------------------------------------


class Container(ApiStruct, frozen=True):
    name: str = ""
    image: str = ""
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    working_dir: str = ""
    ports: Objs = ()
    env_from: Objs = ()
    env: Objs = ()
    resources: ResourceRequirements = msgspec.field(default_factory=ResourceRequirements)
    resize_policy: Objs = ()
    restart_policy: str | None = None
    restart_policy_rules: Objs = ()
    volume_mounts: Objs = ()
    volume_devices: Objs = ()
    liveness_probe: Obj | None = None
    readiness_probe: Obj | None = None
    startup_probe: Obj | None = None
    lifecycle: Obj | None = None
    termination_message_path: str = ""
    termination_message_policy: str = ""
    image_pull_policy: str = ""
    security_context: Obj | None = None
    stdin: bool = False
    stdin_once: bool = False
    tty: bool = False


class PodResourceClaim(ApiStruct, frozen=True):
    """Exactly one of the two sources is set (checked by validation)."""

    name: str = ""
    resource_claim_name: str | None = None
    resource_claim_template_name: str | None = None


class PodSchedulingGroup(ApiStruct, frozen=True):
    pod_group_name: str | None = None


class PodSpec(ApiStruct, frozen=True):
    volumes: Objs = ()
    init_containers: tuple[Container, ...] = ()
    containers: tuple[Container, ...] = ()
    ephemeral_containers: Objs = ()
    restart_policy: str = ""
    termination_grace_period_seconds: Int64 | None = None
    active_deadline_seconds: Int64 | None = None
    dns_policy: str = msgspec.field(default="", name="dnsPolicy")
    node_selector: dict[str, str] = {}
    service_account_name: str = ""
    service_account: str = ""
    automount_service_account_token: bool | None = None
    node_name: str = ""
    host_network: bool = False
    host_pid: bool = msgspec.field(default=False, name="hostPID")
    host_ipc: bool = msgspec.field(default=False, name="hostIPC")
    share_process_namespace: bool | None = None
    security_context: Obj | None = None
    image_pull_secrets: Objs = ()
    hostname: str = ""
    subdomain: str = ""
    affinity: Obj | None = None
    scheduler_name: str = ""
    tolerations: tuple[Toleration, ...] = ()
    host_aliases: Objs = ()
    priority_class_name: str = ""
    priority: Int32 | None = None
    dns_config: Obj | None = msgspec.field(default=None, name="dnsConfig")
    readiness_gates: Objs = ()
    runtime_class_name: str | None = None
    enable_service_links: bool | None = None
    preemption_policy: str | None = None
    overhead: dict[str, QuantityValue] = {}
    topology_spread_constraints: Objs = ()
    set_hostname_as_fqdn: bool | None = msgspec.field(default=None, name="setHostnameAsFQDN")
    os: Obj | None = None
    host_users: bool | None = None
    scheduling_gates: Objs = ()
    resource_claims: tuple[PodResourceClaim, ...] = ()
    resources: ResourceRequirements | None = None
    hostname_override: str | None = None
    scheduling_group: PodSchedulingGroup | None = None
    eviction_responders: Objs = ()

    def __post_init__(self) -> None:
        normalize_quantities(self, "overhead")


class PodCondition(ApiStruct, frozen=True):
    type: str = ""
    observed_generation: Int64 = 0
    status: str = ""
    last_probe_time: str | None = None
    last_transition_time: str | None = None
    reason: str = ""
    message: str = ""


class PodResourceClaimStatus(ApiStruct, frozen=True):
    name: str = ""
    resource_claim_name: str | None = None


class ContainerExtendedResourceRequest(ApiStruct, frozen=True):
    container_name: str = ""
    resource_name: str = ""
    request_name: str = ""


class PodExtendedResourceClaimStatus(ApiStruct, frozen=True):
    request_mappings: tuple[ContainerExtendedResourceRequest, ...] = ()
    resource_claim_name: str = ""


class PodStatus(ApiStruct, frozen=True):
    observed_generation: Int64 = 0
    phase: str = ""
    conditions: tuple[PodCondition, ...] = ()
    message: str = ""
    reason: str = ""
    nominated_node_name: str = ""
    host_ip: str = msgspec.field(default="", name="hostIP")
    host_ips: Objs = msgspec.field(default=(), name="hostIPs")
    pod_ip: str = msgspec.field(default="", name="podIP")
    pod_ips: Objs = msgspec.field(default=(), name="podIPs")
    start_time: str | None = None
    init_container_statuses: Objs = ()
    container_statuses: Objs = ()
    qos_class: str = msgspec.field(default="", name="qosClass")
    ephemeral_container_statuses: Objs = ()
    resize: str = ""
    resource_claim_statuses: tuple[PodResourceClaimStatus, ...] = ()
    extended_resource_claim_status: PodExtendedResourceClaimStatus | None = None
    allocated_resources: dict[str, QuantityValue] = {}
    resources: ResourceRequirements | None = None
    node_allocatable_resource_claim_statuses: Objs = ()
    volume_health: Objs = ()

    def __post_init__(self) -> None:
        normalize_quantities(self, "allocated_resources")


class Pod(ApiStruct, frozen=True):
    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "Pod"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: PodSpec = msgspec.field(default_factory=PodSpec)
    status: PodStatus = msgspec.field(default_factory=PodStatus)


class PodTemplateSpec(ApiStruct, frozen=True):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: PodSpec = msgspec.field(default_factory=PodSpec)


# -- Namespace -----------------------------------------------------------------------------------


class NamespaceSpec(ApiStruct, frozen=True):
    finalizers: tuple[str, ...] = ()


class NamespaceStatus(ApiStruct, frozen=True):
    phase: str = ""
    conditions: Objs = ()


class Namespace(ApiStruct, frozen=True):
    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "Namespace"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: NamespaceSpec = msgspec.field(default_factory=NamespaceSpec)
    status: NamespaceStatus = msgspec.field(default_factory=NamespaceStatus)


# -- Node ----------------------------------------------------------------------------------------


class NodeSpec(ApiStruct, frozen=True):
    pod_cidr: str = msgspec.field(default="", name="podCIDR")
    pod_cidrs: tuple[str, ...] = msgspec.field(default=(), name="podCIDRs")
    provider_id: str = msgspec.field(default="", name="providerID")
    unschedulable: bool = False
    taints: tuple[Taint, ...] = ()
    config_source: Obj | None = None
    external_id: str = msgspec.field(default="", name="externalID")
    pod_preemption_policy: Obj | None = None


class NodeCondition(ApiStruct, frozen=True):
    type: str = ""
    status: str = ""
    last_heartbeat_time: str | None = None
    last_transition_time: str | None = None
    reason: str = ""
    message: str = ""


class NodeAddress(ApiStruct, frozen=True):
    type: str = ""
    address: str = ""


class NodeStatus(ApiStruct, frozen=True):
    capacity: dict[str, QuantityValue] = {}
    allocatable: dict[str, QuantityValue] = {}
    phase: str = ""
    conditions: tuple[NodeCondition, ...] = ()
    addresses: tuple[NodeAddress, ...] = ()
    daemon_endpoints: Obj | None = None
    node_info: Obj | None = None
    images: Objs = ()
    volumes_in_use: tuple[str, ...] = ()
    volumes_attached: Objs = ()
    config: Obj | None = None
    runtime_handlers: Objs = ()
    features: Obj | None = None
    declared_features: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        normalize_quantities(self, "capacity", "allocatable")


class Node(ApiStruct, frozen=True):
    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "Node"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: NodeSpec = msgspec.field(default_factory=NodeSpec)
    status: NodeStatus = msgspec.field(default_factory=NodeStatus)


# -- ResourceQuota -------------------------------------------------------------------------------


class ScopedResourceSelectorRequirement(ApiStruct, frozen=True):
    scope_name: str = ""
    operator: str = ""
    values: tuple[str, ...] = ()


class ScopeSelector(ApiStruct, frozen=True):
    match_expressions: tuple[ScopedResourceSelectorRequirement, ...] = ()


class ResourceQuotaSpec(ApiStruct, frozen=True):
    hard: dict[str, QuantityValue] = {}
    scopes: tuple[str, ...] = ()
    scope_selector: ScopeSelector | None = None

    def __post_init__(self) -> None:
        normalize_quantities(self, "hard")


class ResourceQuotaStatus(ApiStruct, frozen=True):
    hard: dict[str, QuantityValue] = {}
    used: dict[str, QuantityValue] = {}

    def __post_init__(self) -> None:
        normalize_quantities(self, "hard", "used")


class ResourceQuota(ApiStruct, frozen=True):
    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "ResourceQuota"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: ResourceQuotaSpec = msgspec.field(default_factory=ResourceQuotaSpec)
    status: ResourceQuotaStatus = msgspec.field(default_factory=ResourceQuotaStatus)
