"""Guards against a real nats-server: what JetStream checks inside a multi-subject atomic batch,
and ``EventStore.append(..., guards=...)`` serialising two deciders that write different subjects."""

from __future__ import annotations

import asyncio
import json
import os

import pytest

from draflow.events.guard import GuardReleased, GuardTaken
from draflow.infra.errors import ConcurrencyError
from draflow.infra.eventstore import EventStore
from draflow.infra.guard import Guard, GuardConflict, guard_subject, release, take, takes_since
from draflow.infra.publisher import ERR_WRONG_LAST_SEQUENCE
from tests.widgets import WidgetCreated, WidgetResized

ERR_BATCH_UNSUPPORTED_HEADER = 10177  # JetStream: a header atomic batches do not support


async def _raw_batch(store: EventStore, msgs: list[tuple[str, dict[str, str]]]) -> dict[str, object]:
    """Publish ``msgs`` as one atomic batch with exactly these headers; the commit's ack."""
    batch = os.urandom(6).hex()
    for i, (subject, hdrs) in enumerate(msgs[:-1]):
        await store.nc.publish(
            subject, b"{}", headers={**hdrs, "Nats-Batch-Id": batch, "Nats-Batch-Sequence": str(i + 1)}
        )
    subject, hdrs = msgs[-1]
    last = {**hdrs, "Nats-Batch-Id": batch, "Nats-Batch-Sequence": str(len(msgs)), "Nats-Batch-Commit": "1"}
    reply = await store.nc.request(subject, b"{}", headers=last, timeout=5)
    return json.loads(reply.data)


def _err(ack: dict[str, object]) -> int:
    error = ack.get("error")
    return int(error["err_code"]) if isinstance(error, dict) else 0


async def test_jetstream_checks_each_subjects_expected_sequence_in_one_atomic_batch(
    event_store: EventStore,
) -> None:
    """What the guard relies on, on the nats-server the project runs (>= 2.12): in a batch over
    several subjects, ``Nats-Expected-Last-Subject-Sequence`` is honoured on every subject's first
    message, and one wrong expectation refuses the whole batch (nothing stored)."""
    store = event_store
    a, b, c = (store.subject("Widget", "ns", n) for n in ("a", "b", "c"))
    expect = "Nats-Expected-Last-Subject-Sequence"
    seed = await _raw_batch(store, [(a, {}), (b, {})])
    assert seed["seq"] == 2 and seed["count"] == 2  # a=1, b=2
    ok = await _raw_batch(store, [(a, {expect: "1"}), (b, {expect: "2"}), (c, {expect: "0"})])
    assert ok["seq"] == 5  # a=3, b=4, c=5
    before = await store.stream_last_seq()
    # wrong on a later message (another subject) refuses all of it
    assert _err(await _raw_batch(store, [(a, {expect: "3"}), (b, {expect: "2"})])) == ERR_WRONG_LAST_SEQUENCE
    # wrong on the first message
    assert _err(await _raw_batch(store, [(a, {expect: "1"}), (b, {expect: "4"})])) == ERR_WRONG_LAST_SEQUENCE
    # "must not exist yet" (0) on a subject that exists
    assert _err(await _raw_batch(store, [(a, {expect: "3"}), (c, {expect: "0"})])) == ERR_WRONG_LAST_SEQUENCE
    assert await store.stream_last_seq() == before
    assert await store.last_seq(a) == 3 and await store.last_seq(b) == 4
    # an expectation on a subject's *second* message in the batch is refused outright (another
    # code): the store allows one guard per subject per append
    second = await _raw_batch(store, [(a, {expect: "3"}), (a, {expect: "6"})])
    assert _err(second) not in (0, ERR_WRONG_LAST_SEQUENCE)
    # the stream-level Nats-Expected-Last-Sequence: on the first message it is the stream's last
    # sequence before the batch; on a later one it counts the batch's own earlier messages
    stream = "Nats-Expected-Last-Sequence"
    last = await store.stream_last_seq()
    wrong = await _raw_batch(store, [(a, {}), (b, {stream: str(last)})])
    assert _err(wrong) == ERR_WRONG_LAST_SEQUENCE
    right = await _raw_batch(store, [(a, {stream: str(last)}), (b, {})])
    assert right["seq"] == last + 2
    before = await store.stream_last_seq()
    # Nats-Expected-Last-Msg-Id is not supported in atomic batches at all
    assert _err(await _raw_batch(store, [(a, {"Nats-Expected-Last-Msg-Id": "x"}), (b, {})])) == (
        ERR_BATCH_UNSUPPORTED_HEADER
    )
    assert await store.stream_last_seq() == before


async def test_guarded_append_lands_events_and_guards_in_one_batch(event_store: EventStore) -> None:
    store = event_store
    claim = store.subject("Widget", "ns", "w1")
    dev = guard_subject(store.root, "device", "gpu.example.com/node-1/gpu-0")
    assert dev == f"{store.root}.ev.Guard.device.gpu~example~com/node-1/gpu-0"
    seqs = await store.append(
        claim,
        [WidgetCreated(name="w1", size=1), WidgetResized(size=2)],
        expected_last_seq=0,
        guards=[take(dev, 0, "Widget ns/w1", "uid-w1")],
    )
    assert len(seqs) == 2
    (g,) = await store.events(dev)
    assert g.seq == seqs[-1] + 1 and g.data == GuardTaken(holder="Widget ns/w1", holder_uid="uid-w1")
    assert g.id == f"{(await store.events(claim))[0].id.split('#')[0]}#g0"
    # a release needs no expectation
    await store.append(
        claim,
        WidgetResized(size=0),
        expected_last_seq=seqs[-1],
        guards=[release(dev, "Widget ns/w1", "uid-w1")],
    )
    assert [type(e.data) for e in await store.events(dev)] == [GuardTaken, GuardReleased]


async def test_two_deciders_writing_different_subjects_one_guard_only_one_lands(
    event_store: EventStore,
) -> None:
    """The double allocation the guard prevents: two claims, one device, both decided on the
    same state; per-claim expectations never conflict, the device's guard does."""
    store = event_store
    dev = guard_subject(store.root, "device", "gpu.example.com/node-2/gpu-6")

    async def decide(name: str, device: str, seen: int) -> tuple[int, ...]:
        subject = store.subject("Widget", "race", name)
        return await store.append(
            subject, WidgetCreated(name=name, size=1), expected_last_seq=0, guards=[take(device, seen, name)]
        )

    other = guard_subject(store.root, "device", "gpu.example.com/node-2/gpu-7")
    both = await asyncio.gather(decide("p4", other, 0), decide("p5", dev, 0))
    assert all(isinstance(r, tuple) for r in both)  # different devices: both land
    # gpu-6 was taken by p5: a decision that saw it free (0) is stale, whoever it is
    stale = await asyncio.gather(decide("p6", dev, 0), decide("p7", dev, 0), return_exceptions=True)
    assert all(isinstance(e, GuardConflict) for e in stale)
    head = await store.last_seq(dev)
    results = await asyncio.gather(decide("p8", dev, head), decide("p9", dev, head), return_exceptions=True)
    landed = [r for r in results if isinstance(r, tuple)]
    (conflict,) = [r for r in results if isinstance(r, BaseException)]
    assert len(landed) == 1
    assert isinstance(conflict, GuardConflict) and conflict.subjects == (dev,)
    assert conflict.moved == ((dev, head),)
    winner, loser = ("p8", "p9") if isinstance(results[0], tuple) else ("p9", "p8")
    assert await store.last_seq(store.subject("Widget", "race", loser)) == 0  # nothing of it landed
    # what the loser did not count: the winner's take; and the expectation to retry with
    missed, now = await takes_since(store, dev, head)
    assert [e.data for e in missed] == [GuardTaken(holder=winner)]
    assert now == await store.last_seq(dev)
    # a take the loser counts (its own earlier decision, say) is not a conflict; a take released
    # since is not one either
    assert (await takes_since(store, dev, head, counted=lambda env: True))[0] == []
    await store.append(
        store.subject("Widget", "race", winner),
        WidgetResized(size=0),
        expected_last_seq=None,
        guards=[release(dev, winner)],
    )
    assert (await takes_since(store, dev, head))[0] == []


async def test_conflict_on_the_aggregate_is_a_plain_concurrency_error(event_store: EventStore) -> None:
    store = event_store
    claim = store.subject("Widget", "ns", "w2")
    dev = guard_subject(store.root, "device", "d/p/x")
    await store.append(claim, WidgetCreated(name="w2", size=1), expected_last_seq=0)
    with pytest.raises(ConcurrencyError) as info:
        await store.append(claim, WidgetResized(size=3), expected_last_seq=0, guards=[take(dev, 0, "w2")])
    assert not isinstance(info.value, GuardConflict)
    assert await store.last_seq(dev) == 0


async def test_retried_guarded_append_that_landed_returns_its_sequences(event_store: EventStore) -> None:
    """A retry (same message id) of a guarded append that landed: JetStream reports a conflict
    (expectations are checked before de-duplication); the store finds its own batch instead."""
    store = event_store
    claim = store.subject("Widget", "ns", "w3")
    dev = guard_subject(store.root, "device", "d/p/y")
    first = await store.append(
        claim,
        WidgetCreated(name="w3", size=1),
        expected_last_seq=0,
        msg_id="alloc:w3",
        guards=[take(dev, 0, "w3")],
    )
    again = await store.append(
        claim,
        WidgetCreated(name="w3", size=1),
        expected_last_seq=0,
        msg_id="alloc:w3",
        guards=[take(dev, 0, "w3")],
    )
    assert again == first
    # also when only the guards carry expectations
    other = store.subject("Widget", "ns", "w4")
    dev2 = guard_subject(store.root, "device", "d/p/z")
    kw = {"expected_last_seq": None, "msg_id": "alloc:w4", "guards": [take(dev2, 0, "w4")]}
    assert await store.append(other, WidgetCreated(name="w4", size=1), **kw) == await store.append(  # type: ignore[arg-type]
        other,
        WidgetCreated(name="w4", size=1),
        **kw,  # type: ignore[arg-type]
    )
    assert len(await store.events(dev2)) == 1


async def test_one_expectation_per_subject_per_append(event_store: EventStore) -> None:
    """JetStream checks an expectation only on a subject's first message of a batch: a second
    expectation on it would go unchecked, so it is refused; a later message without one lands."""
    store = event_store
    dev = guard_subject(store.root, "device", "d/p/q")
    widget = store.subject("Widget", "ns", "w5")
    with pytest.raises(ValueError, match="twice"):
        await store.append(
            widget,
            WidgetCreated(name="w5", size=1),
            expected_last_seq=0,
            guards=[take(dev, 0, "a"), take(dev, 0, "b")],
        )
    with pytest.raises(ValueError, match="twice"):
        await store.append(
            widget,
            WidgetCreated(name="w5", size=1),
            expected_last_seq=0,
            guards=[Guard(widget, GuardReleased(holder="a"))],
        )
    (seq,) = await store.append(
        widget,
        WidgetCreated(name="w5", size=1),
        expected_last_seq=0,
        guards=[take(dev, 0, "a"), Guard(dev, GuardReleased(holder="a"))],
    )
    assert [e.seq for e in await store.events(dev)] == [seq + 1, seq + 2]
