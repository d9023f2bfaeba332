"""Moving old history out of the event stream into archive segments, then trimming the stream.

Order (each step only after the previous one succeeded, so a kill at any point loses nothing):

1. the stream's configuration is applied again (undoes a trim a killed run left half-done);
2. the cut: the newest event older than the retention (age and/or hot-log size), but never past
   the newest valid snapshot of the object fold, so a start after the trim finds a snapshot
   covering everything trimmed and never needs to fold trimmed events;
3. segments are written from the end of the archive (or the stream's first event) up to the
   cut, each verified (count, range, content hash) before its manifest appears;
4. the stream is trimmed. It denies purges (``deny_purge`` cannot be lifted once set), so the
   admin trims with limits: appends are paused for a moment (``discard: new`` with
   ``max_msgs: 1``; the services' appends get 503 and retry with the same ids), the stream is
   limited to the messages after the trim point (``discard: old``, ``max_msgs``), and the
   configuration is restored. ``margin`` archived events stay in the stream, so appends racing
   the restore evict only archived events.

A rerun after a kill finds the segments already written and goes on from their end: idempotent.
Only the admin may do this: every other role is denied stream updates by the server.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import os
import time
from dataclasses import dataclass

from nats.js import api
from nats.js.errors import APIError

from draflow.infra.archive import SegmentInfo, SegmentWriter
from draflow.infra.eventstore import EventStore
from draflow.infra.snapshots import load_snapshot
from draflow.infra.streams import event_stream_config
from draflow.projections.snapshot import OBJECTS, schema

__all__ = [
    "MARGIN",
    "SEGMENT_EVENTS",
    "ArchiveRefused",
    "ArchiveRun",
    "Retention",
    "archive_and_trim",
    "retention_cut",
]

log = logging.getLogger(__name__)

DEFAULT_RETENTION_S = 7 * 24 * 3600
SEGMENT_EVENTS = 100_000
MARGIN = 1024


class ArchiveRefused(Exception):
    """The run cannot (or may not) archive: a one-line reason."""


@dataclass(frozen=True)
class Retention:
    """How much history the stream keeps: events younger than ``older_than_s`` and, when
    ``max_bytes`` is set, about that many bytes of the newest events (0: no limit)."""

    older_than_s: float = DEFAULT_RETENTION_S
    max_bytes: int = 0

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> Retention:
        env = os.environ if environ is None else environ
        return cls(
            float(env.get("DRAFLOW_RETENTION_S") or DEFAULT_RETENTION_S),
            int(env.get("DRAFLOW_RETENTION_BYTES") or 0),
        )


@dataclass
class ArchiveRun:
    """What a run did."""

    first_before: int = 0
    first_after: int = 0
    last: int = 0
    snapshot: int = 0  # the covering snapshot's position (0: none)
    cut: int = 0  # archived up to here
    segments: list[SegmentInfo] = dataclasses.field(default_factory=list)
    reason: str = ""


async def _cut_by_age(store: EventStore, older_than_s: float, first: int, last: int) -> int:
    """The last sequence stored more than ``older_than_s`` ago (first - 1: none)."""
    since = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=older_than_s)
    rec = await store.first_stored_since(since)
    if rec is None:
        return last  # nothing at or after that time: everything is older
    return max(first - 1, rec.seq - 1)


async def retention_cut(store: EventStore, retention: Retention, first: int, last: int) -> int:
    """The newest sequence the retention lets go (age and/or size; first - 1: none), before
    the snapshot's cap."""
    cut = first - 1
    if retention.older_than_s:
        cut = await _cut_by_age(store, retention.older_than_s, first, last)
    if retention.max_bytes:
        state = (await store.js.stream_info(store.stream)).state
        if state.bytes > retention.max_bytes and state.messages:
            keep = int(retention.max_bytes / (state.bytes / state.messages))
            cut = max(cut, last - keep)
    return cut


async def archive_and_trim(
    store: EventStore,
    retention: Retention,
    *,
    segment_events: int = SEGMENT_EVENTS,
    margin: int = MARGIN,
    trim: bool = True,
) -> ArchiveRun:
    """Archive what the retention lets go (and a snapshot covers), then trim the stream."""
    if not store.manages_streams:
        raise ArchiveRefused(f"archiving trims the stream: only the admin may (this is {store.nc.role})")
    await store.ensure_stream()  # also ends a freeze or a limit a killed run left
    status = await store.stream_status()
    first, last, identity = status.state.first_seq, status.last_seq, status.created
    run = ArchiveRun(first_before=first, first_after=first, last=last)
    if last == 0:
        run.reason = "the log is empty"
        return run
    cut = await retention_cut(store, retention, first, last)
    snap = await load_snapshot(store.snapshots, OBJECTS, schema(), identity, last)
    run.snapshot = snap.header.position if snap is not None else 0
    if cut >= first and run.snapshot < cut:
        if run.snapshot < first:
            run.reason = f"no snapshot covers the events to archive (up to {cut}); a service writes one"
            cut = first - 1
        else:
            cut = run.snapshot
    for stale in store.archive.folder.glob(".writing-*"):  # what a killed run was writing
        stale.unlink(missing_ok=True)
    segs = store.archive.contiguous(identity)
    start = first
    if segs and segs[-1].last + 1 >= first:
        start = segs[-1].last + 1  # a previous run wrote these (and maybe did not trim)
    run.cut = max(cut, start - 1)
    for seg_first in range(start, cut + 1, segment_events):
        seg_last = min(cut, seg_first + segment_events - 1)
        writer = SegmentWriter(store.archive.folder, store.stream, identity)
        try:
            # seg_first is at or after the stream's first event: this reads the stream only
            async for records in store.read_raw(None, seg_first, seg_last):
                writer.add(records)
            if writer.count != seg_last - seg_first + 1:
                raise ArchiveRefused(f"segment {seg_first}-{seg_last}: read {writer.count} events")
            seg = writer.finish()
        except BaseException:
            writer.abort()
            raise
        run.segments.append(seg)
        log.info("archived %d-%d (%d events) to %s", seg.first, seg.last, seg.count, store.archive.folder)
    if not trim:
        return run
    # the last sequence the trim removes; the stream's newest event always stays, so a reader
    # that read everything up to the end knows nothing after it was trimmed (EventStore.read_raw)
    trim_to = min(run.cut - margin, last - 1)
    if trim_to >= first:
        run.first_after = await _trim(store, trim_to, run.cut)
    return run


async def _trim(store: EventStore, trim_to: int, archived_to: int) -> int:
    """Remove the stream's messages up to ``trim_to`` (all archived); returns the new first sequence."""
    normal = event_stream_config(store.settings)
    try:
        # pause appends: at max_msgs with discard new, every publish is refused (503: retried)
        await store.js.update_stream(dataclasses.replace(normal, max_msgs=1, discard=api.DiscardPolicy.NEW))
        try:
            info = await store.js.stream_info(store.stream)
            keep = int(info.state.last_seq) - trim_to
            began = time.monotonic()
            await store.js.update_stream(
                dataclasses.replace(normal, max_msgs=keep, discard=api.DiscardPolicy.OLD)
            )
        finally:
            await store.js.update_stream(normal)
        log.info("trimmed the stream up to %d (%.3fs limited)", trim_to, time.monotonic() - began)
    except APIError as exc:
        raise ArchiveRefused(f"trimming stream {store.stream}: {exc.description}") from None
    after = await store.stream_status()
    new_first = after.state.first_seq
    if new_first - 1 > archived_to:
        # more appends raced the restore than the margin: say so loudly (they are not archived)
        log.error("trim went past the archive: first sequence %d, archived up to %d", new_first, archived_to)
    return new_first
