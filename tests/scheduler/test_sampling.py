"""kube-scheduler's node sampling (numFeasibleNodesToFind) and the best-first shortcut."""

from __future__ import annotations

import pytest

from services.scheduler.framework import Reserved, SchedulerConfig, num_feasible_nodes_to_find, start_index
from tests.scheduler.builders import (
    cluster,
    exact,
    gpu_cluster,
    make_class,
    make_node,
    make_pod,
    pod_with_template_claim,
)


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
    assert num_feasible_nodes_to_find(config, nodes) == expected


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
    pod, claim = _two_signature_pod("p")
    core.observe(claim)
    result = core.schedule(pod)
    assert isinstance(result, Reserved)
    # All nodes score alike: the first node of the pod's walk wins.
    nodes = core.cluster.node_list()
    assert result.node_name == nodes[start_index(pod, len(nodes))].name


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
    start = start_index(pod, len(nodes))
    walk = [nodes[(start + i) % 200] for i in range(200)]
    expected = next(node for node in walk if node.allocatable["cpu"] >= 2000)
    assert result.node_name == expected.name
