"""The PodScheduling saga's work on numeric claims (KEP-4381), part of its ``prebind`` step and
of that step's compensation ``release``.

PreBind, per :class:`NumericClaimPlan`:

1. a plan that allocates first *commits* the capacity on the node's ledger
   (``NumericCapacityCommitted`` on ``NumericLedger._.<node>_<driver>``) at the ledger version the
   decision saw. Another scheduler instance that committed capacity on that node meanwhile makes
   the append conflict; the conflict is accepted only when every commit since is one the decision
   already counted (this instance's own earlier decisions), otherwise the saga compensates and the
   pod is scheduled again on the books that now show the other commit: two schedulers racing never
   over-commit a node;
2. then ``NumericClaimAllocated`` on the claim at its version (phase Allocated, the allocation
   with class and parameter object embedded, the pod in ``reservedFor`` and the
   ``numeric.dra.k8s.io/delete-protection`` finalizer), or ``NumericClaimReserved`` for a claim
   allocated already.

Release undoes only what this saga wrote (the saga id is the correlation id of its appends): its
reservation, and its allocation when no one else uses the claim. A ledger commit is not undone:
it only orders decisions, it never counts capacity.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from draflow.events.api import classic_v1alpha1 as cv
from draflow.events.envelope import Envelope, Event
from draflow.events.numeric import (
    NumericCapacityCommitted,
    NumericClaimAllocated,
    NumericClaimDeallocated,
    NumericClaimReservationsReleased,
    NumericClaimReserved,
)
from draflow.infra.errors import ConcurrencyError
from draflow.sagas.engine import StepContext
from draflow.services.dra.numeric.plans import LEDGER_KIND, NumericClaimPlan, ledger_name
from draflow.services.scheduler.sagas.host import (
    MAX_CONFLICTS,
    SchedulerHost,
    SchedulingConflict,
    read_object,
)

__all__ = ["numeric_allocation_writer", "prebind_numeric", "release_numeric", "reservation_writer"]

Ctx = StepContext[Any, SchedulerHost]


def numeric_allocation_writer(history: Sequence[Envelope[Event]]) -> str | None:
    """The correlation id of the write that made the claim's current allocation (None: none)."""
    writer: str | None = None
    for env in history:
        if isinstance(env.data, NumericClaimAllocated):
            writer = env.correlation_id
        elif isinstance(env.data, NumericClaimDeallocated):
            writer = None
    return writer


def reservation_writer(history: Sequence[Envelope[Event]], uid: str) -> str | None:
    writer: str | None = None
    for env in history:
        data = env.data
        if isinstance(data, NumericClaimAllocated) and data.consumer is not None and data.consumer.uid == uid:
            writer = env.correlation_id
        elif isinstance(data, NumericClaimReserved) and data.consumer.uid == uid:
            writer = env.correlation_id
        elif isinstance(data, NumericClaimReservationsReleased) and uid in data.uids:
            writer = None
        elif isinstance(data, NumericClaimDeallocated):
            writer = None
    return writer


async def _commit(ctx: Ctx, c: NumericClaimPlan) -> None:
    stamp = c.ledger
    if stamp is None:
        return
    rt = ctx.deps
    name = ledger_name(stamp.node, stamp.driver)
    subject = rt.subject(LEDGER_KIND, "", name)
    expected = stamp.version
    counted = set(stamp.counted)
    event = NumericCapacityCommitted(claim_uid=c.uid, claim=f"{c.namespace}/{c.name}")
    for attempt in range(MAX_CONFLICTS):
        try:
            await ctx.append(subject, event, expected_last_seq=expected, suffix=f"ledger:{c.name}:{attempt}")
        except ConcurrencyError:
            since = await rt.history_since(LEDGER_KIND, "", name, expected)
            if any(
                isinstance(e.data, NumericCapacityCommitted)
                and e.data.claim_uid == c.uid
                and e.correlation_id == ctx.saga_id
                for e in since
            ):
                return  # a re-run: our commit is in
            foreign = [
                e.data.claim
                for e in since
                if isinstance(e.data, NumericCapacityCommitted)
                and e.data.claim_uid not in counted
                and e.correlation_id != ctx.saga_id
            ]
            if foreign:
                raise SchedulingConflict(
                    f"capacity of driver {stamp.driver} on node {stamp.node} was committed to "
                    f"{', '.join(foreign)} by another scheduling decision in the meantime"
                ) from None
            expected = since[-1].seq if since else expected
            continue
        rt.appended()
        return
    raise SchedulingConflict(f"ledger {name}: kept changing ({MAX_CONFLICTS} conflicts)")


def _needs_history(claim: cv.ResourceClaim, pod_uid: str) -> bool:
    """Whether PreBind must see who wrote the claim's state before relying on it: it is allocated
    already, or the pod is in its ``reservedFor`` (a re-run, or another attempt for the pod)."""
    status = claim.status
    return status.numeric_allocation is not None or any(u.uid == pod_uid for u in status.reserved_for)


async def prebind_numeric(ctx: Ctx, pod_uid: str, c: NumericClaimPlan) -> None:
    rt = ctx.deps
    key = f"{c.namespace}/{c.name}"
    committed = False
    claim, version = rt.get(cv.CLAIM_KIND, c.namespace, c.name)  # the snapshot first: no read
    history: list[Envelope[Event]] | None = None
    for attempt in range(MAX_CONFLICTS):
        if history is None and (not isinstance(claim, cv.ResourceClaim) or _needs_history(claim, pod_uid)):
            claim, version, history = await read_object(rt, cv.CLAIM_KIND, c.namespace, c.name)
        if not isinstance(claim, cv.ResourceClaim) or (c.uid and claim.metadata.uid != c.uid):
            raise SchedulingConflict(f"claim {key} is gone")
        if claim.metadata.deletion_timestamp:
            raise SchedulingConflict(f"claim {key} is being deleted")
        status = claim.status
        reserved = any(u.uid == pod_uid for u in status.reserved_for)
        events: list[Event] = []
        if c.allocation is not None:
            if status.numeric_allocation is not None:
                if numeric_allocation_writer(history or []) != ctx.saga_id:
                    raise SchedulingConflict(f"claim {key} was allocated by someone else in the meantime")
                if reserved:
                    return  # a re-run: all in
                events.append(NumericClaimReserved(consumer=c.consumer))
            else:
                if not committed:
                    await _commit(ctx, c)
                    committed = True
                events.append(NumericClaimAllocated(allocation=c.allocation, consumer=c.consumer))
        else:
            alloc = status.numeric_allocation
            if alloc is None:
                raise SchedulingConflict(f"claim {key} was deallocated in the meantime")
            if reserved:
                writer = reservation_writer(history or [], pod_uid)
                if writer and writer != ctx.saga_id:
                    raise SchedulingConflict(
                        f"claim {key} is reserved for the pod by another scheduling attempt"
                    )
                return
            if status.reserved_for and not alloc.shareable:
                raise SchedulingConflict(f"claim {key} is in use")
            events.append(NumericClaimReserved(consumer=c.consumer))
        subject = rt.subject(cv.CLAIM_KIND, c.namespace, c.name)
        try:
            await ctx.append(subject, events, expected_last_seq=version, suffix=f"numeric:{c.name}:{attempt}")
        except ConcurrencyError:
            claim, version, history = await read_object(rt, cv.CLAIM_KIND, c.namespace, c.name)
            continue
        rt.appended()
        return
    raise SchedulingConflict(f"claim {key}: kept changing ({MAX_CONFLICTS} conflicts)")


async def release_numeric(ctx: Ctx, pod_uid: str, c: NumericClaimPlan) -> None:
    rt = ctx.deps
    for attempt in range(MAX_CONFLICTS):
        claim, version, history = await read_object(rt, cv.CLAIM_KIND, c.namespace, c.name)
        if not isinstance(claim, cv.ResourceClaim) or (c.uid and claim.metadata.uid != c.uid):
            return
        status = claim.status
        events: list[Event] = []
        ours = (
            any(u.uid == pod_uid for u in status.reserved_for)
            and reservation_writer(history, pod_uid) == ctx.saga_id
        )
        others = [u for u in status.reserved_for if not (ours and u.uid == pod_uid)]
        if (
            c.allocation is not None
            and status.numeric_allocation is not None
            and not others
            and numeric_allocation_writer(history) == ctx.saga_id
        ):
            events.append(NumericClaimDeallocated(reason="Unreserve"))
        elif ours:
            events.append(NumericClaimReservationsReleased(uids=(pod_uid,)))
        if not events:
            return
        subject = rt.subject(cv.CLAIM_KIND, c.namespace, c.name)
        try:
            await ctx.append(subject, events, expected_last_seq=version, suffix=f"numeric:{c.name}:{attempt}")
        except ConcurrencyError:
            continue
        rt.appended()
        return
    raise SchedulingConflict(f"claim {c.namespace}/{c.name}: kept changing while releasing it")
