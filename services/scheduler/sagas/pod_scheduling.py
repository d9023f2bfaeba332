"""The PodScheduling saga: Reserve → PreBind → Bind for one scheduling decision, with Unreserve.

The scheduling cycle decides (node, per-claim allocation) on the in-memory snapshot and already
counts it in the assume cache; the saga's input is that decision, so whoever resumes the saga
after a crash writes exactly what was decided. Steps:

* ``reserve`` — the decision is in the assume cache (re-assumed when another process resumes).
  Compensation ``unreserve``: drop the assume entries and send the pod back to the queue (backoff),
  then give back the device guards PreBind took that no allocation holds (below).
* ``prebind`` — per claim this cycle allocates, first each of its device (and counter-set) guards
  as a single append on the guard's subject at the version the decision saw (:mod:`.guarded`:
  another scheduler's take meanwhile fails the step), then **one** single append on the claim's
  subject at the claim's version: ``ClaimAllocated`` naming the pod as its ``consumer`` (the
  allocation, the delete-protection finalizer and the pod in ``reservedFor`` in one fact, so the
  claim is never allocated and unreserved). A claim allocated already gets ``ClaimReserved``
  alone. No atomic batch: JetStream stages each one in a file store of its own (12-30 ms on this
  machine), the largest wait of a pod's path when PreBind wrote claim and guards as one. A
  conflict on the claim means someone else changed it: reload it from the log and check the
  decision still holds (``prebind_claim``). The step fails (and the saga compensates) when the
  claim was allocated by anyone but this saga meanwhile, or when the pod is already reserved on
  it, or the claim is a special claim created, by *another* saga: another scheduling attempt for
  the same pod is under way (a second scheduler instance), and this saga must neither rely on
  nor later undo its work.
* ``bind`` — ``PodBound`` on the pod's subject (optimistic as well), only while the pod's
  ``extendedResourceClaimStatus`` still names this saga's special claim; a pod bound by someone
  else meanwhile fails the step.

Compensation of ``prebind`` (``release``) undoes only what this saga wrote, as the log shows it
(:mod:`.ownership`: the saga id is the correlation id of its appends): per claim, the pod's
reservation if this saga's ``ClaimReserved`` (or ``ClaimAllocated``) put it there, and the
allocation if this saga's ``ClaimAllocated`` made it and nobody else is left reserving the claim
— one single append at the version read (``ClaimDeallocated`` naming the pod in ``released``, or
``ClaimReservationsReleased`` alone), so a concurrent change makes it read and decide again. The
devices' guards get no message: a take counts as given back once a snapshot has seen its claim
allocated, so the deallocation alone frees the device (see ``guard_heads`` below). A guard taken
without its claim's append landing (the claim lost to another decision, or a crash between the
two appends) is given back by
``unreserve``, whose compensation is owed whichever step failed: a resumed saga whose pod is
gone fails at ``reserve``, before ``prebind``'s compensation is owed. Until then the take only
costs conflicts: a scheduler's snapshot does not count a take in the guard's version before its
allocation is in (:mod:`draflow.services.scheduler.service.guard_heads`).

Extended resources backed by DRA (KEP-5004): when the decision includes the pod's special claim
(``extended_claim``: name and uid derived from the pod, so a re-run targets the same object), the
``prebind`` step first creates it, then allocates and reserves it with the pod's other claims, and
last records the pod's ``status.extendedResourceClaimStatus`` (:mod:`.extended_claim`). Its
compensation deletes the special claim only if this saga created it and no one else uses it, and
clears the status only once the claim it names is gone. These are parts of the existing
``prebind`` step rather than steps of their own: recorded sagas keep the step list they were
started with. A special claim left over from an earlier attempt, which PostFilter finds, is
deleted by the one-step ``ExtendedClaimCleanup`` saga.

Numeric claims (KEP-4381, classic claims whose class lists ``numericParameters``) are allocated
and reserved in the same ``prebind`` step, after the structured claims, and released by its
compensation first (:mod:`.numeric_steps`, with the capacity ledger that keeps scheduler
instances from over-committing a node).

Each step is idempotent: it first looks at the objects and appends only what is missing, with a
deterministic message id, so a re-run after a crash has no second effect.

The saga's own log is kept short (the critical path of every pod): its three steps are local
steps of the saga engine, with no saga events of their own (their compensations are registered in
``SagaStarted``). Whichever process drives the saga runs them again: ``reserve`` assumes the
decision again, ``prebind`` and ``bind`` find their writes in place (correlated with the saga's
id, checked as above) and append nothing twice (a guard's take has one message id per guard:
the retake of a resumed run is the same message). A saga is then ``SagaStarted``, per claim its
guards' ``GuardTaken`` and its ``ClaimAllocated``, ``PodBound`` and ``SagaCompleted``, all single
appends; on a failure, ``SagaStepFailed`` names the step and
the compensations of every step up to it are owed. Sagas recorded before keep the steps' events
they were started with.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from draflow.events.api.core_v1 import ContainerExtendedResourceRequest, Pod
from draflow.events.api.resource_v1 import AllocationResult, ResourceClaim, ResourceClaimConsumerReference
from draflow.events.dra import (
    ClaimAllocated,
    ClaimDeallocated,
    ClaimReservationsReleased,
    ClaimReserved,
    PodBound,
)
from draflow.events.envelope import Envelope, Event
from draflow.events.objects import finalizers_changed
from draflow.infra.errors import ConcurrencyError
from draflow.sagas.engine import SagaDefinition, Step, StepContext
from draflow.services.dra.extended.claim import is_extended_resource_claim
from draflow.services.dra.numeric.plans import NumericClaimPlan
from draflow.services.dra.resourceclaim import DELETE_PROTECTION_FINALIZER, ClaimRef
from draflow.services.scheduler.framework import ClaimBinding, Reserved
from draflow.services.scheduler.plugins.dynamicresources import PreBindConflict, prebind_claim
from draflow.services.scheduler.plugins.numeric import NumericResources
from draflow.services.scheduler.sagas.extended_claim import (
    claim_ref,
    clear_extended_status,
    create_extended_claim,
    record_extended_status,
    release_extended_claim,
)
from draflow.services.scheduler.sagas.extended_steps import pod_with_claim_status
from draflow.services.scheduler.sagas.guarded import (
    GuardStamp,
    release_unbacked,
    take_each,
)
from draflow.services.scheduler.sagas.host import (
    MAX_CONFLICTS,
    DecisionView,
    SchedulerHost,
    SchedulingConflict,
    read_object,
)
from draflow.services.scheduler.sagas.numeric_steps import prebind_numeric, release_numeric
from draflow.services.scheduler.sagas.ownership import (
    allocation_writer,
    binder,
    creator,
    foreign,
    reservation_writer,
)

__all__ = [
    "POD_SCHEDULING",
    "POD_SCHEDULING_SAGA",
    "ClaimPlan",
    "PodSchedulingInput",
    "assume_decided",
    "release_decided",
]

POD_SCHEDULING = "PodScheduling"

Stamper = Callable[[AllocationResult], tuple[GuardStamp, ...]]


class ClaimPlan(msgspec.Struct, frozen=True, kw_only=True):
    namespace: str
    name: str
    uid: str = ""
    allocation: AllocationResult | None = None  # None: already allocated, only reserve
    consumer: ResourceClaimConsumerReference
    # the guards the allocation takes, at the versions the decision saw (:mod:`.guarded`);
    # empty in sagas recorded before guards existed: those allocate unguarded, as they did
    guards: tuple[GuardStamp, ...] = ()


class PodSchedulingInput(msgspec.Struct, frozen=True, kw_only=True):
    """The decision the saga carries out (its input, stored in ``SagaStarted``)."""

    namespace: str
    name: str
    uid: str
    node_name: str
    claims: tuple[ClaimPlan, ...] = ()
    # KEP-5004: the special claim to create (its allocation is one of ``claims``) and the pod's
    # extendedResourceClaimStatus.requestMappings
    extended_claim: ResourceClaim | None = None
    extended_mappings: tuple[ContainerExtendedResourceRequest, ...] = ()
    # KEP-4381: numeric (classic) claims to allocate or reserve
    numeric: tuple[NumericClaimPlan, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @classmethod
    def of(cls, r: Reserved, stamp: Stamper | None = None) -> PodSchedulingInput:
        """The decision as the saga's input; ``stamp`` gives each allocation's guards at the
        versions the decision's snapshot had (the scheduler's; ``verify-replay`` compares
        decisions without them)."""
        claims = tuple(
            ClaimPlan(
                namespace=b.claim.namespace,
                name=b.claim.name,
                uid=b.claim.uid,
                allocation=b.allocation,
                consumer=b.consumer,
                guards=stamp(b.allocation) if stamp is not None and b.allocation is not None else (),
            )
            for b in r.claims
        )
        ext = r.extended
        return cls(
            namespace=r.pod.namespace,
            name=r.pod.name,
            uid=r.pod.uid,
            node_name=r.node_name,
            claims=claims,
            extended_claim=ext.claim if ext is not None else None,
            extended_mappings=ext.mappings if ext is not None else (),
            numeric=r.numeric,
        )

    @staticmethod
    def binding(c: ClaimPlan) -> ClaimBinding:
        return ClaimBinding(ClaimRef(namespace=c.namespace, name=c.name, uid=c.uid), c.allocation, c.consumer)

    def creates(self, c: ClaimPlan) -> bool:
        """Whether ``c`` is the special claim this decision creates."""
        ext = self.extended_claim
        return ext is not None and (c.namespace, c.name, c.uid) == claim_ref(ext)


Ctx = StepContext[PodSchedulingInput, SchedulerHost]


def _needs_history(claim: ResourceClaim, plan: PodSchedulingInput, c: ClaimPlan) -> bool:
    """Whether PreBind must look at who wrote the claim's state before relying on it: when the pod
    is reserved on it already, when it is allocated although this decision allocates it, or when
    it is a stored special claim this decision did not create."""
    status = claim.status
    return (
        any(r.uid == plan.uid for r in status.reserved_for)
        or (c.allocation is not None and status.allocation is not None)
        or (is_extended_resource_claim(claim) and not plan.creates(c))
    )


def _check_owner(
    saga_id: str,
    plan: PodSchedulingInput,
    c: ClaimPlan,
    claim: ResourceClaim,
    history: Sequence[Envelope[Event]],
) -> None:
    """PreBind relies only on what this saga (or nobody's saga) wrote, never on another attempt's
    work for the same pod: that attempt's compensation would pull it from under this one."""
    key = f"{c.namespace}/{c.name}"
    if c.allocation is not None and claim.status.allocation is not None:
        if allocation_writer(history) != saga_id:
            raise SchedulingConflict(f"claim {key} was allocated by someone else in the meantime")
    if is_extended_resource_claim(claim) and not plan.creates(c):
        made_by = creator(history)
        if foreign(made_by, saga_id):
            raise SchedulingConflict(
                f"claim {key} was created by another scheduling attempt (saga {made_by})"
            )
    if any(r.uid == plan.uid for r in claim.status.reserved_for):
        writer = reservation_writer(history, plan.uid)
        if foreign(writer, saga_id):
            raise SchedulingConflict(
                f"claim {key} is reserved for pod {plan.key} by another scheduling attempt (saga {writer})"
            )


def current_pod(rt: DecisionView, plan: PodSchedulingInput) -> Pod | None:
    pod, _ = rt.get("Pod", plan.namespace, plan.name)
    return pod if isinstance(pod, Pod) and pod.metadata.uid == plan.uid else None


def assume_decided(view: DecisionView, pod: Pod, plan: PodSchedulingInput) -> None:
    """Count a decision in the assume cache as the scheduler that took it did (its claims'
    allocations not in the log yet, the special claim's before it exists, the pod on its node),
    unless the pod is bound or the decision is assumed already. ``reserve`` calls it when another
    process resumes the saga; ``draflow verify-replay`` for decisions it replays unchecked."""
    cluster = view.core.cluster
    if pod.spec.node_name or plan.key in cluster.assumed.pods:
        return
    allocs: list[tuple[ResourceClaim, AllocationResult]] = []
    ext = plan.extended_claim
    for c in plan.claims:
        claim, _ = view.get("ResourceClaim", c.namespace, c.name)
        if claim is None and ext is not None and plan.creates(c):
            claim = ext  # the special claim, not created yet
        if c.allocation is not None and isinstance(claim, ResourceClaim):
            if claim.status.allocation is None:
                allocs.append((claim, c.allocation))
    cluster.assume_allocations(pod, plan.node_name, allocs)
    cluster.assume_pod(pod, plan.node_name)
    if plan.numeric:
        for plugin in view.core.profile.plugins:
            if isinstance(plugin, NumericResources):
                for n in plan.numeric:
                    plugin.assume_plan(pod, plan.node_name, n)


def release_decided(view: DecisionView, plan: PodSchedulingInput) -> None:
    """Drop an assumed decision (the pod goes back to the queue): ``unreserve``, and ``draflow
    verify-replay`` where the log shows that compensation."""
    pod = current_pod(view, plan)
    if pod is not None:
        view.core.unreserve(pod)
    else:
        for event in view.core.cluster.forget(plan.key):
            view.core.queue.on_event(event)


async def reserve(ctx: Ctx) -> dict[str, Any]:
    plan, rt = ctx.input, ctx.deps
    pod = current_pod(rt, plan)
    if pod is None:
        raise SchedulingConflict(f"pod {plan.key} (uid {plan.uid}) is gone")
    if pod.spec.node_name and pod.spec.node_name != plan.node_name:
        raise SchedulingConflict(f"pod {plan.key} is bound to {pod.spec.node_name} already")
    assume_decided(rt, pod, plan)  # resumed by a process that did not take the decision
    return {"node": plan.node_name}


async def unreserve(ctx: Ctx) -> None:
    """The decision out of the assume cache, then the guards PreBind took that no allocation
    holds now (:func:`~.guarded.release_unbacked`). Those belong here, not to ``release``:
    Reserve's compensation is owed whatever step failed, and a saga resumed after a crash
    between a take and its claim's append fails at Reserve when its pod is gone meanwhile."""
    plan = ctx.input
    release_decided(ctx.deps, plan)
    for c in reversed(plan.claims):
        if c.allocation is not None and c.guards:
            await release_unbacked(ctx, c.namespace, c.name, c.uid, c.guards)


async def prebind(ctx: Ctx) -> dict[str, Any]:
    plan, rt = ctx.input, ctx.deps
    ext = plan.extended_claim
    if ext is not None:
        await create_extended_claim(ctx, rt, ext)
    for c in plan.claims:
        await _prebind_claim(ctx, plan, c)
    for n in plan.numeric:
        await prebind_numeric(ctx, plan.uid, n)
    if ext is not None:
        await record_extended_status(
            ctx, rt, plan.namespace, plan.name, plan.uid, ext, plan.extended_mappings
        )
    return {"claims": [c.name for c in plan.claims] + [n.name for n in plan.numeric]}


async def _prebind_claim(ctx: Ctx, plan: PodSchedulingInput, c: ClaimPlan) -> None:
    rt = ctx.deps
    binding = PodSchedulingInput.binding(c)
    claim, version = rt.get("ResourceClaim", c.namespace, c.name)  # the snapshot: no read
    history: list[Envelope[Event]] | None = None
    expected = {(g.scope, g.key): g.seen for g in c.guards}
    taken = False
    for attempt in range(MAX_CONFLICTS):
        if history is None and (not isinstance(claim, ResourceClaim) or _needs_history(claim, plan, c)):
            claim, version, history = await read_object(rt, "ResourceClaim", c.namespace, c.name)
        if not isinstance(claim, ResourceClaim):
            raise SchedulingConflict(f"claim {c.namespace}/{c.name} is gone")
        if history is not None:
            _check_owner(ctx.saga_id, plan, c, claim, history)
        try:
            new = prebind_claim(claim, binding)
        except PreBindConflict as exc:
            raise SchedulingConflict(str(exc)) from exc
        if new is claim:
            return
        events: list[Event] = []
        reserved = any(r.uid == plan.uid for r in claim.status.reserved_for)
        if c.allocation is not None and claim.status.allocation is None:
            if not taken:  # the devices first: a take without its allocation is only a conflict
                await take_each(ctx, claim, expected, f"{c.namespace}/{c.name}")
                taken = True
            consumer = None if reserved else c.consumer
            events.append(
                ClaimAllocated(
                    allocation=c.allocation, node_name=plan.node_name, pod_uid=plan.uid, consumer=consumer
                )
            )
            reserved = True
        elif DELETE_PROTECTION_FINALIZER not in claim.metadata.finalizers:
            finalizers = (*claim.metadata.finalizers, DELETE_PROTECTION_FINALIZER)
            events.append(finalizers_changed("ResourceClaim", finalizers))
        if not reserved:
            events.append(ClaimReserved(consumer=c.consumer))
        if not events:
            return  # everything the decision asks for is on the claim already
        subject = rt.subject("ResourceClaim", c.namespace, c.name)
        try:
            await ctx.append(subject, events, expected_last_seq=version, suffix=f"{c.name}:{attempt}")
        except ConcurrencyError:
            claim, version, history = await read_object(rt, "ResourceClaim", c.namespace, c.name)
            continue
        rt.appended()
        return
    raise SchedulingConflict(f"claim {c.namespace}/{c.name}: kept changing ({MAX_CONFLICTS} conflicts)")


async def release(ctx: Ctx) -> None:
    plan, rt = ctx.input, ctx.deps
    ext = plan.extended_claim
    for n in reversed(plan.numeric):
        await release_numeric(ctx, plan.uid, n)
    for c in reversed(plan.claims):
        if not plan.creates(c):  # the special claim: below, allocation and reservation with it
            await _release_claim(ctx, plan, c)
    if ext is not None:
        await release_extended_claim(ctx, rt, plan.uid, ext)
        await clear_extended_status(ctx, rt, plan.namespace, plan.name, plan.uid, ext.metadata.name)


async def _release_claim(ctx: Ctx, plan: PodSchedulingInput, c: ClaimPlan) -> None:
    """Only what this saga wrote: its reservation of the pod, its allocation if unused."""
    rt = ctx.deps
    for attempt in range(MAX_CONFLICTS):
        claim, version, history = await read_object(rt, "ResourceClaim", c.namespace, c.name)
        if not isinstance(claim, ResourceClaim) or (c.uid and claim.metadata.uid != c.uid):
            return
        status = claim.status
        ours = any(r.uid == plan.uid for r in status.reserved_for) and (
            reservation_writer(history, plan.uid) == ctx.saga_id
        )
        released = (plan.uid,) if ours else ()
        others = [r for r in status.reserved_for if not (ours and r.uid == plan.uid)]
        event: Event
        if (
            c.allocation is not None
            and status.allocation is not None
            and not others
            and allocation_writer(history) == ctx.saga_id
        ):
            # one fact, one single append: the reservation leaves with the allocation; the
            # devices' guards need no message (the snapshot counts a take as given back once
            # its claim was allocated, see guard_heads)
            event = ClaimDeallocated(reason="Unreserve", released=released)
        elif released:
            event = ClaimReservationsReleased(uids=released)
        else:
            return
        subject = rt.subject("ResourceClaim", c.namespace, c.name)
        try:
            await ctx.append(subject, event, expected_last_seq=version, suffix=f"{c.name}:{attempt}")
        except ConcurrencyError:
            continue
        rt.appended()
        return
    raise SchedulingConflict(f"claim {c.namespace}/{c.name}: kept changing while releasing it")


def _status_ok(plan: PodSchedulingInput, pod: Pod) -> bool:
    ext = plan.extended_claim
    return ext is None or pod_with_claim_status(pod, ext.metadata.name, plan.extended_mappings) is pod


async def bind(ctx: Ctx) -> dict[str, Any]:
    plan, rt = ctx.input, ctx.deps
    pod, version = rt.get("Pod", plan.namespace, plan.name)
    fresh = False
    for attempt in range(MAX_CONFLICTS):
        stale = not isinstance(pod, Pod) or pod.metadata.uid != plan.uid or not _status_ok(plan, pod)
        if stale and not fresh:  # the snapshot may lag behind our own PreBind: read the log
            pod, version = await rt.load("Pod", plan.namespace, plan.name)
            fresh = True
        if not isinstance(pod, Pod) or pod.metadata.uid != plan.uid:
            raise SchedulingConflict(f"pod {plan.key} (uid {plan.uid}) is gone")
        if pod.metadata.deletion_timestamp:
            raise SchedulingConflict(f"pod {plan.key} is being deleted")
        if pod.spec.node_name:
            history = await rt.history("Pod", plan.namespace, plan.name)
            if pod.spec.node_name == plan.node_name and binder(history) == ctx.saga_id:
                break
            raise SchedulingConflict(f"pod {plan.key} was bound to {pod.spec.node_name} by someone else")
        if not _status_ok(plan, pod):
            raise SchedulingConflict(
                f"pod {plan.key}: status.extendedResourceClaimStatus was changed by someone else"
            )
        subject = rt.subject("Pod", plan.namespace, plan.name)
        try:
            await ctx.append(
                subject,
                PodBound(node_name=plan.node_name, at=rt.now()),
                expected_last_seq=version,
                suffix=str(attempt),
            )
        except ConcurrencyError:
            pod, version = await rt.load("Pod", plan.namespace, plan.name)
            fresh = True
            continue
        rt.appended()
        break
    else:
        raise SchedulingConflict(f"pod {plan.key}: kept changing ({MAX_CONFLICTS} conflicts)")
    rt.bound(plan)
    return {"node": plan.node_name}


POD_SCHEDULING_SAGA = SagaDefinition(
    POD_SCHEDULING,
    (
        # no saga events of their own: whoever drives the saga runs them again. Reserve's effect
        # is this process's memory (the assume cache); PreBind's and Bind's writes carry the
        # saga's id, so a re-run finds them in place, and release undoes only what the log shows
        Step("reserve", reserve, unreserve, local=True),
        Step("prebind", prebind, release, local=True),
        Step("bind", bind, local=True),
    ),
    PodSchedulingInput,
)
