"""Device health end to end (KEP-4680 for DRA, upstream's ``ResourceHealthStatus``): the
gpu.example.com plugin process streams its devices' health to the kubelet process
(``DRAResourceHealth.NodeWatchResources``); a device marked unhealthy through the plugin's admin
endpoint shows in the pod's ``containerStatuses[].allocatedResourcesStatus``, and healthy again
once cleared. The system is ``test_kubelet_plugins``' (its fixtures, a system of its own here)."""

from __future__ import annotations

from typing import Any

import pytest

from draflow.events.api.core_v1 import Pod
from draflow.infra.config import Settings
from draflow.services.runtime.controller import Runtime
from tests.e2e.test_kubelet_plugins import (  # noqa: F401 - fixtures
    admin,
    delete_namespace,
    gpu_pod,
    probe,
    running,
    start_plugin,
    system,
)
from tests.helpers import wait_for

pytestmark = [pytest.mark.kep4381, pytest.mark.timeout(240)]


def resource_status(rt: Runtime, ns: str, name: str) -> list[dict[str, Any]]:
    pod = rt.get("Pod", ns, name)
    if not isinstance(pod, Pod) or not pod.status.container_statuses:
        return []
    found: list[dict[str, Any]] = pod.status.container_statuses[0].get("allocatedResourcesStatus", [])
    return found


async def test_an_unhealthy_device_shows_in_the_pod_status_until_it_recovers(
    system: Settings,  # noqa: F811
    probe: Runtime,  # noqa: F811
) -> None:
    plugin = start_plugin(system)
    try:
        await gpu_pod(probe, "health", "pod")
        await running(probe, "health", "pod")
        (claim,) = probe.items("ResourceClaim", "health")
        assert claim.status.allocation is not None
        (result,) = claim.status.allocation.devices.results

        def health() -> list[tuple[str, str, str]]:
            return [
                (s["name"], r["resourceID"], r["health"])
                for s in resource_status(probe, "health", "pod")
                for r in s["resources"]
            ]

        # k8s.gpu.example.com/gpu=common is the first CDI id of every device: upstream shows that
        await wait_for(
            lambda: health() == [("claim:gpu", "k8s.gpu.example.com/gpu=common", "Healthy")] or health(),
            30,
            "healthy",
        )
        await admin(system, "set", unhealthy_devices=[result.device])
        await wait_for(
            lambda: health() == [("claim:gpu", "k8s.gpu.example.com/gpu=common", "Unhealthy")] or health(),
            30,
            "unhealthy",
        )
        await admin(system, "set", unhealthy_devices=["gpu-none"])  # another device: this one recovers
        await wait_for(lambda: [h[2] for h in health()] == ["Healthy"] or health(), 30, "healthy again")
        plugin.terminate()  # the stream ends: the kubelet no longer knows (Unknown)
        await wait_for(lambda: [h[2] for h in health()] == ["Unknown"] or health(), 30, "unknown")
        plugin = start_plugin(system)
        await delete_namespace(probe, "health")
    finally:
        if plugin.proc.poll() is None:
            plugin.terminate()
