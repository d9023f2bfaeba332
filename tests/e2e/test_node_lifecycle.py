"""A kubelet stops and comes back, with the real processes (issue 13 item 3).

apiserver (``--default-unreachable-toleration-seconds 4``), claim controller, scheduler, the
gpu.example.com driver, the node lifecycle controller (grace 3 s) and two kubelets (leases of 2 s,
renewed every half second). ``examples/node-lifecycle/unreachable.yaml`` puts three pods with a
GPU each on node-5; then node-5's kubelet is stopped:

* node-5 becomes ``Ready=Unknown`` (``NodeStatusUnknown`` / ``Kubelet stopped posting node
  status.``) and gets the ``unreachable`` NoSchedule and NoExecute taints; ``draflow get nodes``
  says ``NotReady``;
* the scheduler keeps new pods off it: one pinned to node-5 stays Pending with kube-scheduler's
  ``node(s) had untolerated taint {node.kubernetes.io/unreachable: }``, one free to go lands on
  node-1;
* the pod with the (short) default toleration is evicted after it: ``DisruptionTarget``, the
  ``TaintManagerEviction`` Event, Terminating with its claim still reserved (no kubelet to confirm);
  the pod tolerating forever stays;
* the kubelet comes back: node Ready, taints gone, the evicted pod finishes (its claim released,
  deallocated and deleted), the 30 s eviction is cancelled, the pinned pod runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from draflow.events.api.core_v1 import Node, Pod
from draflow.infra.config import Settings
from draflow.services.runtime.controller import Runtime
from tests.helpers import wait_for
from tests.paths import ROOT
from tests.processes import GPU_PLUGIN, Proc, draflow_out, stop_cleanly
from tests.shells import manifests, start_runtime

EXAMPLE = ROOT / "examples" / "node-lifecycle" / "unreachable.yaml"
DEVICE_CLASS = ROOT / "examples" / "dra-example-driver" / "deviceclass.yaml"
DOCS = manifests(DEVICE_CLASS.read_text()) + manifests(EXAMPLE.read_text())
NS = "node-lifecycle"
UNREACHABLE = "node.kubernetes.io/unreachable"


def kubelet(settings: Settings, node: str) -> Proc:
    args = ["--node", node, "--gpus", "4", "--node-lease-duration-seconds", "2"]
    return Proc(settings, "draflow.services.kubelet", args)


@pytest.fixture
async def cluster(settings: Settings) -> AsyncIterator[tuple[Runtime, list[Proc]]]:
    procs = [
        Proc(
            settings,
            "draflow.services.apiserver",
            ["--default-unreachable-toleration-seconds", "4", "--default-not-ready-toleration-seconds", "4"],
        )
    ]
    try:
        await asyncio.to_thread(procs[0].expect, "apiserver: serving", 60)
        procs += [
            Proc(settings, "draflow.services.claim_controller"),
            Proc(settings, "draflow.services.scheduler"),
            Proc(settings, "draflow.services.drivers.gpu_example"),
            Proc(
                settings,
                "draflow.services.node_lifecycle",
                ["--node-monitor-grace-period", "3s", "--node-monitor-period", "250ms"],
            ),
            # each node's gpu.example.com plugin (its own process: it outlives a stopped kubelet)
            *(Proc(settings, GPU_PLUGIN, ["--node", n, "--gpus", "4"]) for n in ("node-1", "node-5")),
            kubelet(settings, "node-1"),
            kubelet(settings, "node-5"),  # last: a test stops it and starts it again
        ]
        await asyncio.to_thread(procs[4].expect, "node-lifecycle-controller: watching", 90)
        for proc in procs[5:7]:
            await asyncio.to_thread(proc.expect, "gpu.example.com plugin on ", 90)
        for proc in procs[7:]:
            await asyncio.to_thread(proc.expect, "kubelet ", 90)
        probe, events = await start_runtime(settings, "e2e-probe")
        try:
            yield probe, procs
        finally:
            await probe.stop()
            await events.close()
    finally:
        await stop_cleanly([p for p in procs if p.proc.poll() is None])


def ready(node: Node | None) -> str:
    cond = next((c for c in node.status.conditions if c.type == "Ready"), None) if node else None
    return cond.status if cond else "missing"


def pod(probe: Runtime, name: str) -> Pod | None:
    return probe.get("Pod", NS, name)


def claim_of(probe: Runtime, name: str) -> Any:
    p = pod(probe, name)
    status = next((s for s in p.status.resource_claim_statuses), None) if p else None
    return probe.get("ResourceClaim", NS, status.resource_claim_name or "") if status else None


def pinned(name: str, node: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "busybox"}]}
    if node:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS}, "spec": spec}


@pytest.mark.timeout(240)
async def test_a_stopped_kubelet_is_noticed_its_pods_evicted_and_its_return_welcomed(
    cluster: tuple[Runtime, list[Proc]], settings: Settings
) -> None:
    probe, procs = cluster
    await wait_for(lambda: len(probe.items("ResourceSlice")) == 2, 60, "slices of both nodes")
    for result in await probe.api.apply(DOCS):
        assert result.error is None, result.error
    names = ("default-toleration", "short-toleration", "stays")

    def phases() -> list[str]:
        return [p.status.phase if (p := pod(probe, n)) is not None else "missing" for n in names]

    await wait_for(
        lambda: phases() == ["Running"] * 3 or phases(), 90, "the example's pods Running on node-5"
    )
    assert {pod(probe, n).spec.node_name for n in names} == {"node-5"}  # type: ignore[union-attr]
    leases = await asyncio.to_thread(draflow_out, settings, "get", "leases", "-n", "kube-node-lease")
    assert leases.split("\n")[0].split() == ["NAME", "HOLDER", "AGE"] and "node-5   node-5" in leases

    # stop node-5's kubelet
    kubelet5 = procs.pop()
    assert await asyncio.to_thread(kubelet5.terminate) == 0
    node5: Node = await wait_for(
        lambda: (
            (n := probe.get("Node", "", "node-5")) is not None
            and ready(n) == "Unknown"
            and {(t.key, t.effect) for t in n.spec.taints}
            == {(UNREACHABLE, "NoSchedule"), (UNREACHABLE, "NoExecute")}
            and n
        ),
        30,
        "node-5 Unknown and tainted",
    )
    cond = next(c for c in node5.status.conditions if c.type == "Ready")
    assert (cond.reason, cond.message) == ("NodeStatusUnknown", "Kubelet stopped posting node status.")
    table = await asyncio.to_thread(draflow_out, settings, "get", "nodes")
    assert [line.split()[:2] for line in table.splitlines()[1:]] == [
        ["node-1", "Ready"],
        ["node-5", "NotReady"],
    ]

    # no new pods for node-5
    for result in await probe.api.apply([pinned("late", "node-5"), pinned("elsewhere", None)]):
        assert result.error is None, result.error
    late: Pod = await wait_for(
        lambda: (
            (p := pod(probe, "late")) is not None
            and any(c.type == "PodScheduled" and c.status == "False" for c in p.status.conditions)
            and p
        ),
        30,
        "late unschedulable",
    )
    message = next(c.message for c in late.status.conditions if c.type == "PodScheduled")
    assert message.startswith(
        "0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, "
        "1 node(s) had untolerated taint {node.kubernetes.io/unreachable: }."
    ), message
    await wait_for(
        lambda: (p := pod(probe, "elsewhere")) is not None and p.spec.node_name == "node-1", 30, "bound"
    )

    # the default toleration (4 s here) runs out: evicted; the others stay
    evicted: Pod = await wait_for(
        lambda: (p := pod(probe, "default-toleration")) is not None and p.metadata.deletion_timestamp and p,
        30,
        "default-toleration evicted",
    )
    target = next(c for c in evicted.status.conditions if c.type == "DisruptionTarget")
    assert (target.reason, target.message) == (
        "DeletionByTaintManager",
        "Taint manager: deleting due to NoExecute taint",
    )
    for name in ("short-toleration", "stays"):
        assert pod(probe, name).metadata.deletion_timestamp is None  # type: ignore[union-attr]
    held = claim_of(probe, "default-toleration")
    assert held.status.allocation is not None and [r.name for r in held.status.reserved_for] == [
        "default-toleration"
    ]
    described = await asyncio.to_thread(
        draflow_out, settings, "describe", "pod", "default-toleration", "-n", NS
    )
    assert (
        "TaintManagerEviction" in described
        and "Marking for deletion Pod node-lifecycle/default-toleration" in described
    )

    # the kubelet comes back
    procs.append(kubelet(settings, "node-5"))
    await wait_for(
        lambda: (
            (n := probe.get("Node", "", "node-5")) is not None and ready(n) == "True" and not n.spec.taints
        ),
        60,
        "node-5 Ready and untainted",
    )
    await wait_for(
        lambda: pod(probe, "default-toleration") is None, 60, "the evicted pod's deletion finished"
    )
    await wait_for(
        lambda: (
            not [
                c
                for c in probe.items("ResourceClaim", NS)
                if c.metadata.name.startswith("default-toleration")
            ]
        ),
        60,
        "its claim released, deallocated and deleted",
    )
    await wait_for(
        lambda: (p := pod(probe, "late")) is not None and p.status.phase == "Running", 60, "late runs"
    )
    for name in ("short-toleration", "stays"):
        assert pod(probe, name).metadata.deletion_timestamp is None  # type: ignore[union-attr]
    described = await asyncio.to_thread(
        draflow_out, settings, "describe", "pod", "short-toleration", "-n", NS
    )
    assert "Cancelling deletion of Pod node-lifecycle/short-toleration" in described
