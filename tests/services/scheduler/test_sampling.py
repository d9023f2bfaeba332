"""kube-scheduler's node sampling (numFeasibleNodesToFind) and the best-first shortcut.

Expected nodes are computed here from the definitions, not with the product's helpers: the walk
starts at crc32(pod UID) mod #nodes over the nodes in name order (docs/scheduler.md,
"Determinism"; upstream rotates a counter instead), and looks for upstream's
``numFeasibleNodesToFind`` feasible nodes (pkg/scheduler/schedule_one.go: all nodes below 100;
else the configured percentage, or 50% minus 1% per 125 nodes with a floor of 5%; never fewer
than 100).
"""

from __future__ import annotations

import zlib

import msgspec
import pytest

from draflow.events.api.core_v1 import Pod
from draflow.services.scheduler.framework import Reserved, SchedulerConfig, num_feasible_nodes_to_find
from tests.builders import (
    exact,
    make_allocation,
    make_claim,
    make_class,
    make_node,
    make_pod,
    pod_with_template_claim,
)
from tests.builders.scheduler import cluster, gpu_cluster

pytestmark = pytest.mark.kep4381


def walk_start(pod: Pod, num_nodes: int) -> int:
    """Where the documented walk starts for ``pod``."""
    return zlib.crc32(pod.metadata.uid.encode()) % num_nodes


def upstream_sample_size(num_nodes: int, percentage: int | None = None) -> int:
    """Upstream's numFeasibleNodesToFind with its constants (100 nodes, 5%)."""
    if num_nodes < 100:
        return num_nodes
    if not percentage:
        percentage = max(50 - num_nodes // 125, 5)
    found = num_nodes * percentage // 100
    return max(found, 100) if percentage < 100 else num_nodes


@pytest.mark.parametrize(
    ("nodes", "percentage", "expected"),
    [
        (0, None, 0),
        (50, None, 50),
        (100, None, 100),
        (500, None, 230),  # 50% - 500/125 = 46%
        (5000, None, 500),  # 10%
        (100_000, None, 5000),  # floor of 5%
        (500, 10, 100),  # never below 100
        (500, 100, 500),
        (2000, 30, 600),
    ],
)
def test_num_feasible_nodes_to_find(nodes: int, percentage: int | None, expected: int) -> None:
    config = SchedulerConfig(percentage_of_nodes_to_score=percentage)
    assert num_feasible_nodes_to_find(config, nodes) == expected == upstream_sample_size(nodes, percentage)


def test_num_feasible_nodes_to_find_matches_upstream_everywhere() -> None:
    for nodes in [*range(0, 2001, 7), 6249, 6250, 6251, 100_000]:
        for percentage in (None, 1, 10, 42, 99, 100):
            config = SchedulerConfig(percentage_of_nodes_to_score=percentage)
            assert num_feasible_nodes_to_find(config, nodes) == upstream_sample_size(nodes, percentage)


def _two_signature_pod(name: str):
    sel = 'device.attributes["gpu.example.com"].index >= 0'
    return pod_with_template_claim(name, exact("a"), exact("b", selectors=[sel]))


def test_two_signatures_are_sampled_like_kube_scheduler() -> None:
    core = gpu_cluster(500, 4)
    pod, claim = _two_signature_pod("p")
    core.observe(claim)
    result = core.schedule(pod)
    assert isinstance(result, Reserved)
    assert result.evaluated_nodes == 230 and result.feasible_nodes == 230
    wide = gpu_cluster(500, 4, config=SchedulerConfig(percentage_of_nodes_to_score=100))
    wide.observe(claim)
    result = wide.schedule(pod)
    assert isinstance(result, Reserved) and result.evaluated_nodes == 500


def test_sample_starts_at_the_pod_uid_offset() -> None:
    core = gpu_cluster(300, 2)
    nodes = [info.name for info in core.cluster.node_list()]
    assert nodes == sorted(nodes)
    chosen = set()
    for name in ("p", "q", "r", "s"):
        pod, claim = _two_signature_pod(name)
        core.observe(claim)
        result = core.schedule(pod)
        assert isinstance(result, Reserved)
        # All nodes score alike: the first node of the pod's walk wins.
        assert result.node_name == nodes[walk_start(pod, 300)], name
        chosen.add(result.node_name)
        core.unreserve(pod)
    assert len(chosen) == 4  # different pods start in different places


@pytest.mark.parametrize("uid", ["uid-a", "uid-b", "uid-c", "uid-d", "uid-e", "uid-f"])
def test_the_sample_is_the_window_after_the_start(uid: str) -> None:
    """500 nodes with 6 GPUs, the pod needs 2 of two signatures: best fit prefers the fullest
    node. Two nodes are partly used: one inside the pod's 230-node window (3 GPUs free), one
    just outside it (2 free, a better fit). The sample must be exactly that window: the node
    inside wins although the one outside would score better."""
    pod, claim = _two_signature_pod("p")
    pod = msgspec.structs.replace(pod, metadata=msgspec.structs.replace(pod.metadata, uid=uid))
    owner = msgspec.structs.replace(claim.metadata.owner_references[0], uid=uid)
    claim = msgspec.structs.replace(
        claim, metadata=msgspec.structs.replace(claim.metadata, owner_references=(owner,))
    )
    start = walk_start(pod, 500)
    window = upstream_sample_size(500)
    assert window == 230
    inside = f"node-{(start + 100) % 500:03d}"
    outside = f"node-{(start + window + 20) % 500:03d}"
    core = gpu_cluster(500, 6)
    for node, used in ((inside, 3), (outside, 4)):
        taken = make_claim(
            f"used-{node}",
            exact(count=used),
            allocation=make_allocation(*(f"dev-{i}" for i in range(used)), node=node),
        )
        core.observe(taken)
    core.observe(claim)
    result = core.schedule(pod)
    assert isinstance(result, Reserved)
    assert result.evaluated_nodes == window
    assert result.node_name == inside, (start, inside, outside)


def test_best_first_looks_at_few_nodes() -> None:
    core = gpu_cluster(500, 4)
    pod, claim = pod_with_template_claim("p")
    core.observe(claim)
    result = core.schedule(pod)
    assert isinstance(result, Reserved)
    assert result.evaluated_nodes == 1 and result.feasible_nodes == 1  # best-first: no sample


def test_pods_without_claims_take_the_first_fit() -> None:
    core = cluster(*[make_node(f"n{i:03d}", cpu="1" if i % 2 else "4") for i in range(200)], make_class())
    pod = make_pod("p", cpu="2")
    result = core.schedule(pod)
    assert isinstance(result, Reserved)
    nodes = core.cluster.node_list()
    start = walk_start(pod, 200)
    walk = [nodes[(start + i) % 200] for i in range(200)]
    expected = next(node for node in walk if node.allocatable["cpu"] >= 2000)
    assert result.node_name == expected.name
