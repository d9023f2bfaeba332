"""Core objects: pods, containers, nodes, leases, taints, tolerations, quotas, node selectors, times."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
from msgspec.structs import replace

from draflow.events.api.codec import decode_object
from draflow.events.api.coordination_v1 import Lease
from draflow.events.api.core_v1 import (
    Container,
    Node,
    NodeCondition,
    NodeSpec,
    NodeStatus,
    Pod,
    PodCondition,
    PodResourceClaim,
    PodResourceClaimStatus,
    PodSpec,
    PodStatus,
    ResourceClaimRef,
    ResourceQuota,
    ResourceRequirements,
    Taint,
    Toleration,
)
from draflow.events.api.meta import (
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    ObjectMeta,
    OwnerReference,
)
from draflow.services.kubelet.lease import lease_object
from draflow.services.kubelet.node import node_object, rfc3339

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(s: float) -> datetime:
    """``T0`` + ``s`` seconds (tests that run on a clock of their own)."""
    return T0 + timedelta(seconds=s)


def stamp(s: float) -> str:
    """``at(s)`` as a Kubernetes timestamp."""
    return rfc3339(at(s))


DELETED_AT = stamp(0)


def make_container(
    name: str = "main",
    *,
    requests: Mapping[str, str | int] | None = None,
    limits: Mapping[str, str | int] | None = None,
    claims: Iterable[str | tuple[str, str]] = (),
    sidecar: bool = False,
    image: str = "busybox",
) -> Container:
    """``claims``: pod claim names, or ``(name, request)`` pairs; ``sidecar``: an init container
    with ``restartPolicy: Always``."""
    refs = tuple(
        ResourceClaimRef(name=c) if isinstance(c, str) else ResourceClaimRef(name=c[0], request=c[1])
        for c in claims
    )
    return Container(
        name=name,
        image=image,
        resources=ResourceRequirements(
            requests={k: str(v) for k, v in (requests or {}).items()},
            limits={k: str(v) for k, v in (limits or {}).items()},
            claims=refs,
        ),
        restart_policy="Always" if sidecar else None,
    )


def make_pod(
    name: str = "pod",
    *,
    namespace: str = "default",
    uid: str | None = None,
    containers: Sequence[Container] | None = None,
    init_containers: Sequence[Container] = (),
    cpu: str | None = None,
    memory: str | None = None,
    requests: Mapping[str, str] | None = None,
    claims: Mapping[str, str] | None = None,
    template_claims: Mapping[str, str] | None = None,
    statuses: Mapping[str, str | None] | None = None,
    node_name: str = "",
    node_selector: Mapping[str, str] | None = None,
    affinity: dict[str, Any] | None = None,
    tolerations: Sequence[Toleration] = (),
    priority: int | None = None,
    overhead: Mapping[str, str] | None = None,
    scheduling_gates: Sequence[str] = (),
    phase: str = "Pending",
    conditions: Sequence[PodCondition] = (),
    start_time: str | None = None,
    labels: Mapping[str, str] | None = None,
    owner: OwnerReference | None = None,
    created: str | None = None,
    deleting: bool = False,
) -> Pod:
    """``claims``: pod claim name -> ResourceClaim name; ``template_claims``: pod claim name ->
    ResourceClaimTemplate name; ``statuses``: pod claim name -> the generated claim's name (None: no
    claim needed) as ``status.resourceClaimStatuses`` records it. Without ``containers``, one
    container ``main`` requests ``cpu``/``memory``/``requests`` and uses every pod claim."""
    pod_claims = [PodResourceClaim(name=k, resource_claim_name=v) for k, v in (claims or {}).items()]
    pod_claims += [
        PodResourceClaim(name=k, resource_claim_template_name=v) for k, v in (template_claims or {}).items()
    ]
    if containers is None:
        reqs: dict[str, str] = dict(requests or {})
        if cpu is not None:
            reqs["cpu"] = cpu
        if memory is not None:
            reqs["memory"] = memory
        containers = [make_container(requests=reqs, claims=[c.name for c in pod_claims])]
    return Pod(
        metadata=ObjectMeta(
            name=name,
            namespace=namespace,
            uid=uid if uid is not None else f"uid-{name}",
            labels=dict(labels or {}),
            owner_references=(owner,) if owner else (),
            creation_timestamp=created,
            deletion_timestamp=(created or DELETED_AT) if deleting else None,
        ),
        spec=PodSpec(
            containers=tuple(containers),
            init_containers=tuple(init_containers),
            resource_claims=tuple(pod_claims),
            node_name=node_name,
            node_selector=dict(node_selector or {}),
            affinity=affinity,
            tolerations=tuple(tolerations),
            priority=priority,
            overhead=dict(overhead or {}),
            scheduler_name="default-scheduler",
            scheduling_gates=tuple({"name": g} for g in scheduling_gates),
        ),
        status=PodStatus(
            phase=phase,
            conditions=tuple(conditions),
            start_time=start_time,
            resource_claim_statuses=tuple(
                PodResourceClaimStatus(name=k, resource_claim_name=v) for k, v in (statuses or {}).items()
            ),
        ),
    )


def bound_to(pod: Pod, node: str) -> Pod:
    """``pod`` as its binding left it: ``spec.nodeName`` set."""
    return msgspec.structs.replace(pod, spec=msgspec.structs.replace(pod.spec, node_name=node))


def make_node(
    name: str = "node-1",
    *,
    cpu: str = "32",
    memory: str = "128Gi",
    pods: int = 110,
    extra: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Taint] = (),
    unschedulable: bool = False,
) -> Node:
    """A Node as a test writes it: allocatable = capacity, labels default to the hostname label."""
    allocatable: dict[str, str | int | float] = {
        "cpu": cpu,
        "memory": memory,
        "pods": str(pods),
        **(extra or {}),
    }
    return Node(
        metadata=ObjectMeta(
            name=name, uid=f"uid-{name}", labels=dict(labels or {"kubernetes.io/hostname": name})
        ),
        spec=NodeSpec(taints=tuple(taints), unschedulable=unschedulable),
        status=NodeStatus(allocatable=allocatable, capacity=dict(allocatable)),
    )


def registered_node(
    name: str,
    *,
    registered: float = 0.0,
    labels: dict[str, str] | None = None,
    taints: Sequence[Taint] = (),
    ready: str | None = "True",
    unschedulable: bool = False,
    conditions: Sequence[NodeCondition] = (),
) -> Node:
    """A Node as its kubelet registers it (the kubelet's own code) at ``at(registered)``;
    ``ready``: the Ready condition's status (None: no conditions at all); ``conditions`` replace
    the kubelet's of the same type."""
    n = node_object(name, at(registered), labels=labels)
    meta = replace(n.metadata, uid=f"uid-{name}", creation_timestamp=stamp(registered))
    conds = tuple(n.status.conditions) if ready is not None else ()
    if ready is not None and ready != "True":
        conds = tuple(replace(c, status=ready) if c.type == "Ready" else c for c in conds)
    for extra in conditions:
        conds = (*(c for c in conds if c.type != extra.type), extra)
    return replace(
        n,
        metadata=meta,
        spec=replace(n.spec, taints=tuple(taints), unschedulable=unschedulable),
        status=replace(n.status, conditions=conds),
    )


def make_lease(name: str, renewed: float, duration_s: int = 40) -> Lease:
    """The kubelet's Lease for node ``name``, last renewed at ``at(renewed)``."""
    return lease_object(name, at(renewed), duration_s, f"uid-{name}")


def make_taint(key: str, value: str = "", effect: str = "NoSchedule", *, added: float | None = None) -> Taint:
    """``added``: seconds after ``T0`` for ``timeAdded`` (None: not set)."""
    return Taint(key=key, value=value, effect=effect, time_added=stamp(added) if added is not None else None)


def make_toleration(
    key: str = "", *, operator: str = "", value: str = "", effect: str = "", seconds: int | None = None
) -> Toleration:
    return Toleration(key=key, operator=operator, value=value, effect=effect, toleration_seconds=seconds)


def make_node_selector(*requirements: tuple[str, str, Sequence[str]]) -> NodeSelector:
    """One term: ``(key, operator, values)`` requirements, ANDed."""
    return NodeSelector(
        node_selector_terms=(
            NodeSelectorTerm(
                match_expressions=tuple(
                    NodeSelectorRequirement(key=k, operator=op, values=tuple(v)) for k, op, v in requirements
                )
            ),
        )
    )


def make_quota(name: str, hard: Mapping[str, str | int], namespace: str = "default") -> ResourceQuota:
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
