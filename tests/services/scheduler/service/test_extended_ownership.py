"""Two scheduler instances decide the same extended-resource pod: each saga undoes only its own work.

Both instances derive the same special claim (name and uid come from the pod), so "the claim of
this name and uid" says nothing about who made it. On a real nats-server and apiserver, with the
sagas' real steps:

* the loser's saga runs after the winner created, allocated and reserved the claim and bound the
  pod: it fails without writing anything, and its compensation touches nothing of the winner's
  (claim, allocation, reservation, the pod's ``extendedResourceClaimStatus``);
* the second instance decides while the first one's PreBind is done but its Bind is not: its
  PostFilter takes the stored claim for a leftover and asks to delete it; the cleanup leaves a
  claim someone reserves alone, and the first instance binds the pod with it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from draflow.events.api.core_v1 import Pod
from draflow.events.api.resource_v1 import ResourceClaim
from draflow.projections.objects import fold
from draflow.sagas.engine import SagaState, SagaStatus
from draflow.services.runtime.protocol import StatusError
from draflow.services.scheduler.framework import Reserved, Unschedulable
from draflow.services.scheduler.sagas.extended_claim import EXTENDED_CLAIM_CLEANUP, ExtendedClaimCleanupInput
from draflow.services.scheduler.sagas.pod_scheduling import (
    POD_SCHEDULING,
    PodSchedulingInput,
)
from draflow.services.scheduler.service import SchedulerService
from tests.helpers import assert_eventually
from tests.services.scheduler.service.conftest import Cluster, HeldBind
from tests.services.scheduler.service.test_extended import _gpu_cluster, _gpu_pod

pytestmark = pytest.mark.kep5004


async def _instances(cluster: Cluster) -> tuple[SchedulerService, SchedulerService]:
    a = await cluster.make("scheduler-a")
    b = await cluster.make("scheduler-b")
    await a.start()  # the snapshots only: the tests drive the sagas
    await b.start()
    return a, b


async def _caught_up(cluster: Cluster, *svcs: SchedulerService) -> None:
    last = await cluster.store.stream_last_seq()
    for svc in svcs:
        await svc.snapshot.wait_position(last)


async def _decide(svc: SchedulerService, cluster: Cluster, name: str) -> PodSchedulingInput:
    result = svc.core.schedule(await cluster.get_pod(name))
    assert isinstance(result, Reserved), getattr(result, "message", result)
    return PodSchedulingInput.of(result)


def _sid(svc: SchedulerService, plan: PodSchedulingInput, kind: str = "ps") -> str:
    """A saga id as the service makes them (instance, kind, pod uid), unique per test."""
    return f"{svc.instance}-{kind}-{plan.uid}"


async def _stop(*svcs: SchedulerService) -> None:
    for svc in svcs:
        await svc.snapshot.stop()
        await svc.store.close()


async def _from_log(cluster: Cluster, kind: str, name: str) -> Any:
    """The object as the log has it now (the apiserver's copy may lag a moment)."""
    subject = cluster.store.subject(kind, "default", name)
    loaded = await cluster.store.load(subject, lambda s, env: fold(s, env.type, env.data, env.seq), None)
    return loaded.state


async def _assert_winner_intact(cluster: Cluster, pod_name: str, winner: str, loser: str) -> ResourceClaim:
    """The pod is bound with its special claim allocated, reserved for it and named in its status;
    the loser's saga wrote nothing on the claim or the pod."""
    pod = await _from_log(cluster, "Pod", pod_name)
    assert isinstance(pod, Pod) and pod.spec.node_name == "node-0"
    status = pod.status.extended_resource_claim_status
    assert status is not None, "the pod lost its extendedResourceClaimStatus"
    claim = await _from_log(cluster, "ResourceClaim", status.resource_claim_name)
    assert isinstance(claim, ResourceClaim), f"claim {status.resource_claim_name} is gone"
    assert claim.status.allocation is not None and claim.status.allocation.devices.results
    assert [r.uid for r in claim.status.reserved_for] == [pod.metadata.uid]
    store = cluster.store
    for subject in (
        store.subject("ResourceClaim", "default", claim.metadata.name),
        store.subject("Pod", "default", pod_name),
    ):
        history = await store.events(subject)
        assert not [e.type for e in history if e.correlation_id == loser], subject
        if subject.endswith(claim.metadata.name):
            assert {e.correlation_id for e in history} == {winner}  # created, allocated, reserved
    return claim


async def test_losing_saga_leaves_the_winners_special_claim_alone(cluster: Cluster) -> None:
    await _gpu_cluster(cluster)
    await cluster.apply(_gpu_pod("p", 1))
    a, b = await _instances(cluster)
    plan_a = await _decide(a, cluster, "p")
    plan_b = await _decide(b, cluster, "p")
    assert plan_a.extended_claim is not None and plan_b.extended_claim is not None
    # the premise: both instances derive the very same claim
    assert plan_a.extended_claim.metadata.name == plan_b.extended_claim.metadata.name
    assert plan_a.extended_claim.metadata.uid == plan_b.extended_claim.metadata.uid

    winner, loser = _sid(a, plan_a), _sid(b, plan_b)
    won = await a.engine.start(POD_SCHEDULING, winner, plan_a)
    assert won.status is SagaStatus.COMPLETED, won
    lost = await b.engine.start(POD_SCHEDULING, loser, plan_b)
    assert lost.status is SagaStatus.COMPENSATED, lost
    before = await _assert_winner_intact(cluster, "p", winner, loser)
    assert f"created by another scheduling attempt (saga {winner})" in (lost.error or ""), lost.error
    # the compensation is idempotent: running the loser again still touches nothing
    again = await b.engine.run(loser)
    assert again.status is SagaStatus.COMPENSATED and again.version == lost.version
    after = await _assert_winner_intact(cluster, "p", winner, loser)
    assert after.metadata.resource_version == before.metadata.resource_version
    await _stop(a, b)


async def test_claim_created_by_the_other_instance_before_the_dry_run_is_a_lost_race(
    cluster: Cluster,
) -> None:
    """The other instance creates the special claim between this saga's read and its admission
    dry run: the dry run answers 409 AlreadyExists, which is the same lost race as finding the
    claim on the read (compensate, naming the winner), not an error of the step."""
    await _gpu_cluster(cluster)
    await cluster.apply(_gpu_pod("p", 1))
    a, b = await _instances(cluster)
    plan_a = await _decide(a, cluster, "p")
    plan_b = await _decide(b, cluster, "p")
    assert plan_b.extended_claim is not None
    name = plan_b.extended_claim.metadata.name
    winner, loser = _sid(a, plan_a), _sid(b, plan_b)
    dry_run = b.admission_refusal
    won: list[SagaState] = []

    async def racing(claim: ResourceClaim) -> str:
        if not won:  # the winner's whole saga, seen by the apiserver, before the loser's dry run
            won.append(await a.engine.start(POD_SCHEDULING, winner, plan_a))

            async def seen() -> bool:
                try:
                    return (
                        await cluster.api.get_object("ResourceClaim", name, namespace="default") is not None
                    )
                except StatusError:
                    return False

            await assert_eventually(seen, timeout_s=10)
        return await dry_run(claim)

    b.admission_refusal = racing  # type: ignore[method-assign]
    lost = await b.engine.start(POD_SCHEDULING, loser, plan_b)
    assert won[0].status is SagaStatus.COMPLETED, won
    assert lost.status is SagaStatus.COMPENSATED, lost
    assert f"created by another scheduling attempt (saga {winner})" in (lost.error or ""), lost.error
    await _assert_winner_intact(cluster, "p", winner, loser)
    await _stop(a, b)


async def test_postfilter_of_another_instance_leaves_a_claim_being_bound(cluster: Cluster) -> None:
    """The second instance decides while the first one's PreBind is done but its Bind is not: it
    sees the stored special claim and (as upstream's PostFilter) asks to delete it as a leftover of
    an earlier attempt. The claim is in use (reserved for the pod): the cleanup must leave it, and
    the pod gets bound with it."""
    await _gpu_cluster(cluster)
    await cluster.apply(_gpu_pod("p", 1))
    a, b = await _instances(cluster)
    plan = await _decide(a, cluster, "p")
    assert plan.extended_claim is not None
    held = HeldBind(a)
    winner = _sid(a, plan)
    first = asyncio.create_task(held.engine.start(POD_SCHEDULING, winner, plan))
    await asyncio.wait_for(held.at_bind.wait(), 10)  # a's claim created, allocated, reserved; not bound
    await _caught_up(cluster, b)
    result = b.core.schedule(await cluster.get_pod("p"))
    assert isinstance(result, Unschedulable) and result.delete_claim is not None, result
    stale = result.delete_claim
    assert (stale.name, stale.uid) == (plan.extended_claim.metadata.name, plan.extended_claim.metadata.uid)
    cleanup = ExtendedClaimCleanupInput(  # what the service starts for it
        namespace=stale.namespace, claim_name=stale.name, claim_uid=stale.uid, pod_name="p", pod_uid=plan.uid
    )
    cleaner = _sid(b, plan, "extclean")
    state = await b.engine.start(EXTENDED_CLAIM_CLEANUP, cleaner, cleanup)
    assert state.status is SagaStatus.COMPLETED, state
    held.release()
    done = await asyncio.wait_for(first, 10)
    assert done.status is SagaStatus.COMPLETED, done
    await _assert_winner_intact(cluster, "p", winner, cleaner)
    assert state.outputs["delete"] == {"claim": stale.name, "deleted": False}
    await _stop(a, b)
