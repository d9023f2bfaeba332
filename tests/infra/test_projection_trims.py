"""A durable projection consumer and a trim (real server, SQLite): a consumer whose checkpoint is
older than the stream's first event (history archived while it was stopped), or that is behind
when a trim removes what it has not been delivered yet, applies the missing events from the
archive: its projection ends equal to a rebuild from sequence 1, never silently short."""

from __future__ import annotations

from pathlib import Path

from draflow.events.envelope import Event
from draflow.infra.eventstore import EventStore
from draflow.infra.projection_store import ProjectionStore, projection_consumer, rebuild
from draflow.services.runtime.archiving import archive_and_trim
from tests.builders.history import EVERYTHING_OLD, LINES, publish, snapshot_at
from tests.infra.test_consumer import running, wait_pending_zero
from tests.projections.test_projections import FAST, populate
from tests.widgets import SizeTotals, WidgetResized, Widgets


async def more_resizes(store: EventStore, rounds: int) -> None:
    for r in range(rounds):
        for w in range(30):
            if w % 5 and w != 7:  # the deleted ones and the exploded one keep their fate
                subject = store.subject("Widget", f"ns{w % 3}", f"w{w}.example")
                ev: Event = WidgetResized(size=1000 * (r + 1) + w)
                await store.append(subject, ev, expected_last_seq=None)


async def archive_everything(store: EventStore) -> int:
    """Snapshot at the log's end, archive and trim all but 5 events; the new first sequence."""
    await snapshot_at(store, (await store.stream_status()).last_seq)
    run = await archive_and_trim(store, EVERYTHING_OLD, margin=5)
    return run.first_after


async def projections(store: EventStore, path: Path) -> ProjectionStore:
    return await ProjectionStore.open(path, [Widgets(), SizeTotals()], root=store.root)


async def rebuilt(store: EventStore, path: Path) -> ProjectionStore:
    """The projections folded from sequence 1 (across the archive): what the consumer must reach."""
    db = await projections(store, path)
    await rebuild(store, db, "rebuilt")
    return db


async def same_rows(a: ProjectionStore, b: ProjectionStore) -> None:
    for name in ("widgets", "size_totals"):
        assert await a.rows(name) == await b.rows(name), name


async def test_a_checkpoint_before_the_stream_resumes_from_the_archive(
    event_store: EventStore, tmp_path: Path
) -> None:
    await publish(event_store, LINES)
    await populate(event_store)
    live = await projections(event_store, tmp_path / "live.sqlite")
    try:
        consumer = projection_consumer(event_store, live, "widgets", FAST)
        await consumer.ensure()
        async with running(consumer):
            assert await wait_pending_zero(consumer)
        checkpoint = await live.checkpoint("widgets")
        # while the consumer is stopped: more history, then all of it archived
        await more_resizes(event_store, 8)
        first = await archive_everything(event_store)
        assert first > checkpoint + 100
        consumer = projection_consumer(event_store, live, "widgets", FAST)
        await consumer.ensure()
        async with running(consumer):
            assert await wait_pending_zero(consumer)
        full = await rebuilt(event_store, tmp_path / "full.sqlite")
        try:
            await same_rows(live, full)
            w1 = await live.get("widgets", event_store.subject("Widget", "ns1", "w1.example"))
            assert w1.size == 8001  # the last resize, from the stream
        finally:
            await full.close()
    finally:
        await live.close()


async def test_a_trim_ahead_of_a_running_consumer_is_applied_from_the_archive(
    event_store: EventStore, tmp_path: Path
) -> None:
    await publish(event_store, LINES)
    await populate(event_store)
    await more_resizes(event_store, 8)
    live = await projections(event_store, tmp_path / "live.sqlite")
    try:
        consumer = projection_consumer(event_store, live, "widgets", FAST)
        await consumer.ensure()
        assert await consumer.poll() == FAST.batch  # the consumer is on its way ...
        delivered = await live.checkpoint("widgets")
        first = await archive_everything(event_store)  # ... when a trim removes what follows
        assert first > delivered + 100
        while await consumer.poll():
            pass
        full = await rebuilt(event_store, tmp_path / "full.sqlite")
        try:
            await same_rows(live, full)
        finally:
            await full.close()
    finally:
        await live.close()
