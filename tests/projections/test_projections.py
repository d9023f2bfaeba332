"""Projections: pure reducers, SQLite (WAL) with the checkpoint in the same transaction, rebuilds."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from draflow.events.envelope import Event
from draflow.infra.consumer import ConsumerOptions
from draflow.infra.eventstore import EventStore
from draflow.infra.projection_store import ProjectionStore, projection_consumer, rebuild
from draflow.projections.base import MemoryView, fold, subject_matches
from draflow.projections.heads import AggregateHead, Heads
from tests.helpers import assert_eventually
from tests.infra.test_consumer import running, wait_pending_zero
from tests.widgets import (
    SizeTotals,
    Widget,
    WidgetCreated,
    WidgetDeleted,
    WidgetExploded,
    WidgetResized,
    Widgets,
)

FAST = ConsumerOptions(batch=50, fetch_wait_s=0.2, retry_base_s=0.05, retry_max_s=0.2, max_deliver=3)


async def populate(store: EventStore, widgets: int = 30, rounds: int = 5) -> int:
    """Creates, resizes, a poison event and deletions over several namespaces; returns the count."""
    versions: dict[str, int] = {}
    n = 0
    for r in range(rounds):
        for w in range(widgets):
            subject = store.subject("Widget", f"ns{w % 3}", f"w{w}.example")
            ev: Event
            if r == 0:
                ev = WidgetCreated(name=f"w{w}", size=w)
            elif r == 2 and w == 7:
                ev = WidgetExploded(reason="bad firmware")
            elif r == rounds - 1 and w % 5 == 0:
                ev = WidgetDeleted()
            else:
                ev = WidgetResized(size=w * 10 + r)
            (versions[subject],) = await store.append(subject, ev, expected_last_seq=versions.get(subject, 0))
            n += 1
    return n


async def test_sqlite_is_wal_and_checkpoint_commits_with_state(
    event_store: EventStore, tmp_path: Path
) -> None:
    db = await ProjectionStore.open(tmp_path / "p.sqlite", [Widgets()], root=event_store.root)
    try:
        async with db.db.execute("PRAGMA journal_mode") as cur:
            row = await cur.fetchone()
        assert row is not None and row[0] == "wal"
        subject = event_store.subject("Widget", "d", "w")
        (s1,) = await event_store.append(subject, WidgetCreated(name="w", size=1), expected_last_seq=0)
        (s2,) = await event_store.append(subject, WidgetResized(size=2), expected_last_seq=s1)
        envs = await event_store.events(subject)
        assert await db.apply("c", envs[:1]) == 1
        # a failure inside the transaction: neither the row nor the checkpoint moves
        with pytest.raises(RuntimeError):
            async with db.transaction("c") as batch:
                await batch.apply(envs[1])
                raise RuntimeError("crash before commit")
        assert await db.checkpoint("c") == s1
        assert await db.get("widgets", subject) == Widget(name="w", size=1)
        # redelivered events at or below the checkpoint are skipped
        assert await db.apply("c", envs) == 1
        assert await db.apply("c", envs) == 0
        assert await db.checkpoint("c") == s2
        assert await db.get("widgets", subject) == Widget(name="w", size=2, resizes=1)
    finally:
        await db.close()


async def test_rebuild_from_sequence_1_is_byte_identical(event_store: EventStore, tmp_path: Path) -> None:
    total = await populate(event_store)
    live = await ProjectionStore.open(
        tmp_path / "live.sqlite", [Widgets(), SizeTotals()], root=event_store.root
    )
    consumer = projection_consumer(event_store, live, "widgets-live", FAST)
    try:
        async with running(consumer):
            await assert_eventually(lambda: _checkpoint_is(live, "widgets-live", total), timeout_s=30)
            assert await wait_pending_zero(consumer)
        live_rows = await live.rows("widgets")
        assert len(live_rows) == 30 - 6 and event_store.subject("Widget", "ns1", "w7.example") in live_rows
        # the reducer refused the poison event: it was dead-lettered, not applied
        assert live_rows[event_store.subject("Widget", "ns1", "w7.example")].resizes == 3  # of 4 events
        # a fresh file rebuilt by replaying the log from sequence 1
        fresh = await ProjectionStore.open(
            tmp_path / "fresh.sqlite", [Widgets(), SizeTotals()], root=event_store.root
        )
        try:
            assert await rebuild(event_store, fresh, "widgets-live") == total - 1
            assert await fresh.dump() == await live.dump()
        finally:
            await fresh.close()
        # and the same through the durable consumer: a lost database is re-created from the log
        (tmp_path / "again").mkdir()
        again = await ProjectionStore.open(
            tmp_path / "again" / "p.sqlite", [Widgets(), SizeTotals()], root=event_store.root
        )
        try:
            consumer2 = projection_consumer(event_store, again, "widgets-live", FAST)
            async with running(consumer2):
                await assert_eventually(lambda: _checkpoint_is(again, "widgets-live", total), timeout_s=30)
            assert await again.dump() == await live.dump()
        finally:
            await again.close()
    finally:
        await live.close()


async def _checkpoint_is(db: ProjectionStore, consumer: str, seq: int) -> bool:
    return await db.checkpoint(consumer) == seq


async def test_pure_fold_matches_sqlite(event_store: EventStore, tmp_path: Path) -> None:
    await populate(event_store, widgets=6, rounds=3)
    envs = await event_store.events(event_store.all_events)
    view = MemoryView(Widgets(), root=event_store.root)
    view.apply(e for e in envs if not isinstance(e.data, WidgetExploded))
    db = await ProjectionStore.open(tmp_path / "p.sqlite", [Widgets()], root=event_store.root)
    try:
        await db.apply("c", envs)
        assert await db.rows("widgets") == dict(sorted(view.rows.items()))
        view.apply(envs)  # replays below the checkpoint are ignored
        assert view.checkpoint == envs[-1].seq
    finally:
        await db.close()
    heads = fold(Heads(event_store.root), {}, envs, event_store.root)
    head = heads[event_store.subject("Widget", "ns0", "w0.example")]
    assert head == AggregateHead(
        kind="Widget",
        namespace="ns0",
        name="w0.example",
        version=13,  # w0's events are the 1st, 7th and 13th of 6 widgets x 3 rounds
        events=3,
        last_type="WidgetDeleted",
        first_seq=1,
    )


def test_subject_matching() -> None:
    assert subject_matches("a.*.c", "a.b.c") and not subject_matches("a.*.c", "a.b.d")
    assert subject_matches("a.>", "a.b.c") and not subject_matches("a.>", "a")
    assert not subject_matches("a.b", "a.b.c") and subject_matches("a.b.c", "a.b.c")


async def test_concurrent_writers_to_one_file_serialise(event_store: EventStore, tmp_path: Path) -> None:
    """Two handles on one SQLite file (two service instances) never interleave their transactions."""
    await populate(event_store, widgets=10, rounds=2)
    envs = await event_store.events(event_store.all_events)
    a = await ProjectionStore.open(tmp_path / "shared.sqlite", [Widgets()], root=event_store.root)
    b = await ProjectionStore.open(tmp_path / "shared.sqlite", [Widgets()], root=event_store.root)
    try:
        applied = await asyncio.gather(a.apply("c", envs), b.apply("c", envs))
        assert sorted(applied) == [0, len(envs)]
        assert await a.checkpoint("c") == envs[-1].seq
    finally:
        await a.close()
        await b.close()
