"""dra-example-driver's extended-resource example end to end, and per-container CDI devices.

Real processes: apiserver, claim controller, scheduler, the gpu.example.com slice publisher and one
kubelet with 8 GPUs. The example (``tests/data/realworld/kubernetes-sigs__dra-example-driver/``,
verbatim) has two pods: ``pod0`` asks for the implicit name
``deviceclass.resource.kubernetes.io/gpu.example.com`` and runs with the chart's DeviceClass as
rendered; ``pod1`` asks for ``example.com/gpu``, which nothing maps yet, so it stays Pending
("Insufficient example.com/gpu", as upstream with the default chart) until the class gets
``extendedResourceName: example.com/gpu`` — then it runs without being touched. A pod with an init
container and two containers shows the kubelet handing each container the CDI devices of its own
requests (``extendedResourceClaimStatus.requestMappings``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from draflow.events.api.core_v1 import Pod
from draflow.events.api.resource_v1 import AllocationResult, ResourceClaim
from draflow.events.dra import PodResourcesPrepared
from draflow.infra.config import Settings
from draflow.services.runtime.controller import Runtime
from tests.builders.manifests import REALWORLD
from tests.helpers import wait_for
from tests.processes import ROOT, Proc, node_services, stop_cleanly
from tests.shells import manifests, start_runtime

pytestmark = pytest.mark.kep5004

EXAMPLE = REALWORLD / "kubernetes-sigs__dra-example-driver"
EXTENDED_CLASS = ROOT / "examples" / "extended-resources" / "gpu-example-extended.yaml"
TOO_MANY = ROOT / "examples" / "extended-resources" / "too-many.yaml"
NS = "extended-resource-request"
NODE = "node-1"
SERVICES: tuple[tuple[str, list[str], str | None], ...] = (
    ("draflow.services.claim_controller", [], "claim-controller: following"),
    ("draflow.services.scheduler", [], None),
    ("draflow.services.drivers.gpu_example", [], "gpu-example-driver: publishing"),
    *node_services(NODE, 8),
)


def _classes() -> list[dict[str, Any]]:
    docs = manifests(
        (EXAMPLE / "deployments__helm__dra-example-driver__templates__deviceclass.rendered.yaml").read_text()
    )
    return [d for d in docs if d["kind"] == "DeviceClass"]


@pytest.fixture
async def example_cluster(settings: Settings) -> AsyncIterator[Runtime]:
    procs = [Proc(settings, "draflow.services.apiserver")]
    try:
        await asyncio.to_thread(procs[0].expect, "apiserver: serving", 60)
        probe, events = await start_runtime(settings, "e2e-probe")
        try:
            for result in await probe.api.apply(_classes()):  # the chart's classes, as rendered
                assert result.error is None, result.error
            procs += [Proc(settings, module, args) for module, args, _ in SERVICES]
            for proc, (_, _, ready) in zip(procs[1:], SERVICES, strict=True):
                if ready:
                    await asyncio.to_thread(proc.expect, ready, 90)
            await wait_for(lambda: len(probe.items("ResourceSlice")) == 1 or [], 60, "the node's slice")
            yield probe
        finally:
            await probe.stop()
            await events.close()
    finally:
        await stop_cleanly(procs)


def _phase(probe: Runtime, ns: str, name: str, phase: str) -> Any:
    def check() -> bool | list[str]:
        pod = probe.get("Pod", ns, name)
        return (pod is not None and pod.status.phase == phase) or [f"{pod and pod.status.phase}"]

    return check


def _allocation(claim: ResourceClaim) -> AllocationResult:
    assert claim.status.allocation is not None
    return claim.status.allocation


def _special_claim(probe: Runtime, pod: Pod) -> ResourceClaim:
    status = pod.status.extended_resource_claim_status
    assert status is not None
    claim = probe.get("ResourceClaim", pod.metadata.namespace, status.resource_claim_name)
    assert isinstance(claim, ResourceClaim) and claim.status.allocation is not None
    return claim


async def _cdi(probe: Runtime, ns: str, name: str) -> dict[str, list[str]]:
    for env in await probe.events.events(probe.events.subject("Pod", ns, name)):
        if env.type == "PodResourcesPrepared":
            assert isinstance(env.data, PodResourcesPrepared)
            return {c.container: list(c.cdi_ids) for c in env.data.containers}
    raise AssertionError(f"pod {ns}/{name} was not prepared")


async def test_example_driver_extended_resource_request(example_cluster: Runtime) -> None:
    probe = example_cluster
    docs = manifests(
        (EXAMPLE / "demo__examples__extended-resource-request__extended-resource-request.yaml").read_text()
    )
    for result in await probe.api.apply(docs):
        assert result.error is None, result.error

    # pod0: the implicit name of the chart's class
    await wait_for(_phase(probe, NS, "pod0", "Running"), 60, "pod0 Running")
    pod0 = probe.get("Pod", NS, "pod0")
    claim = _special_claim(probe, pod0)
    (req,) = claim.spec.devices.requests
    assert req.name == "container-0-request-0" and req.exactly is not None
    assert (req.exactly.device_class_name, req.exactly.count) == ("gpu.example.com", 1)
    (mapping,) = pod0.status.extended_resource_claim_status.request_mappings
    assert mapping.resource_name == "deviceclass.resource.kubernetes.io/gpu.example.com"
    (device,) = _allocation(claim).devices.results
    cdi = (await _cdi(probe, NS, "pod0"))["ctr0"]
    assert cdi[1] == f"k8s.gpu.example.com/gpu={claim.metadata.uid}-{device.device}"

    # pod1: example.com/gpu is mapped by no class yet
    def pending() -> bool | list[str]:
        pod = probe.get("Pod", NS, "pod1")
        conds = [c.message for c in pod.status.conditions if c.type == "PodScheduled"] if pod else []
        return bool(conds and "Insufficient example.com/gpu" in conds[0]) or conds or ["no condition"]

    await wait_for(pending, 30, "pod1 Pending: Insufficient example.com/gpu")
    assert probe.get("Pod", NS, "pod1").status.extended_resource_claim_status is None

    # the class learns the name (the README's file: the chart's class + extendedResourceName):
    # pod1 is requeued by the class event and runs
    (gpu_class,) = manifests(EXTENDED_CLASS.read_text())
    (chart_class,) = [c for c in _classes() if c["metadata"]["name"] == "gpu.example.com"]
    assert gpu_class["spec"] == {**chart_class["spec"], "extendedResourceName": "example.com/gpu"}
    for result in await probe.api.apply([gpu_class]):
        assert result.error is None, result.error
    await wait_for(_phase(probe, NS, "pod1", "Running"), 60, "pod1 Running")
    pod1 = probe.get("Pod", NS, "pod1")
    claim1 = _special_claim(probe, pod1)
    (mapping,) = pod1.status.extended_resource_claim_status.request_mappings
    assert (mapping.container_name, mapping.resource_name, mapping.request_name) == (
        "ctr0",
        "example.com/gpu",
        "container-0-request-0",
    )
    devices = {r.device for c in (claim, claim1) for r in _allocation(c).devices.results}
    assert len(devices) == 2  # two different GPUs of the node


async def test_kubelet_gives_each_container_its_own_devices(example_cluster: Runtime) -> None:
    probe = example_cluster
    gpu = "deviceclass.resource.kubernetes.io/gpu.example.com"

    def container(name: str, n: int) -> dict[str, Any]:
        return {"name": name, "image": "busybox", "resources": {"limits": {gpu: n}}}

    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "multi", "namespace": "default"},
        "spec": {
            "initContainers": [container("setup", 3)],
            "containers": [container("main", 1), container("side", 2)],
        },
    }
    for result in await probe.api.apply([pod]):
        assert result.error is None, result.error
    await wait_for(_phase(probe, "default", "multi", "Running"), 60, "multi Running")
    multi = probe.get("Pod", "default", "multi")
    claim = _special_claim(probe, multi)
    # main = container-1, side = container-2; the init container reuses their 1 + 2 devices
    assert [(r.name, r.exactly.count) for r in claim.spec.devices.requests if r.exactly] == [
        ("container-1-request-0", 1),
        ("container-2-request-0", 2),
    ]
    by_request: dict[str, list[str]] = {}
    for r in _allocation(claim).devices.results:
        by_request.setdefault(r.request, []).append(
            f"k8s.gpu.example.com/gpu={claim.metadata.uid}-{r.device}"
        )
    ids = await _cdi(probe, "default", "multi")
    common = "k8s.gpu.example.com/gpu=common"

    def own(cdi: list[str]) -> list[str]:
        return sorted(i for i in cdi if i != common)

    assert own(ids["main"]) == sorted(by_request["container-1-request-0"])
    assert own(ids["side"]) == sorted(by_request["container-2-request-0"]) and len(own(ids["side"])) == 2
    assert own(ids["setup"]) == sorted(
        by_request["container-1-request-0"] + by_request["container-2-request-0"]
    )


async def test_too_many_devices_stay_pending(example_cluster: Runtime) -> None:
    """The README's ``too-many.yaml`` (after its ``gpu-example-extended.yaml``): 129 devices, more
    than a claim holds, stays Pending."""
    probe = example_cluster
    docs = manifests(EXTENDED_CLASS.read_text()) + manifests(TOO_MANY.read_text())
    for result in await probe.api.apply(docs):
        assert result.error is None, result.error

    def refused() -> bool | list[str]:
        pod = probe.get("Pod", "too-many", "big")
        conds = [c for c in pod.status.conditions if c.type == "PodScheduled"] if pod else []
        return bool(conds and conds[0].reason == "SchedulerError") or [repr(conds)]

    await wait_for(refused, 30, "big refused")
    pod = probe.get("Pod", "too-many", "big")
    (cond,) = [c for c in pod.status.conditions if c.type == "PodScheduled"]
    assert cond.message == (
        'running "DynamicResources" filter plugin: '
        "pod too-many/big: extended resources backed by DRA: number of requested devices 129 "
        "exceeds the claim limit of 32"
    )
    assert pod.status.phase == "Pending" and not pod.spec.node_name
