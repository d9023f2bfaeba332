"""The kubelet's level-triggered step per pod, across a restart."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from draflow.services.drivers.gpu_example import GpuExamplePlugin
from draflow.services.kubelet import (
    Admit,
    DRAManager,
    Step,
    admit,
    next_step,
    prepare_pod,
    read_checkpoint,
    unprepare_pod,
    vanished_pods,
    write_checkpoint,
)
from tests.builders import make_allocation, make_claim, make_pod

pytestmark = pytest.mark.kep4381


def test_steps_for_pods_on_and_off_the_node() -> None:
    manager = DRAManager()
    assert next_step(make_pod(node_name="n1"), "n1", manager) is Step.START
    assert next_step(make_pod(node_name="n2"), "n1", manager) is Step.NOTHING
    assert next_step(make_pod(node_name="n1", phase="Running"), "n1", manager) is Step.RUN
    assert next_step(make_pod(node_name="n1", phase="Succeeded"), "n1", manager) is Step.NOTHING
    assert next_step(make_pod(node_name="n1", deleting=True), "n1", manager) is Step.FINISH_DELETION


async def test_pods_holding_claims_are_released_first(tmp_path: Path) -> None:
    claim = make_claim("c", allocation=make_allocation(("gpu", "gpu-0")), reserved_for=["p"])
    pod = make_pod("p", claims={"gpu": "c"}, node_name="node-1")
    plugin = GpuExamplePlugin("node-1", tmp_path / "cdi", lambda ref: claim)
    plugins = {"gpu.example.com": plugin}
    manager = DRAManager()
    decision = admit(pod, [claim], registered_drivers=plugins)
    assert isinstance(decision, Admit)
    assert (await prepare_pod(manager, pod, decision.claims, plugins)).ok
    running = msgspec.structs.replace(pod, status=msgspec.structs.replace(pod.status, phase="Running"))
    assert next_step(running, "node-1", manager) is Step.RUN
    done = msgspec.structs.replace(pod, status=msgspec.structs.replace(pod.status, phase="Succeeded"))
    assert next_step(done, "node-1", manager) is Step.RELEASE
    deleting = make_pod("p", claims={"gpu": "c"}, node_name="node-1", deleting=True)
    assert next_step(deleting, "node-1", manager) is Step.RELEASE

    # The kubelet dies; the pod is deleted from the cluster meanwhile; a new kubelet starts.
    write_checkpoint(tmp_path / "state", manager.entries())
    restarted = DRAManager(read_checkpoint(tmp_path / "state"))
    assert vanished_pods(restarted, []) == ["uid-p"]
    assert restarted.claims_of_pod("uid-p") == [("default", "c")]
    assert (await unprepare_pod(restarted, "uid-p", "default", ["c"], plugins)).ok
    assert vanished_pods(restarted, []) == [] and plugin.prepared == frozenset()
    assert next_step(deleting, "node-1", restarted) is Step.FINISH_DELETION
