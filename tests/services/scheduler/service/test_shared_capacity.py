"""Shared devices with consumable capacity through the real services: concurrent sagas, a scheduler
restart and released claims never book more of a device than it has.

A real apiserver, scheduler instances and the claim controller on a real JetStream. One node with
one multi-allocatable GPU (8Gi of ``memory``); every pod has its own claim for 2Gi of it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from draflow.events.api.core_v1 import Pod
from draflow.events.api.resource_v1 import (
    CapacityRequestPolicy,
    CapacityRequestPolicyRange,
    CapacityRequirements,
    Device,
    DeviceCapacity,
    DeviceRequest,
    ExactDeviceRequest,
    ResourceClaim,
)
from draflow.events.quantity import Quantity
from draflow.infra.config import Settings
from draflow.services.claim_controller.service import ClaimControllerService
from tests.builders import make_claim, make_class, make_node, make_pod, make_slice
from tests.helpers import assert_eventually
from tests.services.scheduler.service.conftest import Cluster
from tests.shells import Running, run

pytestmark = pytest.mark.kep4381

GI = 1 << 30
FULL = "0/1 nodes are available: 1 cannot allocate all claims."


def _shared_gpu() -> Device:
    steps = CapacityRequestPolicyRange(min="1Gi", step="1Gi")
    policy = CapacityRequestPolicy(default="1Gi", valid_range=steps)
    return Device(
        name="gpu-0",
        allow_multiple_allocations=True,
        capacity={"memory": DeviceCapacity(value="8Gi", request_policy=policy)},
    )


def _two_gi(name: str) -> ResourceClaim:
    exactly = ExactDeviceRequest(
        device_class_name="gpu",
        allocation_mode="ExactCount",
        count=1,
        capacity=CapacityRequirements(requests={"memory": "2Gi"}),
    )
    return make_claim(name, DeviceRequest(name="req", exactly=exactly))


async def _pods(cluster: Cluster, *names: str) -> None:
    for name in names:
        await cluster.apply(_two_gi(f"{name}-mem"), make_pod(name, claims={"gpu": f"{name}-mem"}))


async def _state(cluster: Cluster, names: list[str]) -> tuple[list[str], dict[str, Pod], dict[str, int]]:
    """(bound pod names, pods by name, shareID -> bytes over every allocated claim)."""
    pods = {n: await cluster.get_pod(n) for n in names}
    shares: dict[str, int] = {}
    for name in names:
        claim = await cluster.api.get_object("ResourceClaim", f"{name}-mem", namespace="default")
        if not isinstance(claim, ResourceClaim) or claim.status.allocation is None:
            continue
        for res in claim.status.allocation.devices.results:
            assert (res.pool, res.device) == ("node-0", "gpu-0") and res.share_id
            assert res.share_id not in shares, f"share {res.share_id} allocated twice"
            shares[res.share_id] = Quantity.parse(res.consumed_capacity["memory"]).value()
    assert sum(shares.values()) <= 8 * GI, f"{sum(shares.values()) / GI}Gi booked of 8Gi"
    return sorted(n for n, p in pods.items() if p.spec.node_name), pods, shares


def _refused(pod: Pod) -> str:
    conds = {c.type: c for c in pod.status.conditions}
    cond = conds.get("PodScheduled")
    assert cond is not None and (cond.status, cond.reason) == ("False", "Unschedulable"), pod.status
    return cond.message


@pytest.fixture
async def claim_controller(cluster: Cluster, settings: Settings) -> AsyncIterator[Running]:
    ctl, _ = await run(settings, "claim-controller", ClaimControllerService)
    try:
        yield ctl
    finally:
        await ctl.stop()


async def test_shares_survive_concurrent_sagas_a_restart_and_released_claims(
    cluster: Cluster, claim_controller: Running
) -> None:
    await cluster.apply(make_class("gpu"), make_node("node-0"), make_slice("node-0", [_shared_gpu()]))
    names = [f"pod-{i}" for i in range(5)]
    await _pods(cluster, *names)
    # all five pods wait before the scheduler starts: their cycles run back to back while the
    # first sagas are still writing, so the assumed shares must hold the capacity
    first = await cluster.start("sched-1")

    async def four_bound_one_refused() -> tuple[list[str], dict[str, Pod]]:
        bound, pods, shares = await _state(cluster, names)
        assert len(bound) == 4 and len(shares) == 4, (bound, shares)
        (waiting,) = set(names) - set(bound)
        assert _refused(pods[waiting]).startswith(FULL)
        return bound, pods

    bound, _ = await assert_eventually(four_bound_one_refused, timeout_s=20)
    await assert_eventually(lambda: first.outcomes["completed"] == 4, timeout_s=10)
    assert first.outcomes["compensated"] == 0  # nothing was double-booked and undone

    # restart: a new instance rebuilds its ledger from the log; the device is still full
    await cluster.stop_all()
    second = await cluster.start("sched-2")
    names.append("pod-5")
    await _pods(cluster, "pod-5")

    async def late_pod_refused() -> bool:
        pod = await cluster.get_pod("pod-5")
        assert _refused(pod).startswith(FULL)
        return second.outcomes["unschedulable"] >= 1  # the new instance decided it

    await assert_eventually(late_pod_refused, timeout_s=20)
    assert (await _state(cluster, names))[0] == bound

    # a finished pod's claim is deallocated by the claim controller: its 2Gi go to one waiter
    await cluster.api.delete([("Pod", "default", bound[0])], grace_period_seconds=0)
    names.remove(bound[0])

    async def one_waiter_bound() -> list[str]:
        now, _, shares = await _state(cluster, names)
        assert len(now) == 4 and sum(shares.values()) == 8 * GI, (now, shares)
        return now

    now = await assert_eventually(one_waiter_bound, timeout_s=20)
    (last,) = set(names) - set(now)
    await cluster.api.delete([("Pod", "default", now[0])], grace_period_seconds=0)
    names.remove(now[0])

    async def all_bound() -> bool:
        done, _, shares = await _state(cluster, names)
        assert last in done and len(done) == 4 and sum(shares.values()) == 8 * GI, (done, shares)
        return True

    await assert_eventually(all_bound, timeout_s=20)
    assert second.outcomes["completed"] == 2 and second.outcomes["compensated"] == 0
