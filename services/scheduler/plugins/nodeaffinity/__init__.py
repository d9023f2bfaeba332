"""NodeAffinity: ``spec.nodeSelector`` labels and the required node affinity must match the node.

``spec.affinity`` is kept as decoded JSON by the API model; the required node selector is read
from ``nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution`` and matched with the same
NodeSelector semantics as everywhere else (terms ORed, requirements ANDed, ``metadata.name``
field selectors). Preferred terms are a scoring matter and not implemented.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from events.api.core_v1 import Node, Pod
from events.api.meta import NodeSelector
from services.dra.structured.nodeselector import CompiledNodeSelector, NodeSelectorParseError
from services.scheduler.framework.cluster import ClusterState
from services.scheduler.framework.events import ActionType, ClusterEvent, EventResource
from services.scheduler.framework.interface import CycleState, EventRegistration
from services.scheduler.framework.nodeinfo import NodeInfo
from services.scheduler.framework.status import SKIP, QueueingHint, Status, unresolvable

__all__ = ["NAME", "REASON", "NodeAffinity", "RequiredAffinity", "required_affinity"]

NAME = "NodeAffinity"
REASON = "node(s) didn't match Pod's node affinity/selector"
_REJECT = unresolvable(REASON, plugin=NAME)


class RequiredAffinity:
    """The pod's node selector labels plus its compiled required node affinity (if any)."""

    __slots__ = ("labels", "selector")

    def __init__(self, labels: Mapping[str, str], selector: CompiledNodeSelector | None) -> None:
        self.labels = labels
        self.selector = selector

    def matches(self, name: str, node_labels: Mapping[str, str]) -> bool:
        """Raises NodeSelectorParseError for a malformed affinity (reported by PreFilter)."""
        for key, value in self.labels.items():
            if node_labels.get(key) != value:
                return False
        return self.selector is None or self.selector.matches(name, node_labels)


def required_affinity(pod: Pod) -> RequiredAffinity | None:
    """None when the pod constrains nothing; raises ValueError for an unreadable affinity."""
    selector: CompiledNodeSelector | None = None
    affinity: Any = pod.spec.affinity
    if affinity:
        node_affinity = affinity.get("nodeAffinity") or {}
        required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
        if required is not None:
            try:
                parsed = msgspec.convert(required, NodeSelector)
            except msgspec.ValidationError as exc:
                raise ValueError(f"spec.affinity.nodeAffinity: {exc}") from None
            selector = CompiledNodeSelector(parsed)
    if not pod.spec.node_selector and selector is None:
        return None
    return RequiredAffinity(pod.spec.node_selector, selector)


class NodeAffinity:
    name = NAME

    def pre_filter(self, state: CycleState, pod: Pod) -> Status | None:
        try:
            required = required_affinity(pod)
        except ValueError as exc:
            return unresolvable(str(exc), plugin=NAME)
        if required is not None and required.selector is not None and required.selector.error:
            return unresolvable(required.selector.error, plugin=NAME)
        if required is None:
            return SKIP
        state.data[NAME] = required
        return None

    def filter(self, state: CycleState, pod: Pod, node: NodeInfo) -> Status | None:
        required: RequiredAffinity = state.data[NAME]
        if required.matches(node.name, node.labels):
            return None
        return _REJECT

    def events_to_register(self) -> list[EventRegistration]:
        return [
            EventRegistration(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL, _node_hint),
        ]


def _matches(pod: Pod, node: Node) -> bool:
    try:
        required = required_affinity(pod)
        return required is None or required.matches(node.metadata.name, node.metadata.labels)
    except (ValueError, NodeSelectorParseError):
        return False


def _node_hint(pod: Pod, event: ClusterEvent, cluster: ClusterState) -> QueueingHint:
    """Requeue when the node matches now and did not before (or is new)."""
    new = event.new
    if new is None or not _matches(pod, new):
        return QueueingHint.SKIP
    if event.old is not None and _matches(pod, event.old):
        return QueueingHint.SKIP
    return QueueingHint.QUEUE
