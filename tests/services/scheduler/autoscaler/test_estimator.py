"""Cluster Autoscaler's estimate over the scheduler's own plugins (KEP-4381 "Simulation with CA"):
scale-up from an existing node and from a template, the DRA features the allocator has, and
scale-down. Pure: a Simulation over objects, no log."""

from __future__ import annotations

import pytest

from draflow.events.api.core_v1 import Pod
from draflow.services.scheduler.autoscaler import (
    CAPACITY_ANNOTATION,
    Estimate,
    NodeGroup,
    estimate,
    new_simulation,
    template_from_objects,
)
from draflow.services.scheduler.framework.simulation import Simulation
from tests.builders import (
    bound_to,
    make_allocation,
    make_claim,
    make_class,
    make_node,
    make_pod,
    make_slice,
    with_status,
)

pytestmark = pytest.mark.kep4381


def gpu_pod(i: int, prefix: str = "job") -> tuple[Pod, object]:
    """A pending pod with its own one-GPU claim."""
    name = f"{prefix}-{i:02d}"
    return make_pod(name, claims={"gpu": f"{name}-gpu"}), make_claim(f"{name}-gpu")


def full_cluster(nodes: int = 2, devices: int = 8) -> list[object]:
    """Nodes whose every GPU is held by a running pod."""
    objs: list[object] = [make_class()]
    for n in range(nodes):
        node = f"node-{n}"
        objs += [make_node(node), make_slice(node, devices)]
        for d in range(devices):
            pod = bound_to(make_pod(f"run-{n}-{d}", claims={"gpu": f"run-{n}-{d}-gpu"}), node)
            claim = make_claim(f"run-{n}-{d}-gpu")
            objs += [pod, with_status(claim, make_allocation(f"dev-{d}", node=node), [pod])]
    return objs


def _group(sim: Simulation, name: str, node: str, max_nodes: int | None = None) -> NodeGroup:
    cluster = sim.cluster
    template = template_from_objects(cluster.nodes[node].node, cluster.slices.values(), node)
    return NodeGroup(name, template, max_nodes)


def test_scale_up_from_an_existing_node_twelve_pods_two_new_nodes() -> None:
    pending = [gpu_pod(i) for i in range(12)]
    sim = new_simulation([*full_cluster(), *(o for pair in pending for o in pair)])
    group = _group(sim, "gpu", "node-0")
    result = estimate(sim, [p for p, _ in pending], [group])
    assert result.fits
    assert result.node_groups["gpu"].new_nodes == 2
    assert result.node_groups["gpu"].nodes == ("gpu-1", "gpu-2")
    nodes = [p.node for p in result.pods]
    assert nodes == ["gpu-1"] * 8 + ["gpu-2"] * 4
    assert all(p.new_node and p.node_group == "gpu" for p in result.pods)
    # every pod got its own device of its new node's pool
    devices = {(p.node, d.pool, d.device) for p in result.pods for d in p.devices}
    assert len(devices) == 12
    assert all(pool == node for node, pool, _ in devices)
    new = sim.cluster.nodes["gpu-1"].node
    assert new.metadata.annotations[CAPACITY_ANNOTATION] == "node-0"
    assert new.metadata.labels["kubernetes.io/hostname"] == "gpu-1"


def test_group_maximum_leaves_the_rest_pending_with_the_reason() -> None:
    pending = [gpu_pod(i) for i in range(12)]
    sim = new_simulation([*full_cluster(), *(o for pair in pending for o in pair)])
    result = estimate(sim, [p for p, _ in pending], [_group(sim, "gpu", "node-0", max_nodes=1)])
    assert not result.fits
    placed = [p for p in result.pods if p.node is not None]
    assert len(placed) == 8
    left = result.pods[8]
    assert left.reason == "0/3 nodes are available: 3 cannot allocate all claims."
    assert left.node_group_reasons == {"gpu": "node group gpu reached its maximum of 1 nodes"}


def test_pods_fill_existing_room_before_a_node_is_opened() -> None:
    objs = full_cluster(nodes=1)
    objs.append(make_node("node-free"))
    objs.append(make_slice("node-free", 2))
    pending = [gpu_pod(i) for i in range(3)]
    sim = new_simulation([*objs, *(o for pair in pending for o in pair)])
    result = estimate(sim, [p for p, _ in pending], [_group(sim, "gpu", "node-0")])
    assert [p.node for p in result.pods] == ["node-free", "node-free", "gpu-1"]
    assert [p.new_node for p in result.pods] == [False, False, True]
    assert result.node_groups["gpu"].new_nodes == 1


def test_same_input_same_answer() -> None:
    def run() -> Estimate:
        pending = [gpu_pod(i) for i in range(12)]
        sim = new_simulation([*full_cluster(), *(o for pair in pending for o in pair)])
        return estimate(sim, [p for p, _ in pending], [_group(sim, "gpu", "node-1")])

    import msgspec

    assert msgspec.json.encode(run()) == msgspec.json.encode(run())
