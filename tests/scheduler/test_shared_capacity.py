"""Shared devices with consumable capacity (KEP-5075) across scheduling cycles: never double-booked.

One node with one multi-allocatable device (``allowMultipleAllocations``, 8Gi of ``memory``, a
1Gi-step range policy). Every claim asks for part of that memory. The scheduler keeps what shares
consume in its incremental ledger (:mod:`services.scheduler.framework.ledger`); these tests drive
whole cycles (Reserve, the written claim, Unreserve, deallocation, deletion, a restart that
rebuilds the state from the claims) and check the decisions and the ledger against an independent
sum of the claims' ``consumedCapacity``.
"""

from __future__ import annotations

import random

import pytest

from events.api.core_v1 import Pod
from events.api.resource_v1 import (
    AllocationResult,
    CapacityRequestPolicy,
    CapacityRequestPolicyRange,
    CapacityRequirements,
    Device,
    DeviceCapacity,
    DeviceRequest,
    ExactDeviceRequest,
    ResourceClaim,
)
from events.quantity import Quantity
from services.dra.structured import DeviceID
from services.scheduler.framework import Reserved, Scheduler, Unschedulable
from services.scheduler.plugins.dynamicresources import prebind_claim
from tests.scheduler.builders import (
    DRIVER,
    bound,
    cluster,
    make_class,
    make_node,
    make_slice,
    pod_with_template_claim,
    with_status,
)

GI = 1 << 30
DEVICE = DeviceID(DRIVER, "node-0", "gpu-0")
FULL = "0/1 nodes are available: 1 cannot allocate all claims."


def shared_gpu(memory: str = "8Gi") -> Device:
    policy = CapacityRequestPolicy(
        default="1Gi", valid_range=CapacityRequestPolicyRange(min="1Gi", step="1Gi")
    )
    return Device(
        name="gpu-0",
        allow_multiple_allocations=True,
        capacity={"memory": DeviceCapacity(value=memory, request_policy=policy)},
    )


def new_core(*objects: object) -> Scheduler:
    return cluster(make_class("gpu"), make_node("node-0"), make_slice("node-0", [shared_gpu()]), *objects)


def memory_request(amount: str) -> DeviceRequest:
    return DeviceRequest(
        name="req",
        exactly=ExactDeviceRequest(
            device_class_name="gpu",
            allocation_mode="ExactCount",
            count=1,
            capacity=CapacityRequirements(requests={"memory": amount}),
        ),
    )


def sharer(name: str, amount: str) -> tuple[Pod, ResourceClaim]:
    return pod_with_template_claim(name, memory_request(amount))


def allocation(result: Reserved) -> AllocationResult:
    (binding,) = result.claims
    assert binding.allocation is not None
    return binding.allocation


def share(result: Reserved) -> tuple[str, Quantity]:
    """The (shareID, consumed memory) the decision took of the shared device."""
    (res,) = allocation(result).devices.results
    assert (res.driver, res.pool, res.device) == DEVICE
    assert res.share_id, "a multi-allocatable device is allocated as a share"
    return res.share_id, Quantity.parse(res.consumed_capacity["memory"])


def effective_shares(core: Scheduler) -> dict[str, int]:
    """shareID -> bytes, summed from the claims themselves: the written allocation, else the
    pending (assumed) one. Independent of the ledger under test."""
    out: dict[str, int] = {}
    keys = set(core.cluster.claims) | set(core.cluster.assumed.claims)
    for key in keys:
        claim = core.cluster.claims.get(key)
        alloc = claim.status.allocation if claim is not None else None
        if alloc is None:
            pending = core.cluster.assumed.claims.get(key)
            if pending is None or (claim is not None and claim.metadata.uid != pending.claim_uid):
                continue
            alloc = pending.allocation
        for res in alloc.devices.results:
            assert res.share_id is not None and res.share_id not in out, f"share {res.share_id} twice"
            out[res.share_id] = Quantity.parse(res.consumed_capacity["memory"]).value()
    return out


def ledger_memory(core: Scheduler) -> int:
    """The bytes of the device's memory the ledger counts as consumed (0: nothing recorded)."""
    consumed = core.cluster.ledger.consumed.get(DEVICE)
    return 0 if consumed is None else consumed["memory"].value()


def check_ledger(core: Scheduler) -> int:
    """The ledger agrees with the claims; returns the consumed bytes (never over capacity)."""
    shares = effective_shares(core)
    total = sum(shares.values())
    assert ledger_memory(core) == total
    assert {s.share_id for s in core.cluster.ledger.shared} == set(shares)
    assert all(n == 1 for n in core.cluster.ledger.shared.values())
    if shares:
        assert dict(core.cluster.ledger.shared_device) == {DEVICE: len(shares)}
        assert set(core.cluster.ledger.any_device) == {DEVICE}
    else:
        assert not core.cluster.ledger.consumed and not core.cluster.ledger.any_device
    assert total <= 8 * GI, f"{total / GI}Gi consumed of 8Gi"
    return total


def write(core: Scheduler, pod: Pod, claim: ResourceClaim, result: Reserved) -> ResourceClaim:
    """PreBind and bind as the saga does: the written claim and the bound pod come back."""
    written = prebind_claim(claim, result.claims[0])
    core.observe(written)
    core.observe(bound(pod, result.node_name))
    return written


def test_successive_cycles_consume_capacity_until_the_device_is_full() -> None:
    core = new_core()
    shares = []
    for name in ("a", "b"):
        pod, claim = sharer(name, "3Gi")
        core.observe(claim)
        result = core.schedule(pod)
        assert isinstance(result, Reserved)
        shares.append(share(result))
        write(core, pod, claim, result)
        check_ledger(core)
    assert [q for _, q in shares] == [Quantity.parse("3Gi")] * 2
    assert shares[0][0] != shares[1][0]
    assert ledger_memory(core) == 6 * GI
    pod, claim = sharer("c", "3Gi")  # 9Gi > 8Gi
    core.observe(claim)
    blocked = core.schedule(pod)
    assert isinstance(blocked, Unschedulable) and blocked.message == FULL
    pod, claim = sharer("d", "2Gi")  # exactly the 2Gi left
    core.observe(claim)
    fits = core.schedule(pod)
    assert isinstance(fits, Reserved)
    assert share(fits)[1] == Quantity.parse("2Gi")
    assert check_ledger(core) == 8 * GI


def test_a_request_is_rounded_up_by_the_policy_before_it_is_counted() -> None:
    core = new_core()
    pod, claim = sharer("a", "1500Mi")  # rounded up to the next 1Gi step: 2Gi
    core.observe(claim)
    result = core.schedule(pod)
    assert isinstance(result, Reserved) and share(result)[1] == Quantity.parse("2Gi")
    assert check_ledger(core) == 2 * GI
    for name in ("b", "c", "d"):
        pod, claim = sharer(name, "2Gi")
        core.observe(claim)
        assert isinstance(core.schedule(pod), Reserved), name
    pod, claim = sharer("e", "1")  # one byte rounds up to 1Gi: nothing left
    core.observe(claim)
    assert isinstance(core.schedule(pod), Unschedulable)
    assert check_ledger(core) == 8 * GI


def test_concurrent_cycles_count_assumed_shares_and_the_written_claims_replace_them() -> None:
    """Cycles run back to back while the earlier sagas are in flight (nothing written yet): the
    assumed allocations hold their capacity; the written claims then take over without counting
    twice, in whatever order they arrive."""
    core = new_core()
    pods = [sharer(n, "3Gi") for n in ("a", "b", "c")]
    for pod, claim in pods:
        core.observe(claim)
        core.observe(pod)
    decided = []
    while (step := core.schedule_next()) is not None:
        decided.append(step[1])
        check_ledger(core)
    reserved = [r for r in decided if isinstance(r, Reserved)]
    assert [r.pod.name for r in reserved] == ["a", "b"]
    assert [type(r).__name__ for r in decided] == ["Reserved", "Reserved", "Unschedulable"]
    assert core.cluster.assumed.claims and ledger_memory(core) == 6 * GI
    for result in reversed(reserved):  # b's writes land first
        pod, claim = next(p for p in pods if p[0].metadata.name == result.pod.name)
        write(core, pod, claim, result)
        assert check_ledger(core) == 6 * GI
    assert not core.cluster.assumed.claims


def test_unreserve_returns_the_assumed_capacity() -> None:
    core = new_core()
    a, a_claim = sharer("a", "5Gi")
    b, b_claim = sharer("b", "5Gi")
    core.observe(a_claim)
    core.observe(b_claim)
    assert isinstance(core.schedule(a), Reserved)
    assert isinstance(core.schedule(b), Unschedulable)
    core.unreserve(a)  # the saga compensates before anything was written
    assert check_ledger(core) == 0
    result = core.schedule(b)
    assert isinstance(result, Reserved)
    assert share(result)[1] == Quantity.parse("5Gi") and check_ledger(core) == 5 * GI


@pytest.mark.parametrize("how", ["deallocated", "deleted"])
def test_a_released_claim_returns_exactly_its_capacity(how: str) -> None:
    core = new_core()
    written = {}
    for name, amount in (("a", "3Gi"), ("b", "4Gi")):
        pod, claim = sharer(name, amount)
        core.observe(claim)
        result = core.schedule(pod)
        assert isinstance(result, Reserved)
        written[name] = write(core, pod, claim, result)
    assert check_ledger(core) == 7 * GI
    big, big_claim = sharer("big", "4Gi")
    core.observe(big_claim)
    assert isinstance(core.schedule(big), Unschedulable)
    # the claim controller releases a's claim: deallocated (allocation cleared) or deleted
    if how == "deallocated":
        core.observe(with_status(written["a"], None))
    else:
        core.observe_deleted("ResourceClaim", "default", "a-gpu")
    assert check_ledger(core) == 4 * GI  # b's 4Gi stay counted: only a's share went
    result = core.schedule(big)
    assert isinstance(result, Reserved)
    assert check_ledger(core) == 8 * GI
    # releasing the last share of the device clears it from the ledger
    for key in ("big", "b"):
        core.observe_deleted("ResourceClaim", "default", f"{key}-gpu")
    core.unreserve(big)
    assert check_ledger(core) == 0


def test_restart_rebuilds_the_consumed_capacity_from_the_claims() -> None:
    """A restarted scheduler folds the same claims from the log: it counts what the shares
    consume (not only that the device is shared), so it does not hand out the capacity again."""
    core = new_core()
    objects: list[object] = []
    for name, amount in (("a", "3Gi"), ("b", "1Gi"), ("c", "4Gi")):
        pod, claim = sharer(name, amount)
        core.observe(claim)
        result = core.schedule(pod)
        assert isinstance(result, Reserved)
        objects += [write(core, pod, claim, result), bound(pod, result.node_name)]
    before = check_ledger(core)
    assert before == 8 * GI

    restarted = new_core(*objects)
    assert check_ledger(restarted) == before
    assert restarted.cluster.ledger.consumed == core.cluster.ledger.consumed
    assert set(restarted.cluster.ledger.shared) == set(core.cluster.ledger.shared)
    late, late_claim = sharer("late", "1Gi")
    restarted.observe(late_claim)
    assert isinstance(restarted.schedule(late), Unschedulable)
    restarted.observe_deleted("ResourceClaim", "default", "b-gpu")  # 1Gi back
    result = restarted.schedule(late)
    assert isinstance(result, Reserved)
    assert share(result)[1] == Quantity.parse("1Gi") and check_ledger(restarted) == 8 * GI


def test_random_interleavings_decide_exactly_by_the_capacity_left() -> None:
    """Cycles, writes, compensations, deallocations, deletions and restarts in random order: the
    ledger always equals the claims' sum, and every decision is the one the free capacity
    dictates (a pod fits if and only if its request fits what is left)."""
    rng = random.Random(11)
    core = new_core()
    pods: dict[str, tuple[Pod, ResourceClaim, int]] = {}
    in_flight: dict[str, Reserved] = {}  # decided, saga running, nothing written
    written: dict[str, ResourceClaim] = {}  # allocated claims of bound pods
    outcomes = {"reserved": 0, "refused": 0, "unreserved": 0, "released": 0, "restarts": 0}
    for i in range(30):
        gib = rng.randint(1, 4)
        pod, claim = sharer(f"p{i}", f"{gib}Gi")
        pods[pod.metadata.name] = (pod, claim, gib * GI)
        core.observe(claim)
    for _ in range(600):
        action = rng.random()
        waiting = sorted(n for n in pods if n not in in_flight and n not in written)
        if action < 0.45 and waiting:
            name = rng.choice(waiting)
            pod, _, wanted = pods[name]
            left = 8 * GI - check_ledger(core)
            result = core.schedule(pod)
            if isinstance(result, Reserved):
                outcomes["reserved"] += 1
                assert wanted <= left, f"{wanted / GI}Gi reserved with {left / GI}Gi free"
                assert share(result)[1].value() == wanted
                in_flight[name] = result
            else:
                outcomes["refused"] += 1
                assert isinstance(result, Unschedulable) and result.message == FULL
                assert wanted > left, f"{wanted / GI}Gi refused with {left / GI}Gi free"
        elif action < 0.65 and in_flight:
            name = rng.choice(sorted(in_flight))
            pod, claim, _ = pods[name]
            written[name] = write(core, pod, claim, in_flight.pop(name))
        elif action < 0.75 and in_flight:
            name = rng.choice(sorted(in_flight))
            core.unreserve(pods[name][0])  # the saga compensates before anything was written
            del in_flight[name]
            outcomes["unreserved"] += 1
        elif action < 0.92 and written:
            # the pod finished: its claim is deallocated (sometimes seen), then deleted; a new
            # pod with a new claim of the same size takes its place
            name = rng.choice(sorted(written))
            claim = written.pop(name)
            if rng.random() < 0.5:
                core.observe(with_status(claim, None))
            core.observe_deleted("ResourceClaim", "default", claim.metadata.name)
            core.observe_deleted("Pod", "default", name)
            pod, claim, wanted = pods.pop(name)
            again = f"{name}x"
            pod, claim = sharer(again, f"{wanted // GI}Gi")
            pods[again] = (pod, claim, wanted)
            core.observe(claim)
            outcomes["released"] += 1
        elif action >= 0.93 and not in_flight:
            # restart: a new scheduler folds what the log holds (written claims, bound pods,
            # the claims still waiting)
            used = ledger_memory(core)
            objects: list[object] = []
            for name, (pod, claim, _) in pods.items():
                objects += [written[name], bound(pod, "node-0")] if name in written else [claim]
            core = new_core(*objects)
            assert ledger_memory(core) == used
            outcomes["restarts"] += 1
        check_ledger(core)
    assert min(outcomes.values()) >= 5, outcomes


def test_ledger_keeps_other_capacities_and_devices_apart() -> None:
    """Two shared devices with two capacities each: releasing one share touches only its own."""
    policy = CapacityRequestPolicy(default="1", valid_values=("1", "2", "4"))
    gpus = [
        Device(
            name=f"gpu-{i}",
            allow_multiple_allocations=True,
            capacity={
                "memory": DeviceCapacity(value="8Gi"),
                "cores": DeviceCapacity(value="4", request_policy=policy),
            },
        )
        for i in range(2)
    ]
    core = cluster(make_class("gpu"), make_node("node-0"), make_slice("node-0", gpus))

    def ask(name: str, memory: str, cores: str) -> tuple[Pod, ResourceClaim]:
        wants = CapacityRequirements(requests={"memory": memory, "cores": cores})
        exactly = ExactDeviceRequest(
            device_class_name="gpu", allocation_mode="ExactCount", count=1, capacity=wants
        )
        return pod_with_template_claim(name, DeviceRequest(name="req", exactly=exactly))

    results, pods = {}, {}
    for name, memory, cores in (("a", "6Gi", "3"), ("b", "6Gi", "1"), ("c", "2Gi", "1")):
        pod, claim = ask(name, memory, cores)
        pods[name] = pod
        core.observe(claim)
        result = core.schedule(pod)
        assert isinstance(result, Reserved), name
        results[name] = result
    # cores 3 is not a valid value: rounded up to 4; a takes gpu-0, b gpu-1, c goes to gpu-1 again
    placed = {n: allocation(r).devices.results[0] for n, r in results.items()}
    assert placed["a"].consumed_capacity == {"memory": "6Gi", "cores": "4"}
    assert {n: p.device for n, p in placed.items()} == {"a": "gpu-0", "b": "gpu-1", "c": "gpu-1"}
    ledger = core.cluster.ledger.consumed

    def used(did: DeviceID) -> dict[str, int]:
        return {k: v.value() for k, v in ledger[did].items()}

    gpu0, gpu1 = (DeviceID(DRIVER, "node-0", f"gpu-{i}") for i in range(2))
    assert used(gpu0) == {"memory": 6 * GI, "cores": 4}
    assert used(gpu1) == {"memory": 8 * GI, "cores": 2}
    core.unreserve(pods["b"])
    assert used(gpu1) == {"memory": 2 * GI, "cores": 1}
    assert used(gpu0) == {"memory": 6 * GI, "cores": 4}
    assert core.cluster.ledger.shared_device == {gpu0: 1, gpu1: 1}
