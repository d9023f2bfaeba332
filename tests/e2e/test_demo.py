"""The demo end to end with the real processes: apiserver, claim controller, scheduler, workloads,
the gpu.example.com driver and four kubelets with 8 GPUs each, on a real nats-server.

Apply the dra-example-driver examples; every pod runs with the devices its author intended
(``tests/e2e/demo.py``), shared claims are shared, admin access consumes nothing; delete the
namespaces and every device is free again: no allocation, nothing prepared on any node.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest

from draflow.events.api.core_v1 import Pod
from draflow.events.api.resource_v1 import ResourceClaim
from draflow.infra.config import Settings
from draflow.services.runtime.controller import Runtime
from tests.e2e.demo import (
    EXAMPLES,
    EXAMPLES_DIR,
    GPUS_PER_NODE,
    NODES,
    WORKLOADS,
    WORKLOADS_NS,
    cdi_ids,
    check_intended,
    check_workloads,
)
from tests.helpers import wait_for
from tests.processes import Proc, Service, node_services, running_system
from tests.shells import manifests

pytestmark = pytest.mark.kep4381

SERVICES: tuple[Service, ...] = (
    ("draflow.services.claim_controller", [], "claim-controller: following"),
    ("draflow.services.scheduler", [], None),
    ("draflow.services.workloads", [], "workloads: following"),
    ("draflow.services.garbage_collector", [], "garbage-collector: following"),
    ("draflow.services.drivers.gpu_example", [], "gpu-example-driver: publishing"),
    *(service for n in NODES for service in node_services(n, GPUS_PER_NODE)),
)


@pytest.fixture
async def cluster(settings: Settings) -> AsyncIterator[tuple[Runtime, list[Proc]]]:
    async with running_system(settings, SERVICES) as system:
        yield system


def _state(probe: Runtime) -> tuple[dict[tuple[str, str], Pod], dict[tuple[str, str], ResourceClaim]]:
    pods = {(p.metadata.namespace, p.metadata.name): p for p in probe.items("Pod")}
    claims = {(c.metadata.namespace, c.metadata.name): c for c in probe.items("ResourceClaim")}
    return pods, claims


def _prepared_everywhere(settings: Settings) -> list[str]:
    """Claim-specific CDI specs left on any node (``<vendor>-<class>_<claim uid>.json``; a driver's
    ``_common`` spec and a device plugin's static ``<vendor>-<class>.json`` stay), and non-empty
    kubelet checkpoints (DRA claims, device-plugin devices)."""
    left = [
        p.name
        for p in (settings.data_dir / "cdi").glob("*/*.json")
        if "_" in p.stem and not p.name.endswith("_common.json")
    ]
    for state in settings.data_dir.glob("kubelet-*/dra_manager_state"):
        if json.loads(json.loads(state.read_text())["Data"])["Entries"]:
            left.append(str(state))
    for state in settings.data_dir.glob("kubelet-*/device-plugins/kubelet_internal_checkpoint"):
        if json.loads(state.read_text())["Data"]["PodDeviceEntries"]:
            left.append(str(state))
    return left


async def test_demo_examples_run_as_intended_and_free_every_device(
    cluster: tuple[Runtime, list[Proc]], settings: Settings
) -> None:
    probe, _ = cluster
    await wait_for(lambda: len(probe.items("ResourceSlice")) == len(NODES), 60, "slices of every node")
    docs = [d for name in EXAMPLES for d in manifests((EXAMPLES_DIR / name).read_text())]
    for result in await probe.api.apply([*docs, *manifests(WORKLOADS.read_text())]):
        assert result.error is None, result.error
    expected_pods = {(d["metadata"]["namespace"], d["metadata"]["name"]) for d in docs if d["kind"] == "Pod"}

    def all_running() -> bool | list[str]:
        pods, _ = _state(probe)
        phases = [f"{k}: {pods[k].status.phase if k in pods else 'missing'}" for k in sorted(expected_pods)]
        return all(k in pods and pods[k].status.phase == "Running" for k in expected_pods) or phases

    await wait_for(all_running, 120, "every pod Running")
    pods, claims = _state(probe)
    assert check_intended({k: pods[k] for k in expected_pods}, claims) == []

    def workloads_done() -> bool | list[str]:
        pods, claims = _state(probe)
        return check_workloads(pods, claims, probe.get("Job", WORKLOADS_NS, "benchmark")) or True

    await wait_for(workloads_done, 60, "Deployment pods Running, Job Complete")
    # the kubelet told each container its devices (CDI ids): one per allocated device + the common one
    events = await probe.events.events(probe.events.subject("Pod", "prioritized-alternatives", "pod1"))
    ids = cdi_ids([e.data for e in events])
    assert (
        list(ids) == ["ctr0"] and ids["ctr0"][0] == "k8s.gpu.example.com/gpu=common" and len(ids["ctr0"]) == 2
    )

    namespaces = sorted({k[0] for k in expected_pods} | {WORKLOADS_NS})
    for result in await probe.api.delete([("Namespace", "", ns) for ns in namespaces]):
        assert result.error is None, result.error

    def all_free() -> bool | list[str]:
        pods, claims = _state(probe)
        left = (
            [
                f"pod {k} {p.status.phase}  {p.spec.node_name} deleting={bool(p.metadata.deletion_timestamp)}"
                for k, p in pods.items()
            ]
            + [f"namespace {n}" for n in namespaces if probe.get("Namespace", "", n) is not None]
            + [f"claim {k} reserved for {[r.name for r in c.status.reserved_for]}" for k, c in claims.items()]
        )
        leftover = left + _prepared_everywhere(settings)
        return leftover or True

    await wait_for(all_free, 120, "every device free")
