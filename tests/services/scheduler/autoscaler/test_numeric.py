"""Cluster Autoscaler's estimate for numeric parameters (KEP-4381): the ``NumericResources``
plugin's own code decides over a copy of its books; fictional nodes bring clones of a template
node's NodeResourceCapacity. Pure: a Simulation over objects, no log."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from draflow.events.api import classic_v1alpha1 as cv
from draflow.events.api import numeric_v1alpha2 as nv
from draflow.events.api.classic_pod import decode_manifest
from draflow.events.api.core_v1 import Pod
from draflow.services.dra.classic.validation import admit_classic
from draflow.services.dra.resourceclaim import pod_owner_reference
from draflow.services.scheduler.autoscaler import (
    CAPACITY_ANNOTATION,
    NodeGroup,
    estimate,
    new_simulation,
    template_from_objects,
)
from draflow.services.scheduler.autoscaler.snapshot import CLASSIC_REASON
from draflow.services.scheduler.framework.simulation import Simulation
from draflow.services.scheduler.plugins.numeric import NumericResources
from draflow.services.scheduler.plugins.numeric.simulation import SIMULATED
from tests.builders import make_node
from tests.builders.numeric import (
    FROB_DRIVER,
    frob_parameters,
    kep_pod,
    node_capacity,
    numeric_claim,
    numeric_class,
)

pytestmark = pytest.mark.kep4381

COUNTER = "counter.dra.config.k8s.io/v1alpha1"


def decoded(manifest: dict[str, Any]) -> Any:
    obj = decode_manifest(manifest)
    return (
        admit_classic(obj)
        if isinstance(obj, cv.ResourceClaim | cv.ResourceClass | nv.NodeResourceCapacity)
        else obj
    )


def claim(
    name: str, params: str, *, holds: int = 0, node: str = "", users: tuple[Pod, ...] = (), cls: str = "frob"
) -> cv.ResourceClaim:
    """A numeric claim; ``holds`` units on ``node`` already allocated (as the log shows it)."""
    c = decoded(numeric_claim(name, params, cls=cls))
    c = msgspec.structs.replace(c, metadata=msgspec.structs.replace(c.metadata, uid=f"uid-{name}"))
    if not holds:
        return c
    alloc = cv.NumericAllocation(
        node_name=node,
        driver_name=FROB_DRIVER,
        api_version=COUNTER,
        kind="Allocation",
        data={"instance": "frob-0", "count": holds},
    )
    status = msgspec.structs.replace(
        c.status, numeric_allocation=alloc, reserved_for=tuple(pod_owner_reference(p) for p in users)
    )
    return msgspec.structs.replace(c, status=status)


def pod(name: str, claim_name: str, node: str = "") -> Pod:
    p = decode_manifest(kep_pod(name, claim_name, node_name=node))
    assert isinstance(p, Pod)
    return msgspec.structs.replace(p, metadata=msgspec.structs.replace(p.metadata, uid=f"uid-{name}"))


def cluster(nodes: dict[str, int], running: dict[str, tuple[str, int]]) -> list[object]:
    """Nodes with ``count`` frobnicators each; running pods holding ``(node, units)``."""
    objs: list[object] = [decoded(numeric_class()), *(frob_parameters(f"p{n}", n) for n in range(1, 9))]
    for node, count in nodes.items():
        objs += [make_node(node), decoded(node_capacity(node, count))]
    for name, (node, units) in running.items():
        p = pod(name, f"{name}-frob", node)
        objs += [p, claim(f"{name}-frob", f"p{units}", holds=units, node=node, users=(p,))]
    return objs


def pending(prefix: str, n: int, units: int) -> tuple[list[Pod], list[object]]:
    pods = [pod(f"{prefix}-{i}", f"{prefix}-{i}-frob") for i in range(n)]
    return pods, [claim(f"{prefix}-{i}-frob", f"p{units}") for i in range(n)]


def group(sim: Simulation, name: str, node: str, max_nodes: int | None = None) -> NodeGroup:
    numeric = next(p for p in sim.profile.plugins if isinstance(p, NumericResources))
    template = template_from_objects(
        sim.cluster.nodes[node].node, (), node, numeric.books.capacities.values()
    )
    return NodeGroup(name, template, max_nodes)


def test_scale_up_counter_model_full_nodes_open_new_nodes() -> None:
    """Two 8-frobnicator nodes fully held; five pods of 3 each: two per new node, three nodes."""
    pods, claims = pending("frob", 5, 3)
    sim = new_simulation(
        [
            *cluster({"node-0": 8, "node-1": 8}, {"run-0": ("node-0", 8), "run-1": ("node-1", 8)}),
            *claims,
            *pods,
        ]
    )
    numeric = next(p for p in sim.profile.plugins if isinstance(p, NumericResources))
    g = group(sim, "frob", "node-0")
    assert [c.metadata.name for c in g.template.capacities] == [f"node-0-{FROB_DRIVER}"]
    result = estimate(sim, pods, [g])
    assert [p.node for p in result.pods] == ["frob-1", "frob-1", "frob-2", "frob-2", "frob-3"]
    assert all(p.new_node and p.node_group == "frob" for p in result.pods)
    assert result.node_groups["frob"].new_nodes == 3 and result.fits
    devices = result.pods[0].devices
    assert [(d.claim, d.request, d.driver, d.pool, d.device) for d in devices] == [
        ("frob-0-frob", "frob", FROB_DRIVER, "frob-1", "frob-0")
    ]
    assert sim.cluster.nodes["frob-1"].node.metadata.annotations[CAPACITY_ANNOTATION] == "node-0"
    books = sim.state.data[SIMULATED]
    cap = books.capacities[f"frob-1-{FROB_DRIVER}"]
    assert (
        cap.node_name == "frob-1" and cap.metadata.annotations[CAPACITY_ANNOTATION] == f"node-0-{FROB_DRIVER}"
    )
    alloc = books.claims[("default", "frob-0-frob")].status.numeric_allocation
    assert (
        alloc is not None and alloc.node_name == "frob-1" and alloc.data == {"instance": "frob-0", "count": 3}
    )
    # the live books never saw any of it
    assert numeric.books.claims[("default", "frob-0-frob")].status.numeric_allocation is None
    assert f"frob-1-{FROB_DRIVER}" not in numeric.books.capacities


def test_free_units_are_used_before_a_node_opens_and_max_caps_the_group() -> None:
    """6 units free on node-0: two pods of 3 there, two on the one new node allowed, the fifth
    fits nowhere (the scheduler's diagnosis, and the group's reason)."""
    pods, claims = pending("frob", 5, 3)
    sim = new_simulation([*cluster({"node-0": 8}, {"run-0": ("node-0", 2)}), *claims, *pods])
    result = estimate(sim, pods, [group(sim, "frob", "node-0", max_nodes=1)])
    assert [p.node for p in result.pods] == ["node-0", "node-0", "frob-1", "frob-1", None]
    last = result.pods[-1]
    assert last.reason is not None and last.reason.startswith("0/2 nodes are available")
    assert last.node_group_reasons == {"frob": "node group frob reached its maximum of 1 nodes"}
    assert not result.fits


def test_scale_down_moves_numeric_claims_and_reverts_when_they_do_not_fit() -> None:
    objs = cluster(
        {"node-0": 8, "node-1": 8, "node-2": 8},
        {"a": ("node-0", 3), "b": ("node-1", 4), "c": ("node-2", 7)},
    )
    sim = new_simulation(objs)
    result = estimate(sim, [], [], remove=["node-0", "node-2"])
    moved = result.remove_nodes["node-0"]
    assert moved.removable
    assert [(m.name, m.node) for m in moved.moves] == [("a", "node-1")]
    assert [(d.pool, d.device) for d in moved.moves[0].devices] == [("node-1", "frob-0")]
    stuck = result.remove_nodes["node-2"]
    assert not stuck.removable
    assert stuck.moves[0].node is None and "insufficient counter capacity: 7 required" in (
        stuck.moves[0].reason or ""
    )
    books = sim.state.data[SIMULATED]
    # a's claim moved (deallocated on node-0, allocated on node-1); c's claim back on node-2
    a = books.claims[("default", "a-frob")].status
    assert a.numeric_allocation.node_name == "node-1" and [r.name for r in a.reserved_for] == ["a"]
    c = books.claims[("default", "c-frob")].status
    assert c.numeric_allocation.node_name == "node-2" and [r.name for r in c.reserved_for] == ["c"]
    assert "node-2" in sim.cluster.nodes


def test_a_shared_numeric_claim_moves_once_with_its_pods() -> None:
    """Two pods on the node share a claim of a shareable class: both evicted, the claim is
    deallocated, allocated once on the other node by the first pod, joined by the second."""
    objs = [*cluster({"node-0": 8, "node-1": 8}, {}), decoded(numeric_class("sfrob", shareable=True))]
    p1, p2 = pod("one", "shared", "node-0"), pod("two", "shared", "node-0")
    objs += [p1, p2, claim("shared", "p2", holds=2, node="node-0", users=(p1, p2), cls="sfrob")]
    sim = new_simulation(objs)
    result = estimate(sim, [], [], remove=["node-0"])
    assert result.remove_nodes["node-0"].removable
    assert [(m.name, m.node) for m in result.remove_nodes["node-0"].moves] == [
        ("one", "node-1"),
        ("two", "node-1"),
    ]
    status = sim.state.data[SIMULATED].claims[("default", "shared")].status
    assert status.numeric_allocation.node_name == "node-1"
    assert [r.name for r in status.reserved_for] == ["one", "two"]
    # a pod using the claim on node-1 while its other user is evicted elsewhere: it stays allocated
    sim = new_simulation(objs)
    assert sim.evict(sim.cluster.pods["default/one"]) is None
    assert sim.state.data[SIMULATED].claims[("default", "shared")].status.numeric_allocation is not None


def test_opaque_classic_claims_are_still_reported_not_placed() -> None:
    objs = cluster({"node-0": 8}, {})
    opaque_class = decoded(
        {
            "apiVersion": "cdi.k8s.io/v1alpha1",
            "kind": "ResourceClass",
            "metadata": {"name": "opaque"},
            "driverName": "x.example.com",
        }
    )
    c = decoded(numeric_claim("o-frob", "p1", cls="opaque"))
    p = pod("o", "o-frob")
    missing = pod("m", "nowhere")
    sim = new_simulation([*objs, opaque_class, c, p, missing])
    result = estimate(sim, [p, missing], [])
    assert result.pods[0].reason == CLASSIC_REASON
    assert result.pods[1].reason == "classic resourceclaim nowhere not found"
