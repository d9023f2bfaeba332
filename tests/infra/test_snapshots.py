"""Snapshots in JetStream on a real server: newest valid wins, the rest is skipped with a reason."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import textwrap

import pytest

from draflow.infra.config import Settings
from draflow.infra.eventstore import EventStore
from draflow.infra.snapshots import HDR_KIND, SLOTS, SnapshotHeader, SnapshotPolicy, snapshot_stream
from tests.helpers import assert_eventually
from tests.paths import ROOT

SCHEMA = "test-1"


async def _load(store: EventStore, name: str = "s", schema: str = SCHEMA) -> tuple[int, bytes] | None:
    assert store.identity
    loaded = await store.snapshots.load(name, schema, store.identity, 10**9)
    return None if loaded is None else (loaded.header.position, loaded.body)


async def test_newest_valid_snapshot_wins_and_slots_rotate(event_store: EventStore) -> None:
    snaps = event_store.snapshots
    assert await _load(event_store) is None
    identity = event_store.identity
    assert identity
    bodies = {pos: os.urandom(pos * 1000) for pos in (100, 200, 300, 400, 600)}  # several chunks too
    used = [await snaps.save("s", SCHEMA, pos, identity, body) for pos, body in bodies.items()]
    assert sorted(set(used)) == list(range(SLOTS))  # each write took the oldest slot
    assert await _load(event_store) == (600, bodies[600])
    # an older log position than the log's end is required: a snapshot past it is not used
    loaded = await snaps.load("s", SCHEMA, identity, 450)
    assert loaded is not None and loaded.header.position == 400


async def test_other_schema_other_stream_and_corrupt_ones_are_skipped(
    event_store: EventStore, caplog: pytest.LogCaptureFixture
) -> None:
    snaps = event_store.snapshots
    identity = event_store.identity
    assert identity
    await snaps.save("s", SCHEMA, 10, identity, b"good")
    await snaps.save("s", "test-0", 20, identity, b"old code")
    await snaps.save("s", SCHEMA, 30, "another stream", b"foreign")
    with caplog.at_level(logging.WARNING):
        assert await _load(event_store) == (10, b"good")
    text = caplog.text
    assert "at 20 ignored: schema test-0" in text and "at 30 ignored: of another log" in text

    # a header whose body does not match it (bytes changed under it): corrupt
    caplog.clear()
    slot = await snaps.save("s", SCHEMA, 40, identity, b"x" * 1000)
    subject = snaps.subject("s", slot)
    header = await snaps.js.get_last_msg(snaps.stream, subject)
    rollup = {HDR_KIND: "chunk", "Nats-Rollup": "sub"}
    await snaps.js.publish(subject, b"y" * 1000, stream=snaps.stream, headers=rollup)
    await snaps.js.publish(subject, header.data or b"", stream=snaps.stream, headers={HDR_KIND: "header"})
    with caplog.at_level(logging.WARNING):
        assert await _load(event_store) == (10, b"good")
    assert "at 40 ignored: corrupt (SHA-256 differs)" in caplog.text


async def test_a_schema_mismatch_everywhere_means_no_snapshot(event_store: EventStore) -> None:
    assert event_store.identity
    await event_store.snapshots.save("s", SCHEMA, 5, event_store.identity, b"a")
    assert await _load(event_store, schema="test-2") is None
    assert await _load(event_store, name="other") is None


_WRITER = textwrap.dedent(
    """
    import asyncio, os, sys
    from draflow.infra.config import Settings
    from draflow.infra.eventstore import EventStore

    async def main() -> None:
        settings = Settings(nats_url=sys.argv[1], stream=sys.argv[2], root=sys.argv[3])
        store = await EventStore.open(settings, "writer")
        print("writing", flush=True)
        await store.snapshots.save("s", "test-1", 999, store.identity, os.urandom(1024 * 1024) * 100)

    asyncio.run(main())
    """
)


async def test_kill_9_while_writing_keeps_the_previous_snapshot(
    event_store: EventStore, settings: Settings
) -> None:
    """A writer killed half-way through a snapshot: the slot it wrote into holds chunks and no
    header, and the next start loads the previous snapshot."""
    assert event_store.identity
    await event_store.snapshots.save("s", SCHEMA, 7, event_store.identity, b"previous")
    stream = snapshot_stream(settings)
    before = (await event_store.js.stream_info(stream)).state.messages
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _WRITER,
        settings.nats_url,
        settings.stream,
        settings.root,
        cwd=ROOT,
        stdout=asyncio.subprocess.DEVNULL,
    )
    try:

        async def chunks_stored() -> bool:
            return (await event_store.js.stream_info(stream)).state.messages >= before + 5

        await assert_eventually(chunks_stored, timeout_s=60, interval_s=0.01)
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == -signal.SIGKILL
    await asyncio.sleep(0.2)
    assert await _load(event_store) == (7, b"previous")
    # and the next write goes on normally (into the torn slot or another one)
    await event_store.snapshots.save("s", SCHEMA, 1000, event_store.identity, b"next")
    assert await _load(event_store) == (1000, b"next")


def test_policy() -> None:
    p = SnapshotPolicy(every_events=100, every_s=10)
    assert not p.due(0, 1000) and not p.due(99, 9) and p.due(100, 0) and p.due(1, 10)
    # a state of 5,000 objects: the events trigger waits for 5,000 events (the cost of a snapshot
    # grows with the state, so the cost per event folded stays flat); the time trigger still fires
    assert not p.due(4_999, 9, state_size=5_000) and p.due(5_000, 9, state_size=5_000)
    assert p.due(100, 0, state_size=50) and p.due(1, 10, state_size=5_000)
    off = SnapshotPolicy.from_env({"DRAFLOW_SNAPSHOT_EVERY_EVENTS": "0", "DRAFLOW_SNAPSHOT_EVERY_S": "0"})
    assert not off.writes
    assert not SnapshotPolicy.from_env({"DRAFLOW_SNAPSHOT_LOAD": "0"}).load
    header = SnapshotHeader(name="s", schema="x", position=1, stream="t", size=0, sha256="", chunks=1)
    assert header.format == 1
