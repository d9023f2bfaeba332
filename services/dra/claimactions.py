"""What the claim controller decides, as data; the service shell turns each action into an event.

Every action names its target (namespace, name and uid where the object exists), so the shell can
append it with optimistic concurrency on that aggregate and a retry can be recognised. The actions of
one ``sync_claim`` call belong together (dropping the last reservation and deallocating is one
upstream status update): append them as one atomic batch, in order.

``release_reservations`` is the one rule for dropping consumers from ``reservedFor`` (the claim
controller and the kubelet both use it). ``apply_to_claim`` / ``apply_to_pod`` give the object
after an action, the way the shell's reducer will; tests use them to run a decider to its fixpoint.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Generic, TypeVar

import msgspec

from events.api import classic_v1alpha1 as cv
from events.api.core_v1 import Pod, PodResourceClaimStatus
from events.api.meta import OwnerReference
from events.api.resource_v1 import (
    ResourceClaim,
    ResourceClaimConsumerReference,
    ResourceClaimStatus,
)
from services.dra.resourceclaim import DELETE_PROTECTION_FINALIZER

__all__ = [
    "AddReservedFor",
    "ClaimAction",
    "CreateClaim",
    "Deallocate",
    "DeleteClaim",
    "RecordEvent",
    "RecordPodClaimStatus",
    "RemoveFinalizer",
    "RemoveReservedFor",
    "apply_to_claim",
    "apply_to_pod",
    "release_reservations",
]


class _Action(msgspec.Struct, frozen=True, kw_only=True, tag=True, tag_field="action"):
    pass


C = TypeVar("C", ResourceClaim, cv.ResourceClaim)


class CreateClaim(_Action, Generic[C], frozen=True, kw_only=True):
    """Create ``claim`` (through admission) for the pod's entry ``pod_claim_name``.

    The claim controller's (structured, from template ``template_name``) and the classic claim
    controller's (KEP-3063 inline template) alike. A structured claim's name is its
    ``generateName`` expanded the API server's way with the controller's suffix source, so a
    replayed decision creates the same object; ``generateName`` is kept as upstream stores it.
    No uid / timestamps: the API server assigns those.
    """

    claim: C
    pod_claim_name: str = ""
    template_name: str = ""

    @property
    def namespace(self) -> str:
        return self.claim.metadata.namespace

    @property
    def name(self) -> str:
        return self.claim.metadata.name

    @property
    def generate_name(self) -> str:
        return self.claim.metadata.generate_name

    @property
    def labels(self) -> dict[str, str]:
        return dict(self.claim.metadata.labels)

    @property
    def annotations(self) -> dict[str, str]:
        return dict(self.claim.metadata.annotations)

    @property
    def owner_reference(self) -> OwnerReference:
        """The controlling pod (a generated claim always has it)."""
        return self.claim.metadata.owner_references[0]

    def to_claim(self) -> C:
        """The object to admit."""
        return self.claim


class RecordPodClaimStatus(_Action, frozen=True, kw_only=True):
    """Set ``pod.status.resourceClaimStatuses`` to ``statuses`` (the full list, pod-spec order)."""

    namespace: str
    pod_name: str
    pod_uid: str
    statuses: tuple[PodResourceClaimStatus, ...]


class AddReservedFor(_Action, frozen=True, kw_only=True):
    """Reserve an allocated claim for a pod that is already bound (normally the scheduler does it)."""

    namespace: str
    claim_name: str
    claim_uid: str
    consumer: ResourceClaimConsumerReference


class RemoveReservedFor(_Action, frozen=True, kw_only=True):
    """Drop the ``reservedFor`` entries with these uids (pods gone, replaced or done)."""

    namespace: str
    claim_name: str
    claim_uid: str
    uids: tuple[str, ...]


class Deallocate(_Action, frozen=True, kw_only=True):
    """Clear ``status.allocation`` (and the per-device status that belonged to it)."""

    namespace: str
    claim_name: str
    claim_uid: str


class RemoveFinalizer(_Action, frozen=True, kw_only=True):
    namespace: str
    claim_name: str
    claim_uid: str
    finalizer: str


class DeleteClaim(_Action, frozen=True, kw_only=True):
    """Delete a generated claim whose pod is gone, replaced or done."""

    namespace: str
    claim_name: str
    claim_uid: str
    reason: str


class RecordEvent(_Action, frozen=True, kw_only=True):
    """A core/v1 Event about an object (``type`` Normal or Warning)."""

    namespace: str
    kind: str
    name: str
    uid: str
    type: str
    reason: str
    message: str


ClaimAction = (
    CreateClaim[ResourceClaim]
    | RecordPodClaimStatus
    | AddReservedFor
    | RemoveReservedFor
    | Deallocate
    | RemoveFinalizer
    | DeleteClaim
    | RecordEvent
)


def _with_status(claim: ResourceClaim, status: ResourceClaimStatus) -> ResourceClaim:
    return msgspec.structs.replace(claim, status=status)


def apply_to_claim(claim: ResourceClaim, action: ClaimAction) -> ResourceClaim:
    """The claim after a status/finalizer action; other actions (and other claims) leave it as is."""
    if getattr(action, "claim_uid", None) != claim.metadata.uid:
        return claim
    status = claim.status
    if isinstance(action, AddReservedFor):
        if any(ref.uid == action.consumer.uid for ref in status.reserved_for):
            return claim
        return _with_status(
            claim, msgspec.structs.replace(status, reserved_for=(*status.reserved_for, action.consumer))
        )
    if isinstance(action, RemoveReservedFor):
        kept = tuple(ref for ref in status.reserved_for if ref.uid not in action.uids)
        return _with_status(claim, msgspec.structs.replace(status, reserved_for=kept))
    if isinstance(action, Deallocate):
        return _with_status(claim, msgspec.structs.replace(status, allocation=None, devices=()))
    if isinstance(action, RemoveFinalizer):
        finalizers = tuple(f for f in claim.metadata.finalizers if f != action.finalizer)
        return msgspec.structs.replace(
            claim, metadata=msgspec.structs.replace(claim.metadata, finalizers=finalizers)
        )
    return claim


def apply_to_pod(pod: Pod, action: ClaimAction) -> Pod:
    """The pod after ``RecordPodClaimStatus``; other actions leave it as is."""
    if not isinstance(action, RecordPodClaimStatus) or action.pod_uid != pod.metadata.uid:
        return pod
    status = msgspec.structs.replace(pod.status, resource_claim_statuses=action.statuses)
    return msgspec.structs.replace(pod, status=status)


def release_reservations(claim: ResourceClaim, uids: Iterable[str]) -> list[ClaimAction]:
    """Drop these consumers from ``reservedFor``; if none is left, free the claim.

    The transition "was used, is no longer used" deallocates a claim carrying the delete-protection
    finalizer and then removes the finalizer (upstream does both in the status update that drops the
    last entry). Whoever removes a reservation (this controller, or the kubelet after unprepare)
    must use this, or a claim whose last reservation went away would stay allocated for good.
    Returns nothing when none of ``uids`` is reserved.
    """
    meta = claim.metadata
    drop = {u for u in uids}
    removed = tuple(ref.uid for ref in claim.status.reserved_for if ref.uid in drop)
    if not removed:
        return []
    ns, name, uid = meta.namespace, meta.name, meta.uid
    left = len(claim.status.reserved_for) - len(removed)
    protected = DELETE_PROTECTION_FINALIZER in meta.finalizers
    allocated = claim.status.allocation is not None
    actions: list[ClaimAction] = [
        RemoveReservedFor(namespace=ns, claim_name=name, claim_uid=uid, uids=removed)
    ]
    if not left and protected and allocated:
        actions.append(Deallocate(namespace=ns, claim_name=name, claim_uid=uid))
        allocated = False
    if protected and not allocated:
        actions.append(
            RemoveFinalizer(
                namespace=ns, claim_name=name, claim_uid=uid, finalizer=DELETE_PROTECTION_FINALIZER
            )
        )
    return actions
