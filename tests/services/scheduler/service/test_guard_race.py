"""Two scheduler instances deciding *different* pods on the same state pick the same free device
(the two-scheduler race of the README): the device's guard lets exactly one allocation land.

Deterministic: both instances are caught up with the same log, each decides its own pod (so each
claim's own version check passes) and only then are both sagas started at once. Without guards
(the stamps left out, as sagas recorded before guards carry none) both would land and
``draflow check`` reports the device in two claims: the control case shows the test can fail.
"""

from __future__ import annotations

import asyncio

import pytest

from draflow.events.api.core_v1 import Pod
from draflow.events.api.resource_v1 import Device, ResourceClaim
from draflow.events.dra import ClaimAllocated
from draflow.events.guard import GuardTaken
from draflow.infra.config import Settings
from draflow.infra.guard import guard_subject
from draflow.infra.snapshots import SnapshotPolicy
from draflow.projections.objects import fold
from draflow.sagas.engine import SagaState, SagaStatus
from draflow.services.runtime.store import ApiStore
from draflow.services.scheduler.framework import Reserved, Scheduler
from draflow.services.scheduler.plugins import default_plugins
from draflow.services.scheduler.sagas.pod_scheduling import POD_SCHEDULING, PodSchedulingInput
from draflow.services.scheduler.service import SchedulerService
from draflow.services.scheduler.service.snapshot import Snapshot
from tests.helpers import assert_eventually
from tests.processes import draflow
from tests.services.scheduler.service.conftest import Cluster
from tests.services.scheduler.service.scenario import Instances, everything

pytestmark = pytest.mark.kep4381


async def _decide(svc: SchedulerService, name: str, *, guarded: bool = True) -> PodSchedulingInput:
    await svc.snapshot.wait_position(await svc.store.stream_last_seq())
    pod, _ = svc.get("Pod", "default", name)
    assert isinstance(pod, Pod)
    result = svc.core.schedule(pod)
    assert isinstance(result, Reserved), getattr(result, "message", result)
    return PodSchedulingInput.of(result, svc.snapshot.stamp if guarded else None)


def _devices(plan: PodSchedulingInput) -> list[str]:
    return [r.device for c in plan.claims if c.allocation is not None for r in c.allocation.devices.results]


async def _race(
    cluster: Cluster, instances: Instances, *, guarded: bool
) -> tuple[list[SagaState], list[PodSchedulingInput]]:
    await cluster.nodes(1, devices=2)
    await cluster.pod("p4")
    await cluster.pod("p5")
    a = await instances.start("scheduler-a")  # both caught up with the same log
    b = await instances.start("scheduler-b")
    plans = [await _decide(a, "p4", guarded=guarded), await _decide(b, "p5", guarded=guarded)]
    assert _devices(plans[0]) == _devices(plans[1]) == ["dev-0"]  # the same free device
    states = await asyncio.gather(
        a.engine.start(POD_SCHEDULING, "scheduler-a-ps-p4", plans[0]),
        b.engine.start(POD_SCHEDULING, "scheduler-b-ps-p5", plans[1]),
    )
    return list(states), plans


async def _allocated_devices(
    cluster: Cluster, names: tuple[str, ...] = ("p4-gpu", "p5-gpu")
) -> dict[str, list[str]]:
    """Each claim's allocated devices, read from the log itself (no cache that may lag)."""
    out: dict[str, list[str]] = {}
    for name in names:
        claim = None
        for env in await cluster.store.events(cluster.store.subject("ResourceClaim", "default", name)):
            claim = fold(claim, env.type, env.data, env.seq)
        assert isinstance(claim, ResourceClaim)
        alloc = claim.status.allocation
        out[name] = [r.device for r in alloc.devices.results] if alloc is not None else []
    return out


async def test_two_instances_one_device_only_one_allocation_lands_and_the_other_pod_goes_elsewhere(
    cluster: Cluster, instances: Instances, settings: Settings
) -> None:
    states, plans = await _race(cluster, instances, guarded=True)
    assert sorted(s.status.value for s in states) == ["Compensated", "Completed"], states
    winner, loser = (0, 1) if states[0].status is SagaStatus.COMPLETED else (1, 0)
    won_claim, lost_claim = ("p4-gpu", "p5-gpu") if winner == 0 else ("p5-gpu", "p4-gpu")
    lost_pod = lost_claim.removesuffix("-gpu")
    assert states[loser].error == (
        f"prebind: SchedulingConflict: claim default/{lost_claim}: allocated meanwhile by another "
        f"scheduler: gpu.example.com/node-0/dev-0 to ResourceClaim default/{won_claim} "
        f"(by scheduler-{'ab'[winner]})"
    )
    assert await _allocated_devices(cluster) == {won_claim: ["dev-0"], lost_claim: []}
    # the guard subject: one take, the winner's, right before its claim (nothing of the loser's)
    guard = f"{settings.root}.ev.Guard.device.gpu~example~com/node-0/dev-0"
    (take,) = await cluster.store.events(guard)
    uid = (await cluster.claim(won_claim)).metadata.uid
    assert take.data == GuardTaken(holder=f"ResourceClaim default/{won_claim}", holder_uid=uid)
    claim_log = await cluster.store.events(cluster.store.subject("ResourceClaim", "default", won_claim))
    (allocated,) = [e for e in claim_log if isinstance(e.data, ClaimAllocated)]
    assert take.seq < allocated.seq  # the device first, then the claim (two single appends)
    assert take.correlation_id == allocated.correlation_id
    fact = allocated.data
    assert isinstance(fact, ClaimAllocated) and fact.consumer is not None  # reserved in the same fact
    assert fact.consumer.name == won_claim.removesuffix("-gpu")

    # the loser's pod is back in its queue: its instance schedules it again, on the other device
    assert cluster.running == []  # the deciders ran no loop: start one now
    cluster.run(await cluster.make(f"scheduler-{'ab'[loser]}-again"))

    async def bound() -> bool:
        return (await cluster.get_pod(lost_pod)).spec.node_name == "node-0"

    await assert_eventually(bound, timeout_s=15)
    assert await _allocated_devices(cluster) == {won_claim: ["dev-0"], lost_claim: ["dev-1"]}
    assert all(_devices(p) == ["dev-0"] for p in plans)

    done = await asyncio.to_thread(draflow, settings, "check")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok        device-once" in done.stdout and "every invariant holds" in done.stdout


async def test_without_guards_the_same_race_allocates_the_device_twice(
    cluster: Cluster, instances: Instances, settings: Settings
) -> None:
    """The control: the same decisions with no guard stamps (as sagas recorded before guards)."""
    states, _ = await _race(cluster, instances, guarded=False)
    assert [s.status for s in states] == [SagaStatus.COMPLETED, SagaStatus.COMPLETED]
    assert await _allocated_devices(cluster) == {"p4-gpu": ["dev-0"], "p5-gpu": ["dev-0"]}
    done = await asyncio.to_thread(draflow, settings, "check")
    assert done.returncode == 1
    assert "VIOLATED  device-once" in done.stdout
    assert (
        "device gpu.example.com/node-0/dev-0 is allocated to claim default/p4-gpu and to claim default/p5-gpu"
        in (done.stdout)
    )


SHARED = [Device(name="dev-0", allow_multiple_allocations=True)]


async def test_a_shared_device_given_twice_by_one_instance_retries_its_own_take(
    cluster: Cluster, instances: Instances, settings: Settings
) -> None:
    """One instance gives one shared device (``allowMultipleAllocations``) to two pods before
    either allocation is in its snapshot: both decisions saw the guard at the same version, so the
    second batch conflicts with the first; the take since is the instance's own (its assume cache
    serialised the two decisions), so PreBind retries at the guard's new version and both land."""
    await cluster.nodes(1, devices=SHARED)
    await cluster.pod("p1")
    await cluster.pod("p2")
    a = await instances.start("scheduler-a")
    first, second = await _decide(a, "p1"), await _decide(a, "p2")
    assert [g.seen for c in (*first.claims, *second.claims) for g in c.guards] == [0, 0]
    one = await a.engine.start(POD_SCHEDULING, "scheduler-a-ps-p1", first)
    two = await a.engine.start(POD_SCHEDULING, "scheduler-a-ps-p2", second)
    assert (one.status, two.status) == (SagaStatus.COMPLETED, SagaStatus.COMPLETED), two.error
    assert await _allocated_devices(cluster, ("p1-gpu", "p2-gpu")) == {
        "p1-gpu": ["dev-0"],
        "p2-gpu": ["dev-0"],
    }
    guard = f"{settings.root}.ev.Guard.device.gpu~example~com/node-0/dev-0"
    takes = await cluster.store.events(guard)
    assert [t.data.holder for t in takes if isinstance(t.data, GuardTaken)] == [
        "ResourceClaim default/p1-gpu",
        "ResourceClaim default/p2-gpu",
    ]
    # both decisions expected version 0: the second take was refused once, then retried at the
    # version after the first (the instance's own take) and landed
    assert [t.correlation_id for t in takes] == ["scheduler-a-ps-p1", "scheduler-a-ps-p2"]
    assert takes[1].id.endswith("default/p2-gpu:g0:1")  # its second attempt


async def test_a_shared_device_taken_by_another_instance_meanwhile_is_decided_again(
    cluster: Cluster, instances: Instances
) -> None:
    """Another instance's take on the device since the decision: it was not counted (the device's
    capacity may be gone), so the saga compensates and the pod is decided again."""
    await cluster.nodes(1, devices=SHARED)
    await cluster.pod("p1")
    await cluster.pod("p2")
    a = await instances.start("scheduler-a")
    b = await instances.start("scheduler-b")
    first, second = await _decide(a, "p1"), await _decide(b, "p2")
    assert (await a.engine.start(POD_SCHEDULING, "scheduler-a-ps-p1", first)).status is SagaStatus.COMPLETED
    state = await b.engine.start(POD_SCHEDULING, "scheduler-b-ps-p2", second)
    assert state.status is SagaStatus.COMPENSATED
    assert "allocated meanwhile by another scheduler: gpu.example.com/node-0/dev-0" in state.error
    again = await _decide(b, "p2")  # its snapshot now shows p1's share
    assert (await b.engine.start(POD_SCHEDULING, "scheduler-b-ps-p2-2", again)).status is SagaStatus.COMPLETED


async def test_a_scheduler_started_from_a_snapshot_expects_the_guards_versions_of_a_full_fold(
    cluster: Cluster, instances: Instances, settings: Settings
) -> None:
    """A snapshot keeps objects, not guard subjects: a scheduler starting from one reads the
    guards' last messages up to the snapshot's position and follows the rest from the log."""
    await _race(cluster, instances, guarded=True)  # dev-0's guard: one take
    writer = ApiStore(cluster.store, snapshot_writer=True)
    await writer.start(timeout_s=30)
    cut = await writer.snapshotter.save_now()
    await writer.stop()
    moved = guard_subject(settings.root, "device", "gpu.example.com/node-0/dev-1")
    await cluster.store.append(moved, GuardTaken(holder="ResourceClaim default/x"), expected_last_seq=0)
    views = []
    for policy in (SnapshotPolicy(), SnapshotPolicy(load=False)):
        view = Snapshot(cluster.store, Scheduler(plugins=default_plugins()))
        view.policy = policy
        await view.start(timeout_s=30)
        views.append(view)
    try:
        restored, full = views
        assert restored.snapshot_position == cut and full.snapshot_position == 0
        assert restored.guard_heads == full.guard_heads
        assert set(full.guard_heads) == {
            moved,
            guard_subject(settings.root, "device", "gpu.example.com/node-0/dev-0"),
        }
    finally:
        for view in views:
            await view.stop()


def _hold_after_take(svc: SchedulerService) -> tuple[asyncio.Event, asyncio.Event]:
    """``svc``'s first guard take lands, then its saga waits (``took`` set) until ``go`` is set:
    the take alone is in the log, the claim's append not sent yet."""
    took, go = asyncio.Event(), asyncio.Event()
    real = svc.store.append

    async def hold_after_take(subject: str, events: object, **kw: object) -> tuple[int, ...]:
        seqs: tuple[int, ...] = await real(subject, events, **kw)  # type: ignore[arg-type]
        if isinstance(events, GuardTaken) and not took.is_set():
            took.set()
            await go.wait()
        return seqs

    svc.store.append = hold_after_take  # type: ignore[method-assign]
    return took, go


async def test_a_take_seen_before_its_allocation_does_not_let_another_instance_take_the_device(
    cluster: Cluster, instances: Instances, settings: Settings
) -> None:
    """PreBind takes the device's guard, then writes the claim: in between, another instance's
    snapshot has the take but shows the device free. Its decision must not expect the guard's
    version after the take (it would land, and the device would be allocated twice): the take
    counts in the version only once its allocation is in, so the other decision conflicts."""
    await cluster.nodes(1, devices=2)
    await cluster.pod("p4")
    await cluster.pod("p5")
    a = await instances.start("scheduler-a")
    b = await instances.start("scheduler-b")
    took, go = _hold_after_take(a)
    first = asyncio.create_task(a.engine.start(POD_SCHEDULING, "scheduler-a-ps-p4", await _decide(a, "p4")))
    await asyncio.wait_for(took.wait(), 10)
    guard = guard_subject(settings.root, "device", "gpu.example.com/node-0/dev-0")
    (take,) = await cluster.store.events(guard)
    second = await _decide(b, "p5")  # b's snapshot has the take, not p4-gpu's allocation
    assert _devices(second) == ["dev-0"]
    assert b.snapshot.guard_heads.unbacked == {guard: (take.seq,)}
    assert [g.seen for c in second.claims for g in c.guards] == [take.seq - 1]
    state = await b.engine.start(POD_SCHEDULING, "scheduler-b-ps-p5", second)
    assert state.status is SagaStatus.COMPENSATED
    assert "allocated meanwhile by another scheduler: gpu.example.com/node-0/dev-0" in state.error
    go.set()
    assert (await asyncio.wait_for(first, 10)).status is SagaStatus.COMPLETED
    assert await _allocated_devices(cluster) == {"p4-gpu": ["dev-0"], "p5-gpu": []}
    await b.snapshot.wait_position(await cluster.store.stream_last_seq())
    assert b.snapshot.guard_heads.unbacked == {} and b.snapshot.guard_heads[guard] == take.seq


async def test_two_instances_deciding_the_same_pod_meet_at_the_device_guard(
    cluster: Cluster, instances: Instances
) -> None:
    """Both instances decide the same pod onto the same device; the second takes the guard after
    the first's take and before its claim's append: it fails naming the other attempt, writes
    nothing, and the first binds the pod."""
    await cluster.nodes(1, devices=2)
    await cluster.pod("p4")
    a = await instances.start("scheduler-a")
    b = await instances.start("scheduler-b")
    took, go = _hold_after_take(a)
    first = asyncio.create_task(a.engine.start(POD_SCHEDULING, "scheduler-a-ps-p4", await _decide(a, "p4")))
    await asyncio.wait_for(took.wait(), 10)
    second = await b.engine.start(POD_SCHEDULING, "scheduler-b-ps-p4", await _decide(b, "p4"))
    assert second.status is SagaStatus.COMPENSATED
    assert second.error == (
        "prebind: SchedulingConflict: claim default/p4-gpu is being allocated by another scheduling "
        "attempt (saga scheduler-a-ps-p4, by scheduler-a)"
    )
    go.set()
    assert (await asyncio.wait_for(first, 10)).status is SagaStatus.COMPLETED
    assert await _allocated_devices(cluster, ("p4-gpu",)) == {"p4-gpu": ["dev-0"]}
    assert not [
        e
        for e in await everything(cluster)
        if e.correlation_id == "scheduler-b-ps-p4" and ".Saga." not in e.subject
    ]
    assert (await cluster.get_pod("p4")).spec.node_name == "node-0"
