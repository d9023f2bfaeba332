"""NodeName: a pod naming a node (``spec.nodeName``) fits only that node.

Pods with ``spec.nodeName`` never reach the queue (they are bound already); the plugin matters
for simulations that ask "where could this pod go", as upstream's does for the autoscaler.
"""

from __future__ import annotations

from draflow.events.api.core_v1 import Pod
from draflow.services.scheduler.framework.cluster import ClusterState
from draflow.services.scheduler.framework.events import ActionType, ClusterEvent, EventResource
from draflow.services.scheduler.framework.interface import CycleState, EventRegistration
from draflow.services.scheduler.framework.nodeinfo import NodeInfo
from draflow.services.scheduler.framework.status import SKIP, QueueingHint, Status, unresolvable

__all__ = ["NAME", "REASON", "NodeName"]

NAME = "NodeName"
REASON = "node(s) didn't match the requested node name"
_REJECT = unresolvable(REASON, plugin=NAME)


class NodeName:
    name = NAME

    def pre_filter(self, state: CycleState, pod: Pod) -> Status | None:
        return None if pod.spec.node_name else SKIP

    def filter(self, state: CycleState, pod: Pod, node: NodeInfo) -> Status | None:
        if pod.spec.node_name and pod.spec.node_name != node.name:
            return _REJECT
        return None

    def events_to_register(self) -> list[EventRegistration]:
        return [EventRegistration(EventResource.NODE, ActionType.ADD, _node_hint)]


def _node_hint(pod: Pod, event: ClusterEvent, cluster: ClusterState) -> QueueingHint:
    node = event.new
    if node is not None and (not pod.spec.node_name or node.metadata.name == pod.spec.node_name):
        return QueueingHint.QUEUE
    return QueueingHint.SKIP
