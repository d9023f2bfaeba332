"""What a scheduling cycle decides, as data the PodScheduling / reallocation sagas append.

* :class:`Reserved` — the pod goes to ``node_name``; ``claims`` says, per claim, what PreBind
  writes (finalizer, the allocation computed in this cycle if any, the pod in ``reservedFor``).
  The devices and the pod's resources are already counted in the assume cache.
* :class:`Unschedulable` — no node fits. ``message`` is kube-scheduler's FitError text for the
  pod condition and the ``FailedScheduling`` Warning event; ``deallocate`` is set when
  PostFilter picked an allocated claim to free (the reallocation saga). A Reserve plugin that
  waits (``Code.PENDING``) ends the cycle this way too, on the one chosen node: the pod waits in
  the pool until that plugin's queueing hint requeues it.
* :class:`SchedulingError` — the attempt failed (broken claim or class, internal error); the pod
  goes to backoff and the message is shown like upstream's ``SchedulerError``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from draflow.events.api.core_v1 import ContainerExtendedResourceRequest, Pod, PodCondition
from draflow.events.api.resource_v1 import AllocationResult, ResourceClaim, ResourceClaimConsumerReference
from draflow.events.dra import RequestDiagnosis
from draflow.services.dra.numeric.plans import NumericClaimPlan
from draflow.services.dra.resourceclaim import ClaimRef

__all__ = [
    "ClaimBinding",
    "ExtendedClaim",
    "KubeEventData",
    "PodRef",
    "Reserved",
    "ScheduleResult",
    "SchedulingError",
    "Unschedulable",
    "failed_scheduling_event",
    "pod_scheduled_condition",
    "scheduled_event",
]


@dataclass(frozen=True, slots=True)
class PodRef:
    namespace: str
    name: str
    uid: str

    @classmethod
    def of(cls, pod: Pod) -> PodRef:
        return cls(pod.metadata.namespace, pod.metadata.name, pod.metadata.uid)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def __str__(self) -> str:
        return self.key


@dataclass(frozen=True, slots=True)
class ClaimBinding:
    """PreBind for one claim: ensure the delete-protection finalizer, set ``status.allocation``
    when this cycle allocated the claim (``allocation`` not None), add ``consumer`` to
    ``status.reservedFor``. ``draflow.services.scheduler.framework.prebind`` applies it to a claim."""

    claim: ClaimRef
    allocation: AllocationResult | None
    consumer: ResourceClaimConsumerReference


@dataclass(frozen=True, slots=True)
class ExtendedClaim:
    """KEP-5004: the pod's special claim for extended resources backed by DRA, as PreBind creates
    it (generated name and uid chosen by the cycle, no status), and the pod's
    ``extendedResourceClaimStatus.requestMappings``. Its allocation and reservation are a
    ``ClaimBinding`` in ``Reserved.claims`` like any other claim's."""

    claim: ResourceClaim
    mappings: tuple[ContainerExtendedResourceRequest, ...] = ()


@dataclass(frozen=True, slots=True)
class Reserved:
    pod: PodRef
    node_name: str
    claims: tuple[ClaimBinding, ...] = ()
    extended: ExtendedClaim | None = None
    evaluated_nodes: int = 0
    feasible_nodes: int = 0
    # KEP-4381: numeric (classic) claims PreBind allocates or reserves
    numeric: tuple[NumericClaimPlan, ...] = ()


@dataclass(frozen=True, slots=True)
class Unschedulable:
    pod: PodRef
    message: str
    num_nodes: int = 0
    # reason -> number of nodes (the histogram in the message), sorted as in the message
    node_reasons: tuple[tuple[str, int], ...] = ()
    # reason -> the first few rejected node names (sorted), for explain
    reason_nodes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    unschedulable_plugins: frozenset[str] = frozenset()
    # plugin -> reasons it gave (deduplicated, first-seen order), for describe/explain
    plugin_reasons: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    pre_filter_message: str = ""
    post_filter_message: str = ""
    deallocate: ClaimRef | None = None
    # KEP-5004: a special claim left over from an earlier cycle, which PostFilter deletes
    delete_claim: ClaimRef | None = None
    # KEP-4381: a numeric claim PostFilter frees (the numeric reallocation saga)
    deallocate_numeric: ClaimRef | None = None
    # per claim request: the allocator's diagnosis of the nodes that had no room (grouped)
    requests: tuple[RequestDiagnosis, ...] = ()


@dataclass(frozen=True, slots=True)
class SchedulingError:
    pod: PodRef
    message: str
    plugin: str = ""


ScheduleResult = Reserved | Unschedulable | SchedulingError


@dataclass(frozen=True, slots=True)
class KubeEventData:
    """The parts of a core/v1 Event the scheduler decides (the shell adds time and source)."""

    type: str
    reason: str
    message: str
    action: str = "Scheduling"


def pod_scheduled_condition(result: Unschedulable | SchedulingError) -> PodCondition:
    """The ``PodScheduled=False`` condition upstream sets (no timestamps: the shell adds them)."""
    reason = "Unschedulable" if isinstance(result, Unschedulable) else "SchedulerError"
    return PodCondition(type="PodScheduled", status="False", reason=reason, message=result.message)


def failed_scheduling_event(result: Unschedulable | SchedulingError) -> KubeEventData:
    return KubeEventData(type="Warning", reason="FailedScheduling", message=result.message)


def scheduled_event(result: Reserved) -> KubeEventData:
    """Upstream's ``Scheduled`` event, recorded after Bind."""
    return KubeEventData(
        type="Normal",
        reason="Scheduled",
        message=f"Successfully assigned {result.pod.key} to {result.node_name}",
        action="Binding",
    )
