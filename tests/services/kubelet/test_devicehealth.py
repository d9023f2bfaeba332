"""Device health in the kubelet without I/O: the cache fed by the plugins' streams, and the pod
status shape upstream's kubelet writes (``allocatedResourcesStatus``)."""

from __future__ import annotations

import msgspec
import pytest

from draflow.events.api.core_v1 import Pod
from draflow.services.kubelet.devicehealth import (
    HEALTHY,
    UNHEALTHY,
    UNKNOWN,
    HealthCache,
    allocated_resources_status,
    health_statuses,
    with_resource_statuses,
)
from draflow.services.kubelet.state import ClaimInfo, DeviceState
from tests.builders import make_container, make_pod

pytestmark = pytest.mark.kep4381

GPU = "gpu.example.com"
NET = "net.example.com"


def test_the_cache_holds_the_complete_lists_and_says_what_changed() -> None:
    cache = HealthCache()
    assert cache.get(GPU, "node-1", "gpu-0") == UNKNOWN and GPU not in cache.reporting
    changed = cache.update(GPU, [("node-1", "gpu-0", HEALTHY), ("node-1", "gpu-1", HEALTHY)])
    assert changed == {("node-1", "gpu-0"), ("node-1", "gpu-1")} and GPU in cache.reporting
    assert cache.update(GPU, [("node-1", "gpu-0", HEALTHY), ("node-1", "gpu-1", HEALTHY)]) == set()
    # a complete list: gpu-1 unhealthy, gpu-0 left out (Unknown again)
    assert cache.update(GPU, [("node-1", "gpu-1", UNHEALTHY)]) == {("node-1", "gpu-0"), ("node-1", "gpu-1")}
    assert (cache.get(GPU, "node-1", "gpu-0"), cache.get(GPU, "node-1", "gpu-1")) == (UNKNOWN, UNHEALTHY)
    assert cache.clear(GPU) == {("node-1", "gpu-1")} and cache.get(GPU, "node-1", "gpu-1") == UNKNOWN
    assert GPU in cache.reporting  # its pods keep showing its devices (Unknown)
    assert cache.clear(NET) == set() and NET not in cache.reporting


def _infos() -> dict[tuple[str, str], ClaimInfo]:
    gpus = ClaimInfo(
        "uid-a",
        "pod-gpus",
        "default",
        {"uid-pod"},
        {
            GPU: [
                DeviceState("node-1", "gpu-0", ("big",), ("k8s.gpu.example.com/gpu=uid-a-gpu-0",)),
                DeviceState("node-1", "gpu-1", ("small",), ()),
            ],
            NET: [DeviceState("node-1", "nic-0", ("big",), ("net.example.com/nic=0",))],
        },
    )
    return {("default", "pod-gpus"): gpus}


def _pod() -> Pod:
    containers = [
        make_container("main", claims=[("gpus", "big")]),
        make_container("side", claims=["gpus"]),
        make_container("plain"),
    ]
    return make_pod(
        "pod",
        containers=containers,
        template_claims={"gpus": "t"},
        statuses={"gpus": "pod-gpus"},
        phase="Running",
    )


def test_pod_status_shape_is_upstreams() -> None:
    """``claim:<pod claim>/<request>`` (or ``claim:<pod claim>``), every device of the claim with
    its first CDI id (else driver/pool/device) and its health; only drivers that report health."""
    infos = _infos()
    cache = HealthCache()
    cache.update(GPU, [("node-1", "gpu-0", HEALTHY), ("node-1", "gpu-1", UNHEALTHY)])
    got = allocated_resources_status(_pod(), lambda ns, name: infos.get((ns, name)), cache)
    resources = [
        {"resourceID": "k8s.gpu.example.com/gpu=uid-a-gpu-0", "health": HEALTHY},
        {"resourceID": "gpu.example.com/node-1/gpu-1", "health": UNHEALTHY},
    ]
    assert got == {
        "main": [{"name": "claim:gpus/big", "resources": resources}],
        "side": [{"name": "claim:gpus", "resources": resources}],
    }
    cache.update(NET, [])
    got = allocated_resources_status(_pod(), lambda ns, name: infos.get((ns, name)), cache)
    assert got["main"][0]["resources"][-1] == {"resourceID": "net.example.com/nic=0", "health": UNKNOWN}
    assert allocated_resources_status(_pod(), lambda ns, name: None, cache) == {}


def test_statuses_are_rewritten_only_when_the_health_differs() -> None:
    infos = _infos()
    cache = HealthCache()
    cache.update(GPU, [("node-1", "gpu-0", HEALTHY), ("node-1", "gpu-1", HEALTHY)])
    pod = _pod()
    running = tuple({"name": c.name, "ready": True} for c in pod.spec.containers)
    pod = msgspec.structs.replace(pod, status=msgspec.structs.replace(pod.status, container_statuses=running))
    first = health_statuses(pod, lambda ns, name: infos.get((ns, name)), cache)
    assert first is not None
    assert [s.get("allocatedResourcesStatus", [{}])[0].get("name") for s in first] == [
        "claim:gpus/big",
        "claim:gpus",
        None,
    ]
    assert first[0]["ready"] is True  # the rest of the status is kept
    pod = msgspec.structs.replace(pod, status=msgspec.structs.replace(pod.status, container_statuses=first))
    assert health_statuses(pod, lambda ns, name: infos.get((ns, name)), cache) is None
    cache.update(GPU, [("node-1", "gpu-0", UNHEALTHY), ("node-1", "gpu-1", HEALTHY)])
    second = health_statuses(pod, lambda ns, name: infos.get((ns, name)), cache)
    assert (
        second is not None and second[0]["allocatedResourcesStatus"][0]["resources"][0]["health"] == UNHEALTHY
    )
    assert with_resource_statuses(second, {}) == running  # nothing to show: the key goes
