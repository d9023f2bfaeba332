"""The pure scheduling core: cluster snapshot, scheduling cycle, queue, decisions.

Public API (no I/O; the service shell and the sagas call these)::

    from services.scheduler.framework import Scheduler, SchedulerConfig
    core = Scheduler(SchedulerConfig(), plugins=default_plugins(), clock=time.monotonic)
    core.observe(obj); core.observe_deleted(kind, ns, name)
    qpi, result = core.schedule_next()        # Reserved | Unschedulable | SchedulingError
    core.unreserve(pod)                       # compensation

Lower level: ``ClusterState`` (incremental snapshot + assume cache), ``schedule_one(pod,
cluster, profile, config)``, ``SchedulingQueue``, ``Profile``. See docs/scheduler.md.
"""

from services.scheduler.framework.cluster import ClusterState, is_assigned
from services.scheduler.framework.config import SchedulerConfig, num_feasible_nodes_to_find
from services.scheduler.framework.core import Scheduler
from services.scheduler.framework.cycle import schedule_one, start_index
from services.scheduler.framework.decisions import (
    ClaimBinding,
    ExtendedClaim,
    KubeEventData,
    PodRef,
    Reserved,
    ScheduleResult,
    SchedulingError,
    Unschedulable,
    failed_scheduling_event,
    pod_scheduled_condition,
    scheduled_event,
)
from services.scheduler.framework.diagnosis import NO_NODES_MESSAGE, Diagnosis
from services.scheduler.framework.events import ActionType, ClusterEvent, EventResource
from services.scheduler.framework.interface import CycleState, EventRegistration, PostFilterOutcome
from services.scheduler.framework.nodeinfo import NodeInfo
from services.scheduler.framework.profile import Profile
from services.scheduler.framework.queue import QueuedPodInfo, SchedulingQueue
from services.scheduler.framework.status import Code, QueueingHint, Status

__all__ = [
    "NO_NODES_MESSAGE",
    "ActionType",
    "ClaimBinding",
    "ClusterEvent",
    "ClusterState",
    "Code",
    "CycleState",
    "Diagnosis",
    "EventRegistration",
    "EventResource",
    "ExtendedClaim",
    "KubeEventData",
    "NodeInfo",
    "PodRef",
    "PostFilterOutcome",
    "Profile",
    "QueuedPodInfo",
    "QueueingHint",
    "Reserved",
    "ScheduleResult",
    "Scheduler",
    "SchedulerConfig",
    "SchedulingError",
    "SchedulingQueue",
    "Status",
    "Unschedulable",
    "failed_scheduling_event",
    "is_assigned",
    "num_feasible_nodes_to_find",
    "pod_scheduled_condition",
    "schedule_one",
    "scheduled_event",
    "start_index",
]
