"""The per-request diagnosis of an unschedulable pod (issue 26): which request failed where and
why, next to kube-scheduler's unchanged message; and allocator errors reported as errors."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from draflow.events.api.resource_v1 import DeviceConstraint, DeviceRequest
from draflow.services.scheduler.framework import Scheduler, SchedulingError, Unschedulable
from draflow.services.scheduler.plugins.dynamicresources.indexed import indexed_precheck
from draflow.services.scheduler.plugins.dynamicresources.precheck import compile_slots, index_diagnosis
from draflow.services.scheduler.service.runner import diagnosis_event
from tests.builders import (
    exact,
    first_available,
    make_claim,
    make_class,
    make_container,
    make_device,
    make_node,
    make_pod,
    make_slice,
    pod_with_template_claim,
)
from tests.builders.scheduler import cluster, gpu_cluster

pytestmark = pytest.mark.kep4381

NO_MATCH = 'device.attributes["gpu.example.com"].index == 99'


def _unschedulable(
    core: Scheduler, *requests: DeviceRequest, constraints: Sequence[DeviceConstraint] = ()
) -> Unschedulable:
    pod = make_pod("p", template_claims={"gpu": "gpu-template"}, statuses={"gpu": "p-gpu"})
    core.observe(make_claim("p-gpu", *requests, owner=pod, constraints=constraints))
    result = core.schedule(pod)
    assert isinstance(result, Unschedulable), result
    return result


def test_selector_matching_nothing_and_too_many_gpus_are_told_apart() -> None:
    selector = _unschedulable(gpu_cluster(4, 8), exact(selectors=[NO_MATCH]))
    too_many = _unschedulable(gpu_cluster(4, 8), exact(count=12))
    # upstream's message is unchanged: on its own it cannot tell the two apart
    assert selector.message == too_many.message == "0/4 nodes are available: 4 cannot allocate all claims."
    (a,) = selector.requests
    (b,) = too_many.requests
    assert (a.claim, a.request, a.nodes, a.node_names[:2]) == (
        "default/p-gpu",
        "gpu",
        4,
        ("node-000", "node-001"),
    )
    assert (a.class_matched, a.selected, a.asked) == (8, 0, 1)
    assert a.outcome == "the request's selectors match none of the 8 devices of the class"
    assert (b.class_matched, b.selected, b.usable, b.asked, b.found) == (8, 8, 8, 12, 8)
    assert b.outcome == "too few devices: 8 usable, 12 asked"
    assert a != b
    # the event carries it
    assert diagnosis_event(too_many).requests == too_many.requests


def test_allocated_devices_are_named_as_the_eliminator() -> None:
    core = gpu_cluster(1, 4)
    first = make_pod("a", template_claims={"gpu": "gpu-template"}, statuses={"gpu": "a-gpu"})
    core.observe(make_claim("a-gpu", exact(count=3), owner=first))
    assert not isinstance(core.schedule(first), Unschedulable)
    (line,) = _unschedulable(core, exact(count=2)).requests
    assert [(e.reason, e.devices) for e in line.eliminated] == [("allocated", 3)]
    assert (line.usable, line.outcome) == (1, "too few devices: 1 usable, 2 asked")


def test_match_attribute_comes_from_the_allocator() -> None:
    """The precheck passes (it ignores constraints); the allocator's search says which one."""
    devices = [make_device(f"dev-{i}", numa=i) for i in range(3)]
    core = cluster(make_class(), make_node("n1"), make_slice("n1", devices))
    constraint = DeviceConstraint(requests=("gpu",), match_attribute="gpu.example.com/numa")
    (line,) = _unschedulable(core, exact(count=2), constraints=[constraint]).requests
    assert line.source == "allocator"
    assert line.outcome == "matchAttribute gpu.example.com/numa: at most 1 of 2 devices satisfy it together"


def test_first_available_lists_every_subrequest() -> None:
    result = _unschedulable(
        gpu_cluster(2, 8), first_available("gpu", ("large", "gpu", 12), ("medium", "gpu", 9))
    )
    assert [(x.request, x.asked, x.outcome, x.nodes) for x in result.requests] == [
        ("gpu/large", 12, "too few devices: 8 usable, 12 asked", 2),
        ("gpu/medium", 9, "too few devices: 8 usable, 9 asked", 2),
    ]


def test_over_the_claim_limit_is_an_error_with_the_allocators_message() -> None:
    """Upstream's allocator refuses the claim on every node; its Filter turns that into an error
    that aborts the attempt (the FailedScheduling message), not "cannot allocate all claims"."""
    core = gpu_cluster(2, 8)
    pod, claim = pod_with_template_claim("p", exact(count=40))
    core.observe(claim)
    result = core.schedule(pod)
    assert isinstance(result, SchedulingError)
    assert result.message == (
        'running "DynamicResources" filter plugin: '
        "claim default/p-gpu: number of requested devices 40 exceeds the claim limit of 32"
    )
    event = diagnosis_event(result)
    assert event.reason == "SchedulerError" and event.message == result.message


def test_the_claim_limit_error_waits_for_a_node_passing_the_other_filters() -> None:
    """As upstream: the DRA Filter only runs on nodes the earlier filters let through."""
    core = gpu_cluster(2, 8, cpu="1")
    big = make_container(requests={"cpu": "4"}, claims=["gpu"])
    pod = make_pod("p", containers=[big], template_claims={"gpu": "gpu-template"}, statuses={"gpu": "p-gpu"})
    core.observe(make_claim("p-gpu", exact(count=40), owner=pod))
    result = core.schedule(pod)
    assert isinstance(result, Unschedulable)
    assert result.message == "0/2 nodes are available: 2 Insufficient cpu."


def test_index_lines_from_the_best_fit_lists_equal_the_entries() -> None:
    """The fast path (the precheck's per-node lists) and the general one give the same lines."""
    core = gpu_cluster(3, 4)
    first = make_pod("a", template_claims={"gpu": "gpu-template"}, statuses={"gpu": "a-gpu"})
    core.observe(make_claim("a-gpu", exact(count=3), owner=first))
    assert not isinstance(core.schedule(first), Unschedulable)
    cluster = core.cluster
    slots = compile_slots([make_claim("c", exact(count=5))], cluster.classes)
    assert slots is not None
    indexed = indexed_precheck(cluster, slots)
    assert indexed is not None
    nodes = cluster.node_list()
    fast = index_diagnosis(cluster.devices, nodes, slots, indexed.orders)
    slow = index_diagnosis(cluster.devices, nodes, slots)
    assert sorted(fast, key=repr) == sorted(slow, key=repr)
    assert sorted((x.usable, x.nodes) for x in fast) == [(1, 1), (4, 2)]
