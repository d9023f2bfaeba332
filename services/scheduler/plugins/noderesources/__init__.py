"""NodeResourcesFit: the pod's requests must fit in what the node has left.

Checks, as upstream ``fitsRequest``: the pod count against allocatable ``pods`` ("Too many
pods"), then cpu, memory, ephemeral-storage and scalar resources (extended resources,
hugepages) the pod requests, each against allocatable minus what the node's pods (bound and
assumed) request. Every shortfall is a reason ("Insufficient cpu"); the node is
UnschedulableAndUnresolvable when some request exceeds the node's allocatable outright.

KEP-5004 (extended resources backed by DRA): a scalar resource the node does not advertise (or
advertises as 0) but a DeviceClass maps (``extendedResourceName`` or the implicit
``deviceclass.resource.kubernetes.io/<class>``) is left to the DynamicResources plugin, which
serves it through the pod's special claim. The predicate is ``NodeResourcesFit(dra_backed=...)``,
by default the cluster snapshot's mapping (``ClusterState.extended``). A node that advertises the
resource (a device plugin) is fitted here as before.
"""

from __future__ import annotations

from collections.abc import Callable

from events.api.core_v1 import Pod
from events.api.resource_v1 import DeviceClass
from services.dra.extended.names import implicit_name
from services.scheduler.framework.cluster import ClusterState
from services.scheduler.framework.events import ActionType, ClusterEvent, EventResource
from services.scheduler.framework.interface import CycleState, EventRegistration
from services.scheduler.framework.nodeinfo import NodeInfo, node_resources
from services.scheduler.framework.resources import (
    CPU,
    EPHEMERAL_STORAGE,
    MEMORY,
    PODS,
    node_allocatable,
    pod_requests,
)
from services.scheduler.framework.status import QueueingHint, Status, unresolvable, unschedulable

__all__ = ["NAME", "NodeResourcesFit", "fits"]

NAME = "NodeResourcesFit"
TOO_MANY_PODS = "Too many pods"
_FIRST = {CPU: 0, MEMORY: 1, EPHEMERAL_STORAGE: 2}

# (resource, amount) pairs, cpu/memory/ephemeral-storage first, then scalars by name.
Requests = tuple[tuple[str, int], ...]


def ordered_requests(requests: dict[str, int]) -> Requests:
    return tuple(sorted(requests.items(), key=lambda item: (_FIRST.get(item[0], 3), item[0])))


def fits(
    requests: Requests,
    pod_count: int,
    allocatable: dict[str, int],
    requested: dict[str, int],
    dra_backed: Callable[[str], bool] | None = None,
) -> tuple[list[str], bool]:
    """(reasons, unresolvable) for a pod with ``requests`` on a node in this state."""
    reasons: list[str] = []
    hard = False
    if pod_count + 1 > allocatable.get(PODS, 0):
        reasons.append(TOO_MANY_PODS)
    for name, amount in requests:
        have = allocatable.get(name, 0)
        if amount > have - requested.get(name, 0):
            if have == 0 and dra_backed is not None and dra_backed(name):
                continue
            reasons.append(f"Insufficient {name}")
            if amount > have:
                hard = True
    return reasons, hard


class NodeResourcesFit:
    name = NAME

    def __init__(self, dra_backed: Callable[[str], bool] | None = None) -> None:
        self.dra_backed = dra_backed

    def pre_filter(self, state: CycleState, pod: Pod) -> Status | None:
        state.data[NAME] = ordered_requests(pod_requests(pod))
        return None

    def filter(self, state: CycleState, pod: Pod, node: NodeInfo) -> Status | None:
        requests: Requests = state.data[NAME]
        free = node.free
        if free[PODS] > 0:
            for name, amount in requests:
                if amount > free.get(name, 0):
                    break
            else:
                return None  # the common case, without building reason lists
        return self._status(requests, node, self._predicate(state))

    def _predicate(self, state: CycleState) -> Callable[[str], bool]:
        return self.dra_backed if self.dra_backed is not None else state.cluster.extended.is_dra_backed

    def filter_batch(
        self, state: CycleState, pod: Pod, nodes: list[NodeInfo], rejected: list[tuple[NodeInfo, Status]]
    ) -> list[NodeInfo]:
        requests: Requests = state.data[NAME]
        kept = []
        for node in nodes:
            free = node.free
            if free[PODS] > 0:
                for name, amount in requests:
                    if amount > free.get(name, 0):
                        break
                else:
                    kept.append(node)
                    continue
            status = self._status(requests, node, self._predicate(state))
            if status is None:
                kept.append(node)
            else:
                rejected.append((node, status))
        return kept

    def _status(self, requests: Requests, node: NodeInfo, dra_backed: Callable[[str], bool]) -> Status | None:
        reasons, hard = fits(requests, len(node.pods), node.allocatable, node.requested, dra_backed)
        if not reasons:
            return None
        make = unresolvable if hard else unschedulable
        return make(*reasons, plugin=NAME)

    def events_to_register(self) -> list[EventRegistration]:
        return [
            EventRegistration(
                EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_ALLOCATABLE, _node_hint
            ),
            EventRegistration(
                EventResource.ASSIGNED_POD, ActionType.DELETE | ActionType.UPDATE_POD_SCALE_DOWN, _pod_hint
            ),
            # KEP-5004: a class that starts mapping a resource the pod asks for (upstream registers
            # DeviceClass events when DRAExtendedResource is on)
            EventRegistration(
                EventResource.DEVICE_CLASS, ActionType.ADD | ActionType.UPDATE_OTHER, _class_hint
            ),
        ]


def _node_hint(pod: Pod, event: ClusterEvent, cluster: ClusterState) -> QueueingHint:
    """Requeue when the pod would fit the (empty) changed node."""
    node = event.new
    if node is None:
        return QueueingHint.SKIP
    reasons, _ = fits(
        ordered_requests(pod_requests(pod)),
        0,
        node_allocatable(node_resources(node)),
        {},
        cluster.extended.is_dra_backed,
    )
    return QueueingHint.SKIP if reasons else QueueingHint.QUEUE


def _class_hint(pod: Pod, event: ClusterEvent, cluster: ClusterState) -> QueueingHint:
    """Requeue when the added or changed DeviceClass maps an extended resource the pod requests."""
    cls = event.new
    if not isinstance(cls, DeviceClass):
        return QueueingHint.SKIP
    names = {implicit_name(cls.metadata.name)}
    if cls.spec.extended_resource_name:
        names.add(cls.spec.extended_resource_name)
    return QueueingHint.QUEUE if names & pod_requests(pod).keys() else QueueingHint.SKIP


def _pod_hint(pod: Pod, event: ClusterEvent, cluster: ClusterState) -> QueueingHint:
    """A bound pod went away or shrank: room may have appeared."""
    gone = event.old
    if gone is None or not gone.spec.node_name:
        return QueueingHint.SKIP
    return QueueingHint.QUEUE
