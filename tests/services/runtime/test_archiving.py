"""Archiving and trimming the log on a real server: history leaves the stream only into verified
segments covered by a snapshot, every tool reads across the boundary, a rerun after a kill is
idempotent, and a read before the oldest retained history is a clear error."""

from __future__ import annotations

import asyncio
import json
import random
import re
import shutil
import signal
import sys
from pathlib import Path

import pytest

from draflow.infra.archive import Archive, ArchiveCorrupt, archive_dir
from draflow.infra.config import Settings
from draflow.infra.errors import HistoryUnavailable
from draflow.infra.eventstore import EventStore
from draflow.infra.snapshots import SnapshotPolicy
from draflow.services.runtime.archiving import Retention, archive_and_trim
from draflow.services.runtime.store import ApiStore
from tests.builders.history import EVERYTHING_OLD, LINES, everything, publish, snapshot_at
from tests.paths import ROOT
from tests.processes import draflow, draflow_out, service_env

CUT = 40  # the snapshot's position
MARGIN = 5
POD = ("pod", "pod0", "-n", "basic-resourceclaimtemplate")


async def _log_with_snapshot(events: EventStore) -> None:
    await publish(events, LINES[:CUT])
    await snapshot_at(events, CUT)
    await publish(events, LINES[CUT:])


def _tools(settings: Settings, replay_dir: Path) -> dict[str, str]:
    """What the tools say about the whole log (each one reads from sequence 1). ``draflow trace``
    looks up a pod's trace ids through the same read (it needs a trace store to run)."""
    replayed = draflow_out(settings, "replay", "--data-dir", str(replay_dir), "--to-seq", "50")
    return {
        "replay": re.sub(r" in [\d.]+s \([\d,]+ events/s\)", "", replayed.replace(str(replay_dir), "DIR")),
        "log": draflow_out(settings, "log", "-o", "json"),
        "export": draflow_out(settings, "export"),
        "verify": draflow_out(settings, "verify-replay", "-o", "json"),
        "explain-as-of": draflow_out(settings, "explain", *POD, "--as-of-seq", "20"),
        "get-as-of": draflow_out(settings, "get", "pods", "-A", "--as-of-seq", "30"),
    }


async def test_archive_trims_and_every_reader_reads_across_the_boundary(
    event_store: EventStore, tmp_path: Path
) -> None:
    settings = event_store.settings
    await _log_with_snapshot(event_store)
    before = await everything(event_store)
    pod = event_store.subject("Pod", "basic-resourceclaimtemplate", "pod1")  # 11, 16, 38, 42, ..
    pod_before = await everything(event_store, pod)
    tools_before = _tools(settings, tmp_path / "replay-before")

    run = await archive_and_trim(event_store, EVERYTHING_OLD, segment_events=16, margin=MARGIN)

    assert run.snapshot == CUT and run.cut == CUT
    assert [(s.first, s.last) for s in run.segments] == [(1, 16), (17, 32), (33, 40)]
    status = await event_store.stream_status()
    assert status.state.first_seq == CUT - MARGIN + 1 and status.last_seq == len(LINES)
    # the hot log is "a snapshot plus everything since"; the archive makes it whole again
    assert await everything(event_store) == before
    assert await everything(event_store, pod) == pod_before
    assert [e.seq for e in await event_store.events(pod)] == [seq for seq, _, _ in pod_before]
    # one aggregate's read opens only the segments holding it
    assert [(s.first, s.last) for s in run.segments if pod in s.subjects] == [(1, 16), (33, 40)]
    assert _tools(settings, tmp_path / "replay-after") == tools_before

    # a start after the trim starts from the snapshot, and folding everything still agrees
    restored = ApiStore(event_store)
    full = ApiStore(event_store, policy=SnapshotPolicy(load=False))
    await restored.start(timeout_s=30)
    await full.start(timeout_s=30)
    try:
        assert restored.snapshot_position == CUT and full.snapshot_position == 0
        assert restored.index.image() == full.index.image()
    finally:
        await restored.stop()
        await full.stop()


async def test_nothing_is_archived_without_a_covering_snapshot(event_store: EventStore) -> None:
    await publish(event_store, LINES)
    run = await archive_and_trim(event_store, EVERYTHING_OLD, margin=0)
    assert run.segments == [] and run.first_after == 1 and "no snapshot covers" in run.reason
    # a retention that lets nothing go archives nothing either
    await snapshot_at(event_store, len(LINES))
    run = await archive_and_trim(event_store, Retention(older_than_s=3600), margin=0)
    assert run.segments == [] and run.first_after == 1


async def test_a_rerun_after_segments_were_written_but_not_trimmed_is_idempotent(
    event_store: EventStore,
) -> None:
    await _log_with_snapshot(event_store)
    before = await everything(event_store)
    first = await archive_and_trim(event_store, EVERYTHING_OLD, margin=MARGIN, trim=False)
    assert [(s.first, s.last) for s in first.segments] == [(1, CUT)]
    assert (await event_store.stream_status()).state.first_seq == 1  # killed before the trim
    assert await everything(event_store) == before

    again = await archive_and_trim(event_store, EVERYTHING_OLD, margin=MARGIN)
    assert again.segments == []  # nothing written twice
    assert again.first_after == CUT - MARGIN + 1
    assert len(event_store.archive.segments()) == 1
    assert await everything(event_store) == before


async def test_a_read_before_the_oldest_retained_history_names_the_oldest_sequence(
    event_store: EventStore,
) -> None:
    settings = event_store.settings
    await _log_with_snapshot(event_store)
    await archive_and_trim(event_store, EVERYTHING_OLD, segment_events=16, margin=MARGIN)
    oldest = CUT - MARGIN + 1
    # the first segment is lost: the archive now starts at 17
    folder = archive_dir(settings)
    for path in folder.glob("000000000001-000000000016.*"):
        path.unlink()
    with pytest.raises(HistoryUnavailable, match="the oldest available is 17") as caught:
        await everything(event_store)
    assert caught.value.oldest == 17
    kept = [r.seq async for batch in event_store.read_raw(None, 17) for r in batch]
    assert kept == list(range(17, len(LINES) + 1))

    shutil.rmtree(folder)  # the whole archive gone (or not mounted on this machine)
    as_of_time = json.loads(LINES[2])["envelope"]["time"]
    for args in (
        ("log",),
        ("explain", *POD, "--as-of-seq", "20"),
        ("get", "pods", "-A", "--as-of-time", as_of_time),
        ("export",),
        ("verify-replay",),
    ):
        done = draflow(settings, *args)
        assert done.returncode == 1, (args, done.stdout, done.stderr)
        assert f"the oldest available is {oldest}" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
    # reading what is retained still works
    retained = draflow_out(settings, "log", "--from-seq", str(oldest), "-o", "json")
    assert retained.count("\n") == len(LINES) - oldest + 1


async def test_a_corrupt_segment_is_refused_not_read(event_store: EventStore) -> None:
    await _log_with_snapshot(event_store)
    await archive_and_trim(event_store, EVERYTHING_OLD, margin=MARGIN)
    (seg,) = event_store.archive.segments()
    path = event_store.archive.folder / f"{seg.name}.seg"
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ArchiveCorrupt, match="SHA-256 differs"):
        await everything(event_store)


async def test_retention_by_size_keeps_about_that_many_bytes(event_store: EventStore) -> None:
    await publish(event_store, LINES)
    await snapshot_at(event_store, len(LINES))
    state = (await event_store.js.stream_info(event_store.stream)).state
    per_event = state.bytes / state.messages
    keep_bytes = int(20 * per_event)  # about the newest 20 events
    run = await archive_and_trim(event_store, Retention(older_than_s=0, max_bytes=keep_bytes), margin=0)
    assert abs(run.cut - (len(LINES) - 20)) <= 1
    assert run.first_after == run.cut + 1
    assert [r[0] for r in await everything(event_store)] == list(range(1, len(LINES) + 1))


async def test_kill_9_during_archiving_loses_nothing(event_store: EventStore) -> None:
    settings = event_store.settings
    for copy in range(40):  # a few thousand events in many segments
        await publish(event_store, LINES, copy)
    last = (await event_store.stream_status()).last_seq
    await snapshot_at(event_store, last)
    before = await everything(event_store)
    await asyncio.sleep(1.1)
    rng = random.Random(7)
    args = ("archive", "--older-than", "1s", "--margin", "10", "--segment-events", "20")
    folder = archive_dir(settings)
    for _ in range(3):
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "draflow.services.cli", *args,
            cwd=ROOT, env=service_env(settings), stdout=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        written = len(list(folder.glob("*.json")))
        for _ in range(6000):  # until this run has written something of its own (at most 30 s)
            if len(list(folder.glob("*.json"))) > written or proc.returncode is not None:
                break
            await asyncio.sleep(0.005)
        await asyncio.sleep(rng.uniform(0, 0.01))
        assert proc.returncode is None, "the run ended before it could be killed"
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
        assert await everything(event_store) == before  # whatever the moment, nothing lost
    assert (await event_store.stream_status()).state.first_seq == 1  # no run got to the trim
    done = draflow(settings, *args)
    assert done.returncode == 0, done.stderr
    status = await event_store.stream_status()
    assert status.state.first_seq == last - 10 + 1
    assert await everything(event_store) == before
    archive = Archive(archive_dir(settings))
    segs = archive.contiguous()
    assert segs[0].first == 1 and segs[-1].last == last
    assert len(segs) == len(archive.segments())  # no segment written twice
    assert not list(archive.folder.glob(".writing-*"))  # a killed run's partial file is cleaned up
