"""The reallocation saga: PostFilter freed a claim allocated where its pod cannot run.

When no node fits because a claim is allocated (to a place the pod cannot reach) and only this
pod uses it, kube-scheduler's DRA PostFilter clears the allocation so the next attempt can
allocate again. Here that is a saga too, so the decision and its effect show in the log: one step,
``deallocate``, reloads the claim, checks the decision still holds (same uid, no other consumer)
and appends ``ClaimDeallocated{reason: Reallocate}`` on the claim's subject, optimistically, one
single append (the reservations left, if any, named in its ``released``; the devices' guards
need no message of their own, see :mod:`draflow.services.scheduler.service.guard_heads`). The
claim's change requeues the pod. Nothing to compensate: a deallocation is not undone. A re-run
(the saga resumed after a crash) that finds this saga's ``ClaimDeallocated`` in the claim's log is
done: anything on the claim now (the pod's next allocation) came after it and is not its to free.

With several scheduler instances, the pod's own reservation on the claim may be another
instance's scheduling attempt in flight (which is about to bind the pod with this very claim):
a reservation of the pod written by a saga (``ownership.reservation_writer``) refuses the
deallocation; only a reservation nobody's saga owns (upstream's leftover case) is cleared.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from draflow.events.api.core_v1 import Pod
from draflow.events.api.meta import ObjectMeta
from draflow.events.api.resource_v1 import ResourceClaim
from draflow.events.dra import ClaimDeallocated
from draflow.events.envelope import Envelope, Event
from draflow.infra.errors import ConcurrencyError
from draflow.sagas.engine import SagaDefinition, Step, StepContext
from draflow.services.dra.resourceclaim import ClaimRef
from draflow.services.scheduler.plugins.dynamicresources import PreBindConflict, deallocated
from draflow.services.scheduler.sagas.host import (
    MAX_CONFLICTS,
    SchedulerHost,
    SchedulingConflict,
    read_object,
)
from draflow.services.scheduler.sagas.ownership import reservation_writer

__all__ = ["REALLOCATION", "REALLOCATION_SAGA", "ReallocationInput"]

REALLOCATION = "Reallocation"


class ReallocationInput(msgspec.Struct, frozen=True, kw_only=True):
    claim_namespace: str
    claim_name: str
    claim_uid: str = ""
    pod_namespace: str
    pod_name: str
    pod_uid: str

    @classmethod
    def of(cls, claim: ClaimRef, pod: Pod) -> ReallocationInput:
        """Free ``claim`` (PostFilter's choice) for ``pod``."""
        meta = pod.metadata
        return cls(
            claim_namespace=claim.namespace,
            claim_name=claim.name,
            claim_uid=claim.uid,
            pod_namespace=meta.namespace,
            pod_name=meta.name,
            pod_uid=meta.uid,
        )


def _deallocated_by(history: Sequence[Envelope[Event]], saga_id: str) -> bool:
    """Whether this saga's deallocation is in the claim's log: a step re-run after a crash must
    not free an allocation made after it (the pod's next attempt), nor fail on a claim deleted
    since (its work was done)."""
    return any(isinstance(e.data, ClaimDeallocated) and e.correlation_id == saga_id for e in history)


async def deallocate(ctx: StepContext[ReallocationInput, SchedulerHost]) -> dict[str, Any]:
    inp, rt = ctx.input, ctx.deps
    ref = ClaimRef(namespace=inp.claim_namespace, name=inp.claim_name, uid=inp.claim_uid)
    pod = Pod(metadata=ObjectMeta(namespace=inp.pod_namespace, name=inp.pod_name, uid=inp.pod_uid))
    subject = rt.subject("ResourceClaim", inp.claim_namespace, inp.claim_name)
    for attempt in range(MAX_CONFLICTS):
        claim, version, history = await read_object(rt, "ResourceClaim", inp.claim_namespace, inp.claim_name)
        if _deallocated_by(history, ctx.saga_id):
            return {"deallocated": True}  # a re-run: ours landed, what came after is not ours
        if not isinstance(claim, ResourceClaim):
            raise SchedulingConflict(f"claim {ref} is gone")
        if any(r.uid == inp.pod_uid for r in claim.status.reserved_for):
            writer = reservation_writer(history, inp.pod_uid)
            if writer:
                raise SchedulingConflict(
                    f"claim {ref} is reserved for pod {inp.pod_namespace}/{inp.pod_name} "
                    f"by a scheduling attempt (saga {writer})"
                )
        try:
            if deallocated(claim, ref, pod) is claim:
                return {"deallocated": False}
        except PreBindConflict as exc:
            raise SchedulingConflict(str(exc)) from exc
        # one fact, one single append: the reservations leave with the allocation, and the
        # devices' guards need no message (see guard_heads)
        released = tuple(r.uid for r in claim.status.reserved_for)
        event = ClaimDeallocated(reason="Reallocate", released=released)
        try:
            await ctx.append(subject, event, expected_last_seq=version, suffix=str(attempt))
        except ConcurrencyError:
            continue
        rt.appended()
        return {"deallocated": True}
    raise SchedulingConflict(f"claim {ref}: kept changing ({MAX_CONFLICTS} conflicts)")


REALLOCATION_SAGA = SagaDefinition(REALLOCATION, (Step("deallocate", deallocate),), ReallocationInput)
