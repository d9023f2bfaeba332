"""A device freed by ``ClaimDeallocated`` alone (no ``GuardReleased``) is usable again, once.

Deallocations write one single append and nothing on the device's guard: the take stays the
guard's last message. That is also the state a deallocation written the old way leaves when its
writer dies between ``ClaimDeallocated`` and ``GuardReleased``. Nobody has to finish a release:
a scheduler's snapshot counts a take once it has seen the take's allocation (or its claim gone),
so the freed device's guard is at its last sequence and the next decision on it lands. A
scheduler started from an objects snapshot sees only the guard's last message and the claim as
it is now; it reads the claim's log to tell "allocated and freed since" from "allocation still
on its way". Without that (the control), the freed device stays held back for the restored
instance: its decision conflicts with the old take and fails, again and again.

Two instances then decide two new pods onto the one freed device (one restored, one folded from
the start): exactly one allocation lands.
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import pytest

from draflow.events.api.core_v1 import Pod
from draflow.events.api.resource_v1 import ResourceClaim
from draflow.events.dra import ClaimDeallocated
from draflow.infra.config import Settings
from draflow.infra.guard import guard_subject
from draflow.infra.snapshots import SnapshotPolicy
from draflow.projections.objects import fold
from draflow.sagas.engine import SagaStatus
from draflow.services.runtime.store import ApiStore
from draflow.services.scheduler.framework import Reserved, Scheduler
from draflow.services.scheduler.plugins import default_plugins
from draflow.services.scheduler.sagas.pod_scheduling import POD_SCHEDULING, PodSchedulingInput
from draflow.services.scheduler.service import SchedulerService
from draflow.services.scheduler.service.snapshot import Snapshot
from tests.services.scheduler.service.conftest import Cluster
from tests.services.scheduler.service.scenario import Instances, everything

DEV0 = "gpu.example.com/node-0/dev-0"


async def _decide(svc: SchedulerService, name: str) -> PodSchedulingInput:
    await svc.snapshot.wait_position(await svc.store.stream_last_seq())
    pod, _ = svc.get("Pod", "default", name)
    assert isinstance(pod, Pod)
    result = svc.core.schedule(pod)
    assert isinstance(result, Reserved), getattr(result, "message", result)
    return PodSchedulingInput.of(result, svc.snapshot.stamp)


def _devices(plan: PodSchedulingInput) -> list[str]:
    return [r.device for c in plan.claims if c.allocation is not None for r in c.allocation.devices.results]


async def _holders(cluster: Cluster, names: tuple[str, ...]) -> dict[str, list[str]]:
    """Each claim's allocated devices, folded from the log itself."""
    out: dict[str, list[str]] = {}
    for name in names:
        claim: Any = None
        for env in await cluster.store.events(cluster.store.subject("ResourceClaim", "default", name)):
            claim = fold(claim, env.type, env.data, env.seq)
        alloc = claim.status.allocation if isinstance(claim, ResourceClaim) else None
        out[name] = [r.device for r in alloc.devices.results] if alloc is not None else []
    return out


async def _instance(cluster: Cluster, instances: Instances, name: str, *, load: bool) -> SchedulerService:
    svc = await cluster.make(name)
    svc.snapshot.policy = SnapshotPolicy(load=load)
    instances.made.append(svc)
    await svc.start()
    return svc


async def _freed_device(
    cluster: Cluster, instances: Instances, settings: Settings, claim: str
) -> tuple[str, int]:
    """p1 holds the only device, then its pod goes and its claim is freed with one
    ``ClaimDeallocated`` naming the pod (the claim controller's append), the claim kept or
    deleted after; an objects snapshot is written after all that. The guard and its take."""
    await cluster.nodes(1, devices=1)
    await cluster.pod("p1")
    a = await instances.start("scheduler-a")
    first = await a.engine.start(POD_SCHEDULING, "scheduler-a-ps-p1", await _decide(a, "p1"))
    assert first.status is SagaStatus.COMPLETED, first
    guard = guard_subject(settings.root, "device", DEV0)
    (take,) = await cluster.store.events(guard)
    p1 = await cluster.get_pod("p1")
    (res,) = await cluster.api.delete([("Pod", "default", "p1")])
    assert res.error is None, res.error
    await cluster.store.append(
        cluster.store.subject("ResourceClaim", "default", "p1-gpu"),
        ClaimDeallocated(reason="NoConsumers", released=(p1.metadata.uid,)),
        expected_last_seq=None,
    )
    if claim == "deleted":
        (res,) = await cluster.api.delete([("ResourceClaim", "default", "p1-gpu")])
        assert res.error is None, res.error
    writer = ApiStore(cluster.store, snapshot_writer=True)
    await writer.start(timeout_s=30)
    await writer.snapshotter.save_now()
    await writer.stop()
    assert [e.type for e in await cluster.store.events(guard)] == ["GuardTaken"]  # nothing released
    return guard, take.seq


@pytest.mark.parametrize("claim", ["kept", "deleted"])
async def test_a_device_freed_without_a_guard_release_is_allocated_again_exactly_once(
    cluster: Cluster, instances: Instances, settings: Settings, claim: str
) -> None:
    guard, take = await _freed_device(cluster, instances, settings, claim)
    await cluster.pod("p2")
    await cluster.pod("p3")
    b = await _instance(cluster, instances, "scheduler-b", load=True)  # from the objects snapshot
    c = await _instance(cluster, instances, "scheduler-c", load=False)  # the whole log folded
    assert b.snapshot.snapshot_position > take and c.snapshot.snapshot_position == 0
    for svc in (b, c):
        assert svc.snapshot.guard_heads.unbacked == {} and svc.snapshot.guard_heads[guard] == take
    plans = [await _decide(b, "p2"), await _decide(c, "p3")]
    assert _devices(plans[0]) == _devices(plans[1]) == ["dev-0"]  # both see the device free
    states = await asyncio.gather(
        b.engine.start(POD_SCHEDULING, "scheduler-b-ps-p2", plans[0]),
        c.engine.start(POD_SCHEDULING, "scheduler-c-ps-p3", plans[1]),
    )
    assert sorted(s.status.name for s in states) == ["COMPENSATED", "COMPLETED"], states
    held = await _holders(cluster, ("p2-gpu", "p3-gpu"))
    assert sorted(held.values()) == [[], ["dev-0"]], held  # usable again, and given once
    takes = [e for e in await everything(cluster) if e.subject == guard]
    assert [e.type for e in takes] == ["GuardTaken", "GuardTaken"]


async def test_without_reading_the_claims_log_a_restored_instance_never_gets_the_freed_device(
    cluster: Cluster, instances: Instances, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The control: a restored snapshot that does not look at the claim's log after the take
    (the healing removed) keeps the freed device's take unbacked, so its decision on the
    device expects the version before the take and fails, though the device is free."""

    async def never(self: Snapshot, *args: object) -> bool:
        return False

    monkeypatch.setattr(Snapshot, "_backed_since", never)
    guard, take = await _freed_device(cluster, instances, settings, "kept")
    await cluster.pod("p2")
    b = await _instance(cluster, instances, "scheduler-b", load=True)
    assert b.snapshot.guard_heads.unbacked == {guard: (take,)}
    for attempt in range(2):  # decided again on the same snapshot: the same refusal
        state = await b.engine.start(POD_SCHEDULING, f"scheduler-b-ps-p2-{attempt}", await _decide(b, "p2"))
        assert state.status is SagaStatus.COMPENSATED, state
        assert f"allocated meanwhile by another scheduler: {DEV0}" in state.error, state.error
    assert await _holders(cluster, ("p2-gpu",)) == {"p2-gpu": []}


async def test_a_restored_instance_still_holds_back_a_take_whose_allocation_is_on_its_way(
    cluster: Cluster, instances: Instances, settings: Settings
) -> None:
    """Safety of the log read: a take whose claim changed after it (a label) but is not
    allocated yet stays unbacked in a restored snapshot, as in a full fold, until the
    allocation lands."""
    await cluster.nodes(1, devices=1)
    await cluster.pod("p4")
    a = await instances.start("scheduler-a")
    took, go = asyncio.Event(), asyncio.Event()
    real = a.store.append

    async def hold_after_take(subject: str, events: object, **kw: object) -> tuple[int, ...]:
        seqs: tuple[int, ...] = await real(subject, events, **kw)  # type: ignore[arg-type]
        if ".Guard." in subject and not took.is_set():
            took.set()
            await go.wait()
        return seqs

    a.store.append = hold_after_take  # type: ignore[method-assign]
    first = asyncio.create_task(a.engine.start(POD_SCHEDULING, "scheduler-a-ps-p4", await _decide(a, "p4")))
    await asyncio.wait_for(took.wait(), 10)
    claim = await cluster.claim("p4-gpu")
    meta = msgspec.structs.replace(claim.metadata, labels={"team": "ml"}, resource_version="")
    await cluster.apply(msgspec.structs.replace(claim, metadata=meta))  # a change after the take
    writer = ApiStore(cluster.store, snapshot_writer=True)
    await writer.start(timeout_s=30)
    await writer.snapshotter.save_now()
    await writer.stop()
    guard = guard_subject(settings.root, "device", DEV0)
    (take,) = await cluster.store.events(guard)
    views = []  # snapshots only: a scheduler instance would resume p4's saga at its start
    for load in (True, False):
        view = Snapshot(cluster.store, Scheduler(plugins=default_plugins()))
        view.policy = SnapshotPolicy(load=load)
        await view.start(timeout_s=30)
        views.append(view)
    try:
        assert views[0].snapshot_position > take.seq and views[1].snapshot_position == 0
        for view in views:
            assert view.guard_heads.unbacked == {guard: (take.seq,)}
        go.set()
        assert (await asyncio.wait_for(first, 10)).status is SagaStatus.COMPLETED
        for view in views:
            await view.wait_position(await cluster.store.stream_last_seq())
            assert view.guard_heads.unbacked == {} and view.guard_heads[guard] == take.seq
    finally:
        for view in views:
            await view.stop()
