"""Cluster events that can make a waiting pod schedulable (upstream ``fwk.ClusterEvent``).

The cluster state returns one :class:`ClusterEvent` per object change it applies; the scheduling
queue hands it to the queueing hints of the plugins that rejected each waiting pod. Action types
are flags so that one node update can be "label and taint changed" at once, as upstream.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntFlag, StrEnum
from typing import Any

from draflow.events.api.core_v1 import Node, Pod

__all__ = ["ActionType", "ClusterEvent", "EventResource", "node_update_action", "pod_update_action"]


class EventResource(StrEnum):
    NODE = "Node"
    ASSIGNED_POD = "AssignedPod"  # a pod bound (or assumed) to a node: its resources count there
    UNSCHEDULED_POD = "UnscheduledPod"  # a pod waiting in the queue (its own updates)
    RESOURCE_CLAIM = "ResourceClaim"
    DEVICE_CLASS = "DeviceClass"
    RESOURCE_SLICE = "ResourceSlice"
    DEVICE_TAINT_RULE = "DeviceTaintRule"
    # KEP-4381 numeric parameters: a ResourceClass, NodeResourceCapacity, vendor parameter object
    # or numeric claim changed (the numeric plugin's books, fed by the service shell)
    NUMERIC = "Numeric"


class ActionType(IntFlag):
    ADD = 1
    DELETE = 2
    UPDATE_NODE_ALLOCATABLE = 4
    UPDATE_NODE_LABEL = 8
    UPDATE_NODE_TAINT = 16  # taints or spec.unschedulable
    UPDATE_NODE_CONDITION = 32
    UPDATE_POD_LABEL = 64
    UPDATE_POD_SCALE_DOWN = 128
    UPDATE_POD_TOLERATIONS = 256
    UPDATE_POD_SCHEDULING_GATES = 512
    UPDATE_POD_GENERATED_RESOURCE_CLAIM = 1024
    UPDATE_OTHER = 2048  # any other change (claims, classes, slices: no finer split upstream)

    UPDATE = (
        UPDATE_NODE_ALLOCATABLE
        | UPDATE_NODE_LABEL
        | UPDATE_NODE_TAINT
        | UPDATE_NODE_CONDITION
        | UPDATE_POD_LABEL
        | UPDATE_POD_SCALE_DOWN
        | UPDATE_POD_TOLERATIONS
        | UPDATE_POD_SCHEDULING_GATES
        | UPDATE_POD_GENERATED_RESOURCE_CLAIM
        | UPDATE_OTHER
    )
    ALL = ADD | DELETE | UPDATE


@dataclass(frozen=True, slots=True)
class ClusterEvent:
    """One applied change: what kind of object, which action(s), the object before and after."""

    resource: EventResource
    action: ActionType
    old: Any = None
    new: Any = None

    @property
    def label(self) -> str:
        """Upstream-style event label, e.g. ``Node/UpdateNodeLabel`` (for logs and traces)."""
        return f"{self.resource.value}/{self.action!s}"

    def matches(self, resource: EventResource, actions: ActionType) -> bool:
        return self.resource == resource and bool(self.action & actions)


def node_update_action(old: Node, new: Node) -> ActionType:
    """Which node aspects changed (zero when nothing the scheduler reads changed)."""
    action = ActionType(0)
    # allocatable defaults to capacity (nodeinfo.node_resources)
    if (old.status.allocatable or old.status.capacity) != (new.status.allocatable or new.status.capacity):
        action |= ActionType.UPDATE_NODE_ALLOCATABLE
    if old.metadata.labels != new.metadata.labels:
        action |= ActionType.UPDATE_NODE_LABEL
    if old.spec.taints != new.spec.taints or old.spec.unschedulable != new.spec.unschedulable:
        action |= ActionType.UPDATE_NODE_TAINT
    if old.status.conditions != new.status.conditions:
        action |= ActionType.UPDATE_NODE_CONDITION
    return action


def pod_update_action(old: Pod, new: Pod) -> ActionType:
    """Which pod aspects changed (upstream ``extractPodUpdateActionTypes``, simplified)."""
    action = ActionType(0)
    if old.metadata.labels != new.metadata.labels:
        action |= ActionType.UPDATE_POD_LABEL
    if old.spec.tolerations != new.spec.tolerations:
        action |= ActionType.UPDATE_POD_TOLERATIONS
    if old.spec.scheduling_gates != new.spec.scheduling_gates:
        action |= ActionType.UPDATE_POD_SCHEDULING_GATES
    if old.status.resource_claim_statuses != new.status.resource_claim_statuses:
        action |= ActionType.UPDATE_POD_GENERATED_RESOURCE_CLAIM
    if _requests(old) != _requests(new):
        action |= ActionType.UPDATE_POD_SCALE_DOWN
    if not action:
        action = ActionType.UPDATE_OTHER
    return action


def _requests(pod: Pod) -> tuple[object, ...]:
    spec = pod.spec
    return (
        tuple(c.resources.requests for c in spec.containers),
        tuple(c.resources.requests for c in spec.init_containers),
        spec.resources.requests if spec.resources is not None else None,
    )
