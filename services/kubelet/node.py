"""What the kubelet writes about its node and its pods: the Node it registers, pod status changes.

Pure builders (the clock is a parameter), so the shell only appends what they return.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

import msgspec

from draflow.events.api.core_v1 import (
    Node,
    NodeAddress,
    NodeCondition,
    NodeStatus,
    Pod,
    PodCondition,
    PodStatus,
)
from draflow.events.api.meta import ObjectMeta

__all__ = [
    "DEFAULT_CAPACITY",
    "HEALTHY_CONDITIONS",
    "failed_status",
    "is_ready",
    "node_object",
    "ready_status",
    "rfc3339",
    "running_status",
]

DEFAULT_CAPACITY = {"cpu": "8", "memory": "32Gi", "pods": "110", "ephemeral-storage": "100Gi"}


def rfc3339(now: datetime) -> str:
    """Kubernetes' timestamp format (second precision, UTC, ``Z``)."""
    if now.tzinfo is None:
        now = now.replace(tzinfo=UTC)
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def node_object(
    name: str,
    now: datetime,
    *,
    labels: Mapping[str, str] | None = None,
    capacity: Mapping[str, str] | None = None,
) -> Node:
    """The Node a kubelet registers: hostname/os/arch labels, capacity, Ready condition."""
    stamp = rfc3339(now)
    node_labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        **(labels or {}),
    }
    cap: dict[str, str | int | float] = dict(capacity or DEFAULT_CAPACITY)
    return Node(
        metadata=ObjectMeta(name=name, labels=node_labels),
        status=NodeStatus(
            capacity=cap,
            allocatable=dict(cap),
            conditions=tuple(
                NodeCondition(
                    type=type_,
                    status=status,
                    last_heartbeat_time=stamp,
                    last_transition_time=stamp,
                    reason=reason,
                    message=message,
                )
                for type_, status, reason, message in HEALTHY_CONDITIONS
            ),
            addresses=(NodeAddress(type="Hostname", address=name),),
        ),
    )


# What a healthy kubelet posts (upstream's setters: Ready first here, then the pressure conditions).
HEALTHY_CONDITIONS = (
    ("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
    ("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
    ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
)


def is_ready(node: Node) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions)


def ready_status(node: Node, now: datetime) -> NodeStatus:
    """``node``'s status with the kubelet's conditions healthy again (the kubelet is back, or was
    marked Unknown while it was only slow): heartbeat ``now``, transition ``now`` where the status
    changes, other conditions kept."""
    stamp = rfc3339(now)
    by_type = {c.type: c for c in node.status.conditions}
    ours = []
    for type_, status, reason, message in HEALTHY_CONDITIONS:
        old = by_type.get(type_)
        since = old.last_transition_time if old is not None and old.status == status else None
        ours.append(
            NodeCondition(
                type=type_,
                status=status,
                last_heartbeat_time=stamp,
                last_transition_time=since or stamp,
                reason=reason,
                message=message,
            )
        )
    mine = {t for t, _, _, _ in HEALTHY_CONDITIONS}
    rest = tuple(c for c in node.status.conditions if c.type not in mine)
    return msgspec.structs.replace(node.status, conditions=(*ours, *rest))


def _conditions(now: str, *types: str) -> tuple[PodCondition, ...]:
    return tuple(PodCondition(type=t, status="True", last_transition_time=now) for t in types)


def running_status(pod: Pod, now: datetime) -> PodStatus:
    """Status of a pod whose containers the kubelet started (start time kept if already set)."""
    stamp = rfc3339(now)
    started = pod.status.start_time or stamp
    containers = tuple(
        {
            "name": c.name,
            "image": c.image,
            "ready": True,
            "started": True,
            "restartCount": 0,
            "state": {"running": {"startedAt": started}},
        }
        for c in pod.spec.containers
    )
    return msgspec.structs.replace(
        pod.status,
        phase="Running",
        start_time=started,
        conditions=_conditions(
            stamp, "PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"
        ),
        container_statuses=containers,
        reason="",
        message="",
    )


def failed_status(pod: Pod, reason: str, message: str) -> PodStatus:
    """Status of a pod the kubelet refused to start (admission failure)."""
    return msgspec.structs.replace(pod.status, phase="Failed", reason=reason, message=message)
