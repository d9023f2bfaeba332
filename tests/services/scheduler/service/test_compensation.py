"""A PodScheduling saga that fails after it wrote: its compensation undoes exactly its own writes.

Real nats-server, apiserver and saga steps, in the scenario of :mod:`.scenario` (pod ``p`` with
claims ``shared``, ``joint`` and ``p-gpu``; another pod's saga holds ``shared``). The saga is
failed after PreBind (Bind finds the pod deleted or bound by someone else) and inside PreBind
(another attempt allocated ``p-gpu`` first, after ``shared`` and ``joint`` were written). The log
afterwards must show the saga's writes undone claim by claim in reverse order (its reservation
released, its allocation given back unless someone else now reserves the claim), between the
saga's ``SagaStepFailed`` and its ``SagaStepCompensated``, nothing another saga wrote touched,
and running the saga again must append nothing.
"""

from __future__ import annotations

import asyncio

import msgspec
import pytest

from draflow.events.dra import ClaimAllocated, ClaimDeallocated, ClaimReserved, PodBound
from draflow.events.objects import object_applied, object_deleted
from draflow.sagas.engine import SagaStatus
from draflow.services.scheduler.sagas.pod_scheduling import POD_SCHEDULING
from tests.builders import exact, make_allocation, make_claim
from tests.helpers import wait_for_value
from tests.services.scheduler.service.conftest import Cluster
from tests.services.scheduler.service.interrupt import BeforeAppend, HeldBefore
from tests.services.scheduler.service.scenario import (
    FORWARD,
    OTHER,
    Q_SAGA,
    Instances,
    assert_q_intact,
    build,
    consumer,
    decide,
    devices,
    everything,
    load_claim,
    quiet,
    released_only_p,
    saga_id_of,
    saga_trail,
    undone_between_failure_and_compensation,
    writes,
)

pytestmark = pytest.mark.kep4381


@pytest.mark.parametrize("breaker", ["pod-deleted", "bound-by-someone-else"])
async def test_failed_bind_undoes_only_the_sagas_writes_in_reverse(
    cluster: Cluster, instances: Instances, breaker: str
) -> None:
    p, q, a = await build(cluster, instances)
    plan = await decide(a, p)
    sid = saga_id_of(p)
    held = HeldBefore(a, "bind")
    task = asyncio.create_task(held.engine.start(POD_SCHEDULING, sid, plan))
    await asyncio.wait_for(held.reached.wait(), 10)  # PreBind's writes are in the log
    assert writes(await everything(cluster), sid) == FORWARD

    # between PreBind and Bind: pod q's attempt reserves `joint` as well, and p is taken away
    store = cluster.store
    await store.append(
        store.subject("ResourceClaim", "default", "joint"),
        ClaimReserved(consumer=consumer(q)),
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
    q_writes = writes(await everything(cluster), Q_SAGA)
    held.release()
    state = await asyncio.wait_for(task, 20)
    assert state.status is SagaStatus.COMPENSATED, state
    assert state.error.startswith(f"bind: SchedulingConflict: {why}"), state.error

    log = await everything(cluster)
    assert writes(log, sid) == [
        *FORWARD,
        # reverse claim order; `joint` stays allocated: q reserves it now
        ("p-gpu", "ClaimDeallocated"),  # p's reservation leaves with it; no guard message
        ("joint", "ClaimReservationsReleased"),
        ("shared", "ClaimReservationsReleased"),
    ]
    undone_between_failure_and_compensation(log, sid, "bind")
    released_only_p(log, sid, p)
    own = await load_claim(cluster, "p-gpu")
    assert own.status.allocation is None and own.status.reserved_for == ()
    joint = await load_claim(cluster, "joint")
    assert joint.status.allocation is not None and [r.uid for r in joint.status.reserved_for] == [
        q.metadata.uid
    ]
    await assert_q_intact(cluster, q, q_writes)
    if breaker == "bound-by-someone-else":
        bound = [e for e in log if isinstance(e.data, PodBound)]
        assert [e.correlation_id for e in bound] == [OTHER]  # the other binding stands
    await quiet(cluster, held.engine.run, sid)


async def test_prebind_failing_midway_undoes_the_claims_it_wrote(
    cluster: Cluster, instances: Instances
) -> None:
    """Another attempt allocates ``p-gpu`` while p's saga is between Reserve and PreBind: PreBind
    writes ``shared`` and ``joint``, then fails on ``p-gpu``; its compensation undoes those two
    and leaves ``p-gpu``'s foreign allocation alone."""
    p, q, a = await build(cluster, instances)
    plan = await decide(a, p)
    sid = saga_id_of(p)
    held = HeldBefore(a, "prebind")
    task = asyncio.create_task(held.engine.start(POD_SCHEDULING, sid, plan))
    await asyncio.wait_for(held.reached.wait(), 10)
    store = cluster.store
    (planned,) = [c.allocation for c in plan.claims if c.name == "p-gpu"]
    assert planned is not None
    taken = planned.devices.results[0].device
    other_device = next(d for d in ("dev-0", "dev-1", "dev-2") if d != taken and d not in devices(plan))
    await store.append(
        store.subject("ResourceClaim", "default", "p-gpu"),
        ClaimAllocated(
            allocation=make_allocation(other_device, node="node-0"),
            node_name="node-0",
            pod_uid=p.metadata.uid,
        ),
        expected_last_seq=None,
        correlation_id=OTHER,
    )
    q_writes = writes(await everything(cluster), Q_SAGA)
    await a.snapshot.wait_position(await store.stream_last_seq())  # PreBind sees it: no take
    held.release()
    state = await asyncio.wait_for(task, 20)
    assert state.status is SagaStatus.COMPENSATED, state
    assert "claim default/p-gpu was allocated by someone else in the meantime" in state.error, state.error

    log = await everything(cluster)
    assert writes(log, sid) == [
        ("shared", "ClaimReserved"),
        ("guard", "GuardTaken"),
        ("joint", "ClaimAllocated"),
        # p-gpu: nothing written, nothing undone; then the others in reverse
        ("joint", "ClaimDeallocated"),  # p's reservation leaves with it; no guard message
        ("shared", "ClaimReservationsReleased"),
    ]
    undone_between_failure_and_compensation(log, sid, "prebind")
    released_only_p(log, sid, p)
    own = await load_claim(cluster, "p-gpu")
    assert own.status.allocation is not None
    assert [r.device for r in own.status.allocation.devices.results] == [other_device]
    assert (await load_claim(cluster, "joint")).status.allocation is None
    await assert_q_intact(cluster, q, q_writes)
    await quiet(cluster, held.engine.run, sid)


async def test_release_reads_again_on_a_conflict_and_skips_a_replaced_claim(
    cluster: Cluster, instances: Instances
) -> None:
    """While the compensation releases ``p-gpu`` someone labels it (its append is refused at the
    version read: read again, released at the next attempt), and ``joint`` was deleted and created
    again by its user meanwhile (another uid: not the claim the saga wrote, nothing undone there)."""
    p, q, a = await build(cluster, instances)
    plan = await decide(a, p)
    sid = saga_id_of(p)
    held = HeldBefore(a, "bind")
    task = asyncio.create_task(held.engine.start(POD_SCHEDULING, sid, plan))
    await asyncio.wait_for(held.reached.wait(), 10)
    store = cluster.store
    joint = store.subject("ResourceClaim", "default", "joint")
    replaced = make_claim("joint", exact(), uid="uid-joint-again")
    await store.append(
        joint, [object_deleted("ResourceClaim"), object_applied(replaced)], expected_last_seq=None
    )
    (result,) = await cluster.api.delete([("Pod", "default", "p")])
    assert result.error is None, result.error

    async def label() -> None:
        claim = await cluster.claim("p-gpu")
        meta = msgspec.structs.replace(claim.metadata, labels={"team": "ml"}, resource_version="")
        await cluster.apply(msgspec.structs.replace(claim, metadata=meta))

    releasing = BeforeAppend(
        a.store,
        lambda subject, events: (
            subject.endswith(".p-gpu") and any(isinstance(e, ClaimDeallocated) for e in events)
        ),
        label,
    )
    q_writes = writes(await everything(cluster), Q_SAGA)
    held.release()
    state = await asyncio.wait_for(task, 20)
    assert releasing.done and state.status is SagaStatus.COMPENSATED, state
    log = await everything(cluster)
    assert writes(log, sid) == [
        *FORWARD,
        ("p-gpu", "ClaimDeallocated"),  # p's reservation leaves with it; no guard message
        ("shared", "ClaimReservationsReleased"),
        # the replaced joint's allocation went with the claim it was on: its device's take,
        # which no allocation backs any more, is given back last
        ("guard", "GuardReleased"),
    ]
    undone = [e for e in log if e.correlation_id == sid and e.subject.endswith(".p-gpu")][-1:]
    assert [e.id for e in undone] == [f"saga:{sid}:1:undo:p-gpu:1"]  # one event: a single append
    undone_between_failure_and_compensation(log, sid, "bind")
    again = await load_claim(cluster, "joint")
    assert again.metadata.uid == "uid-joint-again" and again.status == replaced.status
    own = await load_claim(cluster, "p-gpu")
    assert own.metadata.labels == {"team": "ml"} and own.status.allocation is None
    await assert_q_intact(cluster, q, q_writes)


async def test_bind_reads_the_pod_again_when_it_changed_under_it(
    cluster: Cluster, instances: Instances
) -> None:
    """A label lands on the pod between Bind's read and its append: refused at that version, the
    pod is read again and bound at the next attempt (no failure, nothing undone)."""
    p, _q, a = await build(cluster, instances)
    plan = await decide(a, p)
    sid = saga_id_of(p)

    async def label() -> None:
        pod = await cluster.get_pod("p")
        meta = msgspec.structs.replace(pod.metadata, labels={"team": "ml"}, resource_version="")
        await cluster.apply(msgspec.structs.replace(pod, metadata=meta))

    binding = BeforeAppend(
        a.store, lambda subject, events: any(isinstance(e, PodBound) for e in events), label
    )
    state = await a.engine.start(POD_SCHEDULING, sid, plan)
    assert binding.done and state.status is SagaStatus.COMPLETED, state
    log = await everything(cluster)
    assert writes(log, sid) == [*FORWARD, ("p", "PodBound")]
    (bound,) = [e for e in log if isinstance(e.data, PodBound)]
    assert bound.id == f"saga:{sid}:2:do:1"  # the second attempt's
    # the apiserver's cache follows the log: wait until it holds the binding the saga appended
    pod = await wait_for_value(lambda: cluster.get_pod("p"), lambda p: p.spec.node_name != "")
    assert pod.spec.node_name == "node-0" and pod.metadata.labels == {"team": "ml"}


async def test_a_pod_gone_before_reserve_writes_nothing(cluster: Cluster, instances: Instances) -> None:
    p, _q, a = await build(cluster, instances)
    plan = await decide(a, p)
    sid = saga_id_of(p)
    (result,) = await cluster.api.delete([("Pod", "default", "p")])
    assert result.error is None, result.error
    await a.snapshot.wait_position(await a.store.stream_last_seq())
    state = await a.engine.start(POD_SCHEDULING, sid, plan)
    assert state.status is SagaStatus.COMPENSATED, state
    assert state.error.startswith("reserve: SchedulingConflict: pod default/p (uid"), state.error
    log = await everything(cluster)
    assert writes(log, sid) == []
    assert [e.type for e in saga_trail(log, sid)] == [
        "SagaStarted",  # reserve's start is implied (a local step: no events of its own)
        "SagaStepFailed",
        "SagaStepCompensated",  # unreserve: the decision leaves the assume cache
        "SagaCompensated",
    ]
    assert "default/p" not in a.core.cluster.assumed.pods
