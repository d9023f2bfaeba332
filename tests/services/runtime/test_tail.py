"""Following the log: republished records taken as they come, gaps read back from the log."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from draflow.infra.eventstore import EventStore, RawRecord
from draflow.services.runtime.tail import Tail
from tests.shells import eventually
from tests.widgets import WidgetCreated, WidgetResized


async def _collect(tail: Tail, out: list[RawRecord]) -> None:
    async for records in tail.batches():
        out.extend(records)


@contextlib.asynccontextmanager
async def _following(tail: Tail) -> AsyncIterator[list[RawRecord]]:
    got: list[RawRecord] = []
    task = asyncio.create_task(_collect(tail, got))
    try:
        yield got
    finally:
        await tail.stop()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_tail_of_the_whole_log_takes_the_republished_records(event_store: EventStore) -> None:
    store = event_store
    before = await store.append(
        store.subject("Widget", "ns", "w0"), WidgetCreated(name="w0"), expected_last_seq=0
    )
    tail = Tail(store, f"{store.root}.ev.>", 1)
    async with _following(tail) as got:
        await eventually(lambda: len(got) == 1, what="the catch-up read")
        seqs = list(before)
        for i in range(1, 30):
            seqs += await store.append(
                store.subject("Widget", "ns", f"w{i}"), WidgetCreated(name=f"w{i}"), expected_last_seq=0
            )
        await eventually(lambda: len(got) == 30, what="thirty records")
        assert [r.seq for r in got] == seqs
        assert {r.subject for r in got} == {store.subject("Widget", "ns", f"w{i}") for i in range(30)}
        assert all(r.header("Draflow-Type") == "WidgetCreated" and r.time is not None for r in got)
        assert tail.taken >= 20  # the live ones crossed the wire once: not read back


async def test_records_missed_while_not_listening_are_read_back_in_order(event_store: EventStore) -> None:
    store = event_store
    subject = store.subject("Widget", "ns", "gap")
    tail = Tail(store, f"{store.root}.ev.>", 1, idle_poll_s=30.0)
    async with _following(tail) as got:
        seqs = list(await store.append(subject, WidgetCreated(name="gap"), expected_last_seq=None))
        await eventually(lambda: len(got) == 1, what="the first record")
        sub = tail._sub
        assert sub is not None
        await store.nc.raw_unsubscribe(sub)  # as if the connection dropped: republished ones are lost
        for size in range(1, 4):
            seqs += await store.append(subject, WidgetResized(size=size), expected_last_seq=None)
        tail._sub = await store.nc.raw_subscribe(tail._stored_filter, tail._on_msg)
        seqs += await store.append(subject, WidgetResized(size=9), expected_last_seq=None)
        # the first record after the gap shows it: what is missing is read from the log
        await eventually(lambda: len(got) == 5, what="the records after the gap")
        assert [r.seq for r in got] == seqs


async def test_a_tail_of_part_of_the_log_reads_what_it_is_woken_for(event_store: EventStore) -> None:
    store = event_store
    tail = Tail(store, f"{store.root}.ev.Widget.ns.*", 1, idle_poll_s=30.0)
    async with _following(tail) as got:
        seqs: list[int] = []
        for i in range(5):
            seqs += await store.append(
                store.subject("Widget", "ns", f"p{i}"), WidgetCreated(name=f"p{i}"), expected_last_seq=0
            )
            await store.append(
                store.subject("Widget", "other", f"p{i}"), WidgetCreated(name=f"p{i}"), expected_last_seq=0
            )
        await eventually(lambda: len(got) == 5, what="the five records of namespace ns")
        assert [r.seq for r in got] == seqs and tail.taken == 0
