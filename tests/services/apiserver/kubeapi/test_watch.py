"""WATCH through the Kubernetes API: kubectl get -w, kubectl wait, the Python client, 410 Gone,
bookmarks and resumption from a resourceVersion."""

from __future__ import annotations

import asyncio
import json
import os
import ssl
from typing import Any

import aiohttp
import pytest

from draflow.services.apiserver.kubeapi.server import KubeApi
from draflow.services.apiserver.server import ApiServer
from draflow.services.runtime.client import ApiClient
from tests.e2e.demo import EXAMPLES_DIR
from tests.helpers import assert_eventually
from tests.services.apiserver.kubeapi.conftest import KUBECTL, Kube, kubectl, list_rv, watching

TEMPLATE = EXAMPLES_DIR / "basic-resourceclaimtemplate--basic-resourceclaimtemplate.yaml"
NS = "basic-resourceclaimtemplate"
RUNNING = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}


async def _watch_lines(kube: Kube, path: str, until: Any, timeout_s: float = 15) -> list[dict[str, Any]]:
    """Watch events from ``path`` until ``until(events)`` holds (or the server ends the stream)."""
    ctx = ssl.create_default_context(cadata=kube.credentials.ca_pem.decode())
    events: list[dict[str, Any]] = []
    headers = {"Authorization": f"Bearer {kube.token}"}
    async with (
        aiohttp.ClientSession() as session,
        session.get(kube.url + path, headers=headers, ssl=ctx) as resp,
    ):
        assert resp.status == 200
        async with asyncio.timeout(timeout_s):
            async for line in resp.content:
                events.append(json.loads(line))
                if until(events):
                    break
    return events


async def test_kubectl_get_watch_sees_pending_then_running(kube: Kube, api: ApiClient) -> None:
    await kubectl(kube, "apply", "-f", str(TEMPLATE))
    assert KUBECTL
    env = {**os.environ, "KUBECONFIG": str(kube.kubeconfig)}
    proc = await asyncio.create_subprocess_exec(
        KUBECTL, "get", "pods", "-n", NS, "-w", stdout=asyncio.subprocess.PIPE, env=env
    )
    assert proc.stdout is not None
    try:
        lines: list[str] = []
        async with asyncio.timeout(20):
            while len(lines) < 3:  # header and both pods
                lines.append((await proc.stdout.readline()).decode())
            assert lines[0].split()[:3] == ["NAME", "READY", "STATUS"]
            assert [ln.split()[2] for ln in lines[1:]] == ["Pending", "Pending"]
            await api.update_status("Pod", "pod0", RUNNING, namespace=NS)
            line = (await proc.stdout.readline()).decode()
        assert line.split()[0] == "pod0" and line.split()[2] == "Running"
    finally:
        proc.terminate()
        await proc.wait()


async def test_kubectl_wait_for_condition_and_delete(kube: Kube, api: ApiClient) -> None:
    await kubectl(kube, "apply", "-f", str(TEMPLATE))
    waiting = asyncio.create_task(
        kubectl(kube, "wait", "--for=condition=Ready", "pod/pod0", "-n", NS, "--timeout=20s")
    )
    await asyncio.sleep(0.5)  # let kubectl list and start watching; it also sees a later change
    assert not waiting.done()
    await api.update_status("Pod", "pod0", RUNNING, namespace=NS)
    assert (await waiting).out.strip() == "pod/pod0 condition met"
    gone = asyncio.create_task(kubectl(kube, "wait", "--for=delete", "pod/pod1", "-n", NS, "--timeout=20s"))
    await asyncio.sleep(0.5)
    await api.delete([("Pod", NS, "pod1")])
    assert (await gone).out.strip() == "pod/pod1 condition met"


async def test_python_client_lists_and_watches_claims(kube: Kube, api: ApiClient) -> None:
    from kubernetes import client, config, watch

    # resource.k8s.io through the client's generic API (its generated ResourceV1Api cannot decode
    # a ResourceClaimList in kubernetes 37: the model is named ResourceV1ResourceClaim there)

    await kubectl(kube, "apply", "-f", str(EXAMPLES_DIR / "deviceclass.yaml"))
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "gpu", "namespace": "default"},
        "spec": {
            "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}
        },
    }
    await api.apply([claim])
    api_client = config.new_client_from_config(config_file=str(kube.kubeconfig))
    objects = client.CustomObjectsApi(api_client)
    group = ("resource.k8s.io", "v1")

    def list_and_watch() -> tuple[list[str], list[tuple[str, str]]]:
        listed: Any = objects.list_cluster_custom_object(*group, "resourceclaims")
        names = [c["metadata"]["name"] for c in listed["items"]]
        seen = []
        w = watch.Watch()
        for ev in w.stream(
            objects.list_namespaced_custom_object,
            *group,
            "default",
            "resourceclaims",
            resource_version=listed["metadata"]["resourceVersion"],
            timeout_seconds=10,
        ):
            seen.append((ev["type"], ev["object"]["metadata"]["name"]))
            if len(seen) == 2:
                w.stop()
        return names, seen

    task = asyncio.create_task(asyncio.to_thread(list_and_watch))
    await asyncio.sleep(0.5)
    await api.apply([{**claim, "metadata": {"name": "gpu2", "namespace": "default"}}])
    await api.delete([("ResourceClaim", "default", "gpu")])
    names, seen = await task
    api_client.close()
    assert names == ["gpu"]
    assert seen == [("ADDED", "gpu2"), ("DELETED", "gpu")]


async def test_watch_resumes_in_order_and_filters(kube: Kube, api: ApiClient) -> None:
    await kubectl(kube, "apply", "-f", str(TEMPLATE))
    rv = await list_rv(kube, f"/api/v1/namespaces/{NS}/pods")
    await api.update_status("Pod", "pod0", RUNNING, namespace=NS)
    await api.delete([("Pod", NS, "pod1")])
    # from the list's version: exactly what happened since, in log order
    events = await _watch_lines(
        kube, f"/api/v1/namespaces/{NS}/pods?watch=1&resourceVersion={rv}", lambda e: len(e) == 2
    )
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("MODIFIED", "pod0"),
        ("DELETED", "pod1"),
    ]
    seqs = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert rv < seqs[0] < seqs[1]
    # a label selector: an object that stops matching is DELETED for the watcher, as upstream
    await api.apply(
        [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "l", "labels": {"a": "1"}}}]
    )
    rv = await list_rv(kube, "/api/v1/namespaces")
    await api.apply(
        [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "l", "labels": {"a": "2"}}}]
    )
    events = await _watch_lines(
        kube, f"/api/v1/namespaces?watch=1&labelSelector=a%3D1&resourceVersion={rv}", lambda e: len(e) == 1
    )
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("DELETED", "l")]


async def test_too_old_resource_version_is_gone_and_bookmarks(
    apiserver: ApiServer, api: ApiClient, kube: Kube
) -> None:
    small = KubeApi(apiserver, port=0, credentials=kube.credentials, watch_capacity=3)
    small.watches.bookmark_every_s = 0.2
    await small.start()
    try:
        tiny = Kube(small, kube.kubeconfig, kube.credentials)
        start = apiserver.store.position
        for i in range(5):
            await api.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": f"n{i}"}}])
        last = await apiserver.events.stream_last_seq()
        await assert_eventually(lambda: small.watches.position >= last)  # released to watchers
        events = await _watch_lines(
            tiny, f"/api/v1/namespaces?watch=1&resourceVersion={start}", lambda e: True
        )
        (error,) = events
        assert error["type"] == "ERROR"
        status = error["object"]
        assert (status["code"], status["reason"]) == (410, "Expired")
        assert status["message"].startswith(f"too old resource version: {start} (")
        now = await list_rv(tiny, "/api/v1/namespaces")
        events = await _watch_lines(
            tiny, f"/api/v1/namespaces?watch=1&resourceVersion={now}&allowWatchBookmarks=true", lambda e: True
        )
        (bookmark,) = events
        assert bookmark["type"] == "BOOKMARK" and bookmark["object"]["metadata"]["resourceVersion"] == str(
            now
        )
        # client-go's watch-list: the current objects, then the bookmark that ends them
        events = await _watch_lines(
            tiny,
            "/api/v1/namespaces?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true",
            lambda e: e[-1]["type"] == "BOOKMARK",
        )
        assert {e["object"]["metadata"]["name"] for e in events[:-1]} >= {"default", "n0", "n4"}
        assert all(e["type"] == "ADDED" for e in events[:-1])
        assert events[-1]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
    finally:
        await small.stop()


async def test_a_burst_goes_out_in_one_write_and_a_change_after_quiet_at_once(
    apiserver: ApiServer, api: ApiClient, kube: Kube
) -> None:
    """Watchers are woken together, not sooner than ``coalesce_s`` after their last write: the
    changes of a burst reach a watcher together; a change after a quiet moment goes out at once."""
    slow = KubeApi(apiserver, port=0, credentials=kube.credentials)
    slow.watches.coalesce_s = 0.6
    await slow.start()
    loop = asyncio.get_running_loop()
    try:
        own = Kube(slow, kube.kubeconfig, kube.credentials)
        rv = await list_rv(own, "/api/v1/namespaces")
        async with watching(own, f"/api/v1/namespaces?watch=1&resourceVersion={rv}") as events:
            await asyncio.sleep(0.7)  # quiet for longer than the window
            sent = loop.time()
            await api.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "first"}}])
            await assert_eventually(lambda: len(events) == 1)
            assert events[0][1] - sent < 0.4  # at once
            for name in ("b1", "b2", "b3"):  # a burst right after that write
                await api.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}])
            await assert_eventually(lambda: len(events) == 4)
        received = [(e["object"]["metadata"]["name"], t) for e, t in events]
        names = [n for n, _ in received]
        assert names == ["first", "b1", "b2", "b3"]
        burst = [t for _, t in received[1:]]
        assert max(burst) - min(burst) < 0.1  # together, in one write
        assert min(burst) - received[0][1] >= 0.5  # after the window, not one by one
    finally:
        await slow.stop()


async def test_a_backed_up_connection_is_written_by_its_own_task_in_order(
    kube: Kube, api: ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unselected JSON watchers are written to directly at each wake-up; a connection with too
    much unsent is left to its own task (which waits for the client), and back again: the events
    arrive once each, in order, either way."""
    from draflow.services.apiserver.kubeapi import watch

    rv = await list_rv(kube, "/api/v1/namespaces")
    async with watching(kube, f"/api/v1/namespaces?watch=1&resourceVersion={rv}") as events:

        async def create(name: str) -> None:
            await api.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}])

        await create("direct-1")
        await assert_eventually(lambda: len(events) == 1)
        monkeypatch.setattr(watch, "_DIRECT_LIMIT", -1)  # every connection counts as backed up
        for name in ("task-1", "task-2"):
            await create(name)
        await assert_eventually(lambda: len(events) == 3)
        monkeypatch.setattr(watch, "_DIRECT_LIMIT", 256 * 1024)
        await create("direct-2")
        await assert_eventually(lambda: len(events) == 4)
        await asyncio.sleep(0.2)
    names = [(e["type"], e["object"]["metadata"]["name"]) for e, _ in events]
    assert names == [("ADDED", n) for n in ("direct-1", "task-1", "task-2", "direct-2")]
