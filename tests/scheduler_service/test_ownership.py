"""Two scheduler instances decide the same pod: no saga relies on, or undoes, another saga's work.

The pod uses a claim that is already allocated (a shared claim), so PreBind only reserves it.
Instance A's saga has reserved it and waits before Bind (:class:`HeldBind`: the real steps, held);
instance B then decides the same pod and sees the pod already reserved on the claim. Before, B
counted that reservation as done and bound the pod; A's Bind then failed and A's compensation
released "its" reservation — from under the pod B had bound. Now B's PreBind sees the reservation
is another attempt's and fails (its compensation touches nothing), and A binds. Likewise, a
Reallocation decided meanwhile (PostFilter: the claim is reserved only for this pod) must not
deallocate a claim another attempt reserved for the pod. Real nats-server and apiserver.
"""

from __future__ import annotations

import asyncio
from typing import Any

from events.api.core_v1 import Pod
from events.api.resource_v1 import ResourceClaim
from events.dra import ClaimAllocated
from projections.objects import fold
from sagas.engine import SagaStatus
from services.scheduler.framework import Reserved
from services.scheduler.sagas.pod_scheduling import POD_SCHEDULING, PodSchedulingInput
from services.scheduler.sagas.reallocation import REALLOCATION, ReallocationInput
from services.scheduler.service import SchedulerService
from tests.scheduler.builders import allocation_on, exact, make_claim, make_pod
from tests.scheduler_service.conftest import Cluster, HeldBind


async def _setup(cluster: Cluster) -> tuple[Pod, SchedulerService, SchedulerService]:
    """One node, a claim ``shared`` already allocated on it (nobody's saga), a pod using it."""
    await cluster.nodes(1, devices=2)
    await cluster.apply(make_claim("shared", exact()))
    subject = cluster.store.subject("ResourceClaim", "default", "shared")
    await cluster.store.append(
        subject, ClaimAllocated(allocation=allocation_on("node-0", "dev-0")), expected_last_seq=None
    )
    await cluster.apply(make_pod("p", claims={"gpu": "shared"}))
    a = await cluster.make("scheduler-a")
    b = await cluster.make("scheduler-b")
    await a.start()  # snapshots only: the test drives the sagas
    await b.start()
    return await cluster.get_pod("p"), a, b


async def _decide(svc: SchedulerService, pod: Pod) -> PodSchedulingInput:
    await svc.snapshot.wait_position(await svc.store.stream_last_seq())
    result = svc.core.schedule(pod)
    assert isinstance(result, Reserved), getattr(result, "message", result)
    return PodSchedulingInput.of(result)


async def _from_log(cluster: Cluster, kind: str, name: str) -> Any:
    subject = cluster.store.subject(kind, "default", name)
    loaded = await cluster.store.load(subject, lambda s, env: fold(s, env.type, env.data, env.seq), None)
    return loaded.state


async def _assert_bound_and_reserved(cluster: Cluster, pod: Pod, binder: str) -> None:
    current = await _from_log(cluster, "Pod", "p")
    assert isinstance(current, Pod) and current.spec.node_name == "node-0"
    claim = await _from_log(cluster, "ResourceClaim", "shared")
    assert isinstance(claim, ResourceClaim) and claim.status.allocation is not None, "deallocated"
    assert [r.uid for r in claim.status.reserved_for] == [pod.metadata.uid], (
        "the bound pod lost its reservation"
    )
    bound = [
        e
        for e in await cluster.store.events(cluster.store.subject("Pod", "default", "p"))
        if e.type == "PodBound"
    ]
    assert [e.correlation_id for e in bound] == [binder]


async def _stop(*svcs: SchedulerService) -> None:
    for svc in svcs:
        await svc.snapshot.stop()
        await svc.store.close()


async def test_second_instance_does_not_bind_on_a_reservation_it_did_not_make(cluster: Cluster) -> None:
    pod, a, b = await _setup(cluster)
    plan_a = await _decide(a, pod)
    held = HeldBind(a)
    first_id = f"scheduler-a-ps-{pod.metadata.uid}"
    first = asyncio.create_task(held.engine.start(POD_SCHEDULING, first_id, plan_a))
    await asyncio.wait_for(held.at_bind.wait(), 10)  # A reserved the claim for the pod, not bound yet

    plan_b = await _decide(b, pod)  # B sees the pod reserved on the claim already
    second_id = f"scheduler-b-ps-{pod.metadata.uid}"
    second = await b.engine.start(POD_SCHEDULING, second_id, plan_b)
    held.release()
    done = await asyncio.wait_for(first, 10)
    await _assert_bound_and_reserved(cluster, pod, first_id)
    assert done.status is SagaStatus.COMPLETED, done
    assert second.status is SagaStatus.COMPENSATED, second
    assert f"is reserved for pod default/p by another scheduling attempt (saga {first_id})" in second.error
    claim_history = await cluster.store.events(cluster.store.subject("ResourceClaim", "default", "shared"))
    assert not [e.type for e in claim_history if e.correlation_id == second_id]
    await _stop(a, b)


async def test_reallocation_leaves_a_claim_another_attempt_reserved_for_the_pod(cluster: Cluster) -> None:
    pod, a, b = await _setup(cluster)
    plan_a = await _decide(a, pod)
    held = HeldBind(a)
    first_id = f"scheduler-a-ps-{pod.metadata.uid}"
    first = asyncio.create_task(held.engine.start(POD_SCHEDULING, first_id, plan_a))
    await asyncio.wait_for(held.at_bind.wait(), 10)

    # B's PostFilter found the claim reserved only for this pod and asked to free it
    inp = ReallocationInput(
        claim_namespace="default",
        claim_name="shared",
        claim_uid=(await cluster.claim("shared")).metadata.uid,
        pod_namespace="default",
        pod_name="p",
        pod_uid=pod.metadata.uid,
    )
    realloc = await b.engine.start(
        REALLOCATION, f"scheduler-b-realloc-{pod.metadata.uid}", inp
    )
    held.release()
    done = await asyncio.wait_for(first, 10)
    await _assert_bound_and_reserved(cluster, pod, first_id)
    assert done.status is SagaStatus.COMPLETED, done
    assert "by a scheduling attempt (saga " in realloc.error, realloc
    await _stop(a, b)
