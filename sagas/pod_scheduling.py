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

Each step is idempotent: it first looks at the objects and appends only what is missing, with a
deterministic message id, so a re-run after a crash has no second effect.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import msgspec

from events.api.core_v1 import Pod
from events.api.resource_v1 import AllocationResult, ResourceClaim, ResourceClaimConsumerReference
from events.dra import ClaimAllocated, ClaimDeallocated, ClaimReservationsReleased, ClaimReserved, PodBound
from events.envelope import Envelope, Event
from events.objects import finalizers_changed
from infra.errors import ConcurrencyError
from sagas.engine import SagaDefinition, Step, StepContext
from services.scheduler.framework import ClaimBinding, ClaimRef, Reserved, Scheduler
from services.scheduler.plugins.dynamicresources import FINALIZER, PreBindConflict, prebind_claim

__all__ = [
    "POD_SCHEDULING",
    "ClaimPlan",
    "PodSchedulingInput",
    "Runtime",
    "SchedulingConflict",
    "pod_scheduling_saga",
    "written_by",
]

POD_SCHEDULING = "PodScheduling"
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
        return cls(
            namespace=r.pod.namespace, name=r.pod.name, uid=r.pod.uid, node_name=r.node_name, claims=claims
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
            for c in plan.claims:
                claim, _ = rt.get("ResourceClaim", c.namespace, c.name)
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
        for c in plan.claims:
            await _prebind_claim(ctx, plan, c)
        return {"claims": [c.name for c in plan.claims]}

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
        for c in reversed(plan.claims):
            await _release_claim(ctx, plan, c)

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
