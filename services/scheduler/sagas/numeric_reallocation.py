"""The numeric reallocation saga: PostFilter freed a numeric claim allocated where its pod cannot run.

Like structured claims (:mod:`.reallocation`): one step, ``deallocate``, reloads the claim, checks
the decision still holds (same uid; no consumer but, at most, the pod itself with a reservation
no scheduling attempt owns) and appends ``NumericClaimDeallocated{reason: Reallocate}`` at the
claim's version. The claim change requeues the pod, whose next attempt allocates again. A re-run
that finds this saga's deallocation in the claim's log is done.
"""

from __future__ import annotations

from typing import Any

from draflow.events.api import classic_v1alpha1 as cv
from draflow.events.numeric import NumericClaimDeallocated
from draflow.infra.errors import ConcurrencyError
from draflow.sagas.engine import SagaDefinition, Step, StepContext
from draflow.services.scheduler.sagas.host import (
    MAX_CONFLICTS,
    SchedulerHost,
    SchedulingConflict,
    read_object,
)
from draflow.services.scheduler.sagas.numeric_steps import reservation_writer
from draflow.services.scheduler.sagas.reallocation import ReallocationInput

__all__ = ["NUMERIC_REALLOCATION", "NUMERIC_REALLOCATION_SAGA", "NumericReallocationInput"]

NUMERIC_REALLOCATION = "NumericReallocation"


# the structured saga's input: the same claim and pod (a classic claim's namespace, name and uid)
NumericReallocationInput = ReallocationInput


async def deallocate(ctx: StepContext[NumericReallocationInput, SchedulerHost]) -> dict[str, Any]:
    inp, rt = ctx.input, ctx.deps
    key = f"{inp.claim_namespace}/{inp.claim_name}"
    subject = rt.subject(cv.CLAIM_KIND, inp.claim_namespace, inp.claim_name)
    for attempt in range(MAX_CONFLICTS):
        claim, version, history = await read_object(rt, cv.CLAIM_KIND, inp.claim_namespace, inp.claim_name)
        if any(
            isinstance(e.data, NumericClaimDeallocated) and e.correlation_id == ctx.saga_id for e in history
        ):
            return {"deallocated": True}
        if not isinstance(claim, cv.ResourceClaim) or (inp.claim_uid and claim.metadata.uid != inp.claim_uid):
            raise SchedulingConflict(f"claim {key} is gone")
        if claim.status.numeric_allocation is None:
            return {"deallocated": False}
        for user in claim.status.reserved_for:
            if user.uid != inp.pod_uid:
                raise SchedulingConflict(f"claim {key} is in use by {user.name}")
            writer = reservation_writer(history, inp.pod_uid)
            if writer:
                raise SchedulingConflict(
                    f"claim {key} is reserved for the pod by a scheduling attempt (saga {writer})"
                )
        try:
            await ctx.append(
                subject,
                NumericClaimDeallocated(reason="Reallocate"),
                expected_last_seq=version,
                suffix=str(attempt),
            )
        except ConcurrencyError:
            continue
        rt.appended()
        return {"deallocated": True}
    raise SchedulingConflict(f"claim {key}: kept changing ({MAX_CONFLICTS} conflicts)")


NUMERIC_REALLOCATION_SAGA = SagaDefinition(
    NUMERIC_REALLOCATION, (Step("deallocate", deallocate),), NumericReallocationInput
)
