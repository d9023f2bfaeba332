"""The guards of the PodScheduling saga's allocations: taken at PreBind, given back on release.

Two scheduler instances may decide, on the same state, to give one free device to two different
claims; each claim's append expects only that claim's version, so both would land. The decision
therefore records, per claim it allocates, the guard of every device (and counter set) it uses
with the guard subject's last sequence the decision's snapshot had seen (:class:`GuardStamp`,
part of the saga's input, so a resumed saga expects the same). PreBind appends the claim's
events and those takes in one atomic batch; if another decision took one of the guards since,
nothing lands and the step looks at what was taken there (:func:`accept_or_refuse`):

* takes by this instance (its actor) are decisions its assume cache already serialised with
  this one (a shared device given to two of its own pods): retry at the guard's new version;
* any other take (another scheduler instance) means this decision did not count it: the step
  fails, the saga compensates and the pod is scheduled again on a snapshot that shows it.

Deallocations (``release``, the Reallocation saga) give the guards back in their batch.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from draflow.events.api.resource_v1 import AllocationResult, ResourceClaim
from draflow.events.guard import GuardTaken
from draflow.infra.guard import Guard, GuardConflict, guard_subject, takes_since
from draflow.services.dra.guards import allocation_guard_keys, claim_holder
from draflow.services.runtime.guards import release_guards, take_guards
from draflow.services.scheduler.framework import Scheduler
from draflow.services.scheduler.sagas.host import SchedulerHost, SchedulingConflict

__all__ = ["GuardStamp", "accept_or_refuse", "claim_releases", "claim_takes", "stamps"]


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


def claim_takes(
    rt: SchedulerHost, claim: ResourceClaim, expected: Mapping[tuple[str, str], int]
) -> list[Guard]:
    holder, uid = claim_holder(claim)
    seen = [(scope, key, seq) for (scope, key), seq in expected.items()]
    return take_guards(rt.store.root, holder, uid, seen)


def claim_releases(rt: SchedulerHost, claim: ResourceClaim) -> list[Guard]:
    return release_guards(rt.store.root, claim, rt.core.cluster.pool_slices)


async def accept_or_refuse(
    rt: SchedulerHost, conflict: GuardConflict, expected: dict[tuple[str, str], int], key: str
) -> None:
    """After a guard conflict: move ``expected`` on to the guards' new versions when every take
    since was this instance's own; otherwise raise ``SchedulingConflict`` naming the holders."""
    by_subject = {guard_subject(rt.store.root, s, k): (s, k) for s, k in expected}
    others: list[str] = []
    for subject, seen in conflict.moved:
        missed, head = await takes_since(
            rt.store, subject, seen, counted=lambda env: env.actor == rt.store.actor
        )
        for env in missed:
            if isinstance(env.data, GuardTaken):
                scope_key = by_subject.get(subject, ("", subject))
                others.append(f"{scope_key[1]} to {env.data.holder} (by {env.actor})")
        if subject in by_subject:
            expected[by_subject[subject]] = head
    if others:
        raise SchedulingConflict(
            f"claim {key}: allocated meanwhile by another scheduler: {', '.join(others)}"
        )
