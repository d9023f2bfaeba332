"""Durable consumers: acks, nak with delay, dead letters, and surviving a nats-server restart."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections import Counter
from collections.abc import AsyncIterator, Awaitable

import msgspec

from events.envelope import Envelope, Event
from infra.config import Settings
from infra.consumer import ConsumerOptions, DurableConsumer, FunctionHandler
from infra.errors import PoisonEvent, TransientError
from infra.eventstore import EventStore
from infra.natsd import LocalNatsServer
from infra.projection_store import ProjectionStore, projection_consumer
from projections.base import Projection
from tests.conftest import settings_for
from tests.foundation.model import WidgetCreated, WidgetResized
from tests.helpers import assert_eventually

FAST = ConsumerOptions(batch=64, fetch_wait_s=0.2, retry_base_s=0.05, retry_max_s=0.2, max_deliver=4)


@contextlib.asynccontextmanager
async def running(consumer: DurableConsumer) -> AsyncIterator[None]:
    stop = asyncio.Event()
    task = asyncio.create_task(consumer.run(stop))
    try:
        yield
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


async def dead_letters(store: EventStore) -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    info = await store.js.stream_info(store.settings.dlq_stream)
    for seq in range(1, info.state.last_seq + 1):
        msg = await store.js.get_msg(store.settings.dlq_stream, seq, direct=True)
        out.append({**(msg.headers or {}), "data": (msg.data or b"").decode()})
    return out


async def test_events_are_handled_once_and_acked(event_store: EventStore) -> None:
    seen: list[int] = []

    async def handle(env: Envelope[Event]) -> None:
        seen.append(env.seq)

    consumer = DurableConsumer(
        event_store, "c-basic", [f"{event_store.root}.ev.Widget.>"], FunctionHandler(handle), FAST
    )
    await consumer.ensure()
    await consumer.ensure()  # idempotent: a second instance starting
    for i in range(150):
        await event_store.append(
            event_store.subject("Widget", "d", f"w{i}"), WidgetCreated(name="w"), expected_last_seq=0
        )
    async with running(consumer):
        await assert_eventually(lambda: len(seen) >= 150)
        assert await wait_pending_zero(consumer)
    assert seen == list(range(1, 151))


async def wait_pending_zero(consumer: DurableConsumer) -> bool:
    async def zero() -> bool:
        return await consumer.pending() == 0

    return bool(await assert_eventually(zero))


async def test_transient_errors_nak_with_delay_then_succeed(event_store: EventStore) -> None:
    attempts: Counter[int] = Counter()
    handled: list[int] = []

    async def handle(env: Envelope[Event]) -> None:
        attempts[env.seq] += 1
        if env.seq == 2 and attempts[env.seq] < 3:
            raise TransientError("database busy")
        handled.append(env.seq)

    consumer = DurableConsumer(
        event_store, "c-transient", [f"{event_store.root}.ev.>"], FunctionHandler(handle), FAST
    )
    for i in range(3):
        await event_store.append(
            event_store.subject("Widget", "d", f"w{i}"), WidgetCreated(name="w"), expected_last_seq=0
        )
    async with running(consumer):
        await assert_eventually(lambda: sorted(handled) == [1, 2, 3])
        assert await wait_pending_zero(consumer)
    assert attempts[2] == 3 and attempts[1] == attempts[3] == 1
    assert handled.index(2) == 2  # unordered consumer: the others were not held up by the retry
    assert await dead_letters(event_store) == []


async def test_poison_events_are_dead_lettered_with_the_reason(event_store: EventStore) -> None:
    handled: list[int] = []

    async def handle(env: Envelope[Event]) -> None:
        if isinstance(env.data, WidgetResized) and env.data.size < 0:
            raise PoisonEvent(f"negative size {env.data.size}")
        if isinstance(env.data, WidgetResized) and env.data.size == 13:
            raise RuntimeError("unlucky")  # not known to be permanent: retried up to max_deliver
        handled.append(env.seq)

    consumer = DurableConsumer(
        event_store, "c-poison", [f"{event_store.root}.ev.>"], FunctionHandler(handle), FAST
    )
    subject = event_store.subject("Widget", "d", "w")
    (s1,) = await event_store.append(subject, WidgetCreated(name="w"), expected_last_seq=0)
    (s2,) = await event_store.append(subject, WidgetResized(size=-1), expected_last_seq=s1)
    (s3,) = await event_store.append(subject, WidgetResized(size=13), expected_last_seq=s2)
    (s4,) = await event_store.append(subject, WidgetResized(size=2), expected_last_seq=s3)
    garbage = await event_store.js.publish(subject, b"{not an envelope")
    async with running(consumer):
        letters = await assert_eventually(lambda: _at_least(dead_letters(event_store), 3), timeout_s=15)
        assert await wait_pending_zero(consumer)
    assert handled == [s1, s4]
    by_seq = {int(d["Draflow-Dlq-Stream-Seq"]): d for d in letters}
    assert set(by_seq) == {s2, s3, garbage.seq}
    assert by_seq[s2]["Draflow-Dlq-Reason"] == "PoisonEvent: negative size -1"
    assert by_seq[s3]["Draflow-Dlq-Reason"].startswith("gave up after 4 attempts: RuntimeError: unlucky")
    assert by_seq[s3]["Draflow-Dlq-Deliveries"] == "4"
    assert by_seq[garbage.seq]["Draflow-Dlq-Reason"].startswith("undecodable")
    assert all(
        d["Draflow-Dlq-Consumer"] == "c-poison" and d["Draflow-Dlq-Subject"] == subject for d in letters
    )
    assert msgspec.json.decode(by_seq[s2]["data"])["data"] == {"type": "WidgetResized", "size": -1}
    assert by_seq[s2]["Draflow-Type"] == "WidgetResized"


async def _at_least(letters: Awaitable[list[dict[str, str]]], n: int) -> list[dict[str, str]] | None:
    got = await letters
    return got if len(got) >= n else None


class AppliedOnce(Projection[int]):
    """Counts how often each event id was applied: any count above 1 is a double application."""

    name = "applied"
    state_type = int
    subjects = (">",)

    def keys(self, env: Envelope[Event]) -> tuple[str, ...]:
        return (env.id,)

    def apply(self, key: str, state: int | None, env: Envelope[Event]) -> int:
        return (state or 0) + 1


async def test_restarting_nats_server_loses_and_doubles_nothing(
    own_nats_server: LocalNatsServer, tmp_path
) -> None:
    settings: Settings = settings_for(own_nats_server, tmp_path / "data")
    producer = await EventStore.open(settings, "producer")
    consumer_store = await EventStore.open(settings, "projector")
    db = await ProjectionStore.open(tmp_path / "applied.sqlite", [AppliedOnce()], root=settings.root)
    consumer = projection_consumer(consumer_store, db, "projector", FAST)
    total, widgets = 600, 20
    produced: list[str] = []
    restarted = asyncio.Event()

    async def produce() -> None:
        versions = [0] * widgets
        for i in range(total):
            if i == total // 2:
                # the second half only after the restart, however slow the machine: the restart
                # is in the middle of the stream (appends may still be in flight when it comes)
                await restarted.wait()
            w = i % widgets
            subject = producer.subject("Widget", "d", f"w{w}")
            event: Event = WidgetCreated(name=f"w{w}") if versions[w] == 0 else WidgetResized(size=i)
            # a deterministic id per logical append: a retry across the restart cannot duplicate
            seqs = await producer.append(subject, event, expected_last_seq=versions[w], msg_id=f"p-{i}")
            versions[w] = seqs[-1]
            produced.append(f"p-{i}")
            if i % 50 == 0:
                await asyncio.sleep(0.01)  # a stream of events over time, not one burst

    async def applied_count() -> int:
        return len(await db.rows("applied"))

    try:
        async with running(consumer):
            producing = asyncio.create_task(produce())
            await assert_eventually(lambda: _ge(applied_count(), total // 3), timeout_s=30)
            assert not producing.done(), "the restart must happen in the middle of the stream"
            own_nats_server.stop(signal.SIGKILL)  # no graceful shutdown
            await asyncio.sleep(0)
            await asyncio.to_thread(own_nats_server.start)
            restarted.set()
            await asyncio.wait_for(producing, 60)
            await assert_eventually(lambda: _ge(applied_count(), total), timeout_s=60)
            assert await wait_pending_zero(consumer)
        rows = await db.rows("applied")
        assert sorted(rows) == sorted(produced) and len(produced) == total
        assert set(rows.values()) == {1}, "an event was applied twice"
        stored = [e.id for batch in [await producer.events(producer.all_events)] for e in batch]
        assert sorted(stored) == sorted(produced), "the stream holds each append exactly once"
        assert await db.checkpoint("projector") == len(stored)
    finally:
        await db.close()
        await producer.close()
        await consumer_store.close()


async def _ge(count: Awaitable[int], n: int) -> bool:
    return await count >= n


async def test_ordered_consumer_retries_in_place(event_store: EventStore) -> None:
    """A projection-style consumer never applies a later event before an earlier failing one."""
    order: list[int] = []
    failures = Counter[int]()

    async def handle(env: Envelope[Event]) -> None:
        if env.seq == 3 and failures[3] < 2:
            failures[3] += 1
            raise TransientError("locked")
        order.append(env.seq)

    opts = msgspec.structs.replace(FAST, ordered=True)
    consumer = DurableConsumer(
        event_store, "c-ordered", [f"{event_store.root}.ev.>"], FunctionHandler(handle), opts
    )
    for i in range(6):
        await event_store.append(
            event_store.subject("Widget", "d", f"w{i}"), WidgetCreated(name="w"), expected_last_seq=0
        )
    async with running(consumer):
        await assert_eventually(lambda: len(order) == 6)
    assert order == [1, 2, 3, 4, 5, 6] and failures[3] == 2
