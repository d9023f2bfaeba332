"""One node as the scheduler sees it: allocatable, what its pods request, taints, labels.

Kept up to date incrementally by the cluster state (pods bound or assumed onto the node add
their requests; removal subtracts them), so the node-fit check is a few integer comparisons.
"""

from __future__ import annotations

from draflow.events.api.core_v1 import Node, Taint
from draflow.services.scheduler.framework.resources import PODS, node_allocatable

__all__ = ["NodeInfo", "PodUsage", "node_resources"]

_BLOCKING = ("NoSchedule", "NoExecute")


def node_resources(node: Node) -> dict[str, str | int | float]:
    """What the node offers: ``status.allocatable``, or ``status.capacity`` when allocatable is
    unset (the API server's defaulting of NodeStatus)."""
    return dict(node.status.allocatable or node.status.capacity)


class PodUsage:
    """What one pod occupies on its node (its requests) and whether it is only assumed."""

    __slots__ = ("assumed", "requests", "uid")

    def __init__(self, uid: str, requests: dict[str, int], assumed: bool) -> None:
        self.uid = uid
        self.requests = requests
        self.assumed = assumed


class NodeInfo:
    """Node object plus aggregated usage; ``index`` is its position in name order."""

    __slots__ = (
        "allocatable",
        "blocking_taints",
        "free",
        "index",
        "labels",
        "name",
        "node",
        "pods",
        "requested",
        "unschedulable",
    )

    def __init__(self, node: Node, pods: dict[str, PodUsage] | None = None) -> None:
        self.name = node.metadata.name
        self.index = 0
        self.pods: dict[str, PodUsage] = pods if pods is not None else {}
        self.requested: dict[str, int] = {}
        for usage in self.pods.values():
            self._add(usage.requests)
        self.set_node(node)

    def set_node(self, node: Node) -> None:
        self.node = node
        self.labels = node.metadata.labels
        # Kubernetes defaults allocatable to capacity when a Node has none (hand-written Nodes,
        # such as KEP-5004's, only set capacity).
        self.allocatable = node_allocatable(node_resources(node))
        self.unschedulable = node.spec.unschedulable
        self.blocking_taints: tuple[Taint, ...] = tuple(t for t in node.spec.taints if t.effect in _BLOCKING)
        self._refree()

    @property
    def pod_count(self) -> int:
        return len(self.pods)

    def add_pod(self, key: str, usage: PodUsage) -> None:
        old = self.pods.get(key)
        if old is not None:
            self._sub(old.requests)
        self.pods[key] = usage
        self._add(usage.requests)
        self._refree()

    def remove_pod(self, key: str) -> PodUsage | None:
        old = self.pods.pop(key, None)
        if old is not None:
            self._sub(old.requests)
            self._refree()
        return old

    def _refree(self) -> None:
        """``free``: allocatable minus requested for every name either mentions, and ``pods``
        (slots left), so the fit check reads one number per resource."""
        allocatable, requested = self.allocatable, self.requested
        free = {
            name: allocatable.get(name, 0) - requested.get(name, 0) for name in {*allocatable, *requested}
        }
        free[PODS] = allocatable.get(PODS, 0) - len(self.pods)
        self.free = free

    def _add(self, requests: dict[str, int]) -> None:
        requested = self.requested
        for name, value in requests.items():
            requested[name] = requested.get(name, 0) + value

    def _sub(self, requests: dict[str, int]) -> None:
        requested = self.requested
        for name, value in requests.items():
            left = requested.get(name, 0) - value
            if left:
                requested[name] = left
            else:
                requested.pop(name, None)

    def __repr__(self) -> str:
        return f"NodeInfo({self.name}, pods={len(self.pods)}, requested={self.requested})"
