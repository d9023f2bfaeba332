"""bench/kubeapi.py's watchers: a process of their own (niced when asked), connected to a real
Kubernetes API before the bench goes on, every event of every watcher counted, and their CPU and
niceness reported, so the watchers-vs-scheduling figures cannot silently measure nothing."""

from __future__ import annotations

from typing import Any

from bench.kubeapi import Watchers
from draflow.infra.config import Settings
from draflow.services.apiserver.kubeapi.auth import load_or_create, write_kubeconfig
from draflow.services.apiserver.kubeapi.server import KubeApi
from draflow.services.apiserver.server import ApiServer
from draflow.services.runtime.client import ApiClient


def _pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "b"},
        "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
    }


async def test_niced_watchers_receive_every_event_and_report_their_cpu(
    apiserver: ApiServer, api: ApiClient, settings: Settings
) -> None:
    creds = load_or_create(settings.data_dir / "kubeapi", "127.0.0.1")
    kube = KubeApi(apiserver, host="127.0.0.1", port=0, credentials=creds)
    await kube.start()
    fleet = Watchers(3, kube.port, nice=19)
    try:
        write_kubeconfig(creds, kube.url, settings.data_dir / "kubeconfig")
        await api.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "b"}}])
        await fleet.start(settings)  # returns once all three are connected
        assert kube.watches.watchers() == 3
        await api.apply([_pod(f"p{i}") for i in range(5)])
        await api.delete([("Pod", "b", "p0")])
    finally:
        await fleet.stop()
        await kube.stop()
    assert fleet.events == 3 * 6  # five ADDED and one DELETED, each to every watcher
    assert fleet.niceness == 19
    assert fleet.cpu_s > 0
