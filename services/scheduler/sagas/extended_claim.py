"""The KEP-5004 special claim's parts of the scheduler's sagas: create, record, undo, clean up.

The special claim's name and uid are derived from the pod (so a resumed saga targets the same
object), which means two scheduler instances deciding the same pod derive the *same* claim. What
tells them apart is who created it: the saga whose id is the correlation id of the claim's
creating append (:func:`.ownership.creator`). Only that saga allocates, reserves, records or
deletes it; any other saga that meets it fails its step (``SchedulingConflict``) having touched
nothing of it, and its compensation leaves it alone.

* :func:`create_extended_claim` — PreBind's first part: ``ResourceClaimApplied`` at the subject's
  version; a claim already there is ours only if our saga created it (a re-run).
* :func:`record_extended_status` — PreBind's last part: ``pod.status.extendedResourceClaimStatus``
  (refused on a pod someone else bound).
* :func:`release_extended_claim` — compensation: only a claim this saga created, and only what no
  one else relies on: deleted when nobody else reserves it and its allocation (if any) is ours,
  else just our own reservation released.
* :func:`clear_extended_status` — compensation / cleanup: the pod's status entry cleared when it
  names the claim and that claim no longer exists (the pod is read before the claim, so a claim
  created meanwhile, with the status that goes with it, is never cleared away).
* ``EXTENDED_CLAIM_CLEANUP_SAGA`` — PostFilter's deletion of a special claim left over from an
  earlier attempt: only while nobody reserves it (a reserved claim is in use, not stale).

Every write is at the version the decision was read from; a conflict reads again and decides again.
"""

from __future__ import annotations

from typing import Any

import msgspec

from draflow.events.api.core_v1 import ContainerExtendedResourceRequest, Pod
from draflow.events.api.resource_v1 import ResourceClaim
from draflow.events.dra import ClaimReservationsReleased, PodExtendedResourceClaimStatusRecorded
from draflow.events.envelope import Event
from draflow.events.objects import object_applied, object_deleted
from draflow.infra.errors import ConcurrencyError
from draflow.sagas.engine import SagaDefinition, Step, StepContext
from draflow.services.dra.extended.claim import claim_status
from draflow.services.runtime.protocol import StatusError
from draflow.services.scheduler.sagas.extended_steps import pod_with_claim_status, pod_without_claim_status
from draflow.services.scheduler.sagas.host import (
    MAX_CONFLICTS,
    SchedulerHost,
    SchedulingConflict,
    read_object,
)
from draflow.services.scheduler.sagas.ownership import allocation_writer, creator, reservation_writer

__all__ = [
    "EXTENDED_CLAIM_CLEANUP",
    "EXTENDED_CLAIM_CLEANUP_SAGA",
    "ExtendedClaimCleanupInput",
    "clear_extended_status",
    "create_extended_claim",
    "record_extended_status",
    "release_extended_claim",
]

EXTENDED_CLAIM_CLEANUP = "ExtendedClaimCleanup"


def claim_ref(claim: ResourceClaim) -> tuple[str, str, str]:
    meta = claim.metadata
    return meta.namespace, meta.name, meta.uid


def _by(writer: str | None) -> str:
    return f" (saga {writer})" if writer else ""


async def create_extended_claim(ctx: StepContext, rt: SchedulerHost, claim: ResourceClaim) -> None:
    """PreBind: the special claim, created once (upstream: the API server creates it)."""
    ns, name, uid = claim_ref(claim)
    subject = rt.subject("ResourceClaim", ns, name)
    for attempt in range(MAX_CONFLICTS):
        current, version, history = await read_object(rt, "ResourceClaim", ns, name)
        if isinstance(current, ResourceClaim):
            if current.metadata.uid != uid:
                raise SchedulingConflict(f"claim {ns}/{name} exists already (uid {current.metadata.uid})")
            made_by = creator(history)
            if made_by == ctx.saga_id:
                return  # created by this saga already (a re-run)
            raise SchedulingConflict(
                f"claim {ns}/{name} was created by another scheduling attempt{_by(made_by)}"
            )
        meta = msgspec.structs.replace(claim.metadata, creation_timestamp=rt.now())
        new = msgspec.structs.replace(claim, metadata=meta)
        # upstream creates it through the API server, whose quota admission may refuse it
        # (count/resourceclaims.resource.k8s.io); PreBind then fails and the pod backs off
        try:
            refusal = await rt.admission_refusal(new)
        except StatusError as exc:
            if exc.status.code != 409:
                raise
            continue  # the dry run found it created meanwhile (another instance): read it again
        if refusal:
            raise SchedulingConflict(refusal)
        try:
            await ctx.append(
                subject, object_applied(new), expected_last_seq=version, suffix=f"create:{attempt}"
            )
        except ConcurrencyError:
            continue
        rt.appended()
        return
    raise SchedulingConflict(f"claim {ns}/{name}: kept changing while creating it")


async def record_extended_status(
    ctx: StepContext,
    rt: SchedulerHost,
    namespace: str,
    pod_name: str,
    pod_uid: str,
    claim: ResourceClaim,
    mappings: tuple[ContainerExtendedResourceRequest, ...],
) -> None:
    """PreBind, last part: ``pod.status.extendedResourceClaimStatus`` names the claim."""
    name = claim.metadata.name
    key = f"{namespace}/{pod_name}"
    pod, version = rt.get("Pod", namespace, pod_name)
    subject = rt.subject("Pod", namespace, pod_name)
    for attempt in range(MAX_CONFLICTS):
        if not isinstance(pod, Pod) or pod.metadata.uid != pod_uid:
            pod, version = await rt.load("Pod", namespace, pod_name)
            if not isinstance(pod, Pod) or pod.metadata.uid != pod_uid:
                raise SchedulingConflict(f"pod {key} (uid {pod_uid}) is gone")
        if pod_with_claim_status(pod, name, mappings) is pod:
            return
        if pod.spec.node_name:  # PreBind runs before Bind: this is someone else's binding
            raise SchedulingConflict(f"pod {key} was bound to {pod.spec.node_name} by someone else")
        event = PodExtendedResourceClaimStatusRecorded(status=claim_status(name, mappings))
        try:
            await ctx.append(subject, event, expected_last_seq=version, suffix=f"ext-status:{attempt}")
        except ConcurrencyError:
            pod, version = await rt.load("Pod", namespace, pod_name)
            continue
        rt.appended()
        return
    raise SchedulingConflict(f"pod {key}: kept changing ({MAX_CONFLICTS} conflicts)")


async def release_extended_claim(
    ctx: StepContext, rt: SchedulerHost, pod_uid: str, claim: ResourceClaim
) -> None:
    """Compensation (upstream Unreserve's ``deleteClaim``), limited to what this saga owns."""
    ns, name, uid = claim_ref(claim)
    subject = rt.subject("ResourceClaim", ns, name)
    for attempt in range(MAX_CONFLICTS):
        current, version, history = await read_object(rt, "ResourceClaim", ns, name)
        if not isinstance(current, ResourceClaim) or current.metadata.uid != uid:
            return  # gone already
        if creator(history) != ctx.saga_id:
            return  # another saga's claim (same derived name): never ours to undo
        status = current.status
        ours = any(r.uid == pod_uid for r in status.reserved_for) and (
            reservation_writer(history, pod_uid) == ctx.saga_id
        )
        others = [r for r in status.reserved_for if not (ours and r.uid == pod_uid)]
        allocated_by_us = status.allocation is None or allocation_writer(history) == ctx.saga_id
        events: list[Event] = []
        if not others and allocated_by_us:
            events.append(object_deleted("ResourceClaim"))
        elif ours:
            events.append(ClaimReservationsReleased(uids=(pod_uid,)))  # in use by others: it stays
        if not events:
            return
        try:
            await ctx.append(subject, events, expected_last_seq=version, suffix=f"delete:{attempt}")
        except ConcurrencyError:
            continue
        rt.appended()
        return
    raise SchedulingConflict(f"claim {ns}/{name}: kept changing while deleting it")


async def clear_extended_status(
    ctx: StepContext, rt: SchedulerHost, namespace: str, pod_name: str, pod_uid: str, claim_name: str
) -> None:
    """Drop ``extendedResourceClaimStatus`` if it names ``claim_name`` and that claim is gone."""
    subject = rt.subject("Pod", namespace, pod_name)
    for attempt in range(MAX_CONFLICTS):
        pod, version = await rt.load("Pod", namespace, pod_name)  # the pod first, then the claim
        if not isinstance(pod, Pod) or pod.metadata.uid != pod_uid:
            return
        if pod_without_claim_status(pod, claim_name) is pod:
            return
        claim, _ = await rt.load("ResourceClaim", namespace, claim_name)
        if isinstance(claim, ResourceClaim):
            return  # the claim exists (another attempt's, or kept in use): its status stays
        try:
            await ctx.append(
                subject,
                PodExtendedResourceClaimStatusRecorded(status=None),
                expected_last_seq=version,
                suffix=f"ext-status:{attempt}",
            )
        except ConcurrencyError:
            continue
        rt.appended()
        return
    raise SchedulingConflict(f"pod {namespace}/{pod_name}: kept changing while clearing its status")


async def delete_unused_claim(
    ctx: StepContext, rt: SchedulerHost, namespace: str, name: str, uid: str
) -> bool:
    """PostFilter: delete the special claim (this uid) unless someone reserves it; True if gone."""
    subject = rt.subject("ResourceClaim", namespace, name)
    for attempt in range(MAX_CONFLICTS):
        claim, version = await rt.load("ResourceClaim", namespace, name)
        if not isinstance(claim, ResourceClaim) or claim.metadata.uid != uid:
            return True
        if claim.status.reserved_for:
            return False  # in use (e.g. another instance is binding the pod with it): not stale
        try:
            await ctx.append(
                subject,
                object_deleted("ResourceClaim"),
                expected_last_seq=version,
                suffix=f"delete:{attempt}",
            )
        except ConcurrencyError:
            continue
        rt.appended()
        return True
    raise SchedulingConflict(f"claim {namespace}/{name}: kept changing while deleting it")


class ExtendedClaimCleanupInput(msgspec.Struct, frozen=True, kw_only=True):
    """A special claim PostFilter found left over from an earlier attempt, and its pod."""

    namespace: str
    claim_name: str
    claim_uid: str
    pod_name: str
    pod_uid: str


async def delete_stale_claim(ctx: StepContext[ExtendedClaimCleanupInput, SchedulerHost]) -> dict[str, Any]:
    """PostFilter's deletion of a stale special claim (upstream: ``deleteClaim`` in PostFilter),
    so the pod's next attempt starts with a new in-memory claim."""
    inp, rt = ctx.input, ctx.deps
    gone = await delete_unused_claim(ctx, rt, inp.namespace, inp.claim_name, inp.claim_uid)
    await clear_extended_status(ctx, rt, inp.namespace, inp.pod_name, inp.pod_uid, inp.claim_name)
    return {"claim": inp.claim_name, "deleted": gone}


EXTENDED_CLAIM_CLEANUP_SAGA = SagaDefinition(
    EXTENDED_CLAIM_CLEANUP, (Step("delete", delete_stale_claim),), ExtendedClaimCleanupInput
)
