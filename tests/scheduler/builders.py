"""Builders for scheduler tests: small keyword-driven constructors of API objects.

node = make_node("n1", cpu="4", labels={"zone": "a"})
pod = make_pod("p1", cpu="1", claims={"gpu": "p1-gpu"})          # direct claim references
pod, claim = pod_with_template_claim("p2", count=2)              # generated claim, owned
slc = make_slice("n1", devices=10)
cls = make_class("gpu")
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import msgspec

from events.api.core_v1 import (
    Container,
    Node,
    NodeSpec,
    NodeStatus,
    Pod,
    PodResourceClaim,
    PodResourceClaimStatus,
    PodSpec,
    PodStatus,
    ResourceRequirements,
    Taint,
    Toleration,
)
from events.api.meta import (
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    ObjectMeta,
    OwnerReference,
)
from events.api.resource_v1 import (
    AllocationResult,
    CELDeviceSelector,
    Device,
    DeviceAllocationResult,
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
    ResourcePool,
    ResourceSlice,
    ResourceSliceSpec,
)
from services.scheduler.framework import ClaimBinding, Scheduler, SchedulerConfig, ScheduleResult
from services.scheduler.plugins import default_plugins
from tests.allocator.builders import device

DRIVER = "gpu.example.com"


def make_node(
    name: str,
    *,
    cpu: str = "32",
    memory: str = "128Gi",
    pods: int = 110,
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Taint] = (),
    unschedulable: bool = False,
    extra: Mapping[str, str] | None = None,
) -> Node:
    allocatable: dict[str, str | int | float] = {
        "cpu": cpu,
        "memory": memory,
        "pods": str(pods),
        **(extra or {}),
    }
    return Node(
        metadata=ObjectMeta(
            name=name, uid=f"uid-node-{name}", labels=dict(labels or {"kubernetes.io/hostname": name})
        ),
        spec=NodeSpec(taints=tuple(taints), unschedulable=unschedulable),
        status=NodeStatus(allocatable=allocatable, capacity=dict(allocatable)),
    )


def taint(key: str, value: str = "", effect: str = "NoSchedule") -> Taint:
    return Taint(key=key, value=value, effect=effect)


def toleration(key: str = "", value: str = "", effect: str = "", operator: str = "") -> Toleration:
    return Toleration(key=key, value=value, effect=effect, operator=operator)


def container(name: str = "c", **requests: str) -> Container:
    reqs: dict[str, str | int | float] = {k.replace("_", "-"): v for k, v in requests.items()}
    return Container(name=name, image="busybox", resources=ResourceRequirements(requests=reqs))


def make_pod(
    name: str,
    *,
    namespace: str = "default",
    uid: str | None = None,
    cpu: str | None = None,
    memory: str | None = None,
    requests: Mapping[str, str] | None = None,
    containers: Sequence[Container] | None = None,
    init_containers: Sequence[Container] = (),
    claims: Mapping[str, str] | None = None,
    template_claims: Mapping[str, str | None] | None = None,
    node_selector: Mapping[str, str] | None = None,
    affinity: dict[str, Any] | None = None,
    tolerations: Sequence[Toleration] = (),
    priority: int | None = None,
    node_name: str = "",
    overhead: Mapping[str, str] | None = None,
    phase: str = "Pending",
    scheduling_gates: Sequence[str] = (),
) -> Pod:
    """``claims``: pod claim name -> ResourceClaim name (direct); ``template_claims``: pod claim
    name -> generated claim name (None: no claim needed), recorded in resourceClaimStatuses."""
    if containers is None:
        reqs: dict[str, str | int | float] = dict(requests or {})
        if cpu is not None:
            reqs["cpu"] = cpu
        if memory is not None:
            reqs["memory"] = memory
        containers = [Container(name="main", image="busybox", resources=ResourceRequirements(requests=reqs))]
    pod_claims = [PodResourceClaim(name=k, resource_claim_name=v) for k, v in (claims or {}).items()]
    statuses = []
    for k, v in (template_claims or {}).items():
        pod_claims.append(PodResourceClaim(name=k, resource_claim_template_name=f"{k}-template"))
        statuses.append(PodResourceClaimStatus(name=k, resource_claim_name=v))
    return Pod(
        metadata=ObjectMeta(name=name, namespace=namespace, uid=uid or f"uid-{namespace}-{name}"),
        spec=PodSpec(
            containers=tuple(containers),
            init_containers=tuple(init_containers),
            resource_claims=tuple(pod_claims),
            node_selector=dict(node_selector or {}),
            affinity=affinity,
            tolerations=tuple(tolerations),
            priority=priority,
            node_name=node_name,
            overhead=dict(overhead or {}),
            scheduler_name="default-scheduler",
            scheduling_gates=tuple({"name": g} for g in scheduling_gates),
        ),
        status=PodStatus(phase=phase, resource_claim_statuses=tuple(statuses)),
    )


def bound(pod: Pod, node: str) -> Pod:
    return msgspec.structs.replace(pod, spec=msgspec.structs.replace(pod.spec, node_name=node))


make_device = device  # one device builder for allocator and scheduler tests


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


def label_selector(key: str, *values: str) -> NodeSelector:
    req = NodeSelectorRequirement(key=key, operator="In", values=values)
    return NodeSelector(node_selector_terms=(NodeSelectorTerm(match_expressions=(req,)),))


def make_class(name: str = "gpu", *, driver: str = DRIVER, expression: str | None = None) -> DeviceClass:
    expr = expression or f'device.driver == "{driver}"'
    sel = DeviceSelector(cel=CELDeviceSelector(expression=expr))
    return DeviceClass(
        metadata=ObjectMeta(name=name, uid=f"uid-class-{name}"), spec=DeviceClassSpec(selectors=(sel,))
    )


def exact(
    name: str = "req",
    *,
    count: int = 1,
    device_class: str = "gpu",
    mode: str = "ExactCount",
    selectors: Iterable[str] = (),
    admin: bool = False,
) -> DeviceRequest:
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


def first_available(name: str, *subs: tuple[str, str, int]) -> DeviceRequest:
    """Subrequests as (name, class, count) in preference order."""
    return DeviceRequest(
        name=name,
        first_available=tuple(
            DeviceSubRequest(name=n, device_class_name=c, allocation_mode="ExactCount", count=k)
            for n, c, k in subs
        ),
    )


def make_claim(
    name: str,
    *requests: DeviceRequest,
    namespace: str = "default",
    uid: str | None = None,
    owner: Pod | None = None,
    constraints: Sequence[DeviceConstraint] = (),
    allocation: AllocationResult | None = None,
    reserved_for: Sequence[Pod] = (),
    resource_version: str = "",
) -> ResourceClaim:
    if not requests:
        requests = (exact(),)
    owners: tuple[OwnerReference, ...] = ()
    if owner is not None:
        owners = (
            OwnerReference(
                api_version="v1",
                kind="Pod",
                name=owner.metadata.name,
                uid=owner.metadata.uid,
                controller=True,
            ),
        )
    return ResourceClaim(
        metadata=ObjectMeta(
            name=name,
            namespace=namespace,
            uid=uid or f"uid-claim-{namespace}-{name}",
            owner_references=owners,
            resource_version=resource_version,
        ),
        spec=ResourceClaimSpec(devices=DeviceClaim(requests=tuple(requests), constraints=tuple(constraints))),
        status=ResourceClaimStatus(
            allocation=allocation,
            reserved_for=tuple(
                ResourceClaimConsumerReference(resource="pods", name=p.metadata.name, uid=p.metadata.uid)
                for p in reserved_for
            ),
        ),
    )


def allocation_on(
    node: str, *devices: str, driver: str = DRIVER, pool: str | None = None, request: str = "req"
):
    from services.dra.structured.nodeselector import node_name_selector

    return AllocationResult(
        devices=DeviceAllocationResult(
            results=tuple(
                DeviceRequestAllocationResult(request=request, driver=driver, pool=pool or node, device=d)
                for d in devices
            )
        ),
        node_selector=node_name_selector(node),
    )


def with_status(claim: ResourceClaim, allocation: AllocationResult | None, reserved: Sequence[Pod] = ()):
    status = ResourceClaimStatus(
        allocation=allocation,
        reserved_for=tuple(
            ResourceClaimConsumerReference(resource="pods", name=p.metadata.name, uid=p.metadata.uid)
            for p in reserved
        ),
    )
    return msgspec.structs.replace(claim, status=status)


def pod_with_template_claim(
    name: str, *requests: DeviceRequest, namespace: str = "default", **pod_kw: Any
) -> tuple[Pod, ResourceClaim]:
    """A pod with one template claim ``gpu`` and its generated claim, owned by the pod."""
    claim_name = f"{name}-gpu"
    pod = make_pod(name, namespace=namespace, template_claims={"gpu": claim_name}, **pod_kw)
    claim = make_claim(claim_name, *requests, namespace=namespace, owner=pod)
    return pod, claim


def cluster(*objects: object, config: SchedulerConfig | None = None, clock: Any = None) -> Scheduler:
    """A Scheduler that has observed ``objects`` (in order)."""
    core = Scheduler(config or SchedulerConfig(), plugins=default_plugins(), clock=clock or (lambda: 0.0))
    for obj in objects:
        core.observe(obj)
    return core


def gpu_cluster(
    nodes: int, devices: int = 10, config: SchedulerConfig | None = None, **node_kw: Any
) -> Scheduler:
    """``nodes`` nodes named node-000.. with ``devices`` GPUs each and the ``gpu`` class."""
    objs: list[object] = [make_class("gpu")]
    for i in range(nodes):
        name = f"node-{i:03d}"
        objs.append(make_node(name, **node_kw))
        objs.append(make_slice(name, devices))
    return cluster(*objs, config=config)


def results_of(binding: ClaimBinding) -> tuple[DeviceRequestAllocationResult, ...]:
    """The device results a binding writes (it must carry an allocation)."""
    assert binding.allocation is not None
    return binding.allocation.devices.results


def next_result(core: Scheduler) -> ScheduleResult:
    """``schedule_next`` for tests that know a pod is ready."""
    step = core.schedule_next()
    assert step is not None
    return step[1]
