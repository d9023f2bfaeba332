"""TaintToleration: a node's NoSchedule/NoExecute taints must be tolerated by the pod.

A rejection names the first untolerated taint as kube-scheduler does
(``node(s) had untolerated taint {node.kubernetes.io/unreachable: }``), so nodes with different
taints are counted on separate diagnosis lines."""

from __future__ import annotations

from collections.abc import Iterable

from draflow.events.api.core_v1 import Pod, Taint, Toleration
from draflow.services.scheduler.framework.cluster import ClusterState
from draflow.services.scheduler.framework.events import ActionType, ClusterEvent, EventResource
from draflow.services.scheduler.framework.interface import CycleState, EventRegistration
from draflow.services.scheduler.framework.nodeinfo import NodeInfo
from draflow.services.scheduler.framework.status import QueueingHint, Status, unresolvable

__all__ = ["NAME", "REASON", "TaintToleration", "tolerates", "untolerated"]

NAME = "TaintToleration"
REASON = "node(s) had untolerated taint {%s: %s}"  # upstream's wording, with the first such taint
_BLOCKING = ("NoSchedule", "NoExecute")
_REJECTS: dict[tuple[str, str], Status] = {}  # one Status per taint (Filter runs per node)


def _reject(taint: Taint) -> Status:
    key = (taint.key, taint.value)
    status = _REJECTS.get(key)
    if status is None:
        if len(_REJECTS) > 4096:
            _REJECTS.clear()
        status = _REJECTS[key] = unresolvable(REASON % key, plugin=NAME)
    return status


def tolerates(toleration: Toleration, taint: Taint) -> bool:
    """core/v1 ``Toleration.ToleratesTaint`` (``Toleration.tolerates``)."""
    return toleration.tolerates(taint)


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
        if taints:
            taint = untolerated(taints, pod.spec.tolerations)
            if taint is not None:
                return _reject(taint)
        return None

    def filter_batch(
        self, state: CycleState, pod: Pod, nodes: list[NodeInfo], rejected: list[tuple[NodeInfo, Status]]
    ) -> list[NodeInfo]:
        tolerations = pod.spec.tolerations
        kept = []
        for node in nodes:
            taints = node.blocking_taints
            taint = untolerated(taints, tolerations) if taints else None
            if taint is not None:
                rejected.append((node, _reject(taint)))
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
