"""The scenario of the PodScheduling recovery tests (``test_compensation``, ``test_resume``).

Pod ``p`` uses three claims, planned in this order:

* ``shared`` — already allocated by another pod's scheduling attempt (``Q_SAGA``) and reserved
  for pod ``q``: p's saga only adds p's reservation;
* ``joint`` — unallocated: p's saga allocates it and reserves it for p;
* ``p-gpu`` — p's generated claim: p's saga allocates it and reserves it for p.

The helpers read the log (every event of the test's stream) and check what a saga wrote: its
writes carry the saga id as their correlation id.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from draflow.events.api.core_v1 import Pod, PodResourceClaimStatus
from draflow.events.api.resource_v1 import ResourceClaim, ResourceClaimConsumerReference
from draflow.events.dra import (
    ClaimAllocated,
    ClaimDeallocated,
    ClaimReservationsReleased,
    ClaimReserved,
    PodClaimStatusesRecorded,
)
from draflow.events.envelope import Envelope, Event
from draflow.events.saga import SagaStepCompensated, SagaStepFailed
from draflow.projections.objects import fold
from draflow.sagas.engine import SagaState
from draflow.services.scheduler.framework import Reserved
from draflow.services.scheduler.sagas.pod_scheduling import PodSchedulingInput
from draflow.services.scheduler.service import SchedulerService
from tests.builders import exact, make_allocation, make_claim, make_pod
from tests.services.scheduler.service.conftest import Cluster

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


def consumer(pod: Pod) -> ResourceClaimConsumerReference:
    return ResourceClaimConsumerReference(resource="pods", name=pod.metadata.name, uid=pod.metadata.uid)


async def build(cluster: Cluster, instances: Instances) -> tuple[Pod, Pod, SchedulerService]:
    await cluster.nodes(1, devices=4)
    await cluster.apply(make_claim("shared", exact()), make_claim("joint", exact()))
    await cluster.apply(make_pod("q", claims={"s": "shared"}))
    q = await cluster.get_pod("q")
    store = cluster.store
    await store.append(
        store.subject("ResourceClaim", "default", "shared"),
        [
            ClaimAllocated(
                allocation=make_allocation("dev-3", node="node-0"), node_name="node-0", pod_uid=q.metadata.uid
            ),
            ClaimReserved(consumer=consumer(q)),
        ],
        expected_last_seq=None,
        correlation_id=Q_SAGA,
    )
    await cluster.apply(
        make_pod(
            "p",
            claims={"s": "shared", "j": "joint"},
            template_claims={"gpu": "gpu-template"},
            statuses={"gpu": "p-gpu"},
        )
    )
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


async def decide(svc: SchedulerService, pod: Pod) -> PodSchedulingInput:
    await svc.snapshot.wait_position(await svc.store.stream_last_seq())
    result = svc.core.schedule(pod)
    assert isinstance(result, Reserved), getattr(result, "message", result)
    plan = PodSchedulingInput.of(result, svc.snapshot.stamp)
    assert [c.name for c in plan.claims] == PLAN_ORDER
    assert [c.allocation is not None for c in plan.claims] == [False, True, True]
    return plan


def saga_id_of(pod: Pod) -> str:
    return f"scheduler-a-ps-{pod.metadata.uid}"


async def load_claim(cluster: Cluster, name: str) -> ResourceClaim:
    subject = cluster.store.subject("ResourceClaim", "default", name)
    loaded = await cluster.store.load(subject, lambda s, env: fold(s, env.type, env.data, env.seq), None)
    assert isinstance(loaded.state, ResourceClaim), name
    return loaded.state


async def everything(cluster: Cluster) -> list[Envelope[Event]]:
    return await cluster.store.events(f"{cluster.store.root}.ev.>")


def writes(log: Sequence[Envelope[Event]], by: str) -> list[tuple[str, str]]:
    """(object name, event type) of every non-saga event correlated with ``by``, in log order;
    a guard message (``draflow.infra.guard``) as ("guard", its type)."""
    return [
        ("guard" if ".Guard." in e.subject else e.subject.rsplit(".", 1)[-1], e.type)
        for e in log
        if e.correlation_id == by and ".Saga." not in e.subject
    ]


def saga_trail(log: Sequence[Envelope[Event]], sid: str) -> list[Envelope[Event]]:
    return [e for e in log if e.subject.endswith(f".Saga._.{sid}")]


def undone_between_failure_and_compensation(log: Sequence[Envelope[Event]], sid: str, step: str) -> None:
    """The compensation's writes follow the saga's failure and precede its ``SagaStepCompensated``
    for PreBind (index 1), which precedes Reserve's (index 0)."""
    trail = saga_trail(log, sid)
    failed = [e.seq for e in trail if isinstance(e.data, SagaStepFailed)]
    assert len(failed) == 1 and next(e.data.step for e in trail if isinstance(e.data, SagaStepFailed)) == step
    undone = [e.data.index for e in trail if isinstance(e.data, SagaStepCompensated)]
    assert undone == [1, 0], undone  # release (prebind) first, then unreserve (reserve)
    prebind_undone = next(e.seq for e in trail if isinstance(e.data, SagaStepCompensated))
    for e in log:
        if e.correlation_id == sid and isinstance(e.data, ClaimReservationsReleased | ClaimDeallocated):
            assert failed[0] < e.seq < prebind_undone, (e.type, e.seq, failed, prebind_undone)
    assert trail[-1].type == "SagaCompensated"


def released_only_p(log: Sequence[Envelope[Event]], sid: str, p: Pod) -> None:
    for e in log:
        if e.correlation_id == sid and isinstance(e.data, ClaimReservationsReleased):
            assert e.data.uids == (p.metadata.uid,), e.data
        if e.correlation_id == sid and isinstance(e.data, ClaimDeallocated):
            assert e.data.reason == "Unreserve" and e.data.released == (p.metadata.uid,), e.data


async def assert_q_intact(cluster: Cluster, q: Pod, before: list[tuple[str, str]], *also: Pod) -> None:
    """The other saga's writes are as they were; ``shared`` keeps its allocation and q's
    reservation (next to the reservations of ``also``)."""
    log = await everything(cluster)
    assert writes(log, Q_SAGA) == before, "another saga's writes changed"
    shared = await load_claim(cluster, "shared")
    assert shared.status.allocation is not None
    assert [r.device for r in shared.status.allocation.devices.results] == ["dev-3"]
    assert [r.uid for r in shared.status.reserved_for] == [q.metadata.uid, *(p.metadata.uid for p in also)]


async def quiet(cluster: Cluster, engine_run: Any, sid: str) -> None:
    """Running the finished saga again appends nothing (idempotent, terminal)."""
    last = await cluster.store.stream_last_seq()
    state: SagaState = await engine_run(sid)
    assert state.status.terminal
    assert await cluster.store.stream_last_seq() == last


FORWARD = [
    ("shared", "ClaimReserved"),
    ("guard", "GuardTaken"),  # joint's device, a single append before the claim's
    ("joint", "ClaimAllocated"),  # allocated and reserved for p in one fact
    ("guard", "GuardTaken"),
    ("p-gpu", "ClaimAllocated"),
]


def devices(plan: PodSchedulingInput) -> set[str]:
    return {r.device for c in plan.claims if c.allocation is not None for r in c.allocation.devices.results}
