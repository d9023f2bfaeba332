"""A PodScheduling saga that fails after it wrote: its compensation undoes exactly its own writes.

Real nats-server, apiserver and saga steps. Pod ``p`` uses three claims, planned in this order:

* ``shared`` — already allocated by another pod's scheduling attempt (``Q_SAGA``) and reserved
  for pod ``q``: p's saga only adds p's reservation;
* ``joint`` — unallocated: p's saga allocates it and reserves it for p;
* ``p-gpu`` — p's generated claim: p's saga allocates it and reserves it for p.

The saga is failed after PreBind (Bind finds the pod deleted or bound by someone else) and inside
PreBind (another attempt allocated ``p-gpu`` first, after ``shared`` and ``joint`` were written).
The log afterwards must show the saga's writes undone claim by claim in reverse order (its
reservation released, its allocation given back unless someone else now reserves the claim),
between the saga's ``SagaStepFailed`` and its ``SagaStepCompensated``, and nothing another saga
wrote touched. Then the saga is stopped dead at points inside its run (right after one append
landed, as a crash leaves it) and a new instance resumes it: forward to a bound pod or backward to
the same undone state, each write exactly once.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from events.api.core_v1 import Pod, PodResourceClaimStatus
from events.api.resource_v1 import ResourceClaim, ResourceClaimConsumerReference
from events.dra import (
    ClaimAllocated,
    ClaimDeallocated,
    ClaimReservationsReleased,
    ClaimReserved,
    PodBound,
    PodClaimStatusesRecorded,
)
from events.envelope import Envelope, Event
from events.saga import SagaStepCompensated, SagaStepCompleted, SagaStepFailed
from projections.objects import fold
from sagas.engine import SagaState, SagaStatus
from sagas.pod_scheduling import POD_SCHEDULING, PodSchedulingInput
from services.scheduler.framework import Reserved
from services.scheduler.service import SchedulerService
from tests.scheduler.builders import allocation_on, exact, make_claim, make_pod
from tests.scheduler_service.conftest import Cluster
from tests.scheduler_service.interrupt import HeldBefore, StopAfterAppend, stop_dead

Q_SAGA = "scheduler-b-ps-q"  # the other pod's scheduling attempt (another instance)
OTHER = "scheduler-c-ps-p"  # another attempt for p itself
PLAN_ORDER = ["shared", "joint", "p-gpu"]


class Instances:
    """Scheduler instances made by a test (snapshot followed, no loop), all closed at the end."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.made: list[SchedulerService] = []

    async def start(self, name: str) -> SchedulerService:
        svc = await self.cluster.make(name)
        self.made.append(svc)
        await svc.start()  # the snapshot, and the sagas an earlier instance left unfinished
        return svc


@pytest.fixture
async def instances(cluster: Cluster) -> AsyncIterator[Instances]:
    made = Instances(cluster)
    try:
        yield made
    finally:
        for svc in made.made:
            await svc.snapshot.stop()
            await svc.store.close()


def _consumer(pod: Pod) -> ResourceClaimConsumerReference:
    return ResourceClaimConsumerReference(resource="pods", name=pod.metadata.name, uid=pod.metadata.uid)


async def _setup(cluster: Cluster, instances: Instances) -> tuple[Pod, Pod, SchedulerService]:
    await cluster.nodes(1, devices=4)
    await cluster.apply(make_claim("shared", exact()), make_claim("joint", exact()))
    await cluster.apply(make_pod("q", claims={"s": "shared"}))
    q = await cluster.get_pod("q")
    store = cluster.store
    await store.append(
        store.subject("ResourceClaim", "default", "shared"),
        [
            ClaimAllocated(
                allocation=allocation_on("node-0", "dev-3"), node_name="node-0", pod_uid=q.metadata.uid
            ),
            ClaimReserved(consumer=_consumer(q)),
        ],
        expected_last_seq=None,
        correlation_id=Q_SAGA,
    )
    await cluster.apply(make_pod("p", claims={"s": "shared", "j": "joint"}, template_claims={"gpu": "p-gpu"}))
    p = await cluster.get_pod("p")
    await cluster.apply(make_claim("p-gpu", exact(), owner=p))
    statuses = (PodResourceClaimStatus(name="gpu", resource_claim_name="p-gpu"),)
    await store.append(
        store.subject("Pod", "default", "p"),
        PodClaimStatusesRecorded(statuses=statuses),
        expected_last_seq=None,
    )
    a = await instances.start("scheduler-a")  # the test drives the saga
    return await cluster.get_pod("p"), q, a


async def _decide(svc: SchedulerService, pod: Pod) -> PodSchedulingInput:
    await svc.snapshot.wait_position(await svc.store.stream_last_seq())
    result = svc.core.schedule(pod)
    assert isinstance(result, Reserved), getattr(result, "message", result)
    plan = PodSchedulingInput.of(result)
    assert [c.name for c in plan.claims] == PLAN_ORDER
    assert [c.allocation is not None for c in plan.claims] == [False, True, True]
    return plan


def _sid(pod: Pod) -> str:
    return f"scheduler-a-ps-{pod.metadata.uid}"


async def _claim(cluster: Cluster, name: str) -> ResourceClaim:
    subject = cluster.store.subject("ResourceClaim", "default", name)
    loaded = await cluster.store.load(subject, lambda s, env: fold(s, env.type, env.data, env.seq), None)
    assert isinstance(loaded.state, ResourceClaim), name
    return loaded.state


async def _everything(cluster: Cluster) -> list[Envelope[Event]]:
    return await cluster.store.events(f"{cluster.store.root}.ev.>")


def _writes(log: Sequence[Envelope[Event]], by: str) -> list[tuple[str, str]]:
    """(object name, event type) of every non-saga event correlated with ``by``, in log order."""
    return [
        (e.subject.rsplit(".", 1)[-1], e.type)
        for e in log
        if e.correlation_id == by and ".Saga." not in e.subject
    ]


def _saga_trail(log: Sequence[Envelope[Event]], sid: str) -> list[Envelope[Event]]:
    return [e for e in log if e.subject.endswith(f".Saga._.{sid}")]


def _undone_between_failure_and_compensation(log: Sequence[Envelope[Event]], sid: str, step: str) -> None:
    """The compensation's writes follow the saga's failure and precede its ``SagaStepCompensated``
    for PreBind (index 1), which precedes Reserve's (index 0)."""
    trail = _saga_trail(log, sid)
    failed = [e.seq for e in trail if isinstance(e.data, SagaStepFailed)]
    assert len(failed) == 1 and next(e.data.step for e in trail if isinstance(e.data, SagaStepFailed)) == step
    undone = [e.data.index for e in trail if isinstance(e.data, SagaStepCompensated)]
    assert undone == [1, 0], undone  # release (prebind) first, then unreserve (reserve)
    prebind_undone = next(e.seq for e in trail if isinstance(e.data, SagaStepCompensated))
    for e in log:
        if e.correlation_id == sid and isinstance(e.data, ClaimReservationsReleased | ClaimDeallocated):
            assert failed[0] < e.seq < prebind_undone, (e.type, e.seq, failed, prebind_undone)
    assert trail[-1].type == "SagaCompensated"


def _released_only_p(log: Sequence[Envelope[Event]], sid: str, p: Pod) -> None:
    for e in log:
        if e.correlation_id == sid and isinstance(e.data, ClaimReservationsReleased):
            assert e.data.uids == (p.metadata.uid,), e.data
        if e.correlation_id == sid and isinstance(e.data, ClaimDeallocated):
            assert e.data.reason == "Unreserve"


async def _assert_q_intact(cluster: Cluster, q: Pod, before: list[tuple[str, str]], *also: Pod) -> None:
    """The other saga's writes are as they were; ``shared`` keeps its allocation and q's
    reservation (next to the reservations of ``also``)."""
    log = await _everything(cluster)
    assert _writes(log, Q_SAGA) == before, "another saga's writes changed"
    shared = await _claim(cluster, "shared")
    assert shared.status.allocation is not None
    assert [r.device for r in shared.status.allocation.devices.results] == ["dev-3"]
    assert [r.uid for r in shared.status.reserved_for] == [q.metadata.uid, *(p.metadata.uid for p in also)]


async def _quiet(cluster: Cluster, engine_run: Any, sid: str) -> None:
    """Running the finished saga again appends nothing (idempotent, terminal)."""
    last = await cluster.store.stream_last_seq()
    state: SagaState = await engine_run(sid)
    assert state.status.terminal
    assert await cluster.store.stream_last_seq() == last


FORWARD = [
    ("shared", "ClaimReserved"),
    ("joint", "ClaimAllocated"),
    ("joint", "ClaimReserved"),
    ("p-gpu", "ClaimAllocated"),
    ("p-gpu", "ClaimReserved"),
]


@pytest.mark.parametrize("breaker", ["pod-deleted", "bound-by-someone-else"])
async def test_failed_bind_undoes_only_the_sagas_writes_in_reverse(
    cluster: Cluster, instances: Instances, breaker: str
) -> None:
    p, q, a = await _setup(cluster, instances)
    plan = await _decide(a, p)
    sid = _sid(p)
    held = HeldBefore(a, "bind")
    task = asyncio.create_task(held.engine.start(POD_SCHEDULING, sid, plan.to_input()))
    await asyncio.wait_for(held.reached.wait(), 10)  # PreBind's writes are in the log
    assert _writes(await _everything(cluster), sid) == FORWARD

    # between PreBind and Bind: pod q's attempt reserves `joint` as well, and p is taken away
    store = cluster.store
    await store.append(
        store.subject("ResourceClaim", "default", "joint"),
        ClaimReserved(consumer=_consumer(q)),
        expected_last_seq=None,
        correlation_id=Q_SAGA,
    )
    if breaker == "pod-deleted":
        (result,) = await cluster.api.delete([("Pod", "default", "p")])
        assert result.error is None, result.error
        why = "pod default/p (uid"
    else:
        await store.append(
            store.subject("Pod", "default", "p"),
            PodBound(node_name="node-0"),
            expected_last_seq=None,
            correlation_id=OTHER,
        )
        why = "pod default/p was bound to node-0 by someone else"
    q_writes = _writes(await _everything(cluster), Q_SAGA)
    held.release()
    state = await asyncio.wait_for(task, 20)
    assert state.status is SagaStatus.COMPENSATED, state
    assert state.error.startswith(f"bind: SchedulingConflict: {why}"), state.error

    log = await _everything(cluster)
    assert _writes(log, sid) == [
        *FORWARD,
        # reverse claim order; `joint` stays allocated: q reserves it now
        ("p-gpu", "ClaimReservationsReleased"),
        ("p-gpu", "ClaimDeallocated"),
        ("joint", "ClaimReservationsReleased"),
        ("shared", "ClaimReservationsReleased"),
    ]
    _undone_between_failure_and_compensation(log, sid, "bind")
    _released_only_p(log, sid, p)
    own = await _claim(cluster, "p-gpu")
    assert own.status.allocation is None and own.status.reserved_for == ()
    joint = await _claim(cluster, "joint")
    assert joint.status.allocation is not None and [r.uid for r in joint.status.reserved_for] == [
        q.metadata.uid
    ]
    await _assert_q_intact(cluster, q, q_writes)
    if breaker == "bound-by-someone-else":
        bound = [e for e in log if isinstance(e.data, PodBound)]
        assert [e.correlation_id for e in bound] == [OTHER]  # the other binding stands
    await _quiet(cluster, held.engine.run, sid)


async def test_prebind_failing_midway_undoes_the_claims_it_wrote(
    cluster: Cluster, instances: Instances
) -> None:
    """Another attempt allocates ``p-gpu`` while p's saga is between Reserve and PreBind: PreBind
    writes ``shared`` and ``joint``, then fails on ``p-gpu``; its compensation undoes those two
    and leaves ``p-gpu``'s foreign allocation alone."""
    p, q, a = await _setup(cluster, instances)
    plan = await _decide(a, p)
    sid = _sid(p)
    held = HeldBefore(a, "prebind")
    task = asyncio.create_task(held.engine.start(POD_SCHEDULING, sid, plan.to_input()))
    await asyncio.wait_for(held.reached.wait(), 10)
    store = cluster.store
    (planned,) = [c.allocation for c in plan.claims if c.name == "p-gpu"]
    assert planned is not None
    taken = planned.devices.results[0].device
    other_device = next(d for d in ("dev-0", "dev-1", "dev-2") if d != taken and d not in _devices(plan))
    await store.append(
        store.subject("ResourceClaim", "default", "p-gpu"),
        ClaimAllocated(
            allocation=allocation_on("node-0", other_device), node_name="node-0", pod_uid=p.metadata.uid
        ),
        expected_last_seq=None,
        correlation_id=OTHER,
    )
    q_writes = _writes(await _everything(cluster), Q_SAGA)
    held.release()
    state = await asyncio.wait_for(task, 20)
    assert state.status is SagaStatus.COMPENSATED, state
    assert "claim default/p-gpu was allocated by someone else in the meantime" in state.error, state.error

    log = await _everything(cluster)
    assert _writes(log, sid) == [
        ("shared", "ClaimReserved"),
        ("joint", "ClaimAllocated"),
        ("joint", "ClaimReserved"),
        # p-gpu: nothing written, nothing undone; then the others in reverse
        ("joint", "ClaimReservationsReleased"),
        ("joint", "ClaimDeallocated"),
        ("shared", "ClaimReservationsReleased"),
    ]
    _undone_between_failure_and_compensation(log, sid, "prebind")
    _released_only_p(log, sid, p)
    own = await _claim(cluster, "p-gpu")
    assert own.status.allocation is not None
    assert [r.device for r in own.status.allocation.devices.results] == [other_device]
    assert (await _claim(cluster, "joint")).status.allocation is None
    await _assert_q_intact(cluster, q, q_writes)
    await _quiet(cluster, held.engine.run, sid)


def _devices(plan: PodSchedulingInput) -> set[str]:
    return {r.device for c in plan.claims if c.allocation is not None for r in c.allocation.devices.results}


# ---- stopped dead, resumed by another instance --------------------------------------------------


def _on_claim(name: str, kind: type[Event]) -> Any:
    return lambda subject, events: (
        subject.endswith(f".ResourceClaim.default.{name}") and any(isinstance(e, kind) for e in events)
    )


def _saga_event(kind: type[Event], step: str) -> Any:
    return lambda subject, events: (
        ".Saga." in subject and any(isinstance(e, kind) and getattr(e, "step", "") == step for e in events)
    )


@pytest.mark.parametrize(
    ("where", "stop_at"),
    [
        # joint written, p-gpu not, the step still open
        pytest.param("inside-prebind", _on_claim("joint", ClaimAllocated), id="inside-prebind"),
        # between PreBind and Bind
        pytest.param("after-prebind", _saga_event(SagaStepCompleted, "prebind"), id="after-prebind"),
    ],
)
async def test_stopped_forward_is_finished_by_the_next_instance(
    cluster: Cluster, instances: Instances, where: str, stop_at: Any
) -> None:
    p, q, a = await _setup(cluster, instances)
    plan = await _decide(a, p)
    sid = _sid(p)
    q_writes = _writes(await _everything(cluster), Q_SAGA)
    stop = StopAfterAppend(a.store, stop_at)
    task = asyncio.create_task(a.engine.start(POD_SCHEDULING, sid, plan.to_input()))
    await asyncio.wait_for(stop.landed.wait(), 10)
    await stop_dead(task, a)
    interrupted = [e.type for e in _saga_trail(await _everything(cluster), sid)]
    assert interrupted[-1] == ("SagaStepStarted" if where == "inside-prebind" else "SagaStepCompleted")

    b = await instances.start("scheduler-b")  # resumes what a left unfinished, before deciding
    state = await b.engine.load(sid)
    assert state is not None and state.status is SagaStatus.COMPLETED, state
    log = await _everything(cluster)
    assert _writes(log, sid) == [*FORWARD, ("p", "PodBound")]  # each write once, by the saga's id
    trail = _saga_trail(log, sid)
    resumed = [e for e in trail if e.seq > trail[len(interrupted) - 1].seq]
    assert resumed and {e.actor for e in resumed} == {"scheduler-b"}, [(e.type, e.actor) for e in trail]
    bound = [e for e in log if isinstance(e.data, PodBound)]
    assert [(e.correlation_id, e.actor) for e in bound] == [(sid, "scheduler-b")]
    for name in ("joint", "p-gpu"):
        claim = await _claim(cluster, name)
        assert claim.status.allocation is not None and [r.uid for r in claim.status.reserved_for] == [
            p.metadata.uid
        ]
    await _assert_q_intact(cluster, q, q_writes, p)
    await _quiet(cluster, b.engine.run, sid)


@pytest.mark.parametrize(
    ("stop_at", "trail_end"),
    [
        # the first claim's release landed, the others not; PreBind's compensation not recorded
        pytest.param(_on_claim("p-gpu", ClaimDeallocated), "SagaStepFailed", id="inside-release"),
        # PreBind's compensation recorded, Reserve's (unreserve) not
        pytest.param(
            _saga_event(SagaStepCompensated, "prebind"), "SagaStepCompensated", id="between-compensations"
        ),
    ],
)
async def test_stopped_compensation_is_finished_by_the_next_instance(
    cluster: Cluster, instances: Instances, stop_at: Any, trail_end: str
) -> None:
    p, q, a = await _setup(cluster, instances)
    plan = await _decide(a, p)
    sid = _sid(p)
    held = HeldBefore(a, "bind")
    stop = StopAfterAppend(a.store, stop_at)
    task = asyncio.create_task(held.engine.start(POD_SCHEDULING, sid, plan.to_input()))
    await asyncio.wait_for(held.reached.wait(), 10)
    (result,) = await cluster.api.delete([("Pod", "default", "p")])  # Bind will fail
    assert result.error is None, result.error
    q_writes = _writes(await _everything(cluster), Q_SAGA)
    held.release()
    await asyncio.wait_for(stop.landed.wait(), 10)
    await stop_dead(task, a)
    assert _saga_trail(await _everything(cluster), sid)[-1].type == trail_end

    b = await instances.start("scheduler-b")
    state = await b.engine.load(sid)
    assert state is not None and state.status is SagaStatus.COMPENSATED, state
    log = await _everything(cluster)
    # every undo exactly once: what ran before the stop is not repeated, the rest is done
    assert _writes(log, sid) == [
        *FORWARD,
        ("p-gpu", "ClaimReservationsReleased"),
        ("p-gpu", "ClaimDeallocated"),
        ("joint", "ClaimReservationsReleased"),
        ("joint", "ClaimDeallocated"),
        ("shared", "ClaimReservationsReleased"),
    ]
    _undone_between_failure_and_compensation(log, sid, "bind")
    _released_only_p(log, sid, p)
    trail = _saga_trail(log, sid)
    assert trail[-1].actor == "scheduler-b"
    for name in ("joint", "p-gpu"):
        claim = await _claim(cluster, name)
        assert claim.status.allocation is None and claim.status.reserved_for == ()
    await _assert_q_intact(cluster, q, q_writes)
    await _quiet(cluster, b.engine.run, sid)
