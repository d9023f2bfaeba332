"""Issue 13 end to end: re-applying the README's first example while its pods run changes nothing.

The real processes (apiserver, claim controller, scheduler, gpu.example.com driver, one kubelet
with 2 GPUs) and the real ``draflow apply``: the second apply of the same file prints
``unchanged`` for every object, both pods keep their node and their GPU, and a pod of another
namespace that asks for a GPU afterwards finds none free (it used to get pod0's). The log then
passes ``draflow verify-replay``, invariants included.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from draflow.events.api.core_v1 import Pod
from draflow.events.api.resource_v1 import ResourceClaim
from draflow.infra.config import Settings
from draflow.services.cli.verify import verify_records
from draflow.services.runtime.controller import Runtime
from tests.e2e.demo import EXAMPLES_DIR
from tests.helpers import wait_for
from tests.processes import Service, draflow_out, node_services, running_system

pytestmark = pytest.mark.kep4381

NS = "basic-resourceclaimtemplate"
FILES = ("deviceclass.yaml", "basic-resourceclaimtemplate--basic-resourceclaimtemplate.yaml")
SERVICES: tuple[Service, ...] = (
    ("draflow.services.claim_controller", [], "claim-controller: following"),
    ("draflow.services.scheduler", [], None),
    ("draflow.services.drivers.gpu_example", [], "gpu-example-driver: publishing"),
    *node_services("node-1", 2),
)


@pytest.fixture
async def cluster(settings: Settings) -> AsyncIterator[Runtime]:
    async with running_system(settings, SERVICES) as (probe, _):
        yield probe


def draflow_apply(settings: Settings) -> list[str]:
    args = [a for f in FILES for a in ("-f", str(EXAMPLES_DIR / f))]
    return draflow_out(settings, "apply", *args).splitlines()


def _holding(probe: Runtime) -> dict[str, Any]:
    """Each pod's node and phase, and the devices of the claim it reserves."""
    out: dict[str, Any] = {}
    for claim in probe.items("ResourceClaim", NS):
        assert isinstance(claim, ResourceClaim)
        alloc = claim.status.allocation
        devices = [r.device for r in alloc.devices.results] if alloc is not None else []
        for ref in claim.status.reserved_for:
            out[ref.name] = devices
    return {
        p.metadata.name: (p.spec.node_name, p.status.phase, out.get(p.metadata.name))
        for p in probe.items("Pod", NS)
        if isinstance(p, Pod)
    }


LATE = [
    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "late"}},
    {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "gpu", "namespace": "late"},
        "spec": {
            "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}
        },
    },
    {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "late", "namespace": "late"},
        "spec": {
            "containers": [
                {"name": "c", "image": "ubuntu:22.04", "resources": {"claims": [{"name": "gpu"}]}}
            ],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": "gpu"}],
        },
    },
]


async def test_reapplying_the_first_example_leaves_its_running_pods_alone(
    cluster: Runtime, settings: Settings
) -> None:
    probe = cluster
    await wait_for(lambda: len(probe.items("ResourceSlice")) == 1, 60, "node-1's slice")
    first = await asyncio.to_thread(draflow_apply, settings)
    assert "pod/pod0 created" in first and "pod/pod1 created" in first

    def running() -> bool | list[str]:
        held = _holding(probe)
        ok = len(held) == 2 and all(p[1] == "Running" and p[2] for p in held.values())
        return ok or [f"{k}: {v}" for k, v in held.items()]

    await wait_for(running, 90, "pod0 and pod1 Running with a GPU each")
    before = _holding(probe)
    assert sorted(d for p in before.values() for d in p[2]) == ["gpu-0", "gpu-1"]

    second = await asyncio.to_thread(draflow_apply, settings)
    assert second == [
        "deviceclass.resource.k8s.io/gpu.example.com unchanged",
        f"namespace/{NS} unchanged",
        "resourceclaimtemplate.resource.k8s.io/single-gpu unchanged",
        "pod/pod0 unchanged",
        "pod/pod1 unchanged",
    ]

    # a GPU asked for afterwards: none is free, so the scheduler says so (and takes nobody's)
    for result in await probe.api.apply(LATE):
        assert result.error is None, result.error

    def late_unschedulable() -> bool | list[str]:
        pod = probe.get("Pod", "late", "late")
        conds = {c.type: c for c in pod.status.conditions} if isinstance(pod, Pod) else {}
        cond = conds.get("PodScheduled")
        return (cond is not None and cond.status == "False") or [repr(pod and pod.status)]

    await wait_for(late_unschedulable, 60, "the late pod found no free GPU")
    assert _holding(probe) == before
    claim = probe.get("ResourceClaim", "late", "gpu")
    assert isinstance(claim, ResourceClaim) and claim.status.allocation is None

    records: list[Any] = []
    async for batch in probe.events.read_raw():
        records.extend(batch)
    verifier, divergence = verify_records(records, probe.events.root)
    assert divergence is None, divergence
    assert verifier.invariants >= 2 and verifier.checked["schedule"] >= 2
