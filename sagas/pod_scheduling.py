"""The PodScheduling saga: Reserve → PreBind → Bind for one scheduling decision, with Unreserve.

The scheduling cycle decides (node, per-claim allocation) on the in-memory snapshot and already
counts it in the assume cache; the saga's input is that decision, so whoever resumes the saga
after a crash writes exactly what was decided. Steps:

* ``reserve`` — the decision is in the assume cache (re-assumed when another process resumes).
  Compensation ``unreserve``: drop the assume entries and send the pod back to the queue (backoff).
* ``prebind`` — per claim, one atomic append on the claim's subject with the claim's version as
  the expected last sequence: ``ClaimAllocated`` (when this cycle allocated it; also sets the
  delete-protection finalizer) and ``ClaimReserved`` (the pod in ``reservedFor``). A conflict
  means someone else changed the claim: reload it from the log and check the decision still holds
  (``prebind_claim``); a claim allocated by anyone but this saga meanwhile fails the step, which
  compensates. Compensation: for each claim this saga wrote (found by the saga id as correlation
  id in the claim's history), ``ClaimReservationsReleased`` and, when the allocation is this
  saga's and nobody else reserves the claim, ``ClaimDeallocated{reason: Unreserve}``.
* ``bind`` — ``PodBound`` on the pod's subject (optimistic as well); a pod bound by someone else
  meanwhile fails the step.

Extended resources backed by DRA (KEP-5004): when the decision includes the pod's special claim
(``extended_claim``: name and uid chosen by the cycle, so a re-run targets the same object), the
``prebind`` step first creates it (``ResourceClaimApplied`` on its subject, expected to be new),
then allocates and reserves it with the pod's other claims, and last records the pod's
``status.extendedResourceClaimStatus`` (``PodExtendedResourceClaimStatusRecorded``). Its
compensation (registered by the engine before the step runs, so it also undoes a step cut short)
clears that status if it still names the claim, releases the other claims, and deletes the
special claim (upstream Unreserve's ``deleteClaim``) — each part checks first, so it is
idempotent. These are parts of the existing ``prebind`` step rather than steps of their own:
recorded sagas keep the step list they were started with. A special claim left over from an
earlier attempt, which PostFilter finds, is deleted by the one-step ``ExtendedClaimCleanup``
saga.

Each step is idempotent: it first looks at the objects and appends only what is missing, with a
deterministic message id, so a re-run after a crash has no second effect.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import msgspec

from events.api.core_v1 import ContainerExtendedResourceRequest, Pod
from events.api.resource_v1 import AllocationResult, ResourceClaim, ResourceClaimConsumerReference
from events.dra import (
    ClaimAllocated,
    ClaimDeallocated,
    ClaimReservationsReleased,
    ClaimReserved,
    PodBound,
    PodExtendedResourceClaimStatusRecorded,
)
from events.envelope import Envelope, Event
from events.objects import finalizers_changed, object_applied, object_deleted
from infra.errors import ConcurrencyError
from sagas.engine import SagaDefinition, Step, StepContext
from services.scheduler.extended.claim import claim_status
from services.scheduler.extended.saga import pod_with_claim_status, pod_without_claim_status
from services.scheduler.framework import ClaimBinding, ClaimRef, Reserved, Scheduler
from services.scheduler.plugins.dynamicresources import FINALIZER, PreBindConflict, prebind_claim

__all__ = [
    "EXTENDED_CLAIM_CLEANUP",
    "POD_SCHEDULING",
    "ClaimPlan",
    "ExtendedClaimCleanupInput",
    "PodSchedulingInput",
    "Runtime",
    "SchedulingConflict",
    "extended_claim_cleanup_saga",
    "pod_scheduling_saga",
    "written_by",
]

POD_SCHEDULING = "PodScheduling"
EXTENDED_CLAIM_CLEANUP = "ExtendedClaimCleanup"
MAX_CONFLICTS = 8  # reload-and-retry rounds on one subject before giving up (compensate)


class SchedulingConflict(Exception):
    """The decision no longer holds (pod or claim changed by someone else): compensate."""


class Runtime(Protocol):
    """What the saga steps need from the scheduler service."""

    core: Scheduler

    def get(self, kind: str, namespace: str, name: str) -> tuple[Any, int]: ...
    async def load(self, kind: str, namespace: str, name: str) -> tuple[Any, int]: ...
    async def history(self, kind: str, namespace: str, name: str) -> list[Envelope[Event]]: ...
    def subject(self, kind: str, namespace: str, name: str) -> str: ...
    def now(self) -> str: ...
    def appended(self) -> None: ...
    def bound(self, plan: PodSchedulingInput) -> None: ...
    async def admission_refusal(self, claim: ResourceClaim) -> str:
        """Why the API server's admission (quota) would refuse creating ``claim``; "" if it would not."""
        ...


class ClaimPlan(msgspec.Struct, frozen=True, kw_only=True):
    namespace: str
    name: str
    uid: str = ""
    allocation: AllocationResult | None = None  # None: already allocated, only reserve
    consumer: ResourceClaimConsumerReference


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

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @classmethod
    def of(cls, r: Reserved) -> PodSchedulingInput:
        claims = tuple(
            ClaimPlan(
                namespace=b.claim.namespace,
                name=b.claim.name,
                uid=b.claim.uid,
                allocation=b.allocation,
                consumer=b.consumer,
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
        )

    def to_input(self) -> dict[str, Any]:
        out: dict[str, Any] = msgspec.to_builtins(self)
        return out

    @staticmethod
    def binding(c: ClaimPlan) -> ClaimBinding:
        return ClaimBinding(ClaimRef(c.namespace, c.name, c.uid), c.allocation, c.consumer)


_PLANS: dict[str, PodSchedulingInput] = {}  # saga id -> decoded input, while the saga runs


def _plan(ctx: StepContext) -> PodSchedulingInput:
    plan = _PLANS.get(ctx.saga_id)
    if plan is None:
        if len(_PLANS) > 4096:
            _PLANS.clear()
        plan = _PLANS[ctx.saga_id] = msgspec.convert(ctx.input, PodSchedulingInput)
    return plan


def written_by(history: Sequence[Envelope[Event]], saga_id: str, types: Sequence[type[Event]]) -> bool:
    """Whether the last event of these types on the subject was appended by ``saga_id``."""
    names = {t.type_name() for t in types}
    for env in reversed(history):
        if env.type in names:
            return env.correlation_id == saga_id
    return False


def pod_scheduling_saga(rt: Runtime) -> SagaDefinition:
    """The saga definition, its steps closed over the service's runtime."""

    def current_pod(plan: PodSchedulingInput) -> Pod | None:
        pod, _ = rt.get("Pod", plan.namespace, plan.name)
        return pod if isinstance(pod, Pod) and pod.metadata.uid == plan.uid else None

    async def reserve(ctx: StepContext) -> dict[str, Any]:
        plan = _plan(ctx)
        pod = current_pod(plan)
        if pod is None:
            raise SchedulingConflict(f"pod {plan.key} (uid {plan.uid}) is gone")
        if pod.spec.node_name and pod.spec.node_name != plan.node_name:
            raise SchedulingConflict(f"pod {plan.key} is bound to {pod.spec.node_name} already")
        cluster = rt.core.cluster
        if not pod.spec.node_name and plan.key not in cluster.assumed.pods:
            # resumed by a process that did not make the decision: assume it here too
            allocs: list[tuple[ResourceClaim, AllocationResult]] = []
            ext = plan.extended_claim
            for c in plan.claims:
                claim, _ = rt.get("ResourceClaim", c.namespace, c.name)
                if claim is None and ext is not None and (c.namespace, c.name, c.uid) == _ref(ext):
                    claim = ext  # the special claim, not created yet
                if c.allocation is not None and isinstance(claim, ResourceClaim):
                    if claim.status.allocation is None:
                        allocs.append((claim, c.allocation))
            cluster.assume_allocations(pod, plan.node_name, allocs)
            cluster.assume_pod(pod, plan.node_name)
        return {"node": plan.node_name}

    async def unreserve(ctx: StepContext) -> None:
        plan = _plan(ctx)
        pod = current_pod(plan)
        if pod is not None:
            rt.core.unreserve(pod)
        else:
            for event in rt.core.cluster.forget(plan.key):
                rt.core.queue.on_event(event)

    async def prebind(ctx: StepContext) -> dict[str, Any]:
        plan = _plan(ctx)
        if plan.extended_claim is not None:
            await _create_extended_claim(ctx, plan.extended_claim)
        for c in plan.claims:
            await _prebind_claim(ctx, plan, c)
        if plan.extended_claim is not None:
            await _record_extended_status(ctx, plan, plan.extended_claim)
        return {"claims": [c.name for c in plan.claims]}

    async def _create_extended_claim(ctx: StepContext, claim: ResourceClaim) -> None:
        """PreBind: the special claim, created once (upstream: the API server creates it)."""
        ns, name, uid = _ref(claim)
        subject = rt.subject("ResourceClaim", ns, name)
        for attempt in range(MAX_CONFLICTS):
            current, version = await rt.load("ResourceClaim", ns, name)
            if isinstance(current, ResourceClaim):
                if current.metadata.uid == uid:
                    return  # created by this saga already (a re-run)
                raise SchedulingConflict(f"claim {ns}/{name} exists already (uid {current.metadata.uid})")
            meta = msgspec.structs.replace(claim.metadata, creation_timestamp=rt.now())
            new = msgspec.structs.replace(claim, metadata=meta)
            # upstream creates it through the API server, whose quota admission may refuse it
            # (count/resourceclaims.resource.k8s.io); PreBind then fails and the pod backs off
            refusal = await rt.admission_refusal(new)
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

    async def _record_extended_status(
        ctx: StepContext, plan: PodSchedulingInput, claim: ResourceClaim
    ) -> None:
        """PreBind, last part: ``pod.status.extendedResourceClaimStatus`` names the claim."""
        name = claim.metadata.name
        pod, version = rt.get("Pod", plan.namespace, plan.name)
        subject = rt.subject("Pod", plan.namespace, plan.name)
        for attempt in range(MAX_CONFLICTS):
            if not isinstance(pod, Pod) or pod.metadata.uid != plan.uid:
                pod, version = await rt.load("Pod", plan.namespace, plan.name)
                if not isinstance(pod, Pod) or pod.metadata.uid != plan.uid:
                    raise SchedulingConflict(f"pod {plan.key} (uid {plan.uid}) is gone")
            if pod_with_claim_status(pod, name, plan.extended_mappings) is pod:
                return
            event = PodExtendedResourceClaimStatusRecorded(status=claim_status(name, plan.extended_mappings))
            try:
                await ctx.append(subject, event, expected_last_seq=version, suffix=f"ext-status:{attempt}")
            except ConcurrencyError:
                pod, version = await rt.load("Pod", plan.namespace, plan.name)
                continue
            rt.appended()
            return
        raise SchedulingConflict(f"pod {plan.key}: kept changing ({MAX_CONFLICTS} conflicts)")

    async def _prebind_claim(ctx: StepContext, plan: PodSchedulingInput, c: ClaimPlan) -> None:
        binding = PodSchedulingInput.binding(c)
        claim, version = rt.get("ResourceClaim", c.namespace, c.name)
        fresh = False
        for attempt in range(MAX_CONFLICTS):
            if not isinstance(claim, ResourceClaim):
                if fresh:
                    raise SchedulingConflict(f"claim {c.namespace}/{c.name} is gone")
                claim, version = await rt.load("ResourceClaim", c.namespace, c.name)
                fresh = True
                continue
            if c.allocation is not None and claim.status.allocation is not None:
                history = await rt.history("ResourceClaim", c.namespace, c.name)
                if not written_by(history, ctx.saga_id, (ClaimAllocated,)):
                    raise SchedulingConflict(
                        f"claim {c.namespace}/{c.name} was allocated by someone else in the meantime"
                    )
            try:
                new = prebind_claim(claim, binding)
            except PreBindConflict as exc:
                raise SchedulingConflict(str(exc)) from exc
            if new is claim:
                return
            events: list[Event] = []
            if c.allocation is not None and claim.status.allocation is None:
                events.append(
                    ClaimAllocated(allocation=c.allocation, node_name=plan.node_name, pod_uid=plan.uid)
                )
            elif FINALIZER not in claim.metadata.finalizers:
                events.append(finalizers_changed("ResourceClaim", (*claim.metadata.finalizers, FINALIZER)))
            if not any(r.uid == plan.uid for r in claim.status.reserved_for):
                events.append(ClaimReserved(consumer=c.consumer))
            if not events:
                return  # everything the decision asks for is on the claim already
            subject = rt.subject("ResourceClaim", c.namespace, c.name)
            try:
                await ctx.append(subject, events, expected_last_seq=version, suffix=f"{c.name}:{attempt}")
            except ConcurrencyError:
                claim, version = await rt.load("ResourceClaim", c.namespace, c.name)
                fresh = True
                continue
            rt.appended()
            return
        raise SchedulingConflict(f"claim {c.namespace}/{c.name}: kept changing ({MAX_CONFLICTS} conflicts)")

    async def release(ctx: StepContext) -> None:
        plan = _plan(ctx)
        ext = plan.extended_claim
        if ext is not None:
            await clear_extended_status(ctx, rt, plan.namespace, plan.name, plan.uid, ext.metadata.name)
        for c in reversed(plan.claims):
            if ext is not None and (c.namespace, c.name, c.uid) == _ref(ext):
                continue  # deleted below, allocation and reservation with it
            await _release_claim(ctx, plan, c)
        if ext is not None:
            await delete_extended_claim(ctx, rt, *_ref(ext))

    async def _release_claim(ctx: StepContext, plan: PodSchedulingInput, c: ClaimPlan) -> None:
        for attempt in range(MAX_CONFLICTS):
            history = await rt.history("ResourceClaim", c.namespace, c.name)
            if not any(env.correlation_id == ctx.saga_id for env in history):
                return  # this saga wrote nothing on the claim: nothing to undo
            claim, version = await rt.load("ResourceClaim", c.namespace, c.name)
            if not isinstance(claim, ResourceClaim) or (c.uid and claim.metadata.uid != c.uid):
                return
            events: list[Event] = []
            reserved = claim.status.reserved_for
            if any(r.uid == plan.uid for r in reserved):
                events.append(ClaimReservationsReleased(uids=(plan.uid,)))
            others = [r for r in reserved if r.uid != plan.uid]
            ours = c.allocation is not None and written_by(history, ctx.saga_id, (ClaimAllocated,))
            if ours and claim.status.allocation is not None and not others:
                events.append(ClaimDeallocated(reason="Unreserve"))
            if not events:
                return
            subject = rt.subject("ResourceClaim", c.namespace, c.name)
            try:
                await ctx.append(subject, events, expected_last_seq=version, suffix=f"{c.name}:{attempt}")
            except ConcurrencyError:
                continue
            rt.appended()
            return
        raise SchedulingConflict(f"claim {c.namespace}/{c.name}: kept changing while releasing it")

    async def bind(ctx: StepContext) -> dict[str, Any]:
        plan = _plan(ctx)
        pod, version = rt.get("Pod", plan.namespace, plan.name)
        for attempt in range(MAX_CONFLICTS):
            if not isinstance(pod, Pod) or pod.metadata.uid != plan.uid:
                pod, version = await rt.load("Pod", plan.namespace, plan.name)
                if not isinstance(pod, Pod) or pod.metadata.uid != plan.uid:
                    raise SchedulingConflict(f"pod {plan.key} (uid {plan.uid}) is gone")
            if pod.metadata.deletion_timestamp:
                raise SchedulingConflict(f"pod {plan.key} is being deleted")
            if pod.spec.node_name:
                history = await rt.history("Pod", plan.namespace, plan.name)
                if pod.spec.node_name == plan.node_name and written_by(history, ctx.saga_id, (PodBound,)):
                    break
                raise SchedulingConflict(f"pod {plan.key} was bound to {pod.spec.node_name} by someone else")
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
                continue
            rt.appended()
            break
        else:
            raise SchedulingConflict(f"pod {plan.key}: kept changing ({MAX_CONFLICTS} conflicts)")
        rt.bound(plan)
        return {"node": plan.node_name}

    return SagaDefinition(
        POD_SCHEDULING,
        (
            Step("reserve", reserve, unreserve),
            Step("prebind", prebind, release),
            Step("bind", bind),
        ),
    )


def _ref(claim: ResourceClaim) -> tuple[str, str, str]:
    meta = claim.metadata
    return meta.namespace, meta.name, meta.uid


async def clear_extended_status(
    ctx: StepContext, rt: Runtime, namespace: str, pod_name: str, pod_uid: str, claim_name: str
) -> None:
    """Compensation: drop ``extendedResourceClaimStatus`` if it still names ``claim_name``."""
    subject = rt.subject("Pod", namespace, pod_name)
    for attempt in range(MAX_CONFLICTS):
        pod, version = await rt.load("Pod", namespace, pod_name)
        if not isinstance(pod, Pod) or pod.metadata.uid != pod_uid:
            return
        if pod_without_claim_status(pod, claim_name) is pod:
            return
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


async def delete_extended_claim(ctx: StepContext, rt: Runtime, namespace: str, name: str, uid: str) -> None:
    """Unreserve / PostFilter: delete the special claim (this uid only; gone already is fine)."""
    subject = rt.subject("ResourceClaim", namespace, name)
    for attempt in range(MAX_CONFLICTS):
        claim, version = await rt.load("ResourceClaim", namespace, name)
        if not isinstance(claim, ResourceClaim) or claim.metadata.uid != uid:
            return
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
        return
    raise SchedulingConflict(f"claim {namespace}/{name}: kept changing while deleting it")


class ExtendedClaimCleanupInput(msgspec.Struct, frozen=True, kw_only=True):
    """A special claim PostFilter found left over from an earlier attempt, and its pod."""

    namespace: str
    claim_name: str
    claim_uid: str
    pod_name: str
    pod_uid: str


def extended_claim_cleanup_saga(rt: Runtime) -> SagaDefinition:
    """PostFilter's deletion of a stale special claim (upstream: ``deleteClaim`` in PostFilter),
    so the pod's next attempt starts with a new in-memory claim."""

    async def delete(ctx: StepContext) -> dict[str, Any]:
        inp = msgspec.convert(ctx.input, ExtendedClaimCleanupInput)
        await clear_extended_status(ctx, rt, inp.namespace, inp.pod_name, inp.pod_uid, inp.claim_name)
        await delete_extended_claim(ctx, rt, inp.namespace, inp.claim_name, inp.claim_uid)
        return {"claim": inp.claim_name}

    return SagaDefinition(EXTENDED_CLAIM_CLEANUP, (Step("delete", delete),))
