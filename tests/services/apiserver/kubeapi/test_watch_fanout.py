"""The watch fan-out's cost does not grow per watcher: with many watchers of a few shapes, a change
is encoded once per (event type, version, format) and selected once per distinct selector; every
watcher still receives exactly its events, a Table watch its column definitions once."""

from __future__ import annotations

import asyncio
import json
import ssl
from collections import Counter
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest

from draflow.services.apiserver.kubeapi import encoding, watchcache
from draflow.services.apiserver.kubeapi.server import KubeApi
from draflow.services.apiserver.server import ApiServer
from draflow.services.runtime.client import ApiClient
from tests.helpers import assert_eventually
from tests.services.apiserver.kubeapi.conftest import Kube, http, list_rv, watching

TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
PER_SHAPE = 8


def _counting(monkeypatch: pytest.MonkeyPatch, calls: Counter[str], module: Any, name: str) -> None:
    real: Callable[..., Any] = getattr(module, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[name] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)


async def test_a_change_is_encoded_once_per_shape_not_per_watcher(
    kube: Kube, api: ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, body = await http(kube, "GET", "/api/v1/namespaces")
    assert code == 200
    rv = json.loads(body)["metadata"]["resourceVersion"]
    base = f"/api/v1/namespaces?watch=1&resourceVersion={rv}"
    shapes = {  # path, Accept
        "json": (base, "application/json"),
        "selected": (base + "&labelSelector=team%3Da", "application/json"),
        "table": (base, TABLE),
    }
    ctx = ssl.create_default_context(cadata=kube.credentials.ca_pem.decode())
    headers = {"Authorization": f"Bearer {kube.token}"}
    received: dict[tuple[str, int], list[dict[str, Any]]] = {}
    cache = kube.server.watches

    async def watch(session: aiohttp.ClientSession, shape: str, i: int) -> None:
        path, accept = shapes[shape]
        events = received.setdefault((shape, i), [])
        async with session.get(kube.url + path, headers={**headers, "Accept": accept}, ssl=ctx) as resp:
            assert resp.status == 200
            async for line in resp.content:
                events.append(json.loads(line))

    async with aiohttp.ClientSession() as session:
        tasks = [asyncio.create_task(watch(session, s, i)) for s in shapes for i in range(PER_SHAPE)]
        try:
            await assert_eventually(lambda: cache.watchers() == len(tasks))
            assert cache.feeds() == len(shapes)
            calls: Counter[str] = Counter()
            _counting(monkeypatch, calls, encoding, "object_json")
            _counting(monkeypatch, calls, watchcache, "table_json")
            _counting(monkeypatch, calls, watchcache, "event_line")
            stats = Counter(cache.stats)
            ns = {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": "fan", "labels": {"team": "a"}},
            }
            await api.apply([ns])
            await assert_eventually(lambda: all(len(e) == 1 for e in received.values()))
            ns["metadata"]["labels"] = {"team": "b"}  # type: ignore[index]
            await api.apply([ns])
            await assert_eventually(lambda: all(len(e) == 2 for e in received.values()))
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    # what each watcher saw: the selected ones see the namespace leave their selection as DELETED
    for (shape, _), events in received.items():
        types = [e["type"] for e in events]
        assert types == (["ADDED", "DELETED"] if shape == "selected" else ["ADDED", "MODIFIED"]), shape
        if shape == "table":
            first, second = (e["object"] for e in events)
            assert first["kind"] == "Table" and first["columnDefinitions"][0]["name"] == "NAME"
            assert second["columnDefinitions"] == [] and second["rows"][0]["cells"][0] == "fan"
        else:
            assert {e["object"]["metadata"]["name"] for e in events} == {"fan"}
    # the cost, independent of PER_SHAPE: two object versions encoded once each; the lines are
    # ADDED as JSON and as Table, then MODIFIED as JSON and as Table and DELETED as JSON
    assert calls["object_json"] == 2
    assert calls["table_json"] == 2
    assert calls["event_line"] == 5
    assert cache.stats["lines"] - stats["lines"] == 5
    assert cache.stats["selections"] - stats["selections"] == 2  # one selected feed, two changes


async def test_the_window_grows_with_the_cost_of_the_last_wake_up_up_to_its_bound(
    apiserver: ApiServer, api: ApiClient, kube: Kube, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wake-up's writes that took long make the next wait longer (here: any cost at all, up to
    ``coalesce_max_s``): the changes meanwhile reach the watcher together, after that bound."""
    monkeypatch.setattr(watchcache, "COST_FACTOR", 1e9)
    server = KubeApi(apiserver, port=0, credentials=kube.credentials)
    server.watches.coalesce_s = 0.0
    server.watches.coalesce_max_s = 0.6
    await server.start()
    try:
        own = Kube(server, kube.kubeconfig, kube.credentials)
        rv = await list_rv(own, "/api/v1/namespaces")
        async with watching(own, f"/api/v1/namespaces?watch=1&resourceVersion={rv}") as events:
            await asyncio.sleep(0.7)
            await api.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "w0"}}])
            await assert_eventually(lambda: len(events) == 1)
            assert server.watches.last_cost_s > 0 and server.watches.window_s() == 0.6
            for name in ("w1", "w2"):
                await api.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}])
            await assert_eventually(lambda: len(events) == 3)
        received = [(e["object"]["metadata"]["name"], t) for e, t in events]
        assert [n for n, _ in received] == ["w0", "w1", "w2"]
        assert received[2][1] - received[1][1] < 0.1  # together
        assert received[1][1] - received[0][1] >= 0.5  # after the grown window
    finally:
        await server.stop()


async def test_a_bookmark_never_claims_a_change_still_waiting_for_the_wake_up(
    apiserver: ApiServer, api: ApiClient, kube: Kube
) -> None:
    """Bookmarks (one timer for all) fire while a change waits out the window: they carry a version
    before it, so a client resuming from a bookmark does not skip the change."""
    server = KubeApi(apiserver, port=0, credentials=kube.credentials)
    server.watches.coalesce_s = 0.8
    server.watches.bookmark_every_s = 0.15
    await server.start()
    try:
        own = Kube(server, kube.kubeconfig, kube.credentials)
        rv = await list_rv(own, "/api/v1/namespaces")
        query = f"?watch=1&resourceVersion={rv}&allowWatchBookmarks=true"
        async with watching(own, "/api/v1/namespaces" + query) as received:
            await asyncio.sleep(0.9)  # quiet: the next change goes out at once
            await api.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "now"}}])
            await api.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "later"}}])
            await assert_eventually(lambda: len([e for e, _ in received if e["type"] == "ADDED"]) == 2)
        events = [(e["type"], int(e["object"]["metadata"]["resourceVersion"])) for e, _ in received]
        added = [i for i, (t, _) in enumerate(events) if t == "ADDED"]
        between = [v for t, v in events[added[0] + 1 : added[1]] if t == "BOOKMARK"]
        assert between, events  # bookmarks came while "later" waited out the window
        assert all(v < events[added[1]][1] for v in between), events
    finally:
        await server.stop()
