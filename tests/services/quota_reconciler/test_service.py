"""The quota reconciler on a real server starts from the object fold's snapshot: the same index,
the same usage and the same decisions (nothing to write) as a reconciler that folds the whole log."""

from __future__ import annotations

import asyncio

from draflow.infra.eventstore import EventStore
from draflow.infra.snapshots import SnapshotPolicy
from draflow.services.apiserver.server import ApiServer
from draflow.services.quota_reconciler.service import QuotaReconciler
from draflow.services.runtime.client import ApiClient
from tests.helpers import assert_eventually
from tests.services.apiserver.test_quota import CLASS, QUOTA, claim, pod


async def _run_until_caught_up(
    events: EventStore, *, load: bool, until: int
) -> tuple[QuotaReconciler, asyncio.Event, asyncio.Task[None], ApiClient]:
    client = await ApiClient.connect(events.settings, actor="quota-reconciler", timeout_s=10.0)
    rec = QuotaReconciler(events, client)
    rec.policy = SnapshotPolicy(load=load)
    stop = asyncio.Event()
    task = asyncio.create_task(rec.run(stop))

    async def there() -> bool:
        return rec.position >= until

    await assert_eventually(there, timeout_s=15, interval_s=0.05)
    return rec, stop, task, client


async def _halt(stop: asyncio.Event, task: asyncio.Task[None], client: ApiClient) -> None:
    stop.set()
    await asyncio.wait_for(task, 5)
    await client.close()


async def test_the_reconciler_starts_from_the_snapshot_and_decides_as_a_full_fold(
    api: ApiClient, apiserver: ApiServer, event_store: EventStore
) -> None:
    results = await api.apply([CLASS, QUOTA, claim("a", 2), pod("p", 1)])
    assert [r.error for r in results] == [None] * 4
    await apiserver.store.wait_position(await event_store.stream_last_seq())
    cut = await apiserver.store.snapshotter.save_now()
    assert cut is not None and cut == await event_store.stream_last_seq()
    await api.delete([("ResourceClaim", "default", "a")])
    assert [r.error for r in await api.apply([claim("b", 1)])] == [None]

    # the first run writes the status the whole history implies
    first = await _run_until_caught_up(event_store, load=True, until=await event_store.stream_last_seq())
    rec = first[0]
    assert rec.snapshot_position == cut

    async def written() -> bool:
        quota = await api.get("ResourceQuota", "gpu", namespace="default")
        used = (quota.get("status") or {}).get("used") or {}
        return used.get("count/resourceclaims.resource.k8s.io") == "1"

    await assert_eventually(written, timeout_s=10, interval_s=0.05)
    await _halt(*first[1:])

    last = await event_store.stream_last_seq()
    runs = [await _run_until_caught_up(event_store, load=load, until=last) for load in (True, False)]
    try:
        restored, full = runs[0][0], runs[1][0]
        assert restored.snapshot_position == cut and full.snapshot_position == 0
        assert restored.index.image() == full.index.image()
        assert restored.state.namespace_usage("default") == full.state.namespace_usage("default")
        assert restored.writes == full.writes == 0  # both see the status as it should be
        assert await event_store.stream_last_seq() == last
    finally:
        for _, stop, task, client in runs:
            await _halt(stop, task, client)
