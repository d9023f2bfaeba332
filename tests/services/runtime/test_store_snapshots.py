"""The object store (apiserver, controllers' caches) starts from a snapshot on a real server."""

from __future__ import annotations

import json
import random
from pathlib import Path

from draflow.events.api.codec import object_meta
from draflow.events.api.registry import custom_crds, unregister_custom
from draflow.infra.eventstore import EventStore
from draflow.infra.natsd import LocalNatsServer
from draflow.infra.snapshots import SnapshotPolicy
from draflow.services.apiserver.server import ApiServer
from draflow.services.runtime.client import ApiClient
from draflow.services.runtime.store import ApiStore
from tests.builders.crds import frobnicator_crd, make_frob
from tests.conftest import settings_for
from tests.helpers import assert_eventually
from tests.paths import GOLDEN

LINES = (GOLDEN / "basic-claim-template.jsonl").read_text().splitlines()[1:]


async def _publish(store: EventStore, lines: list[str]) -> None:
    for line in lines:
        rec = json.loads(line)
        subject = store.root + rec["subject"][len("draflow") :]
        env = dict(rec["envelope"], subject=subject)
        await store.js.publish(subject, json.dumps(env).encode(), headers=rec["headers"])


async def _started(events: EventStore, **kw: object) -> ApiStore:
    store = ApiStore(events, **kw)  # type: ignore[arg-type]
    await store.start(timeout_s=30)
    return store


async def test_snapshot_plus_tail_equals_a_full_fold_at_random_cuts(
    nats_server: LocalNatsServer, tmp_path: Path
) -> None:
    rng = random.Random(2024)
    for cut in sorted(rng.sample(range(1, len(LINES)), 4)):
        settings = settings_for(nats_server, tmp_path / str(cut))
        events = await EventStore.open(settings, "test")
        try:
            await _publish(events, LINES[:cut])
            writer = await _started(events, snapshot_writer=True)
            assert await writer.snapshotter.save_now() == cut
            await writer.stop()
            await _publish(events, LINES[cut:])

            restored = await _started(events)
            full = await _started(events, policy=SnapshotPolicy(load=False))
            try:
                assert restored.snapshot_position == cut and full.snapshot_position == 0
                assert restored.position == full.position == len(LINES)
                assert restored.index.image() == full.index.image()
            finally:
                await restored.stop()
                await full.stop()
        finally:
            for name in (settings.stream, settings.dlq_stream, f"{settings.stream}_SNAPSHOTS"):
                await events.js.delete_stream(name)
            await events.close()


async def test_listeners_hear_the_restored_objects_and_snapshots_are_written_by_policy(
    event_store: EventStore,
) -> None:
    await _publish(event_store, LINES[:12])
    writer = await _started(
        event_store, snapshot_writer=True, policy=SnapshotPolicy(every_events=5, every_s=0)
    )
    try:
        await _publish(event_store, LINES[12:20])
        await writer.wait_position(20)
        await assert_eventually(lambda: writer.snapshotter.saved_at == 20, timeout_s=10)
        assert writer.snapshotter.written <= 2  # at 12 and/or 20, not at each of the 8 events
    finally:
        await writer.stop()
    heard: list[tuple[str, str, str]] = []
    reader = ApiStore(event_store)
    reader.listen(lambda kind, ns, name, change: heard.append((kind, ns, name)))
    await reader.start(timeout_s=30)
    try:
        assert reader.snapshot_position == 20
        expected = {(k, ns, n) for k in reader.index.kinds() for ns, n in _keys(reader, k)}
        assert set(heard) == expected and ("Pod", "basic-resourceclaimtemplate", "pod0") in expected
    finally:
        await reader.stop()


def _keys(store: ApiStore, kind: str) -> list[tuple[str, str]]:
    return [(object_meta(o).namespace or "", object_meta(o).name) for o in store.index.items(kind)]


async def test_the_scheduler_starts_from_the_objects_snapshot(event_store: EventStore) -> None:
    """The scheduler folds a subset of the same objects: it loads the snapshot the apiserver
    wrote, keeps its kinds, and ends where a full fold ends (its index and its queue)."""
    from draflow.services.scheduler.framework import Scheduler
    from draflow.services.scheduler.plugins import default_plugins
    from draflow.services.scheduler.service.snapshot import Snapshot

    cut = 46  # pod2 is pending (unschedulable) at this point of the recording
    await _publish(event_store, LINES[:cut])
    writer = await _started(event_store, snapshot_writer=True)
    assert await writer.snapshotter.save_now() == cut
    await writer.stop()
    views = []
    for policy in (SnapshotPolicy(), SnapshotPolicy(load=False)):
        view = Snapshot(event_store, Scheduler(plugins=default_plugins()))
        view.policy = policy
        await view.start(timeout_s=30)
        views.append(view)
    try:
        restored, full = views
        assert restored.snapshot_position == cut and full.snapshot_position == 0
        assert restored.index.image() == full.index.image()
        assert len(restored.core.queue) == len(full.core.queue) == 1
        assert "basic-resourceclaimtemplate/pod2" in restored.core.queue
    finally:
        for view in views:
            await view.stop()


async def test_custom_objects_are_in_the_snapshot(
    api: ApiClient, apiserver: ApiServer, event_store: EventStore
) -> None:
    """A system with CRDs is snapshotted too: a restored store holds the CRD and its objects, as
    a full fold does, and folds the tail's custom objects (the kind is served from the snapshot)."""
    before = set(custom_crds())
    try:
        applied = await api.apply([frobnicator_crd(), make_frob("three", 3), make_frob("one", 1)])
        assert [r.error for r in applied] == [None] * 3
        await apiserver.store.wait_position(await event_store.stream_last_seq())
        cut = await apiserver.store.snapshotter.save_now()
        assert cut is not None and cut == await event_store.stream_last_seq()
        assert [r.error for r in await api.apply([make_frob("five", 5)])] == [None]
        await api.delete([("ClaimParameters", "default", "one")])

        restored = await _started(event_store)
        full = await _started(event_store, policy=SnapshotPolicy(load=False))
        try:
            assert restored.snapshot_position == cut and full.snapshot_position == 0
            assert restored.index.image() == full.index.image()
            names = [object_meta(o).name for o in restored.index.items("ClaimParameters")]
            assert names == ["five", "three"]
        finally:
            await restored.stop()
            await full.stop()
    finally:
        for name in set(custom_crds()) - before:
            unregister_custom(name)
