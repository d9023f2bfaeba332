"""The Reallocation saga (PostFilter frees a claim its pod cannot use where it is) under races and
a crash: a write by someone else between its read and its append is read and decided again, a
claim that became someone else's is refused untouched, and a saga stopped right after its
deallocation landed is finished by the next instance without a second deallocation.

Real nats-server, apiserver and saga step; the log is what is checked.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import msgspec
import pytest

from draflow.events.api.core_v1 import Pod
from draflow.events.dra import ClaimAllocated, ClaimDeallocated, ClaimReserved
from draflow.events.envelope import Envelope, Event
from draflow.sagas.engine import SagaStatus
from draflow.services.scheduler.sagas.reallocation import REALLOCATION, ReallocationInput
from draflow.services.scheduler.service import SchedulerService
from tests.builders import exact, make_allocation, make_claim, make_pod
from tests.services.scheduler.service.conftest import Cluster
from tests.services.scheduler.service.interrupt import BeforeAppend, StopAfterAppend, stop_dead
from tests.services.scheduler.service.scenario import Instances, consumer, load_claim, saga_trail

pytestmark = pytest.mark.kep4381

Q_SAGA = "scheduler-b-ps-q"


async def _setup(cluster: Cluster, instances: Instances) -> tuple[Pod, str, SchedulerService]:
    """Claim ``c`` allocated on node-0 by nobody's saga, with a leftover reservation of pod ``p``
    (no saga wrote it: upstream's case of a reservation nobody will release)."""
    await cluster.nodes(1, devices=2)
    await cluster.apply(make_claim("c", exact()), make_pod("p", claims={"gpu": "c"}))
    p = await cluster.get_pod("p")
    await cluster.store.append(
        _subject(cluster),
        [
            ClaimAllocated(allocation=make_allocation("dev-0", node="node-0")),
            ClaimReserved(consumer=consumer(p)),
        ],
        expected_last_seq=None,
    )
    svc = await instances.start("scheduler-a")
    return p, f"scheduler-a-realloc-{p.metadata.uid}", svc


def _subject(cluster: Cluster) -> str:
    return cluster.store.subject("ResourceClaim", "default", "c")


def _input(cluster: Cluster, p: Pod, uid: str) -> ReallocationInput:
    return ReallocationInput(
        claim_namespace="default",
        claim_name="c",
        claim_uid=uid,
        pod_namespace="default",
        pod_name="p",
        pod_uid=p.metadata.uid,
    )


def _deallocating(subject: str, events: Sequence[Event]) -> bool:
    return subject.endswith(".ResourceClaim.default.c") and any(
        isinstance(e, ClaimDeallocated) for e in events
    )


async def _by(cluster: Cluster, sid: str) -> list[Envelope[Event]]:
    return [e for e in await cluster.store.events(_subject(cluster)) if e.correlation_id == sid]


async def test_a_change_between_read_and_append_is_read_and_decided_again(
    cluster: Cluster, instances: Instances
) -> None:
    p, sid, svc = await _setup(cluster, instances)
    uid = (await cluster.claim("c")).metadata.uid

    async def label() -> None:  # a user labels the claim meanwhile: harmless, but a new version
        claim = await cluster.claim("c")
        meta = msgspec.structs.replace(claim.metadata, labels={"team": "ml"}, resource_version="")
        await cluster.apply(msgspec.structs.replace(claim, metadata=meta))

    injected = BeforeAppend(svc.store, _deallocating, label)
    state = await svc.engine.start(REALLOCATION, sid, _input(cluster, p, uid))
    assert injected.done
    assert state.status is SagaStatus.COMPLETED and state.outputs["deallocate"] == {"deallocated": True}
    mine = await _by(cluster, sid)
    # one single append, the second attempt's (the first was refused at the version it read):
    # the reservation leaves in the deallocation's own fact, no guard message
    assert [e.type for e in mine] == ["ClaimDeallocated"]
    assert [e.id for e in mine] == [f"saga:{sid}:0:do:1"]
    dealloc = mine[0].data
    assert isinstance(dealloc, ClaimDeallocated) and dealloc.reason == "Reallocate"
    assert dealloc.released == (p.metadata.uid,)
    claim = await load_claim(cluster, "c")
    assert claim.status.allocation is None and claim.status.reserved_for == ()
    assert claim.metadata.labels == {"team": "ml"}  # the other write stands


async def test_a_claim_someone_else_reserved_meanwhile_is_left_alone(
    cluster: Cluster, instances: Instances
) -> None:
    p, sid, svc = await _setup(cluster, instances)
    uid = (await cluster.claim("c")).metadata.uid
    await cluster.apply(make_pod("q", claims={"gpu": "c"}))
    q = await cluster.get_pod("q")

    async def q_reserves() -> None:  # another pod's scheduling attempt starts using the claim
        await cluster.store.append(
            _subject(cluster),
            ClaimReserved(consumer=consumer(q)),
            expected_last_seq=None,
            correlation_id=Q_SAGA,
        )

    BeforeAppend(svc.store, _deallocating, q_reserves)
    state = await svc.engine.start(REALLOCATION, sid, _input(cluster, p, uid))
    assert state.status is SagaStatus.COMPENSATED, state  # nothing to compensate: it wrote nothing
    assert "is in use by another consumer" in state.error, state.error
    assert [e.type for e in saga_trail(await cluster.store.events(f"{cluster.store.root}.ev.>"), sid)] == [
        "SagaStarted",
        "SagaStepStarted",
        "SagaStepFailed",
        "SagaCompensated",
    ]
    assert await _by(cluster, sid) == []
    claim = await load_claim(cluster, "c")
    assert claim.status.allocation is not None
    assert [r.uid for r in claim.status.reserved_for] == [p.metadata.uid, q.metadata.uid]


@pytest.mark.parametrize("gone", ["deleted", "replaced"])
async def test_a_claim_gone_or_replaced_is_not_touched(
    cluster: Cluster, instances: Instances, gone: str
) -> None:
    p, sid, svc = await _setup(cluster, instances)
    uid = (await cluster.claim("c")).metadata.uid
    if gone == "deleted":
        why = "claim default/c is gone"
        await cluster.store.append(_subject(cluster), ClaimDeallocated(reason="Test"), expected_last_seq=None)
        (result,) = await cluster.api.delete([("ResourceClaim", "default", "c")])
        assert result.error is None, result.error
    else:
        why = "claim default/c was replaced (uid "
        uid = "another-uid"  # PostFilter decided on an earlier claim of the same name
    state = await svc.engine.start(REALLOCATION, sid, _input(cluster, p, uid))
    assert state.status is SagaStatus.COMPENSATED, state
    assert why in state.error, state.error
    assert await _by(cluster, sid) == []


@pytest.mark.parametrize("next_attempt", ["by-another-instance", "by-nobody"])
async def test_stopped_after_its_deallocation_the_next_instance_does_not_deallocate_again(
    cluster: Cluster, instances: Instances, next_attempt: str
) -> None:
    """The saga's deallocation landed, then its process stopped; before anyone resumes it the claim
    is allocated again (the pod's next attempt, by another scheduler instance: allocated and
    reserved in one append; or an allocation nobody's saga wrote). The resumed saga recognises its
    own deallocation in the log and is done: it frees nothing, and it does not fail either."""
    p, sid, a = await _setup(cluster, instances)
    uid = (await cluster.claim("c")).metadata.uid
    stop = StopAfterAppend(a.store, _deallocating)
    task = asyncio.create_task(a.engine.start(REALLOCATION, sid, _input(cluster, p, uid)))
    await asyncio.wait_for(stop.landed.wait(), 10)
    await stop_dead(task, a)
    log = await cluster.store.events(f"{cluster.store.root}.ev.>")
    assert [e.type for e in saga_trail(log, sid)] == ["SagaStarted", "SagaStepStarted"]

    again: list[Event] = [ClaimAllocated(allocation=make_allocation("dev-1", node="node-0"))]
    if next_attempt == "by-another-instance":
        again.append(ClaimReserved(consumer=consumer(p)))
    corr = "scheduler-b-ps-p" if next_attempt == "by-another-instance" else ""
    await cluster.store.append(_subject(cluster), again, expected_last_seq=None, correlation_id=corr)
    b = await instances.start("scheduler-b")
    state = await b.engine.load(sid)
    assert state is not None and state.status is SagaStatus.COMPLETED, state
    assert state.outputs["deallocate"] == {"deallocated": True}
    assert [e.type for e in await _by(cluster, sid)] == ["ClaimDeallocated"]
    claim = await load_claim(cluster, "c")
    assert claim.status.allocation is not None
    assert [r.device for r in claim.status.allocation.devices.results] == ["dev-1"]
    if next_attempt == "by-another-instance":
        assert [r.uid for r in claim.status.reserved_for] == [p.metadata.uid]
    resumed = saga_trail(await cluster.store.events(f"{cluster.store.root}.ev.>"), sid)[2:]
    assert [(e.type, e.actor) for e in resumed] == [
        ("SagaStepCompleted", "scheduler-b"),
        ("SagaCompleted", "scheduler-b"),
    ]
