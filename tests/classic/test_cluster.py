"""KEP-3063 flows through the real services (see ``cluster.py``): apiserver, driver-controller,
ACME publisher and kubelets as processes, the scheduler service in-process, a real nats-server."""

from __future__ import annotations

import urllib.request
from collections.abc import AsyncIterator

import pytest

from infra.config import Settings
from infra.eventstore import EventStore
from tests.classic.cluster import (
    CLAIMS,
    FABRIC,
    ClassicCluster,
    acme,
    claim,
    eventually,
    example,
    plain_pod,
    pod,
)


@pytest.fixture
async def cluster(settings: Settings, event_store: EventStore) -> AsyncIterator[ClassicCluster]:
    c = ClassicCluster(settings, event_store)
    try:
        yield c
    finally:
        codes = await c.stop()
        assert all(code == 0 for code in codes), {n: p.stderr[-20:] for n, p in c.procs.items()}


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text: str = resp.read().decode()
    return text


def _metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in /metrics")


async def test_device_consumer_runs_as_written_and_metrics(cluster: ClassicCluster, unused_tcp_port: int) -> None:
    """The seed's acme-gpu class and device-consumer Pod, unchanged: the claim is created from the
    inline template, allocated 2Gi on a GPU of the pod's node, the pod is reserved, prepared by the
    kubelet (both containers get the CDI device) and runs. The driver-controller's KEP metrics are
    scraped from its /metrics endpoint."""
    await cluster.start(
        {"node-a": acme(2, "8Gi"), "node-b": acme(2, "8Gi")},
        acme_publisher=True,
        DRAFLOW_METRICS_PORT=str(unused_tcp_port),
    )
    await cluster.apply(*example("acme-gpu-resourceclass.yaml"), *example("device-consumer-pod.yaml"))
    running = await cluster.running("device-consumer")
    node = running["spec"]["nodeName"]
    got = await cluster.allocated("device-consumer-gpu")
    assert got["metadata"]["ownerReferences"][0]["name"] == "device-consumer"
    assert got["status"]["attributes"]["node"] == node
    assert got["status"]["attributes"]["memory"] == "2Gi"
    assert [u["name"] for u in got["status"]["reservedFor"]] == ["device-consumer"]
    assert got["metadata"]["finalizers"] == ["gpu.acme.com/deletion-protection"]
    prepared = [
        env.data
        for env in await cluster.store.events(cluster.store.subject("Pod", "default", "device-consumer"))
        if type(env.data).__name__ == "PodResourcesPrepared"
    ]
    uid = got["metadata"]["uid"]
    devices = {c.container: c.cdi_ids for c in prepared[0].containers}  # type: ignore[attr-defined]
    assert devices == {"workload": (f"gpu.acme.com/gpu={uid}",), "monitor": (f"gpu.acme.com/gpu={uid}",)}

    text = _scrape(unused_tcp_port)
    assert _metric(text, "resource_controller_create_total") >= 1
    assert _metric(text, "resource_controller_create_failures_total") == 0
    assert 'workqueue_depth{name="resource_claim"}' in text

    # Pod deleted: the kubelet unprepares and leaves reservedFor, the claim (owned by the pod) is
    # deleted and freed by the teardown saga, and disappears once its finalizer is gone.
    await cluster.delete("Pod", "device-consumer")
    await cluster.gone(CLAIMS, "device-consumer-gpu")
    await cluster.gone("Pod", "device-consumer")
