"""Scheduled archiving: ``draflow archive`` run by a service when the retention lets enough go.

The archiver is the one long-running process that holds the admin credential (trimming the
stream is an update of its limits, which only the admin may make); every other service keeps
its least-privilege role. It never polls. It runs an archive (``archive_and_trim``) when at least
``min_events`` events are due, again at once while runs get somewhere (a long run lets more fall
due), and otherwise sleeps until the first of:

* the **age boundary**: the moment the ``min_events``-th event after what is archived becomes
  older than the retention (a timer, read from that event's storage time);
* a **new snapshot** of the object fold (a headers-only consumer on the snapshot stream): a run
  is capped by the newest snapshot, and the snapshot writers write one every 20,000 events or
  five minutes, so it is also when a size limit is checked again;
* a stop.

A run killed at any point (SIGKILL included) loses nothing and the next one, after a restart,
finishes it: that is :func:`archive_and_trim`'s contract, not this loop's.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import logging
import os
from dataclasses import dataclass

import nats.errors
from nats.aio.msg import Msg
from nats.js import api
from nats.js.errors import APIError

from draflow.infra.archive import ArchiveCorrupt
from draflow.infra.errors import StoreUnavailable
from draflow.infra.eventstore import EventStore
from draflow.infra.snapshots import FORMAT, HDR_KIND, snapshot_stream
from draflow.projections.snapshot import OBJECTS, schema
from draflow.services.runtime.archiving import (
    MARGIN,
    SEGMENT_EVENTS,
    ArchiveRefused,
    ArchiveRun,
    Retention,
    archive_and_trim,
    retention_cut,
)

__all__ = ["Archiver", "ArchiverSettings"]

log = logging.getLogger(__name__)

# a boundary that passed between the check and the timer's arming: look again after this
# (not 0: the server compares nanoseconds, the timer is read to microseconds)
RECHECK_S = 0.01
RETRY_S = (1.0, 60.0)  # a failed run is tried again after 1 s, doubling up to a minute
# what a run may fail with and be tried again (a server restart, a full disk, a corrupt segment)
_FAILURES = (ArchiveRefused, ArchiveCorrupt, OSError, StoreUnavailable, APIError, nats.errors.Error)


@dataclass(frozen=True)
class ArchiverSettings:
    """``DRAFLOW_RETENTION_S`` / ``DRAFLOW_RETENTION_BYTES`` (as ``draflow archive``),
    ``DRAFLOW_ARCHIVE_MIN_EVENTS``: the least a scheduled run archives (default 10,000), so
    segments are not written one event at a time; ``DRAFLOW_ARCHIVE_SEGMENT_EVENTS``: events per
    segment (default 100,000); ``DRAFLOW_ARCHIVE_MARGIN``: archived events left in the stream
    (default 1024, as ``draflow archive --margin``)."""

    retention: Retention = dataclasses.field(default_factory=Retention)
    min_events: int = 10_000
    segment_events: int = SEGMENT_EVENTS
    margin: int = MARGIN

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> ArchiverSettings:
        env = os.environ if environ is None else environ
        return cls(
            retention=Retention.from_env(environ),
            min_events=max(1, int(env.get("DRAFLOW_ARCHIVE_MIN_EVENTS") or cls.min_events)),
            segment_events=max(1, int(env.get("DRAFLOW_ARCHIVE_SEGMENT_EVENTS") or cls.segment_events)),
            margin=max(0, int(env.get("DRAFLOW_ARCHIVE_MARGIN") or cls.margin)),
        )


class Archiver:
    def __init__(self, store: EventStore, settings: ArchiverSettings) -> None:
        self.store = store
        self.settings = settings
        self.last_run: ArchiveRun | None = None  # what this process's latest run did
        self._wake = asyncio.Event()

    async def run(self, stop: asyncio.Event) -> None:
        sub = await self.store.js.subscribe(
            f"{self.store.root}.snap.{OBJECTS}.*",
            stream=snapshot_stream(self.store.settings),
            cb=self._on_snapshot,
            ordered_consumer=True,
            headers_only=True,
            deliver_policy=api.DeliverPolicy.NEW,
        )
        retry = RETRY_S[0]
        try:
            while not stop.is_set():
                self._wake.clear()
                try:
                    if await self.due():
                        run = await archive_and_trim(
                            self.store,
                            self.settings.retention,
                            segment_events=self.settings.segment_events,
                            margin=self.settings.margin,
                        )
                        self.last_run = run
                        retry = RETRY_S[0]
                        log.info(
                            "archived up to %d (%d segments); the stream holds %d-%d",
                            run.cut, len(run.segments), run.first_after, run.last,
                        )  # fmt: skip
                        if run.segments or run.first_after > run.first_before:
                            continue  # it got somewhere: more may be due already (a long run)
                    # nothing (more) to do now: until the boundary, or a snapshot when there is none
                    wait = await self.next_boundary_s()
                    retry = RETRY_S[0]
                except _FAILURES as exc:
                    log.error("archive run failed: %s; trying again in %.0fs", exc, retry)
                    wait, retry = retry, min(retry * 2, RETRY_S[1])
                await self._sleep(stop, wait)
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()

    async def _on_snapshot(self, msg: Msg) -> None:
        if (msg.headers or {}).get(HDR_KIND) == "header":
            self._wake.set()

    async def _sleep(self, stop: asyncio.Event, wait_s: float | None) -> None:
        """Until a stop, a new snapshot, or ``wait_s`` seconds (None: no timer)."""
        waits = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(self._wake.wait())]
        try:
            await asyncio.wait(waits, timeout=wait_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()

    def _archived_to(self, first: int, identity: str) -> int:
        """The last sequence the archive holds contiguously with the stream (first - 1: none)."""
        segs = self.store.archive.contiguous(identity)
        return max(first - 1, segs[-1].last) if segs and segs[-1].last + 1 >= first else first - 1

    async def _snapshot_position(self, identity: str, last: int) -> int:
        """The newest snapshot header's position usable as a cap (its body is checked by the run)."""
        best = 0
        for _, header, _ in await self.store.snapshots.headers(OBJECTS):
            if header is None or header.format != FORMAT or header.schema != schema():
                continue
            if header.stream == identity and header.position <= last:
                best = max(best, header.position)
        return best

    async def due(self) -> bool:
        """Whether a run would archive at least ``min_events`` events, or finish a killed run's trim."""
        status = await self.store.stream_status()
        first, last, identity = status.state.first_seq, status.last_seq, status.created
        if last == 0:
            return False
        archived = self._archived_to(first, identity)
        if archived - self.settings.margin >= first:
            return True  # archived but not trimmed (a run was killed before its trim)
        cut = await retention_cut(self.store, self.settings.retention, first, last)
        cut = min(cut, await self._snapshot_position(identity, last))
        return cut - archived >= self.settings.min_events

    async def next_boundary_s(self) -> float | None:
        """Seconds until the ``min_events``-th event after the archive becomes older than the
        retention; None when that event is not in the log yet, or when no snapshot covers it
        (then only a new snapshot can let more go).

        A boundary already behind is not a reason to sleep without a timer: :meth:`due` looked
        a moment ago, and the event may have become old since (events stored close together
        pass the boundary close together). That asks for a look again at once (:data:`RECHECK_S`);
        sleeping then would wait for a snapshot that may never come."""
        older = self.settings.retention.older_than_s
        if not older:
            return None
        status = await self.store.stream_status()
        archived = self._archived_to(status.state.first_seq, status.created)
        target = archived + self.settings.min_events
        if target > status.last_seq:
            return None
        rec = await self.store.record_at(target)
        when = None if rec is None else rec.time
        if when is None:
            return None
        boundary = when + datetime.timedelta(seconds=older)
        wait = (boundary - datetime.datetime.now(datetime.UTC)).total_seconds()
        if wait > 0:
            return wait
        if await self._snapshot_position(status.created, status.last_seq) >= target:
            return RECHECK_S  # old by now and covered: due, or a hair from it (clock rounding)
        return None
