"""Several score plugins: each plugin's scores are normalized to [0, 100], then weighted and summed
(kube-scheduler's NormalizeScore, then ``weight * score`` per plugin).

DynamicResources scores best fit: its raw scores are ~2^20 apart in scale, so without
normalization it would drown any other plugin, and without its rank normalization a 0..100
plugin could never outvote it. The second plugin here is a plain ScorePlugin of the framework's
interface (a profile may add any): it prefers nodes by a label, on its own 0..10 scale.
"""

from __future__ import annotations

import pytest

from draflow.events.api.core_v1 import Pod
from draflow.services.scheduler.framework import CycleState, NodeInfo, Reserved, Scheduler, SchedulerConfig
from draflow.services.scheduler.framework.interface import MAX_NODE_SCORE
from draflow.services.scheduler.plugins import default_plugins
from tests.builders import make_class, make_node, make_slice, pod_with_template_claim


class LabelPreference:
    """Raw score = the node's ``preference`` label (0..10); normalized against the best node."""

    name = "LabelPreference"

    def __init__(self, weight: int) -> None:
        self.weight = weight

    def score(self, state: CycleState, pod: Pod, node: NodeInfo) -> int:
        return int(node.node.metadata.labels.get("preference", "0"))

    def normalize(self, state: CycleState, pod: Pod, scores: dict[str, int]) -> None:
        top = max(scores.values())
        for name, value in scores.items():
            scores[name] = value * MAX_NODE_SCORE // top if top else 0


def _core(weight: int) -> Scheduler:
    # DRA best fit: node-a (2 GPUs) is the tightest fit for one GPU, node-c (4) the loosest
    objects: list[object] = [make_class("gpu")]
    for name, gpus, preference in (("node-a", 2, 0), ("node-b", 3, 9), ("node-c", 4, 10)):
        objects += [
            make_node(name, labels={"kubernetes.io/hostname": name, "preference": str(preference)}),
            make_slice(name, gpus),
        ]
    plugins = [*default_plugins(), LabelPreference(weight)]
    core = Scheduler(SchedulerConfig(), plugins=plugins, clock=lambda: 0.0)
    for obj in objects:
        core.observe(obj)
    return core


@pytest.mark.parametrize(
    ("weight", "expected"),
    [
        # DRA by rank: a=100, b=50, c=0; LabelPreference normalized: a=0, b=90, c=100
        (0, "node-a"),  # a weight-0 plugin never changes the order: best fit wins
        (1, "node-b"),  # a 100+0, b 50+90=140, c 0+100=100
        (3, "node-b"),  # a 100, b 50+270=320, c 0+300=300
        (20, "node-c"),  # a 100, b 50+1800=1850, c 0+2000=2000
    ],
)
def test_weighted_sum_of_normalized_scores(weight: int, expected: str) -> None:
    core = _core(weight)
    pod, claim = pod_with_template_claim("p")
    core.observe(claim)
    result = core.schedule(pod)
    assert isinstance(result, Reserved)
    assert result.node_name == expected
    assert result.evaluated_nodes == 3  # two scorers: no best-first walk, every node is scored
