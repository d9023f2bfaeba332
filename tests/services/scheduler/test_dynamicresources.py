"""The DynamicResources plugin: claim resolution, PreFilter/Filter messages, PostFilter, Score,
Reserve and the PreBind data."""

from __future__ import annotations

import msgspec
import pytest

from draflow.events.api.meta import ObjectMeta
from draflow.events.api.resource_v1 import DeviceConstraint
from draflow.services.dra.resourceclaim import resolve_claims
from draflow.services.scheduler.framework import Reserved, SchedulingError, Unschedulable
from draflow.services.scheduler.plugins.dynamicresources import DynamicResources
from tests.builders import (
    bound_to,
    exact,
    first_available,
    make_allocation,
    make_claim,
    make_class,
    make_device,
    make_node,
    make_node_selector,
    make_pod,
    make_slice,
    pod_with_template_claim,
    with_status,
)
from tests.builders.scheduler import cluster, gpu_cluster, results_of

pytestmark = pytest.mark.kep4381


def _pre_enqueue(core, pod):
    return core.profile.plugin("DynamicResources").pre_enqueue(pod, core.cluster)


def test_pre_enqueue_reasons() -> None:
    core = gpu_cluster(1)
    pod, claim = pod_with_template_claim("p")
    assert _pre_enqueue(core, pod).message == 'could not find ResourceClaim "default/p-gpu"'
    not_created = make_pod("q", template_claims={}, statuses={})
    not_created = msgspec.structs.replace(
        not_created, spec=msgspec.structs.replace(not_created.spec, resource_claims=pod.spec.resource_claims)
    )
    assert _pre_enqueue(core, not_created).message == 'pod "default/q": ResourceClaim not created yet'
    stranger = make_claim("p-gpu", owner=make_pod("someone-else"))
    core.observe(stranger)
    assert _pre_enqueue(core, pod).message == (
        "ResourceClaim default/p-gpu was not created for pod default/p (pod is not owner)"
    )
    core.observe(claim)
    assert _pre_enqueue(core, pod) is None
    deleting = msgspec.structs.replace(
        claim, metadata=msgspec.structs.replace(claim.metadata, deletion_timestamp="2026-01-01T00:00:00Z")
    )
    core.observe(deleting)
    assert _pre_enqueue(core, pod).message == 'resourceclaim "p-gpu" is being deleted'


def test_template_claim_not_needed_is_skipped() -> None:
    core = gpu_cluster(1)
    pod = make_pod("p", template_claims={"gpu": "gpu-template"}, statuses={"gpu": None})
    assert resolve_claims(pod, core.cluster) == []
    result = core.schedule(pod)
    assert isinstance(result, Reserved) and result.claims == ()


def test_missing_class_is_a_prefilter_rejection() -> None:
    pod, claim = pod_with_template_claim("p", exact(device_class="tpu"))
    core = gpu_cluster(3)
    core.observe(claim)
    result = core.schedule(pod)
    assert isinstance(result, Unschedulable)
    assert result.message == "0/3 nodes are available: request gpu: device class tpu does not exist."
    assert result.unschedulable_plugins == {"DynamicResources"}


def test_first_available_missing_class_names_the_subrequest() -> None:
    pod, claim = pod_with_template_claim("p", first_available("gpu", ("big", "gpu", 2), ("small", "tpu", 1)))
    core = gpu_cluster(1)
    core.observe(claim)
    result = core.schedule(pod)
    assert isinstance(result, Unschedulable)
    assert result.pre_filter_message == "request gpu/small: device class tpu does not exist"


def test_shared_claim_in_flight_for_another_pod() -> None:
    core = gpu_cluster(2)
    shared = make_claim("shared")
    core.observe(shared)
    a = make_pod("a", claims={"gpu": "shared"})
    b = make_pod("b", claims={"gpu": "shared"})
    first = core.schedule(a)
    assert isinstance(first, Reserved)
    second = core.schedule(b)
    assert isinstance(second, Unschedulable)
    assert second.pre_filter_message == "resource claim default/shared is in the process of being allocated"
    # Once the allocation is written, b follows the claim to its node.
    core.observe(with_status(shared, first.claims[0].allocation, [a]))
    third = core.schedule(b)
    assert isinstance(third, Reserved) and third.node_name == first.node_name
    assert third.claims[0].allocation is None  # only reservedFor to add


def test_reserved_for_full_means_in_use() -> None:
    core = gpu_cluster(1)
    pods = [make_pod(f"u{i}") for i in range(256)]
    core.observe(with_status(make_claim("busy"), make_allocation("dev-0", node="node-000"), pods))
    result = core.schedule(make_pod("late", claims={"gpu": "busy"}))
    assert isinstance(result, Unschedulable) and result.pre_filter_message == "resourceclaim in use"


def test_allocated_claim_pins_the_node() -> None:
    core = gpu_cluster(3)
    claim = with_status(make_claim("c"), make_allocation("dev-3", node="node-002"))
    core.observe(claim)
    result = core.schedule(make_pod("p", claims={"gpu": "c"}))
    assert isinstance(result, Reserved) and result.node_name == "node-002"
    (binding,) = result.claims
    assert binding.allocation is None
    assert (binding.consumer.resource, binding.consumer.name, binding.consumer.uid) == (
        "pods",
        "p",
        "uid-p",
    )


def test_post_filter_deallocates_a_claim_allocated_where_the_pod_cannot_run() -> None:
    # Claim "c" is allocated on node-001, but the pod needs more cpu than node-001 has.
    core = cluster(
        make_class(),
        make_node("node-000", cpu="8"),
        make_slice("node-000", 4),
        make_node("node-001", cpu="1"),
        make_slice("node-001", 4),
    )
    stale = with_status(make_claim("a-stale"), make_allocation("dev-0", node="node-001"))
    busy = with_status(make_claim("b-busy"), make_allocation("dev-1", node="node-001"), [make_pod("other")])
    core.observe(stale)
    core.observe(busy)
    pod = make_pod("p", cpu="4", claims={"first": "b-busy", "second": "a-stale"})
    result = core.schedule(pod)
    assert isinstance(result, Unschedulable)
    assert result.message == (
        "0/2 nodes are available: 1 Insufficient cpu, 1 resourceclaim not available on the node."
    )
    # b-busy is reserved by another pod; a-stale is free to move: deterministic pick.
    assert result.deallocate is not None and result.deallocate.name == "a-stale"
    assert result.post_filter_message == "deallocation of ResourceClaim default/a-stale requested"


def test_post_filter_without_candidates() -> None:
    core = gpu_cluster(1, cpu="1")
    busy = with_status(make_claim("busy"), make_allocation("dev-0", node="node-000"), [make_pod("other")])
    core.observe(busy)
    result = core.schedule(make_pod("p", cpu="2", claims={"gpu": "busy"}))
    assert isinstance(result, Unschedulable)
    assert result.deallocate is None
    assert result.post_filter_message == "still not schedulable"
    plain = core.schedule(make_pod("q", cpu="2"))
    assert isinstance(plain, Unschedulable) and plain.deallocate is None


def test_bin_packing_keeps_room_for_big_requests() -> None:
    # Two nodes with 4 devices each: a 1-device pod, then a 4-device pod must still fit.
    for first_name in ("a", "b", "c", "d", "e", "f"):
        core = gpu_cluster(2, 4)
        small, small_claim = pod_with_template_claim(first_name)
        big, big_claim = pod_with_template_claim("big", exact(count=4))
        core.observe(small_claim)
        core.observe(big_claim)
        first = core.schedule(small)
        second = core.schedule(big)
        assert isinstance(first, Reserved) and isinstance(second, Reserved)
        assert first.node_name != second.node_name


def test_score_prefers_the_fuller_node() -> None:
    core = gpu_cluster(3, 4)
    used = with_status(make_claim("used"), make_allocation("dev-0", "dev-1", node="node-001"))
    core.observe(used)
    for i in range(2):
        pod, claim = pod_with_template_claim(f"p{i}")
        core.observe(claim)
        result = core.schedule(pod)
        assert isinstance(result, Reserved) and result.node_name == "node-001"


def test_prioritized_list_beats_bin_packing() -> None:
    core = gpu_cluster(2, 2)
    core.observe(with_status(make_claim("used"), make_allocation("dev-0", node="node-000")))
    pod, claim = pod_with_template_claim("p", first_available("gpu", ("pair", "gpu", 2), ("one", "gpu", 1)))
    core.observe(claim)
    result = core.schedule(pod)
    assert isinstance(result, Reserved) and result.node_name == "node-001"
    assert [r.request for r in results_of(result.claims[0])] == ["gpu/pair", "gpu/pair"]


def test_request_selectors_narrow_the_precheck_and_the_allocation() -> None:
    devices = [make_device(f"dev-{i}", model="h100" if i == 3 else "a100") for i in range(4)]
    core = cluster(
        make_class(),
        make_node("n1"),
        make_slice("n1", devices),
        make_node("n2"),
        make_slice("n2", 4, model="a100"),
    )
    sel = 'device.attributes["gpu.example.com"].model == "h100"'
    pod, claim = pod_with_template_claim("p", exact(selectors=[sel]))
    core.observe(claim)
    result = core.schedule(pod)
    assert isinstance(result, Reserved) and result.node_name == "n1"
    assert results_of(result.claims[0])[0].device == "dev-3"
    pod2, claim2 = pod_with_template_claim("q", exact(selectors=[sel]))
    core.observe(claim2)
    result = core.schedule(pod2)
    assert isinstance(result, Unschedulable)
    assert result.message == "0/2 nodes are available: 2 cannot allocate all claims."


def test_constraint_failure_is_cached_per_node_until_room_comes_back() -> None:
    # Devices differ in numa; a 2-device claim with matchAttribute numa cannot fit (precheck
    # passes: it ignores constraints), so the allocator decides and the answer is cached.
    devices = [make_device(f"dev-{i}", numa=i) for i in range(3)]
    core = cluster(make_class(), make_node("n1"), make_slice("n1", devices))
    constraint = DeviceConstraint(requests=("gpu",), match_attribute="gpu.example.com/numa")
    plugin = core.profile.plugin("DynamicResources")
    assert isinstance(plugin, DynamicResources)
    for name in ("p", "q"):
        pod = make_pod(name, template_claims={"gpu": "gpu-template"}, statuses={"gpu": f"{name}-gpu"})
        core.observe(make_claim(f"{name}-gpu", exact(count=2), owner=pod, constraints=[constraint]))
        result = core.schedule(pod)
        assert isinstance(result, Unschedulable)
        assert result.message == "0/1 nodes are available: 1 cannot allocate all claims."
    assert len(plugin._negative) == 1  # the same spec on the same node: one entry, reused
    (entry,) = plugin._negative.values()
    stamp = entry.stamp
    assert stamp == core.cluster.devices.release_stamp("n1")
    # the second pod's diagnosis came from the cached verdict, named after its own claim
    assert isinstance(result, Unschedulable)
    assert [x.claim for x in result.requests] == ["default/q-gpu"]
    core.observe(make_claim("z", allocation=make_allocation("dev-0", node="n1", pool="n1")))
    core.observe_deleted("ResourceClaim", "default", "z")  # a release on n1
    assert core.cluster.devices.release_stamp("n1") != stamp


def test_cel_runtime_error_is_a_scheduling_error() -> None:
    core = gpu_cluster(1)
    pod, claim = pod_with_template_claim(
        "p", exact(selectors=['device.attributes["gpu.example.com"].nope == 1'])
    )
    core.observe(claim)
    result = core.schedule(pod)
    assert isinstance(result, SchedulingError)
    assert "no such key: nope" in result.message
    assert result.plugin == "DynamicResources"


def test_all_mode_needs_every_matching_device_free() -> None:
    core = gpu_cluster(2, 3)
    core.observe(with_status(make_claim("used"), make_allocation("dev-1", node="node-000")))
    pod, claim = pod_with_template_claim("p", exact(mode="All"))
    core.observe(claim)
    result = core.schedule(pod)
    assert isinstance(result, Reserved) and result.node_name == "node-001"
    assert len(results_of(result.claims[0])) == 3
    again, claim2 = pod_with_template_claim("q", exact(mode="All"))
    core.observe(claim2)
    assert isinstance(core.schedule(again), Unschedulable)


def test_admin_access_ignores_usage() -> None:
    core = gpu_cluster(1, 1)
    core.observe(with_status(make_claim("used"), make_allocation("dev-0", node="node-000")))
    pod, claim = pod_with_template_claim("p", exact(admin=True))
    core.observe(claim)
    result = core.schedule(pod)
    assert isinstance(result, Reserved)
    assert results_of(result.claims[0])[0].admin_access is True


def test_network_attached_devices_by_node_selector() -> None:
    shared = make_slice(
        None, 2, pool="fabric", name="fabric", node_selector=make_node_selector(("rack", "In", ("r1",)))
    )
    core = cluster(
        make_class(),
        make_node("a", labels={"rack": "r2"}),
        make_node("b", labels={"rack": "r1"}),
        shared,
    )
    for name in ("p", "q"):
        pod, claim = pod_with_template_claim(name)
        core.observe(claim)
        result = core.schedule(pod)
        assert isinstance(result, Reserved) and result.node_name == "b"
    pod, claim = pod_with_template_claim("r")
    core.observe(claim)
    assert isinstance(core.schedule(pod), Unschedulable)


def test_reserved_decision_data_for_prebind() -> None:
    core = gpu_cluster(1)
    pod = make_pod(
        "p", claims={"mine": "pre"}, template_claims={"gpu": "gpu-template"}, statuses={"gpu": "p-gpu"}
    )
    core.observe(make_claim("p-gpu", exact(count=2), owner=pod))
    core.observe(with_status(make_claim("pre"), make_allocation("dev-9", node="node-000"), [pod]))
    result = core.schedule(pod)
    assert isinstance(result, Reserved)
    # "pre" is reserved for the pod already: listed with nothing to allocate (the saga checks
    # who reserved it before relying on it: another scheduler instance's attempt may have)
    binding, pre = sorted(result.claims, key=lambda b: b.claim.name)
    assert str(pre.claim) == "default/pre" and pre.allocation is None and pre.consumer.uid == pod.metadata.uid
    assert str(binding.claim) == "default/p-gpu" and binding.claim.uid == "uid-p-gpu"
    assert [r.device for r in results_of(binding)] == ["dev-0", "dev-1"]
    assert binding.allocation is not None and binding.allocation.node_selector is not None


def test_claim_in_other_namespace_is_not_visible() -> None:
    core = gpu_cluster(1)
    core.observe(make_claim("c", namespace="other"))
    pod = make_pod("p", claims={"gpu": "c"})
    result = core.schedule(pod)
    assert isinstance(result, Unschedulable)
    assert result.pre_filter_message == 'could not find ResourceClaim "default/c"'


def test_unknown_object_kinds_are_ignored() -> None:
    core = gpu_cluster(1)
    core.observe(ObjectMeta(name="x"))
    core.observe_deleted("Namespace", "", "x")
    assert len(core.cluster.nodes) == 1


def test_allocator_step_budget_is_a_node_rejection() -> None:
    from draflow.services.scheduler.framework import SchedulerConfig

    core = gpu_cluster(2, 10, config=SchedulerConfig(allocator_max_steps=2))
    pod, claim = pod_with_template_claim("p", exact(count=5))
    core.observe(claim)
    result = core.schedule(pod)
    assert isinstance(result, Unschedulable)
    assert result.message == "0/2 nodes are available: 2 timed out trying to allocate devices."


def test_device_taint_rules_and_tolerations() -> None:
    from draflow.events.api.resource_v1 import (
        DeviceTaint,
        DeviceTaintRule,
        DeviceTaintRuleSpec,
        DeviceTaintSelector,
        DeviceToleration,
    )

    core = gpu_cluster(1, 1)
    rule = DeviceTaintRule(
        metadata=ObjectMeta(name="maintenance"),
        spec=DeviceTaintRuleSpec(
            device_selector=DeviceTaintSelector(driver="gpu.example.com", pool="node-000"),
            taint=DeviceTaint(key="maintenance", effect="NoSchedule"),
        ),
    )
    core.observe(rule)
    pod, claim = pod_with_template_claim("p")
    core.observe(claim)
    core.observe(pod)
    result = core.schedule_next()
    assert result is not None and isinstance(result[1], Unschedulable)
    assert result[1].message == "0/1 nodes are available: 1 cannot allocate all claims."
    core.queue.clock = lambda: 1000.0
    core.observe_deleted("DeviceTaintRule", "", "maintenance")  # the taint goes: the pod moves
    step = core.schedule_next()
    assert step is not None and isinstance(step[1], Reserved)
    base = exact()
    assert base.exactly is not None
    toleration = DeviceToleration(operator="Exists")
    tolerant = msgspec.structs.replace(
        base, exactly=msgspec.structs.replace(base.exactly, tolerations=(toleration,))
    )
    core2 = gpu_cluster(1, 1)
    core2.observe(rule)
    pod2, claim2 = pod_with_template_claim("q", tolerant)
    core2.observe(claim2)
    assert isinstance(core2.schedule(pod2), Reserved)


def test_slice_changes_reach_the_index() -> None:
    core = gpu_cluster(2, 1)
    first = [pod_with_template_claim(f"p{i}") for i in range(3)]
    for pod, claim in first[:2]:
        core.observe(claim)
        assert isinstance(core.schedule(pod), Reserved)
    pod, claim = first[2]
    core.observe(claim)
    assert isinstance(core.schedule(pod), Unschedulable)
    core.observe(make_slice("node-001", 3))  # the driver published more devices on node-001
    result = core.schedule(pod)
    assert isinstance(result, Reserved) and result.node_name == "node-001"
    core.observe_deleted("ResourceSlice", "", "node-001-gpu.example.com")
    late, late_claim = pod_with_template_claim("late")
    core.observe(late_claim)
    assert isinstance(core.schedule(late), Unschedulable)


def test_node_removed_and_added_back_keeps_its_pods() -> None:

    core = cluster(make_node("n1", cpu="2"), bound_to(make_pod("x", cpu="1500m"), "n1"))
    core.observe_deleted("Node", "", "n1")
    core.observe(make_node("n1", cpu="2"))
    result = core.schedule(make_pod("p", cpu="1"))
    assert isinstance(result, Unschedulable)
    assert result.message == "0/1 nodes are available: 1 Insufficient cpu."
