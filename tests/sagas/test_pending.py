"""Finding the unfinished sagas: from the previous start's snapshot plus the saga events since,
the same set a scan of every saga's last event gives, reading only what came after (counted in
events read, not seconds); an unusable snapshot falls back to the whole scan."""

from __future__ import annotations

import random

from draflow.events.saga import SagaCompleted, SagaStarted, SagaStepStarted
from draflow.infra.eventstore import EventStore
from draflow.sagas.engine import SagaEngine
from draflow.sagas.pending import SCHEMA, SNAPSHOT, PendingSagas, pending_after


def test_pending_after_keeps_the_last_word_of_each_saga() -> None:
    heads = [("a", "SagaStepStarted"), ("b", "SagaCompleted"), ("c", "SagaStarted"), ("a", "SagaCompensated")]
    assert pending_after({"a", "b", "z"}, heads) == {"c", "z"}


async def _scan(store: EventStore, prefix: str) -> set[str]:
    """Every saga's last event, read the old way: the set to compare with."""
    out: set[str] = set()
    async for records in store.last_per_subject(f"{prefix}*"):
        out = pending_after(
            out, [(r.subject[len(prefix) :], r.header("Draflow-Type") or "") for r in records]
        )
    return out


async def _run_sagas(store: EventStore, engine: SagaEngine, rng: random.Random, first: int, n: int) -> int:
    """``n`` sagas recorded as an engine records them, about a third left unfinished; the
    number of saga events appended."""
    appended = 0
    for i in range(first, first + n):
        subject = engine.subject(f"s-{i}")
        evs = [SagaStarted(saga_type="T", steps=["a"]), SagaStepStarted(step="a", index=0, compensation="")]
        if rng.random() < 0.66:
            evs.append(SagaCompleted())
        await store.append(subject, evs, expected_last_seq=None)
        appended += len(evs)
    return appended


async def test_snapshot_plus_the_events_since_is_the_whole_scan_at_random_cuts(
    event_store: EventStore,
) -> None:
    rng = random.Random(7)
    engine = SagaEngine(event_store, [])
    finder = engine.pending
    await _run_sagas(event_store, engine, rng, 0, 40)
    assert set(await finder.find()) == await _scan(event_store, finder.prefix)
    assert finder.read == 40  # no snapshot yet: one head per saga
    first = 40
    for _ in range(4):
        n = rng.randrange(1, 15)
        appended = await _run_sagas(event_store, engine, rng, first, n)
        # some unfinished ones finish
        for saga_id in rng.sample(sorted(await _scan(event_store, finder.prefix)), 2):
            await event_store.append(engine.subject(saga_id), [SagaCompleted()], expected_last_seq=None)
            appended += 1
        first += n
        assert set(await finder.find()) == await _scan(event_store, finder.prefix)
        assert finder.read == appended  # the events since the last start, not every saga


async def test_the_work_of_a_start_does_not_grow_with_finished_sagas(event_store: EventStore) -> None:
    engine = SagaEngine(event_store, [])
    rng = random.Random(3)
    await _run_sagas(event_store, engine, rng, 0, 10)
    await engine.pending.find()
    done = [SagaStarted(saga_type="T", steps=["a"]), SagaCompleted()]
    for i in range(100, 300):  # history: 200 sagas run and finished (by an instance that wrote no snapshot)
        await event_store.append(engine.subject(f"s-{i}"), done, expected_last_seq=None)
    await engine.pending.find()
    assert engine.pending.read == 400
    assert await engine.pending.find() == sorted(await _scan(event_store, engine.pending.prefix))
    assert engine.pending.read == 0  # nothing since: no saga read at all


async def test_an_unusable_snapshot_falls_back_to_the_whole_scan(event_store: EventStore) -> None:
    engine = SagaEngine(event_store, [])
    await _run_sagas(event_store, engine, random.Random(5), 0, 12)
    end = await event_store.stream_last_seq()
    identity = event_store.identity
    assert identity
    await event_store.snapshots.save(SNAPSHOT, SCHEMA, end, identity, b"not the pending set")
    finder = PendingSagas(event_store, engine.pending.prefix)
    assert set(await finder.find()) == await _scan(event_store, finder.prefix)
    assert finder.read == 12  # every head: the corrupt body was skipped
    # and the set it found is the snapshot the next start uses
    assert set(await finder.find()) == await _scan(event_store, finder.prefix) and finder.read == 0
