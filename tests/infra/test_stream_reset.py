"""A stream deleted and created again is noticed (issue 14), on a real nats-server.

Before, every reader kept its old position (~seq 12,400) and waited for events a new stream, which
numbers them from 1 again, would not have for a long time: new pods stayed Pending, kubelets kept
CDI specs of claims that no longer existed. Now a reader raises StreamReset (the stream's identity
changed, or it ends before the reader's position) and the projection store either stops or
rebuilds from the new stream.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest

from draflow.events.subjects import aggregate_subject
from draflow.infra.config import Settings
from draflow.infra.consumer import ConsumerOptions
from draflow.infra.errors import StreamReset
from draflow.infra.eventstore import EventStore
from draflow.infra.natsd import LocalNatsServer
from draflow.infra.projection_store import ProjectionStore, projection_consumer, rebuild
from draflow.services.runtime.tail import Tail
from tests.conftest import settings_for
from tests.helpers import assert_eventually
from tests.widgets import WidgetCreated, Widgets


async def _append(store: EventStore, n: int, prefix: str = "w") -> None:
    for i in range(n):
        subject = aggregate_subject("Widget", "default", f"{prefix}{i}", store.root)
        await store.append(subject, WidgetCreated(name=f"{prefix}{i}", size=i), expected_last_seq=0)


async def _recreate(store: EventStore) -> None:
    """What happened in the issue: the stream deleted, then created again (empty) by a service."""
    await store.js.delete_stream(store.stream)
    await store.ensure_stream()


async def _follow(tail: Tail, seen: list[int]) -> None:
    async for records in tail.batches():
        seen.extend(r.seq for r in records)


async def test_tail_stops_when_the_stream_is_recreated_shorter(
    settings: Settings, event_store: EventStore
) -> None:
    follower = await EventStore.open(settings, "follower")
    try:
        await _append(event_store, 5)
        tail = Tail(follower, f"{settings.root}.ev.>", 1, idle_poll_s=0.2)
        seen: list[int] = []
        task = asyncio.create_task(_follow(tail, seen))
        await assert_eventually(lambda: seen == [1, 2, 3, 4, 5], timeout_s=10)
        await _recreate(event_store)
        await _append(event_store, 2, prefix="new")
        with pytest.raises(StreamReset) as info:
            await asyncio.wait_for(task, 10)
        reset = info.value
        assert (reset.stream, reset.position, reset.last_seq) == (settings.stream, 5, 2)
        assert reset.old_identity != reset.new_identity
        message = str(reset)
        assert f"stream {settings.stream} was reset" in message
        assert "up to sequence 5" in message and "ends at sequence 2" in message
        assert seen == [1, 2, 3, 4, 5]  # nothing of the new stream was taken for the old one's
        # every other reader of this process learns it too (the service runner waits for this)
        assert await asyncio.wait_for(follower.wait_reset(), 1) is reset
        await tail.stop()
    finally:
        await follower.close()


async def test_tail_stops_when_the_recreated_stream_has_grown_past_its_position(
    settings: Settings, event_store: EventStore
) -> None:
    follower = await EventStore.open(settings, "follower")
    try:
        await _append(event_store, 3)
        tail = Tail(follower, f"{settings.root}.ev.>", 1, idle_poll_s=0.2)
        seen: list[int] = []
        task = asyncio.create_task(_follow(tail, seen))
        await assert_eventually(lambda: seen == [1, 2, 3], timeout_s=10)
        await tail.stop()
        await asyncio.wait_for(task, 5)
        await _recreate(event_store)
        await _append(event_store, 8, prefix="new")  # sequences 4..8 exist again, other events
        resumed = Tail(follower, f"{settings.root}.ev.>", tail.next_seq, idle_poll_s=0.2)
        more: list[int] = []
        with pytest.raises(StreamReset, match="created again"):
            await asyncio.wait_for(_follow(resumed, more), 10)
        assert more == []
        await resumed.stop()
    finally:
        await follower.close()


async def test_tail_stops_when_the_stream_is_deleted(settings: Settings, event_store: EventStore) -> None:
    """Deleted and not created again: the process must stop serving from memory, not go on as
    if the log were there (before, it retried for ever while answering every read)."""
    follower = await EventStore.open(settings, "follower")
    try:
        await _append(event_store, 3)
        tail = Tail(follower, f"{settings.root}.ev.>", 1, idle_poll_s=0.2)
        seen: list[int] = []
        task = asyncio.create_task(_follow(tail, seen))
        await assert_eventually(lambda: seen == [1, 2, 3], timeout_s=10)
        await event_store.js.delete_stream(event_store.stream)
        with pytest.raises(StreamReset, match="it was deleted") as info:
            await asyncio.wait_for(task, 10)
        assert (info.value.position, info.value.last_seq, info.value.new_identity) == (3, 0, "")
        assert await asyncio.wait_for(follower.wait_reset(), 1) is info.value
        await tail.stop()
    finally:
        await follower.close()


async def test_nats_server_restart_is_not_a_reset(own_nats_server: LocalNatsServer, tmp_path: Path) -> None:
    settings = settings_for(own_nats_server, tmp_path / "data")
    writer = await EventStore.open(settings, "writer")
    follower = await EventStore.open(settings, "follower")
    try:
        await _append(writer, 3)
        tail = Tail(follower, f"{settings.root}.ev.>", 1, idle_poll_s=0.2)
        seen: list[int] = []
        task = asyncio.create_task(_follow(tail, seen))
        await assert_eventually(lambda: seen == [1, 2, 3], timeout_s=10)
        identity = follower.identity
        own_nats_server.stop(signal.SIGKILL)
        await asyncio.to_thread(own_nats_server.start)
        await _append(writer, 2, prefix="after")
        await assert_eventually(lambda: seen == [1, 2, 3, 4, 5], timeout_s=30)
        assert not task.done() and follower.reset is None
        assert (await follower.stream_status()).created == identity  # the server keeps it
        await tail.stop()
        await asyncio.wait_for(task, 5)
    finally:
        await writer.close()
        await follower.close()


async def _projection(settings: Settings, path: Path) -> ProjectionStore:
    return await ProjectionStore.open(path, [Widgets()], root=settings.root)


async def test_projection_consumer_stops_on_a_reset_stream(
    settings: Settings, event_store: EventStore, tmp_path: Path
) -> None:
    db = await _projection(settings, tmp_path / "w.sqlite")
    options = ConsumerOptions(fetch_wait_s=0.2)
    try:
        await _append(event_store, 4)
        consumer = projection_consumer(event_store, db, "widgets", options)
        stop = asyncio.Event()
        running = asyncio.create_task(consumer.run(stop))
        await assert_eventually(lambda: _checkpoint(db, "widgets", 4), timeout_s=15)
        await _recreate(event_store)
        await _append(event_store, 1, prefix="new")
        with pytest.raises(StreamReset) as info:
            await asyncio.wait_for(running, 30)
        assert (info.value.position, info.value.last_seq) == (4, 1)
        # nothing was dropped or applied from the new stream: the operator decides
        assert await db.checkpoint("widgets") == 4
        assert len(await db.rows("widgets")) == 4
        # a one-off rebuild refuses the same way, or starts over when asked to
        with pytest.raises(StreamReset):
            await rebuild(event_store, db, "widgets")
        assert await rebuild(event_store, db, "widgets", on_reset="rebuild") == 1
        assert list(await db.rows("widgets")) == [
            aggregate_subject("Widget", "default", "new0", settings.root)
        ]
    finally:
        await db.close()


async def test_projection_consumer_rebuilds_from_a_reset_stream(
    settings: Settings, event_store: EventStore, tmp_path: Path
) -> None:
    db = await _projection(settings, tmp_path / "w.sqlite")
    options = ConsumerOptions(fetch_wait_s=0.2)
    stop = asyncio.Event()
    try:
        await _append(event_store, 4)
        consumer = projection_consumer(event_store, db, "widgets", options, on_reset="rebuild")
        running = asyncio.create_task(consumer.run(stop))
        await assert_eventually(lambda: _checkpoint(db, "widgets", 4), timeout_s=15)
        await _recreate(event_store)
        await _append(event_store, 2, prefix="new")
        new_rows = {aggregate_subject("Widget", "default", f"new{i}", settings.root) for i in range(2)}

        async def rebuilt() -> bool:
            return set(await db.rows("widgets")) == new_rows and await db.checkpoint("widgets") == 2

        await assert_eventually(rebuilt, timeout_s=30)
        assert not running.done()
        stop.set()
        await asyncio.wait_for(running, 10)
    finally:
        stop.set()
        await db.close()


async def _checkpoint(db: ProjectionStore, consumer: str, seq: int) -> bool:
    return await db.checkpoint(consumer) == seq
