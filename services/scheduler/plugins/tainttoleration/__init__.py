"""TaintToleration: a node's NoSchedule/NoExecute taints must be tolerated by the pod."""

from __future__ import annotations

from collections.abc import Iterable

from events.api.core_v1 import Pod, Taint, Toleration
from services.scheduler.framework.cluster import ClusterState
from services.scheduler.framework.events import ActionType, ClusterEvent, EventResource
from services.scheduler.framework.interface import CycleState, EventRegistration
from services.scheduler.framework.nodeinfo import NodeInfo
from services.scheduler.framework.status import QueueingHint, Status, unresolvable

__all__ = ["NAME", "REASON", "TaintToleration", "tolerates", "untolerated"]

NAME = "TaintToleration"
REASON = "node(s) had untolerated taint(s)"
_REJECT = unresolvable(REASON, plugin=NAME)
_BLOCKING = ("NoSchedule", "NoExecute")


def tolerates(toleration: Toleration, taint: Taint) -> bool:
    """core/v1 ``Toleration.ToleratesTaint``: empty effect/key match all; Exists ignores the value."""
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    if toleration.operator in ("", "Equal"):
        return toleration.value == taint.value
    return toleration.operator == "Exists"


def untolerated(taints: Iterable[Taint], tolerations: tuple[Toleration, ...]) -> Taint | None:
    """The first taint no toleration tolerates (upstream ``FindMatchingUntoleratedTaint``)."""
    for taint in taints:
        if not any(tolerates(t, taint) for t in tolerations):
            return taint
    return None


class TaintToleration:
    name = NAME

    def filter(self, state: CycleState, pod: Pod, node: NodeInfo) -> Status | None:
        taints = node.blocking_taints
        if taints and untolerated(taints, pod.spec.tolerations) is not None:
            return _REJECT
        return None

    def filter_batch(
        self, state: CycleState, pod: Pod, nodes: list[NodeInfo], rejected: list[tuple[NodeInfo, Status]]
    ) -> list[NodeInfo]:
        tolerations = pod.spec.tolerations
        kept = []
        for node in nodes:
            taints = node.blocking_taints
            if taints and untolerated(taints, tolerations) is not None:
                rejected.append((node, _REJECT))
            else:
                kept.append(node)
        return kept

    def events_to_register(self) -> list[EventRegistration]:
        return [
            EventRegistration(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_TAINT, _node_hint),
        ]


def _node_hint(pod: Pod, event: ClusterEvent, cluster: ClusterState) -> QueueingHint:
    """Requeue when the changed node's taints are all tolerated now."""
    if event.new is None:
        return QueueingHint.SKIP
    taints = [t for t in event.new.spec.taints if t.effect in _BLOCKING]
    if untolerated(taints, pod.spec.tolerations) is None:
        return QueueingHint.QUEUE
    return QueueingHint.SKIP
