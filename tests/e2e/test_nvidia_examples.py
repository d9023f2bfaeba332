"""NVIDIA's DRA manifests run on the simulated ``gpu.nvidia.com`` driver, end to end.

Real processes: apiserver, claim controller, scheduler, one kubelet and the simulated NVIDIA
driver's kubelet plugin for its node, started with ``--gpus 4 --mig-gpus 1`` (three full GH200s and
seven ``1g.12gb`` MIG devices), which publishes the node's ResourceSlice itself and serves only the
older ``v1beta1.DRAPlugin`` API (as drivers in the wild still do): the kubelet talks v1beta1 to it. Applied
unchanged from ``tests/data/realworld/NVIDIA__k8s-dra-driver-gpu/``: the chart's DeviceClasses, the
two extended-resource examples (``nvidia.com/gpu`` on a full GPU, ``nvidia.com/mig-1g.12gb`` on a MIG
instance) and ``gpu-test1`` (two pods, a distinct GPU each, from a ResourceClaimTemplate). Every
pod runs with the CDI device of its own GPU or MIG instance; deleting the namespaces unprepares
(CDI specs gone) and frees every device.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from draflow.events.api.resource_v1 import ResourceClaim
from draflow.events.dra import PodResourcesPrepared
from draflow.infra.config import Settings
from draflow.services.drivers.nvidia_sim import DRIVER
from draflow.services.runtime.controller import Runtime
from tests.builders.manifests import REALWORLD
from tests.helpers import wait_for
from tests.processes import Proc, stop_cleanly
from tests.shells import manifests, start_runtime

pytestmark = pytest.mark.kep4381

NVIDIA = REALWORLD / "NVIDIA__k8s-dra-driver-gpu"
NODE = "gh200-1"
FILES = (
    "deployments__helm__dra-driver-nvidia-gpu__templates__deviceclasses.rendered.yaml",
    "demo__specs__extended-resources__gpu-full.yaml",
    "demo__specs__extended-resources__mig-1g-12gb.yaml",
    "demo__specs__quickstart__v1__gpu-test1.yaml",
)
PODS = (
    ("extended-resource-gpu-full", "gpu-full-pod", "cuda-container"),
    ("extended-resource-mig-1g12gb", "mig-1g12gb-pod", "cuda-container"),
    ("gpu-test1", "pod1", "ctr"),
    ("gpu-test1", "pod2", "ctr"),
)


@pytest.fixture
async def nvidia_node(settings: Settings) -> AsyncIterator[Runtime]:
    procs = [Proc(settings, "draflow.services.apiserver")]
    try:
        await asyncio.to_thread(procs[0].expect, "apiserver: serving", 60)
        procs += [
            Proc(settings, "draflow.services.claim_controller"),
            Proc(settings, "draflow.services.scheduler"),
            Proc(settings, "draflow.services.kubelet", ["--node", NODE, "--gpus", "0"]),
            Proc(
                settings,
                "draflow.services.drivers.nvidia_sim.node",
                ["--node", NODE, "--gpus", "4", "--mig-gpus", "1", "--dra-version", "v1beta1.DRAPlugin"],
            ),
        ]
        await asyncio.to_thread(procs[-2].expect, f"kubelet {NODE}: registered", 60)
        await asyncio.to_thread(procs[-1].expect, f"{DRIVER} plugin on {NODE}: serving v1beta1.DRAPlugin", 60)
        probe, events = await start_runtime(settings, "e2e-probe")
        try:
            await wait_for(lambda: len(probe.items("ResourceSlice")) == 1 or [], 30, "the node's slice")
            yield probe
        finally:
            await probe.stop()
            await events.close()
    finally:
        await stop_cleanly(procs)


async def _cdi(probe: Runtime, ns: str, name: str) -> dict[str, list[str]]:
    for env in await probe.events.events(probe.events.subject("Pod", ns, name)):
        if isinstance(env.data, PodResourcesPrepared):
            return {c.container: list(c.cdi_ids) for c in env.data.containers}
    raise AssertionError(f"pod {ns}/{name} was not prepared")


def _claim_of(probe: Runtime, ns: str, name: str) -> ResourceClaim:
    pod = probe.get("Pod", ns, name)
    if pod.status.extended_resource_claim_status is not None:
        claim_name = pod.status.extended_resource_claim_status.resource_claim_name
    else:
        (status,) = pod.status.resource_claim_statuses
        claim_name = status.resource_claim_name or ""
    claim = probe.get("ResourceClaim", ns, claim_name)
    assert isinstance(claim, ResourceClaim) and claim.status.allocation is not None
    return claim


async def test_nvidia_examples_run_and_clean_up(nvidia_node: Runtime, settings: Settings) -> None:
    probe = nvidia_node
    (published,) = probe.items("ResourceSlice")
    assert published.spec.driver == DRIVER and published.spec.node_name == NODE
    assert len(published.spec.devices) == 3 + 7
    docs: list[dict[str, Any]] = []
    for f in FILES:
        docs += manifests((NVIDIA / f).read_text())
    for applied in await probe.api.apply(docs):
        assert applied.error is None, applied.error

    def running() -> bool | list[str]:
        phases = [(name, getattr(probe.get("Pod", ns, name), "status", None)) for ns, name, _ in PODS]
        waiting = [f"{n}: {s.phase if s else None}" for n, s in phases if s is None or s.phase != "Running"]
        return not waiting or waiting

    await wait_for(running, 60, "every NVIDIA example pod Running")

    cdi_root = settings.data_dir / "cdi" / NODE
    devices: dict[str, str] = {}
    for ns, name, ctr in PODS:
        claim = _claim_of(probe, ns, name)
        assert claim.status.allocation is not None
        (result,) = claim.status.allocation.devices.results
        assert (result.driver, result.pool) == (DRIVER, NODE)
        devices[name] = result.device
        expected = f"k8s.gpu.nvidia.com/claim={claim.metadata.uid}-{result.device}"
        assert (await _cdi(probe, ns, name))[ctr] == [expected]
        spec = json.loads((cdi_root / f"k8s.gpu.nvidia.com-claim_{claim.metadata.uid}.json").read_text())
        (dev,) = spec["devices"]
        env = dev["containerEdits"]["env"]
        uuid = next(d for d in published.spec.devices if d.name == result.device).attributes["uuid"].string
        assert env == [f"NVIDIA_VISIBLE_DEVICES={uuid}"]
    # full GPUs for the gpu class, a MIG instance for the MIG class; all distinct
    assert devices["mig-1g12gb-pod"].startswith("gpu-3-mig-1g12gb-")
    full = [devices[n] for n in ("gpu-full-pod", "pod1", "pod2")]
    assert sorted(full) == ["gpu-0", "gpu-1", "gpu-2"]

    results = await probe.api.delete(
        [
            ("Namespace", "", ns)
            for ns in ("extended-resource-gpu-full", "extended-resource-mig-1g12gb", "gpu-test1")
        ]
    )
    assert [r.error for r in results] == [None, None, None]

    def clean() -> bool | list[str]:
        left = [p.name for p in cdi_root.glob("k8s.gpu.nvidia.com-claim_*.json")]
        claims = [c.metadata.name for c in probe.items("ResourceClaim")]
        return (not left and not claims) or left + claims

    await wait_for(clean, 60, "CDI specs removed and claims gone")
