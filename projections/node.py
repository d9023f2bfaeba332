"""Reducers of the node-side facts (:mod:`draflow.events.node`) in the object fold."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from msgspec.structs import replace

from draflow.events.api.coordination_v1 import Lease
from draflow.events.api.core_v1 import Node, NodeCondition, Pod, PodCondition, Taint
from draflow.events.envelope import Event
from draflow.events.node import (
    LeaseRenewed,
    NodeHeartbeatLost,
    NodeTainted,
    NodeUntainted,
    PodContainerStatusesReported,
    PodDisruptionTargeted,
)
from draflow.projections.dra import set_condition

__all__ = ["REDUCERS", "set_node_condition"]


def _container_statuses(pod: Pod | None, ev: PodContainerStatusesReported) -> Pod | None:
    if pod is None:
        return None
    status = replace(
        pod.status,
        container_statuses=tuple(ev.container_statuses),
        init_container_statuses=tuple(ev.init_container_statuses),
    )
    if ev.at and status.phase == "Running":
        unready = [str(s.get("name")) for s in ev.container_statuses if not s.get("ready")]
        reason = "ContainersNotReady" if unready else ""
        message = f"containers with unready status: [{' '.join(unready)}]" if unready else ""
        value = "False" if unready else "True"
        for kind in ("ContainersReady", "Ready"):
            cond = PodCondition(
                type=kind, status=value, reason=reason, message=message, last_transition_time=_time(ev.at)
            )
            status = set_condition(status, cond)
    return replace(pod, status=status)


def _time(stamp: str) -> str | None:
    """A metav1.Time (seconds) from a decision time that may carry microseconds."""
    if not stamp:
        return None
    return stamp[:19] + "Z" if len(stamp) > 20 and stamp[19] == "." else stamp


def _disruption_target(pod: Pod | None, ev: PodDisruptionTargeted) -> Pod | None:
    if pod is None:
        return None
    cond = PodCondition(
        type="DisruptionTarget",
        status="True",
        reason=ev.reason,
        message=ev.message,
        last_transition_time=_time(ev.at),
    )
    return replace(pod, status=set_condition(pod.status, cond))


def _lease_renewed(lease: Lease | None, ev: LeaseRenewed) -> Lease | None:
    if lease is None:
        return None
    return replace(lease, spec=replace(lease.spec, renew_time=ev.renew_time))


def set_node_condition(
    conditions: tuple[NodeCondition, ...], cond: NodeCondition
) -> tuple[NodeCondition, ...]:
    """``conditions`` with ``cond`` replacing the one of its type (appended when new)."""
    if any(c.type == cond.type for c in conditions):
        return tuple(cond if c.type == cond.type else c for c in conditions)
    return (*conditions, cond)


def _heartbeat_lost(node: Node | None, ev: NodeHeartbeatLost) -> Node | None:
    if node is None:
        return None
    conditions = node.status.conditions
    for cond in ev.conditions:
        conditions = set_node_condition(conditions, cond)
    return replace(node, status=replace(node.status, conditions=conditions))


def _same(a: Taint, b: Taint) -> bool:
    return a.key == b.key and a.effect == b.effect


def _tainted(node: Node | None, ev: NodeTainted) -> Node | None:
    if node is None:
        return None
    kept = tuple(t for t in node.spec.taints if not any(_same(t, new) for new in ev.taints))
    return replace(node, spec=replace(node.spec, taints=kept + tuple(ev.taints)))


def _untainted(node: Node | None, ev: NodeUntainted) -> Node | None:
    if node is None:
        return None
    kept = tuple(t for t in node.spec.taints if not any(_same(t, gone) for gone in ev.taints))
    if len(kept) == len(node.spec.taints):
        return node
    return replace(node, spec=replace(node.spec, taints=kept))


# The fold's reducers of these events (``draflow.projections.objects`` assembles every table).
REDUCERS: dict[type[Event], Callable[[Any, Any], Any]] = {
    PodContainerStatusesReported: _container_statuses,
    PodDisruptionTargeted: _disruption_target,
    LeaseRenewed: _lease_renewed,
    NodeHeartbeatLost: _heartbeat_lost,
    NodeTainted: _tainted,
    NodeUntainted: _untainted,
}
