"""The guards of the PodScheduling saga's allocations: taken at PreBind, given back on release.

Two scheduler instances may decide, on the same state, to give one free device to two different
claims; each claim's append expects only that claim's version, so both would land. The decision
therefore records, per claim it allocates, the guard of every device (and counter set) it uses
with the guard subject's last sequence the decision's snapshot had seen (:class:`GuardStamp`,
part of the saga's input, so a resumed saga expects the same). PreBind takes each guard with a
single append at that version (:func:`take_each`), *before* it writes the claim: a JetStream
atomic batch costs a file store of its own on the server (12-30 ms), the largest wait on a pod's
path. If another decision took the guard since, nothing lands and the step looks at what was
taken there:

* a take by this saga (a run before a crash, resumed): the guard is ours already;
* takes by this instance (its actor) are decisions its assume cache already serialised with
  this one (a shared device given to two of its own pods): retry at the guard's new version;
* any other take (another scheduler instance) means this decision did not count it: the step
  fails, the saga compensates and the pod is scheduled again on a snapshot that shows it (a take
  for this very claim: another scheduling attempt of the same pod is allocating it).

A take lands before the allocation it stands for, so a scheduler's snapshot does not count it in
the guard's version until the holder's allocation is in the snapshot too
(:mod:`draflow.services.scheduler.service.guard_heads`): a decision that saw the take but not the
allocation expects the version before the take and conflicts. The saga's compensation gives back
the takes no allocation backs (:func:`release_unbacked`: the claim append never landed, or lost to
someone else's). Deallocations (``release``, the Reallocation saga, the claim controller, the
kubelets) write no guard message: a take the snapshot saw backed by its allocation stays counted
after the claim is freed, so ``ClaimDeallocated`` alone frees the device (a single append). A take
refused here reads the takes since the version it expected; one that a deallocation has ended
without a release shows as another instance's take and fails the step, which is decided again on
a newer snapshot (only a decision on a snapshot older than that take meets it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from draflow.events.api.resource_v1 import AllocationResult, ResourceClaim
from draflow.events.dra import ClaimAllocated
from draflow.events.guard import GuardReleased, GuardTaken
from draflow.infra.errors import ConcurrencyError
from draflow.infra.guard import guard_subject, held, takes_since
from draflow.sagas.engine import StepContext
from draflow.services.dra.guards import allocation_guard_keys, claim_holder
from draflow.services.scheduler.framework import Scheduler
from draflow.services.scheduler.sagas.host import (
    MAX_CONFLICTS,
    SchedulerHost,
    SchedulingConflict,
    read_object,
)
from draflow.services.scheduler.sagas.ownership import current_incarnation

__all__ = ["GuardStamp", "release_unbacked", "stamps", "take_each"]

Ctx = StepContext[Any, SchedulerHost]


class GuardStamp(msgspec.Struct, frozen=True, kw_only=True):
    """A guard an allocation takes and the guard subject's version its decision saw."""

    scope: str
    key: str
    seen: int = 0


def stamps(
    core: Scheduler, allocation: AllocationResult | None, heads: Mapping[str, int], root: str
) -> tuple[GuardStamp, ...]:
    """The guards of ``allocation`` at the versions in ``heads`` (guard subject -> last seq)."""
    keys = allocation_guard_keys(allocation, core.cluster.pool_slices)
    return tuple(GuardStamp(scope=s, key=k, seen=heads.get(guard_subject(root, s, k), 0)) for s, k in keys)


async def take_each(ctx: Ctx, claim: ResourceClaim, expected: dict[tuple[str, str], int], label: str) -> None:
    """Take every guard of ``expected`` ((scope, key) -> the version to expect) for ``claim``,
    one optimistic single append each, in key order; ``expected`` moves on past this
    instance's own takes. ``SchedulingConflict`` when another instance took one meanwhile (the
    takes that landed before it are the compensation's to give back)."""
    rt = ctx.deps
    holder, uid = claim_holder(claim)
    for i, scope_key in enumerate(sorted(expected)):
        subject = guard_subject(rt.store.root, *scope_key)
        for attempt in range(MAX_CONFLICTS):
            try:
                await ctx.append(
                    subject,
                    GuardTaken(holder=holder, holder_uid=uid),
                    expected_last_seq=expected[scope_key],
                    # a resumed run's first take is the same message; a retry after this
                    # instance's own take says so (``bench.scheduling`` counts them)
                    suffix=f"{label}:g{i}" + (f":{attempt}" if attempt else ""),
                )
            except ConcurrencyError:
                if await _ours_or_retry(ctx, subject, scope_key, expected, uid, label):
                    break
                continue
            rt.appended()
            break
        else:
            raise SchedulingConflict(
                f"claim {label}: guard {scope_key[1]} kept changing ({MAX_CONFLICTS} conflicts)"
            )


async def _ours_or_retry(
    ctx: Ctx,
    subject: str,
    scope_key: tuple[str, str],
    expected: dict[tuple[str, str], int],
    uid: str,
    label: str,
) -> bool:
    """After a conflict on a guard: True when this saga holds it already; False to retry at the
    guard's new version (only this instance's own takes came in between); otherwise raise."""
    rt = ctx.deps
    missed, head = await takes_since(rt.store, subject, expected[scope_key])
    if any(env.correlation_id == ctx.saga_id for env in missed):
        return True
    others = [env for env in missed if env.actor != rt.store.actor]
    same = [env for env in others if isinstance(env.data, GuardTaken) and env.data.holder_uid == uid]
    if same:  # another instance decided this very claim (the same pod) onto the device
        by = same[0]
        raise SchedulingConflict(
            f"claim {label} is being allocated by another scheduling attempt "
            f"(saga {by.correlation_id or '-'}, by {by.actor})"
        )
    if others:
        names = ", ".join(
            f"{scope_key[1]} to {env.data.holder} (by {env.actor})"
            for env in others
            if isinstance(env.data, GuardTaken)
        )
        raise SchedulingConflict(f"claim {label}: allocated meanwhile by another scheduler: {names}")
    expected[scope_key] = head
    return False


async def release_unbacked(
    ctx: Ctx, namespace: str, name: str, uid: str, stamps: tuple[GuardStamp, ...]
) -> None:
    """Give back the guards this saga took for claim ``namespace/name`` that no allocation of it
    ever held: one ``GuardReleased`` each, at the guard's version as read (a change meanwhile
    makes it look again). A take this saga's ``ClaimAllocated`` backed counts as given back once
    the claim is deallocated (``guard_heads``): a release would only move the guard's version
    under a decision on the device just freed. Idempotent: a take released already, or
    another's, is left alone."""
    rt = ctx.deps
    claim, _, history = await read_object(rt, "ResourceClaim", namespace, name)
    holder = f"ResourceClaim {namespace}/{name}"
    backed: set[tuple[str, str]] = set()
    if isinstance(claim, ResourceClaim) and (not uid or claim.metadata.uid == uid):
        holder, uid = claim_holder(claim)
        pool_slices = rt.core.cluster.pool_slices
        backed = set(allocation_guard_keys(claim.status.allocation, pool_slices))
        for env in current_incarnation(history):
            if isinstance(env.data, ClaimAllocated) and env.correlation_id == ctx.saga_id:
                backed |= set(allocation_guard_keys(env.data.allocation, pool_slices))
    for i, g in enumerate(sorted(stamps, key=lambda s: (s.scope, s.key))):
        if (g.scope, g.key) in backed:  # it holds the allocation that stands
            continue
        subject = guard_subject(rt.store.root, g.scope, g.key)
        for attempt in range(MAX_CONFLICTS):
            history = await rt.store.events(subject, g.seen + 1)
            take = held(history).get(uid or holder)
            if take is None or take.correlation_id != ctx.saga_id:
                break
            try:
                await ctx.append(
                    subject,
                    GuardReleased(holder=holder, holder_uid=uid),
                    expected_last_seq=history[-1].seq,
                    suffix=f"{name}:g{i}:{attempt}",
                )
            except ConcurrencyError:
                continue
            rt.appended()
            break
        else:
            raise SchedulingConflict(f"guard {g.key}: kept changing while releasing it")
