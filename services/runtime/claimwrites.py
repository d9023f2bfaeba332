"""Carrying out claim actions (``draflow.services.dra.claimactions``) through the controller runtime.

Shared by the claim controller and the kubelet (which releases a pod's reservations after
unpreparing):

* the status actions of one claim (``AddReservedFor`` / ``RemoveReservedFor`` / ``Deallocate``) ->
  ``ClaimReserved`` / ``ClaimReservationsReleased`` / ``ClaimDeallocated``, appended together at
  the claim's version (``ClaimDeallocated`` also drops the delete-protection finalizer, so a
  ``RemoveFinalizer`` that follows it is already done, and carries the reservations released
  right before it in ``released``: a pod's claim freed is one event, a single append, no atomic
  batch; the devices' guards need no message, see ``docs/scheduler-service.md``);
* a lone ``RemoveFinalizer`` (claim being deleted, not allocated) -> the apiserver's finalize,
  which deletes the object when the last finalizer goes;
* ``CreateClaim`` -> create through the apiserver; ``RecordPodClaimStatus`` ->
  ``PodClaimStatusesRecorded`` on the pod's subject; ``DeleteClaim`` -> delete (uid
  precondition); ``RecordEvent`` -> a Kubernetes Event.
"""

from __future__ import annotations

from collections import defaultdict

from draflow.events.dra import (
    DELETE_PROTECTION_FINALIZER,
    ClaimDeallocated,
    ClaimReservationsReleased,
    ClaimReserved,
    PodClaimStatusesRecorded,
)
from draflow.events.envelope import Event
from draflow.services.dra.claimactions import (
    AddReservedFor,
    ClaimAction,
    CreateClaim,
    Deallocate,
    DeleteClaim,
    RecordEvent,
    RecordPodClaimStatus,
    RemoveFinalizer,
    RemoveReservedFor,
)
from draflow.services.runtime.controller import Runtime

__all__ = ["claim_events", "execute"]


def claim_events(actions: list[ClaimAction], reason: str = "NoConsumers") -> list[Event]:
    """One claim's status actions as the domain events of one atomic append, in order."""
    out: list[Event] = []
    deallocated = False
    for a in actions:
        if isinstance(a, AddReservedFor):
            out.append(ClaimReserved(consumer=a.consumer))
        elif isinstance(a, RemoveReservedFor):
            out.append(ClaimReservationsReleased(uids=a.uids))
        elif isinstance(a, Deallocate):
            # the last reservations leave in the deallocation's own fact: one event, one single
            # append (two events would be an atomic batch, a file store of its own on the server)
            released: tuple[str, ...] = ()
            while out and isinstance(last := out[-1], ClaimReservationsReleased):
                out.pop()
                released = (*last.uids, *released)
            out.append(ClaimDeallocated(reason=reason, released=released))
            deallocated = True
        elif isinstance(a, RemoveFinalizer) and not (
            deallocated and a.finalizer == DELETE_PROTECTION_FINALIZER
        ):
            raise ValueError(f"finalizer {a.finalizer} cannot be removed by a domain event")
    return out


async def execute(rt: Runtime, actions: list[ClaimAction], *, reason: str = "NoConsumers") -> None:
    """Carry out a decider's actions: per-claim status batches first, in decision order."""
    batches: dict[tuple[str, str], list[ClaimAction]] = defaultdict(list)
    order: list[tuple[str, str] | ClaimAction] = []
    for a in actions:
        if isinstance(a, (AddReservedFor, RemoveReservedFor, Deallocate, RemoveFinalizer)):
            key = (a.namespace, a.claim_name)
            if key not in batches:
                order.append(key)
            batches[key].append(a)
        else:
            order.append(a)
    for item in order:
        if isinstance(item, tuple):
            await _claim_batch(rt, item[0], item[1], batches[item], reason)
        else:
            await _one(rt, item)


async def _claim_batch(rt: Runtime, namespace: str, name: str, batch: list[ClaimAction], reason: str) -> None:
    claim = rt.get("ResourceClaim", namespace, name)
    if claim is None or claim.metadata.uid != batch[0].claim_uid:  # type: ignore[union-attr]
        return
    lone_finalizer = [a for a in batch if isinstance(a, RemoveFinalizer)]
    status_actions = [a for a in batch if not isinstance(a, RemoveFinalizer)]
    if status_actions:
        events = claim_events(batch, reason)
        if not await rt.append("ResourceClaim", namespace, name, events):
            return
        if any(isinstance(a, Deallocate) for a in batch):
            lone_finalizer = []
    for a in lone_finalizer:
        await rt.remove_finalizer("ResourceClaim", namespace, name, a.finalizer)


async def _one(rt: Runtime, a: ClaimAction) -> None:
    if isinstance(a, CreateClaim):
        await rt.create(a.to_claim())
    elif isinstance(a, RecordPodClaimStatus):
        pod = rt.get("Pod", a.namespace, a.pod_name)
        if pod is not None and pod.metadata.uid == a.pod_uid:
            await rt.append("Pod", a.namespace, a.pod_name, [PodClaimStatusesRecorded(statuses=a.statuses)])
    elif isinstance(a, DeleteClaim):
        await rt.delete("ResourceClaim", a.namespace, a.claim_name, uid=a.claim_uid)
    elif isinstance(a, RecordEvent):
        await rt.record_event(a.kind, a.namespace, a.name, a.type, a.reason, a.message)
