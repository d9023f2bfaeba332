"""ResourceQuota through a real apiserver and nats-server: admission refuses over-quota claims and
pods (nothing appended), the quota-reconciler service writes ``status`` and, restarted, rebuilds
the same usage without appending anything."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from infra.eventstore import EventStore
from services.apiserver.server import ApiServer
from services.quota_reconciler.service import QuotaReconciler
from services.runtime.client import ApiClient
from tests.helpers import assert_eventually

QUOTA = {
    "apiVersion": "v1",
    "kind": "ResourceQuota",
    "metadata": {"name": "gpu", "namespace": "default"},
    "spec": {
        "hard": {
            "count/resourceclaims.resource.k8s.io": 2,
            "gpu.example.com.deviceclass.resource.k8s.io/devices": 3,
            "requests.example.com/gpu": 3,
        }
    },
}
CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "gpu.example.com"},
    "spec": {"extendedResourceName": "example.com/gpu"},
}


def claim(name: str, count: int) -> dict[str, Any]:
    request = {"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com", "count": count}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {"requests": [request]}},
    }


def pod(name: str, gpus: int) -> dict[str, Any]:
    container = {"name": "c", "image": "x", "resources": {"limits": {"example.com/gpu": gpus}}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [container]},
    }


async def _ok(api: ApiClient, *manifests: dict[str, Any]) -> None:
    results = await api.apply(list(manifests))
    assert [r.error for r in results] == [None] * len(manifests), results


async def eventually(check: Callable[[], Awaitable[bool]], timeout_s: float = 10.0) -> None:
    await assert_eventually(check, timeout_s=timeout_s, interval_s=0.05)


async def test_over_quota_claim_and_pod_are_refused_and_append_nothing(
    api: ApiClient, apiserver: ApiServer, event_store: EventStore
) -> None:
    await _ok(api, CLASS, QUOTA, claim("a", 2))
    before = await event_store.stream_last_seq()
    [refused] = await api.apply([claim("b", 2)])
    assert refused.error is not None and refused.error.code == 403
    assert refused.error.message == (
        'resourceclaims.resource.k8s.io "b" is forbidden: exceeded quota: gpu, requested: '
        "gpu.example.com.deviceclass.resource.k8s.io/devices=2,requests.example.com/gpu=2, "
        "used: gpu.example.com.deviceclass.resource.k8s.io/devices=2,requests.example.com/gpu=2, "
        "limited: gpu.example.com.deviceclass.resource.k8s.io/devices=3,requests.example.com/gpu=3"
    )
    [refused_pod] = await api.apply([pod("p", 2)])
    assert refused_pod.error is not None and "exceeded quota: gpu" in refused_pod.error.message
    assert await event_store.stream_last_seq() == before
    # within one request, each admitted object counts for the next: the third is refused
    results = await api.apply([claim("c", 1), claim("d", 1)])
    assert results[0].outcome == "created"
    assert results[1].error is not None
    assert "requested: count/resourceclaims.resource.k8s.io=1" in results[1].error.message
    # deleting frees the quota again
    await api.delete([("ResourceClaim", "default", "a")])
    await _ok(api, claim("d", 1))


async def test_quota_in_the_same_request_applies_at_once(api: ApiClient, apiserver: ApiServer) -> None:
    results = await api.apply([CLASS, QUOTA, claim("a", 2), claim("b", 2)])
    assert [r.outcome for r in results[:3]] == ["created"] * 3
    assert results[3].error is not None and results[3].error.code == 403


@pytest.fixture
async def reconciler_run(
    event_store: EventStore, apiserver: ApiServer
) -> AsyncIterator[Callable[[], Awaitable[tuple[QuotaReconciler, Callable[[], Awaitable[None]]]]]]:
    running: list[tuple[asyncio.Event, asyncio.Task[None], ApiClient]] = []

    async def start() -> tuple[QuotaReconciler, Callable[[], Awaitable[None]]]:
        client = await ApiClient.connect(event_store.settings, actor="quota-reconciler", timeout_s=10.0)
        rec = QuotaReconciler(event_store, client)
        stop = asyncio.Event()
        task = asyncio.create_task(rec.run(stop))
        running.append((stop, task, client))

        async def halt() -> None:
            stop.set()
            await asyncio.wait_for(task, 5)
            await client.close()
            running.remove((stop, task, client))

        return rec, halt

    yield start
    for stop, task, client in list(running):
        stop.set()
        await asyncio.wait_for(task, 5)
        await client.close()


async def test_reconciler_writes_used_and_restarts_without_appending(
    api: ApiClient, event_store: EventStore, reconciler_run: Any
) -> None:
    await _ok(api, CLASS, QUOTA, claim("a", 2), pod("p", 1))
    rec, halt = await reconciler_run()
    want = {
        "count/resourceclaims.resource.k8s.io": "1",
        "gpu.example.com.deviceclass.resource.k8s.io/devices": "3",
        "requests.example.com/gpu": "3",
    }

    async def used() -> dict[str, Any]:
        quota = await api.get("ResourceQuota", "gpu", namespace="default")
        return dict((quota.get("status") or {}).get("used") or {})

    async def settled() -> bool:
        return await used() == want

    await eventually(settled)
    quota = await api.get("ResourceQuota", "gpu", namespace="default")
    assert quota["status"]["hard"] == {k: str(v) for k, v in QUOTA["spec"]["hard"].items()}  # type: ignore[index]
    # the claim moves usage; the reconciler follows
    await api.delete([("ResourceClaim", "default", "a")])
    want = {**want, "count/resourceclaims.resource.k8s.io": "0"}
    want["gpu.example.com.deviceclass.resource.k8s.io/devices"] = "1"
    want["requests.example.com/gpu"] = "1"
    await eventually(settled)
    await halt()

    replayed = await event_store.stream_last_seq()
    rec2, halt2 = await reconciler_run()
    await eventually(lambda: _at(rec2, replayed))
    # Its replay stopped at the log's end as it was then; an event appended now is folded by the
    # loop, which starts only after the post-replay status writes: once it is folded, a wrong
    # write would be in the log. The marker is a DeviceClass no quota counts.
    marker = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "marker"}}
    await _ok(api, marker)
    last = await event_store.stream_last_seq()
    await eventually(lambda: _at(rec2, last))
    assert rec2.writes == 0
    assert await event_store.stream_last_seq() == last
    assert rec2.state.namespace_usage("default") == rec.state.namespace_usage("default")
    assert await used() == want
    await halt2()


async def _at(rec: QuotaReconciler, seq: int) -> bool:
    return rec.position >= seq


async def test_reconciler_waits_for_the_apiserver(event_store: EventStore) -> None:
    """Started while no apiserver answers (honcho starts everything at once), it keeps retrying."""

    async def serving() -> ApiServer:
        server = ApiServer(await EventStore.open(event_store.settings, "apiserver"))
        await server.start()
        return server

    async def halt(server: ApiServer) -> None:
        await server.stop()
        await server.events.close()

    first = await serving()
    client = await ApiClient.connect(event_store.settings, timeout_s=5.0, wait_for_server_s=0.2)
    try:
        await _ok(client, CLASS, QUOTA, claim("a", 1))
        await halt(first)
        rec = QuotaReconciler(event_store, client)
        stop = asyncio.Event()
        task = asyncio.create_task(rec.run(stop))
        await eventually(lambda: _flag(rec.retry_due))
        assert rec.writes == 0 and not task.done()
        second = await serving()
        try:
            await eventually(lambda: _flag(rec.writes == 1))
            quota = await client.get("ResourceQuota", "gpu", namespace="default")
            assert quota["status"]["used"]["count/resourceclaims.resource.k8s.io"] == "1"
        finally:
            stop.set()
            await asyncio.wait_for(task, 5)
            await halt(second)
    finally:
        await client.close()


async def _flag(value: bool) -> bool:
    return value
