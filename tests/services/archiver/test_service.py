"""The archiver service on a real server, as its own process: it archives by itself when the
retention lets events go (woken by a timer at the age boundary, or by a new snapshot when the
snapshot was what held it back), and a SIGKILL in the middle of its run loses nothing: the
restarted service finishes the run."""

from __future__ import annotations

import asyncio
import random
import time

from draflow.infra.archive import Archive, archive_dir
from draflow.infra.eventstore import EventStore
from draflow.services.archiver.service import RECHECK_S, Archiver, ArchiverSettings
from draflow.services.runtime.archiving import Retention
from tests.builders.history import LINES, everything, publish, snapshot_at
from tests.processes import Proc

MODULE = "draflow.services.archiver"


def archiver(store: EventStore, retention_s: float, min_events: int = 50, segment_events: int = 100) -> Proc:
    return Proc(
        store.settings,
        MODULE,
        merge_stderr=True,
        DRAFLOW_RETENTION_S=str(retention_s),
        DRAFLOW_ARCHIVE_MIN_EVENTS=str(min_events),
        DRAFLOW_ARCHIVE_SEGMENT_EVENTS=str(segment_events),
        DRAFLOW_ARCHIVE_MARGIN="5",
        DRAFLOW_LOG_LEVEL="INFO",
        OTEL_TRACES_EXPORTER="none",
    )


async def first_seq(event_store: EventStore) -> int:
    return int((await event_store.stream_status()).state.first_seq)


async def until_trimmed(event_store: EventStore, timeout_s: float) -> float:
    """Seconds until the stream's first sequence moves (fails after ``timeout_s``)."""
    began = time.monotonic()
    while await first_seq(event_store) == 1:
        assert time.monotonic() - began < timeout_s, "the archiver did not trim"
        await asyncio.sleep(0.05)
    return time.monotonic() - began


def test_settings_from_the_environment() -> None:
    s = ArchiverSettings.from_env(
        {"DRAFLOW_RETENTION_S": "3600", "DRAFLOW_RETENTION_BYTES": "5000", "DRAFLOW_ARCHIVE_MIN_EVENTS": "7"}
    )
    assert (s.retention.older_than_s, s.retention.max_bytes, s.min_events) == (3600, 5000, 7)
    assert ArchiverSettings.from_env({"DRAFLOW_ARCHIVE_MARGIN": "0"}).margin == 0
    default = ArchiverSettings.from_env({})
    assert default.retention.older_than_s == 7 * 24 * 3600 and default.retention.max_bytes == 0
    assert default.min_events == 10_000 and default.segment_events == 100_000 and default.margin == 1024


async def test_it_archives_at_the_age_boundary(event_store: EventStore) -> None:
    for copy in range(10):
        await publish(event_store, LINES, copy)
    last = (await event_store.stream_status()).last_seq
    await snapshot_at(event_store, last)
    before = await everything(event_store)
    proc = archiver(event_store, retention_s=3)
    try:
        await asyncio.to_thread(proc.expect, "archiver: keeping 3s of history", 60)
        # nothing is 3 s old yet: the first run waits for the boundary, then archives
        assert await first_seq(event_store) == 1
        await asyncio.to_thread(proc.expect, "archived up to", 30, anywhere=True)
        await until_trimmed(event_store, 10)
        assert await everything(event_store) == before
        archive = Archive(archive_dir(event_store.settings))
        assert archive.contiguous()[0].first == 1
        # later events pass the boundary later: the next timers archive them, 50 or more at a
        # time (the last few wait for more to come)
        deadline = time.monotonic() + 60  # a loaded machine published them over many seconds
        while (archived := archive.contiguous()[-1].last) < last - 50:
            assert time.monotonic() < deadline, (archived, list(proc.lines.queue)[-20:])
            await asyncio.sleep(0.1)
        assert await everything(event_store) == before
    finally:
        assert proc.terminate() == 0, proc.stderr


async def test_a_boundary_passed_since_the_check_is_looked_at_again(event_store: EventStore) -> None:
    """The lost wake-up: the check found too few events old, and by the time the timer is
    armed the boundary is behind. With a snapshot covering the event, that is a look again
    at once (it is due now), not a sleep that only a snapshot ends; without one, no timer."""
    await publish(event_store, LINES, 0)
    await snapshot_at(event_store, len(LINES))
    for copy in (1, 2):
        await publish(event_store, LINES, copy)
    await asyncio.sleep(1.1)  # every event is older than the retention
    covered = Archiver(event_store, ArchiverSettings(retention=Retention(1.0), min_events=len(LINES)))
    assert await covered.due()
    assert await covered.next_boundary_s() == RECHECK_S
    beyond = Archiver(event_store, ArchiverSettings(retention=Retention(1.0), min_events=len(LINES) + 1))
    assert not await beyond.due()  # the snapshot holds it back: only a new one lets more go
    assert await beyond.next_boundary_s() is None
    ahead = Archiver(event_store, ArchiverSettings(retention=Retention(60.0), min_events=len(LINES)))
    wait = await ahead.next_boundary_s()
    assert wait is not None and 55 < wait <= 60


async def test_a_new_snapshot_wakes_it_up(event_store: EventStore) -> None:
    """Everything is old, but no snapshot covers it: nothing is archived, and no timer is set
    (the boundary is behind); the snapshot written later is what starts the run."""
    for copy in range(5):
        await publish(event_store, LINES, copy)
    before = await everything(event_store)
    await asyncio.sleep(1.2)
    proc = archiver(event_store, retention_s=1)
    try:
        await asyncio.to_thread(proc.expect, "archiver: keeping", 60)
        await asyncio.sleep(2)
        assert await first_seq(event_store) == 1
        await snapshot_at(event_store, len(before))
        took = await until_trimmed(event_store, 20)
        assert took < 10, took
        assert await everything(event_store) == before
    finally:
        assert proc.terminate() == 0, proc.stderr


async def test_kill_9_during_a_scheduled_run_loses_nothing(event_store: EventStore) -> None:
    for copy in range(40):  # a few thousand events in many segments
        await publish(event_store, LINES, copy)
    last = (await event_store.stream_status()).last_seq
    await snapshot_at(event_store, last)
    before = await everything(event_store)
    await asyncio.sleep(1.1)
    folder = archive_dir(event_store.settings)
    rng = random.Random(11)
    for _ in range(3):
        written = len(list(folder.glob("*.json")))
        proc = archiver(event_store, retention_s=1, segment_events=20, min_events=1)
        deadline = time.monotonic() + 60
        while len(list(folder.glob("*.json"))) <= written:  # until it has written a segment
            assert time.monotonic() < deadline and proc.proc.poll() is None, proc.stderr
            await asyncio.sleep(0.005)
        await asyncio.sleep(rng.uniform(0, 0.05))
        proc.kill()
        assert await everything(event_store) == before  # whatever the moment, nothing lost
    assert await first_seq(event_store) == 1  # no run got to its trim
    proc = archiver(event_store, retention_s=1, segment_events=20, min_events=1)
    try:
        await until_trimmed(event_store, 60)
        assert await everything(event_store) == before
    finally:
        assert proc.terminate() == 0, proc.stderr
    archive = Archive(folder)
    segs = archive.contiguous()
    assert segs[0].first == 1 and segs[-1].last == last
    assert len(segs) == len(archive.segments())  # no segment written twice
    assert not list(folder.glob(".writing-*"))
