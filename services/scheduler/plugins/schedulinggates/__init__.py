"""SchedulingGates: a pod with ``spec.schedulingGates`` is not tried until the gates are removed."""

from __future__ import annotations

from draflow.events.api.core_v1 import Pod
from draflow.services.scheduler.framework.cluster import ClusterState
from draflow.services.scheduler.framework.events import ActionType, ClusterEvent, EventResource
from draflow.services.scheduler.framework.interface import EventRegistration
from draflow.services.scheduler.framework.status import QueueingHint, Status, unresolvable

__all__ = ["NAME", "SchedulingGates"]

NAME = "SchedulingGates"


def _gates(pod: Pod) -> list[str]:
    return [str(g.get("name", "")) for g in pod.spec.scheduling_gates]


class SchedulingGates:
    name = NAME

    def pre_enqueue(self, pod: Pod, cluster: ClusterState) -> Status | None:
        gates = _gates(pod)
        if not gates:
            return None
        return unresolvable(f"waiting for scheduling gates: [{' '.join(gates)}]", plugin=NAME)

    def events_to_register(self) -> list[EventRegistration]:
        return [
            EventRegistration(EventResource.UNSCHEDULED_POD, ActionType.UPDATE_POD_SCHEDULING_GATES, _hint),
        ]


def _hint(pod: Pod, event: ClusterEvent, cluster: ClusterState) -> QueueingHint:
    new = event.new
    if new is not None and new.metadata.uid == pod.metadata.uid and not _gates(new):
        return QueueingHint.QUEUE
    return QueueingHint.SKIP
