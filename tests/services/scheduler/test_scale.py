"""Whole-cluster properties: filling scheduler_perf's 500 x 10 cluster, best-first order equals a
full scan, the precheck never rejects what the allocator accepts."""

from __future__ import annotations

import random

import msgspec
import pytest

from draflow.events.api.resource_v1 import DeviceConstraint, ResourceClaim
from draflow.services.dra.structured import Allocator
from draflow.services.scheduler.framework import Reserved, SchedulerConfig, Unschedulable
from draflow.services.scheduler.plugins import default_plugins
from draflow.services.scheduler.plugins.dynamicresources import DynamicResources, prebind_claim
from draflow.services.scheduler.plugins.dynamicresources.precheck import compile_slots, precheck
from tests.builders import (
    bound_to,
    exact,
    first_available,
    make_allocation,
    make_claim,
    make_class,
    make_device,
    make_node,
    make_slice,
    pod_with_template_claim,
    with_status,
)
from tests.builders.scheduler import cluster, gpu_cluster, results_of

pytestmark = pytest.mark.kep4381


def test_fill_500_nodes_with_5000_one_device_pods() -> None:
    core = gpu_cluster(500, 10)
    pods = {}
    for i in range(5001):
        pod, claim = pod_with_template_claim(f"p{i:04d}")
        pods[pod.metadata.name] = (pod, claim)
        core.observe(claim)
        core.observe(pod)
    used: dict[tuple[str, str], str] = {}
    results = []
    while (step := core.schedule_next()) is not None:
        _, result = step
        results.append(result)
        if not isinstance(result, Reserved):
            continue
        pod, claim = pods[result.pod.name]
        (binding,) = result.claims
        (device,) = results_of(binding)
        assert device.pool == result.node_name
        key = (device.pool, device.device)
        assert key not in used, f"{key} given to {used[key]} and {result.pod.name}"
        used[key] = result.pod.name
        core.observe(prebind_claim(claim, binding))  # what the saga writes comes back
        core.observe(bound_to(pod, result.node_name))
    reserved = [r for r in results if isinstance(r, Reserved)]
    failed = [r for r in results if not isinstance(r, Reserved)]
    assert len(reserved) == 5000 and len(used) == 5000  # every device exactly once
    (last,) = failed
    assert isinstance(last, Unschedulable)
    assert last.message == "0/500 nodes are available: 500 cannot allocate all claims."
    assert last.unschedulable_plugins == {"DynamicResources"}
    assert not core.cluster.assumed.pods and not core.cluster.assumed.claims


class _NoOrder(DynamicResources):
    node_order = None  # type: ignore[assignment]


def _full_scan_profile():
    plugins = [p for p in default_plugins() if not isinstance(p, DynamicResources)]
    return [*plugins, _NoOrder()]


def test_best_first_walk_equals_a_full_scan() -> None:
    rng = random.Random(3)
    for trial in range(6):
        objs: list[object] = [make_class()]
        for i in range(30):
            objs.append(make_node(f"n{i:02d}", cpu=str(rng.choice([1, 4, 8]))))
            objs.append(make_slice(f"n{i:02d}", rng.randint(0, 6)))
        fast = cluster(*objs)
        full = cluster(*objs, config=SchedulerConfig(percentage_of_nodes_to_score=100))
        full.profile = type(full.profile)(_full_scan_profile())
        for i in range(60):
            cpu = rng.choice(["100m", "1", "3"])
            shape = rng.choice(["one", "one", "two", "first-available"])
            if shape == "one":
                requests = [exact(count=rng.choice([1, 1, 2, 3]))]
            elif shape == "two":
                requests = [exact("a", count=rng.choice([1, 2])), exact("b")]
            else:
                requests = [first_available("r", ("big", "gpu", 3), ("mid", "gpu", 2), ("small", "gpu", 1))]
            pod, claim = pod_with_template_claim(f"t{trial}-p{i}", *requests, cpu=cpu)
            results = []
            for core in (fast, full):
                core.observe(claim)
                results.append(core.schedule(pod))
            a, b = results
            assert type(a) is type(b), (a, b)
            if isinstance(a, Reserved):
                assert isinstance(b, Reserved)
                assert a.node_name == b.node_name
                assert a.claims == b.claims
            else:
                assert isinstance(a, Unschedulable) and isinstance(b, Unschedulable)
                assert a.message == b.message


def test_precheck_never_rejects_what_the_allocator_accepts() -> None:
    rng = random.Random(11)
    models = ["a100", "h100", "l4"]
    outcomes = {"allocated": 0, "refused by precheck": 0, "refused by allocator": 0}
    for trial in range(60):
        count = rng.randint(0, 6)
        devices = [
            make_device(f"d{i}", model=rng.choice(models), numa=rng.randint(0, 1)) for i in range(count)
        ]
        core = cluster(
            make_class(),
            make_class("fast", selectors=['device.attributes["gpu.example.com"].model != "l4"']),
            make_node("n1"),
            make_slice("n1", devices),
        )
        if devices and rng.random() < 0.5:
            core.observe(with_status(make_claim("used"), make_allocation(devices[0].name, node="n1")))
        selectors = []
        if rng.random() < 0.5:
            selectors.append(f'device.attributes["gpu.example.com"].model == "{rng.choice(models)}"')
        request = exact(
            count=rng.randint(1, 3), device_class=rng.choice(["gpu", "fast"]), selectors=selectors
        )
        _, claim = pod_with_template_claim(f"p{trial}", request)
        core.observe(claim)
        node = core.cluster.nodes["n1"]
        slots = compile_slots([claim], core.cluster.classes)
        assert slots is not None
        estimate = precheck(core.cluster.devices, node, slots)
        state = core.cluster.allocated_state()
        results = Allocator(core.cluster.slice_snapshot(), core.cluster.classes, state).allocate(
            node.node, [claim]
        )
        if results is not None:
            assert estimate is not None, (devices, request)
            outcomes["allocated"] += 1
        elif estimate is None:
            outcomes["refused by precheck"] += 1
        else:
            outcomes["refused by allocator"] += 1
    assert outcomes["allocated"] > 5 and outcomes["refused by precheck"] > 5


def test_decisions_do_not_depend_on_observation_order() -> None:
    objs: list[object] = [make_class()]
    for i in range(12):
        objs += [make_node(f"n{i:02d}"), make_slice(f"n{i:02d}", 3)]
    pods = [pod_with_template_claim(f"p{i}") for i in range(20)]
    outcomes = []
    for order in (objs, list(reversed(objs))):
        core = cluster(*order)
        for _, claim in pods:
            core.observe(claim)
        picks = []
        for pod, _ in pods:
            result = core.schedule(pod)
            assert isinstance(result, Reserved)
            picks.append((result.node_name, msgspec.json.encode(result.claims[0].allocation)))
        outcomes.append(picks)
    assert outcomes[0] == outcomes[1]


def _match_claim(claim: ResourceClaim) -> ResourceClaim:
    """Two devices of one node (upstream's resourceclaimtemplate-for-two-devices)."""
    spec = claim.spec.devices
    request = spec.requests[0]
    assert request.exactly is not None
    two = msgspec.structs.replace(request, exactly=msgspec.structs.replace(request.exactly, count=2))
    constraint = DeviceConstraint(requests=(two.name,), match_attribute="gpu.example.com/host")
    devices = msgspec.structs.replace(spec, requests=(two,), constraints=(constraint,))
    return msgspec.structs.replace(claim, spec=msgspec.structs.replace(claim.spec, devices=devices))


@pytest.mark.parametrize("per_pod", [1, 2])
def test_nodes_looked_at_per_pod_do_not_grow_with_the_cluster(per_pod: int) -> None:
    """Half full, the next pods are decided after looking at the same few nodes on 40 and on
    1,000 nodes (the best-first walk stops at the first node passing every filter, which is the
    node a full scan would pick): the Filter work per pod is not linear in the cluster. One
    device a pod, and two with matchAttribute."""
    looked: dict[int, list[int]] = {}
    for nodes in (40, 1000):
        objs: list[object] = [make_class()]
        for n in range(nodes):
            objs += [make_node(f"node-{n:04d}"), make_slice(f"node-{n:04d}", 4, host=f"node-{n:04d}")]
        core = cluster(*objs)
        half = nodes * 4 // 2 // per_pod
        looked[nodes] = []
        for i in range(half + 30):
            pod, claim = pod_with_template_claim(f"p{i:05d}")
            if per_pod == 2:
                claim = _match_claim(claim)
            core.observe(claim)
            result = core.schedule(pod)
            assert isinstance(result, Reserved), result
            core.observe(prebind_claim(claim, result.claims[0]))
            core.observe(bound_to(pod, result.node_name))
            if i >= half:
                looked[nodes].append(result.evaluated_nodes)
    assert max(looked[1000]) <= 2 and looked[40] == looked[1000], looked
