"""NodeUnschedulable: cordoned nodes (``spec.unschedulable``) only take pods tolerating
``node.kubernetes.io/unschedulable:NoSchedule``."""

from __future__ import annotations

from draflow.events.api.core_v1 import Pod, Taint
from draflow.services.scheduler.framework.cluster import ClusterState
from draflow.services.scheduler.framework.events import ActionType, ClusterEvent, EventResource
from draflow.services.scheduler.framework.interface import CycleState, EventRegistration
from draflow.services.scheduler.framework.nodeinfo import NodeInfo
from draflow.services.scheduler.framework.status import QueueingHint, Status, unresolvable
from draflow.services.scheduler.plugins.tainttoleration import tolerates

__all__ = ["NAME", "REASON", "NodeUnschedulable"]

NAME = "NodeUnschedulable"
REASON = "node(s) were unschedulable"
_REJECT = unresolvable(REASON, plugin=NAME)
_TAINT = Taint(key="node.kubernetes.io/unschedulable", effect="NoSchedule")


def _tolerated(pod: Pod) -> bool:
    return any(tolerates(t, _TAINT) for t in pod.spec.tolerations)


class NodeUnschedulable:
    name = NAME

    def filter(self, state: CycleState, pod: Pod, node: NodeInfo) -> Status | None:
        if node.unschedulable and not _tolerated(pod):
            return _REJECT
        return None

    def filter_batch(
        self, state: CycleState, pod: Pod, nodes: list[NodeInfo], rejected: list[tuple[NodeInfo, Status]]
    ) -> list[NodeInfo]:
        if _tolerated(pod):
            return nodes
        kept = []
        for node in nodes:
            if node.unschedulable:
                rejected.append((node, _REJECT))
            else:
                kept.append(node)
        return kept

    def events_to_register(self) -> list[EventRegistration]:
        return [
            EventRegistration(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_TAINT, _node_hint),
        ]


def _node_hint(pod: Pod, event: ClusterEvent, cluster: ClusterState) -> QueueingHint:
    node = event.new
    if node is None:
        return QueueingHint.SKIP
    if not node.spec.unschedulable or _tolerated(pod):
        return QueueingHint.QUEUE
    return QueueingHint.SKIP
