"""The shared DRA domain events: facts the scheduler, claim controller, kubelet and workloads append
on the subjects of the ResourceClaims and Pods they change.

They are ordinary :class:`draflow.events.envelope.Event` classes on an object's aggregate subject
(``<root>.ev.ResourceClaim.<ns>.<name>``, ``<root>.ev.Pod.<ns>.<name>``), appended with the
object's resourceVersion as ``expected_last_seq`` (optimistic concurrency). Their pure reducers,
registered in the object fold, live in :mod:`draflow.projections.dra`, so ``draflow get`` shows their
effect as if a Kubernetes controller had written the status.

Claim events:

* :class:`ClaimAllocated` also adds the ``resource.kubernetes.io/delete-protection`` finalizer
  (upstream the scheduler adds it right before it writes the allocation) and, when it names a
  ``consumer``, reserves the claim for that pod: one fact, one append (PreBind's).
* :class:`ClaimDeallocated` clears the allocation and the device statuses and drops that
  finalizer (what upstream's claim controller and the scheduler's Unreserve do together). Its
  writer must first see ``reservedFor`` empty, or name the last consumers in ``released``: one
  fact, one append.

Pod events cover the scheduler (``PodBound``, ``PodUnschedulable``,
``PodExtendedResourceClaimStatusRecorded`` for KEP-5004's special claim), the claim controller
(``PodClaimStatusesRecorded``) and the node side (``PodResourcesPrepared``, ``PodStarted``,
``PodFailed``, ``PodSucceeded``). Timestamps travel in the event (``at``) because reducers are pure.
"""

from __future__ import annotations

import msgspec

from draflow.events.api.core_v1 import PodExtendedResourceClaimStatus, PodResourceClaimStatus
from draflow.events.api.resource_v1 import AllocationResult, ResourceClaimConsumerReference
from draflow.events.envelope import Event

__all__ = [
    "DELETE_PROTECTION_FINALIZER",
    "MAX_REJECTIONS",
    "ClaimAllocated",
    "ClaimDeallocated",
    "ClaimReservationsReleased",
    "ClaimReserved",
    "ContainerCDIDevices",
    "DeviceElimination",
    "NodeRejection",
    "PodBound",
    "PodClaimStatusesRecorded",
    "PodExtendedResourceClaimStatusRecorded",
    "PodFailed",
    "PodResourcesPrepared",
    "PodStarted",
    "PodSucceeded",
    "PodUnschedulable",
    "RequestDiagnosis",
]

DELETE_PROTECTION_FINALIZER = "resource.kubernetes.io/delete-protection"


# -- on the ResourceClaim subject -------------------------------------------------------------------


class ClaimAllocated(Event, frozen=True, kw_only=True):
    """Devices were allocated to the claim for ``pod_uid`` on ``node_name`` (the scheduler's
    PreBind); sets ``status.allocation`` and the delete-protection finalizer.

    ``consumer``: the pod reserved with the allocation (added to ``status.reservedFor``, as
    ``ClaimReserved`` would), so no one ever sees the claim allocated and unreserved, which the
    claim controller would deallocate. None in events written before it existed (those came
    with a ``ClaimReserved`` in the same batch) and in allocations without a pod."""

    allocation: AllocationResult
    node_name: str = ""
    pod_uid: str = ""
    consumer: ResourceClaimConsumerReference | None = None


class ClaimReserved(Event, frozen=True, kw_only=True):
    """``consumer`` (a pod) was added to ``status.reservedFor`` (idempotent for the same uid)."""

    consumer: ResourceClaimConsumerReference


class ClaimReservationsReleased(Event, frozen=True, kw_only=True):
    """The consumers with these uids left ``status.reservedFor`` (pod gone, saga compensated)."""

    uids: tuple[str, ...] = ()


class ClaimDeallocated(Event, frozen=True, kw_only=True):
    """The allocation was given back: ``status.allocation`` and ``status.devices`` cleared and the
    delete-protection finalizer dropped. ``reason``: why (``Unreserve``, ``Reallocate``,
    ``NoConsumers``...).

    ``released``: the consumers (uids) that left ``status.reservedFor`` in the same fact (the last
    ones), so dropping the last reservation and freeing the claim is one single append instead of
    an atomic batch (a file store of its own on the server). Empty in events written before it
    existed (those came after a ``ClaimReservationsReleased`` in the same batch). The devices'
    guards are not released by a message: a guard's take counts as given back once its claim is
    deallocated (``draflow.services.scheduler.service.guard_heads``)."""

    reason: str = ""
    released: tuple[str, ...] = ()


# -- on the Pod subject -----------------------------------------------------------------------------


class PodBound(Event, frozen=True, kw_only=True):
    """The scheduler bound the pod to ``node_name`` (``spec.nodeName``, condition PodScheduled=True)."""

    node_name: str
    at: str = ""


class NodeRejection(msgspec.Struct, frozen=True, kw_only=True):
    """One line of a failed attempt's diagnosis: ``nodes`` nodes rejected for ``reason`` by ``plugin``.

    Nodes are grouped by (plugin, reason), as kube-scheduler's message groups them, so a
    500-node cluster costs a handful of these, not 500."""

    reason: str
    plugin: str = ""
    nodes: int = 0
    # the first MAX_NODE_NAMES of those nodes by name (sorted): which ones, for explain
    node_names: tuple[str, ...] = ()


MAX_REJECTIONS = 16  # diagnosis lines kept per attempt (the message still counts every node)
MAX_NODE_NAMES = 8  # node names kept per diagnosis line
MAX_REQUEST_LINES = 16  # per-request allocator diagnosis lines kept per attempt


class DeviceElimination(msgspec.Struct, frozen=True, kw_only=True):
    """``devices`` devices that matched a request's selectors were ruled out by ``reason``
    (``allocated``, ``taints``, ``counters``, ``capacity``, ``node selector``, ``binding
    conditions``, ``matchAttribute <attr>``, ``distinctAttribute <attr>``)."""

    reason: str
    devices: int = 0


class RequestDiagnosis(msgspec.Struct, frozen=True, kw_only=True):
    """Why one (sub)request of a claim could not be satisfied on some nodes: the allocator's
    by-product when it says "no fit" (or the scheduler's device-index counts on nodes that never
    reached the allocator). Identical lines of several nodes are one line (``nodes``,
    ``node_names``: the first :data:`MAX_NODE_NAMES` by name).

    ``class_matched``: the node's devices the DeviceClass selectors accept; ``selected``: of
    those, the ones the request's own selectors accept; ``eliminated``: why some of these could
    not be used; ``usable``: what is left; ``found``: the most devices the search held for the
    request at once (constraints, other requests of the pod and the 32-results limit count
    here); ``outcome``: the verdict in words."""

    claim: str
    request: str
    device_class: str = ""
    asked: int = 0
    all_devices: bool = False  # allocationMode All: ``asked`` is what "all" stood for
    admin_access: bool = False
    class_matched: int = 0
    selected: int = 0
    eliminated: tuple[DeviceElimination, ...] = ()
    usable: int = 0
    found: int = 0
    outcome: str = ""
    # "allocator": the search's by-product; "device index": the scheduler's precheck counts on a
    # node the allocator was not asked about (no constraint, taint or counter detail there)
    source: str = ""
    nodes: int = 0
    node_names: tuple[str, ...] = ()


class PodUnschedulable(Event, frozen=True, kw_only=True):
    """A scheduling attempt found no node: condition PodScheduled=False with kube-scheduler's message.

    The diagnosis fields (all defaulted: older events decode unchanged) keep what ``draflow
    explain`` shows: how many nodes were considered, which plugin rejected how many nodes for which
    reason (at most :data:`MAX_REJECTIONS` groups), the PreFilter/PostFilter messages and
    ``snapshot_seq``, the log position the decision was taken on (what ``verify-replay`` re-decides
    from)."""

    message: str
    reason: str = "Unschedulable"
    at: str = ""
    num_nodes: int = 0
    rejections: tuple[NodeRejection, ...] = ()
    unschedulable_plugins: tuple[str, ...] = ()
    pre_filter_message: str = ""
    post_filter_message: str = ""
    snapshot_seq: int = 0
    instance: str = ""  # the scheduler instance that decided (DRAFLOW_SCHEDULER_ID)
    # per claim request: what matched, what eliminated the rest (at most MAX_REQUEST_LINES)
    requests: tuple[RequestDiagnosis, ...] = ()


class PodClaimStatusesRecorded(Event, frozen=True, kw_only=True):
    """The claim controller recorded which ResourceClaim backs each pod claim
    (``status.resourceClaimStatuses``, replaced as a whole)."""

    statuses: tuple[PodResourceClaimStatus, ...] = ()


class PodExtendedResourceClaimStatusRecorded(Event, frozen=True, kw_only=True):
    """KEP-5004: the scheduler's PreBind recorded the pod's special extended-resource claim and
    which request serves which container's extended resource
    (``status.extendedResourceClaimStatus``, replaced as a whole; None clears it, the
    compensation of an abandoned scheduling attempt)."""

    status: PodExtendedResourceClaimStatus | None = None


class ContainerCDIDevices(msgspec.Struct, frozen=True, kw_only=True):
    """The CDI device ids a container gets from its claims."""

    container: str
    cdi_ids: tuple[str, ...] = ()


class PodResourcesPrepared(Event, frozen=True, kw_only=True):
    """The kubelet prepared every claim of the pod on ``node_name``; what each container gets.

    A node-side fact: it does not change the pod object (Kubernetes has no status field for it);
    the kubelet's PodResources API and the workloads read it from the log."""

    node_name: str = ""
    containers: tuple[ContainerCDIDevices, ...] = ()


class PodStarted(Event, frozen=True, kw_only=True):
    """The pod's containers are running: phase Running, Initialized/ContainersReady/Ready True."""

    at: str = ""
    host_ip: str = ""
    pod_ip: str = ""


class PodFailed(Event, frozen=True, kw_only=True):
    """The pod failed (admission rejected it, preparing its resources failed, a container failed)."""

    reason: str = ""
    message: str = ""
    at: str = ""


class PodSucceeded(Event, frozen=True, kw_only=True):
    """Every container exited successfully: phase Succeeded."""

    at: str = ""
