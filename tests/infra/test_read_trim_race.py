"""A read racing a trim (real server): a reader that has started reading the stream at S while a
trim removes S..T continues from the archive, transparently: it neither misses the trimmed
events nor fails. Reading everything, one kind, or one aggregate (each takes another path in the
reader: a consumer, batched direct gets, a chain of direct gets)."""

from __future__ import annotations

import pytest

from draflow.infra.eventstore import EventStore
from draflow.services.runtime.archiving import archive_and_trim
from tests.builders.history import EVERYTHING_OLD, LINES, everything, publish, snapshot_at

COPIES = 40  # ~2,600 events: a read of everything goes from direct gets to a consumer


@pytest.mark.parametrize("reading", ["everything", "one kind", "one aggregate"])
async def test_a_read_racing_a_trim_continues_from_the_archive(event_store: EventStore, reading: str) -> None:
    for copy in range(COPIES):
        await publish(event_store, LINES, copy)
    last = (await event_store.stream_status()).last_seq
    await snapshot_at(event_store, last)
    subject = {
        "everything": None,
        "one kind": f"{event_store.root}.ev.Pod.>",
        "one aggregate": event_store.subject("Pod", "basic-resourceclaimtemplate", "pod1"),
    }[reading]
    before = await everything(event_store, subject)
    assert len(before) > 100

    got: list[tuple[int, str, bytes]] = []
    first_after = 0
    async for records in event_store.read_raw(subject, 1, batch=64):
        got += [(r.seq, r.subject, r.data) for r in records]
        if not first_after:  # the read is under way: trim past where it is
            run = await archive_and_trim(event_store, EVERYTHING_OLD, margin=5)
            first_after = run.first_after
            assert first_after > got[-1][0] + 100, (first_after, got[-1][0])

    assert [seq for seq, _, _ in got] == [seq for seq, _, _ in before]
    assert got == before


async def test_a_read_whose_rest_was_trimmed_reads_the_rest_from_the_archive(event_store: EventStore) -> None:
    """The trim removes everything the read has still to read (up to its ``to_seq``): the stream
    answers with nothing more, which is a gap too, up to the end of the read."""
    for copy in range(COPIES):
        await publish(event_store, LINES, copy)
    last = (await event_store.stream_status()).last_seq
    await snapshot_at(event_store, last)
    pod = event_store.subject("Pod", "basic-resourceclaimtemplate", "pod1")
    before = await everything(event_store, pod)
    to_seq = before[100][0]
    got: list[int] = []
    trimmed = False
    async for records in event_store.read_raw(pod, 1, to_seq):
        got += [r.seq for r in records]
        if not trimmed:
            trimmed = True
            assert len(got) < 100
            run = await archive_and_trim(event_store, EVERYTHING_OLD, margin=5)
            assert run.first_after > to_seq
    assert got == [seq for seq, _, _ in before[:101]]
