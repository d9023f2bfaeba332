"""What the claim controller decides, as data; the service shell turns each action into an event.

Every action names its target (namespace, name and uid where the object exists), so the shell can
append it with optimistic concurrency on that aggregate and a retry can be recognised. The actions of
one ``sync_claim`` call belong together (dropping the last reservation and deallocating is one
upstream status update): append them as one atomic batch, in order.

``apply_to_claim`` / ``apply_to_pod`` give the object after an action, the way the shell's reducer
will; tests use them to run a decider to its fixpoint.
"""

from __future__ import annotations

import msgspec

from events.api.core_v1 import Pod, PodResourceClaimStatus
from events.api.meta import ObjectMeta, OwnerReference
from events.api.resource_v1 import (
    ResourceClaim,
    ResourceClaimConsumerReference,
    ResourceClaimSpec,
    ResourceClaimStatus,
)

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
]


class _Action(msgspec.Struct, frozen=True, kw_only=True, tag=True, tag_field="action"):
    pass


class CreateClaim(_Action, frozen=True, kw_only=True):
    """Create a claim for ``pod_claim_name`` from template ``template_name``.

    ``name`` is ``generate_name`` expanded the API server's way with the controller's suffix source,
    so a replayed decision creates the same object; ``generate_name`` is kept as upstream stores it.
    """

    namespace: str
    name: str
    generate_name: str
    pod_claim_name: str
    template_name: str
    owner_reference: OwnerReference
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    spec: ResourceClaimSpec = msgspec.field(default_factory=ResourceClaimSpec)

    def to_claim(self) -> ResourceClaim:
        """The object to admit (no uid / timestamps: the API server assigns those)."""
        return ResourceClaim(
            metadata=ObjectMeta(
                name=self.name,
                generate_name=self.generate_name,
                namespace=self.namespace,
                labels=dict(self.labels),
                annotations=dict(self.annotations),
                owner_references=(self.owner_reference,),
            ),
            spec=self.spec,
        )


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
    CreateClaim
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
