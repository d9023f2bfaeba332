"""The estimate with every DRA feature the allocator has (prioritized lists, matchAttribute
constraints, admin access, partitionable devices' counters, shared claims, extended resources
backed by DRA) and scale-down, on the scheduler's own plugins. Pure: no log."""

from __future__ import annotations

import msgspec
import pytest

from draflow.events.api.core_v1 import Pod
from draflow.events.api.resource_v1 import (
    Counter,
    CounterSet,
    Device,
    DeviceAttribute,
    DeviceConstraint,
    DeviceCounterConsumption,
    ResourceSlice,
)
from draflow.services.dra.extended import EXTENDED_RESOURCE_CLAIM_ANNOTATION
from draflow.services.scheduler.autoscaler import (
    NodeGroup,
    NodeTemplate,
    estimate,
    new_simulation,
    template_from_objects,
)
from draflow.services.scheduler.framework.simulation import Simulation
from tests.builders import (
    DRIVER,
    bound_to,
    exact,
    first_available,
    make_allocation,
    make_claim,
    make_class,
    make_device,
    make_node,
    make_pod,
    make_slice,
    with_status,
)
from tests.services.scheduler.autoscaler.test_estimator import full_cluster, gpu_pod

pytestmark = pytest.mark.kep4381


def group_of(sim: Simulation, node: str, name: str = "gpu") -> NodeGroup:
    cluster = sim.cluster
    return NodeGroup(name, template_from_objects(cluster.nodes[node].node, cluster.slices.values(), node))


def scale_from_zero(slc: ResourceSlice | list[ResourceSlice], name: str = "gpu") -> NodeGroup:
    """A group from a template node nobody runs (its slices name it as their node)."""
    slices = slc if isinstance(slc, list) else [slc]
    return NodeGroup(name, template_from_objects(make_node("template"), slices, "template.yaml"))


def test_prioritized_list_takes_the_subrequest_the_new_node_has() -> None:
    objs = [
        make_class(
            "a100",
            selectors=[f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].model == "a100"'],
        ),
        make_class(
            "t4", selectors=[f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].model == "t4"']
        ),
    ]
    claim = make_claim("c", first_available("gpu", ("big", "a100", 1), ("small", "t4", 1)))
    pod = make_pod("p", claims={"gpu": "c"})
    sim = new_simulation([*objs, claim, pod])
    group = scale_from_zero(make_slice("template", 2, model="t4"))
    result = estimate(sim, [pod], [group])
    (placed,) = result.pods
    assert placed.node == "gpu-1"
    assert [(d.request, d.pool, d.device) for d in placed.devices] == [("gpu/small", "gpu-1", "dev-0")]


def test_match_attribute_constraint_packs_two_pods_per_numa_node() -> None:
    numa = DeviceConstraint(requests=("a", "b"), match_attribute=f"{DRIVER}/numa")
    devices = [make_device(f"dev-{i}", numa=i // 2) for i in range(4)]
    pods = []
    objs: list[object] = [make_class()]
    for i in range(4):
        claim = make_claim(f"c{i}", exact("a"), exact("b"), constraints=[numa])
        pod = make_pod(f"p{i}", claims={"gpu": f"c{i}"})
        objs += [claim, pod]
        pods.append(pod)
    sim = new_simulation(objs)
    result = estimate(sim, pods, [scale_from_zero(make_slice("template", devices))])
    assert result.node_groups["gpu"].new_nodes == 2
    for p in result.pods:
        a, b = p.devices
        assert {a.device, b.device} in ({"dev-0", "dev-1"}, {"dev-2", "dev-3"})


def test_admin_access_needs_no_new_node_on_a_full_cluster() -> None:
    claim = make_claim("admin", exact(admin=True))
    pod = make_pod("monitor", claims={"gpu": "admin"})
    sim = new_simulation([*full_cluster(nodes=1), claim, pod])
    result = estimate(sim, [pod], [group_of(sim, "node-0")])
    (placed,) = result.pods
    assert placed.node == "node-0" and not placed.new_node
    assert placed.devices[0].admin_access
    assert result.node_groups["gpu"].new_nodes == 0


def _partitioned() -> list[ResourceSlice]:
    """One GPU with 8 memory counters (in a slice of their own, as the API wants them): the whole
    GPU uses 8, each half 4."""

    def dev(name: str, size: str, memory: int) -> Device:
        uses = DeviceCounterConsumption(counter_set="gpu-0", counters={"mem": Counter(value=str(memory))})
        return Device(name=name, attributes={"size": DeviceAttribute(string=size)}, consumes_counters=(uses,))

    devices = [dev("whole", "whole", 8), dev("half-0", "half", 4), dev("half-1", "half", 4)]
    counters = make_slice("template", [], name="template-counters", count=2)
    spec = msgspec.structs.replace(
        counters.spec, shared_counters=(CounterSet(name="gpu-0", counters={"mem": Counter(value="8")}),)
    )
    return [
        make_slice("template", devices, name="template-devices", count=2),
        msgspec.structs.replace(counters, spec=spec),
    ]


def test_counters_of_partitionable_devices_are_not_double_booked() -> None:
    def size_claim(name: str, size: str) -> object:
        return make_claim(name, exact(selectors=[f'device.attributes["{DRIVER}"].size == "{size}"']))

    objs: list[object] = [make_class()]
    pods: list[Pod] = []
    for name, size in (("h1", "half"), ("h2", "half"), ("w", "whole"), ("h3", "half")):
        pods.append(make_pod(name, claims={"gpu": name}))
        objs += [size_claim(name, size), pods[-1]]
    sim = new_simulation(objs)
    result = estimate(sim, pods, [scale_from_zero(_partitioned())])
    got = [(p.name, p.node, p.devices[0].device) for p in result.pods]
    assert got == [
        ("h1", "gpu-1", "half-0"),
        ("h2", "gpu-1", "half-1"),
        ("w", "gpu-2", "whole"),
        ("h3", "gpu-3", "half-0"),
    ]


def test_a_shared_claim_is_allocated_once_for_both_pods() -> None:
    claim = make_claim("shared")
    pods = [make_pod(f"p{i}", claims={"gpu": "shared"}) for i in range(2)]
    sim = new_simulation([*full_cluster(nodes=1), claim, *pods])
    result = estimate(sim, pods, [group_of(sim, "node-0")])
    assert [p.node for p in result.pods] == ["gpu-1", "gpu-1"]
    assert result.pods[0].devices == result.pods[1].devices
    stored = sim.cluster.claim("default", "shared")
    assert stored is not None and [r.name for r in stored.status.reserved_for] == ["p0", "p1"]
    assert result.node_groups["gpu"].new_nodes == 1


def test_extended_resource_pods_get_a_special_claim_on_new_nodes() -> None:
    objs = [*full_cluster(nodes=1)]
    objs[0] = make_class(extended_resource_name="example.com/gpu")
    pods = [make_pod(f"ext-{i}", requests={"example.com/gpu": "1"}) for i in range(10)]
    sim = new_simulation([*objs, *pods])
    result = estimate(sim, pods, [group_of(sim, "node-0")])
    assert result.fits
    assert result.node_groups["gpu"].new_nodes == 2
    assert [p.node for p in result.pods] == ["gpu-1"] * 8 + ["gpu-2"] * 2
    first = result.pods[0]
    assert first.devices[0].claim.startswith("ext-0-extended-resources-")
    special = sim.cluster.claim("default", first.devices[0].claim)
    assert special is not None and special.metadata.annotations[EXTENDED_RESOURCE_CLAIM_ANNOTATION] == "true"


def test_extended_resource_pod_without_a_mapping_fits_nowhere() -> None:
    pod = make_pod("ext", requests={"example.com/gpu": "1"})
    sim = new_simulation([*full_cluster(nodes=1), pod])
    result = estimate(sim, [pod], [group_of(sim, "node-0")])
    assert not result.fits
    assert result.pods[0].reason == "0/1 nodes are available: 1 Insufficient example.com/gpu."
    assert result.pods[0].node_group_reasons == {"gpu": "Insufficient example.com/gpu"}


# -- scale-down ---------------------------------------------------------------------------------------


def _running(
    name: str, node: str, device: str, claim: str | None = None, consumers: tuple[Pod, ...] = ()
) -> list[object]:
    pod = bound_to(make_pod(name, claims={"gpu": claim or f"{name}-gpu"}), node)
    if claim is not None:
        return [pod]
    c = make_claim(f"{name}-gpu")
    return [pod, with_status(c, make_allocation(device, node=node), [pod])]


def test_remove_node_moves_its_pods_where_there_is_room() -> None:
    objs: list[object] = [
        make_class(),
        make_node("node-a"),
        make_slice("node-a", 2),
        make_node("node-b"),
        make_slice("node-b", 2),
    ]
    objs += _running("a", "node-a", "dev-0")
    sim = new_simulation(objs)
    result = estimate(sim, [], [], remove=["node-a"])
    assert result.fits
    (move,) = result.remove_nodes["node-a"].moves
    assert (move.name, move.node) == ("a", "node-b")
    assert move.devices[0].pool == "node-b"
    assert "node-a" not in sim.cluster.nodes


def test_a_node_that_cannot_go_is_left_as_it_was() -> None:
    objs: list[object] = [
        make_class(),
        make_node("node-a"),
        make_slice("node-a", 1),
        make_node("node-b"),
        make_slice("node-b", 1),
    ]
    objs += _running("a", "node-a", "dev-0") + _running("b", "node-b", "dev-0")
    pending, claim = gpu_pod(0)
    sim = new_simulation([*objs, pending, claim])
    result = estimate(sim, [pending], [], remove=["node-a"])
    assert not result.fits
    removal = result.remove_nodes["node-a"]
    assert not removal.removable
    assert removal.moves[0].reason == "0/1 nodes are available: 1 cannot allocate all claims."
    # reverted: node-a and its pod's allocation are back, so the pending pod still finds no room
    assert "node-a" in sim.cluster.nodes
    back = sim.cluster.claim("default", "a-gpu")
    assert back is not None and back.status.allocation is not None
    assert result.pods[0].node is None


def test_a_node_whose_pod_shares_a_network_claim_with_a_pod_elsewhere() -> None:
    """The claim stays allocated for the other pod; the evicted pod moves and shares it again."""
    objs: list[object] = [make_class(), make_slice(None, 1, all_nodes=True)]
    objs += [make_node("node-a"), make_node("node-b")]
    p1 = bound_to(make_pod("p1", claims={"gpu": "net"}), "node-a")
    p2 = bound_to(make_pod("p2", claims={"gpu": "net"}), "node-b")
    net = with_status(make_claim("net"), make_allocation("dev-0", pool="shared"), [p1, p2])
    sim = new_simulation([*objs, p1, p2, net])
    result = estimate(sim, [], [], remove=["node-a"])
    removal = result.remove_nodes["node-a"]
    assert removal.removable
    (move,) = removal.moves
    assert move.node == "node-b" and move.devices[0].device == "dev-0"
    stored = sim.cluster.claim("default", "net")
    assert stored is not None and stored.status.allocation == net.status.allocation
    assert [r.name for r in stored.status.reserved_for] == ["p2", "p1"]


def test_a_node_local_claim_shared_by_two_pods_there_moves_with_both() -> None:
    objs: list[object] = [
        make_class(),
        make_node("node-a"),
        make_slice("node-a", 1),
        make_node("node-b"),
        make_slice("node-b", 1),
    ]
    p1 = bound_to(make_pod("p1", claims={"gpu": "pair"}), "node-a")
    p2 = bound_to(make_pod("p2", claims={"gpu": "pair"}), "node-a")
    pair = with_status(make_claim("pair"), make_allocation("dev-0", node="node-a"), [p1, p2])
    sim = new_simulation([*objs, p1, p2, pair])
    result = estimate(sim, [], [], remove=["node-a"])
    removal = result.remove_nodes["node-a"]
    assert removal.removable
    assert [(m.name, m.node, m.devices[0].pool) for m in removal.moves] == [
        ("p1", "node-b", "node-b"),
        ("p2", "node-b", "node-b"),
    ]


def test_node_template_keeps_shared_slices_out() -> None:
    node = make_node("node-0")
    template = template_from_objects(
        node,
        [make_slice("node-0", 2), make_slice(None, 1, all_nodes=True), make_slice("node-1", 2)],
        "node-0",
    )
    assert isinstance(template, NodeTemplate)
    assert [s.spec.node_name for s in template.slices] == ["node-0"]
