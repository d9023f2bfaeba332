"""Following the log: every stored message matching a subject filter, in stream order, as it lands.

The event stream republishes every event once it is stored on ``<root>.st.<...>`` with its stream
sequence (:func:`draflow.infra.streams.event_stream_config`); a tail subscribes there. A tail of
the whole log (``<root>.ev.>``) takes the records straight from those messages while their
sequences follow on without a gap: each event crosses the wire once per follower, no read back.
Anything else — a gap (a reconnect, a buffer overflow), the catch-up at start, a tail of part of
the log (whose sequences have gaps by nature) — is read with the event store's batched direct get
(no consumer state on the server, gapless by construction: each read continues at the sequence
after the last one seen), the republished messages serving as wake-ups only. An idle poll reads
anything a wake-up missed. Used by the apiserver and every controller's cache to stay current,
by the scheduler's snapshot and by ``draflow get -w`` to watch.

Every idle poll also asks the stream for its identity and end (:meth:`EventStore.check_stream`):
a stream deleted and created again starts numbering at 1, so a reader that went on at its old
position would silently see nothing ever again. It raises :class:`StreamReset` instead, and the
event store remembers it for the whole process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator

from nats.aio.subscription import Subscription

from draflow.events.subjects import events_prefix, stored_prefix
from draflow.infra import metrics
from draflow.infra.eventstore import EventStore, RawRecord, StoreUnavailable
from draflow.infra.reader import header_value

__all__ = ["Tail"]

log = logging.getLogger(__name__)

CHECK_EVERY_S = 1.0  # while reading, the stream's identity is confirmed at least this often
MAX_BUFFERED = 8192  # republished records held for a follower that lags; past it, read instead


def _consumer_label(subject_filter: str, root: str) -> str:
    """``<root>.ev.Pod.default.*`` -> ``Pod``: low cardinality (a kind, or ``all``)."""
    parts = subject_filter.split(".")
    if len(parts) >= 3 and parts[0] == root and parts[1] == "ev":
        return "all" if parts[2] in (">", "*") else parts[2]
    return "other"


class Tail:
    """Yields batches of stored messages matching ``subject_filter`` from ``from_seq`` on, forever."""

    def __init__(
        self, store: EventStore, subject_filter: str, from_seq: int = 1, *, idle_poll_s: float = 1.0
    ) -> None:
        self.store = store
        self.subject_filter = subject_filter
        self.next_seq = max(1, from_seq)
        self.idle_poll_s = idle_poll_s
        self._wake = asyncio.Event()
        self._sub: Subscription | None = None
        self._stopped = False
        labels = {"service": store.actor, "consumer": _consumer_label(subject_filter, store.root)}
        self._consumed = metrics.EVENTS_CONSUMED.labels(**labels)
        self._lag = metrics.CONSUMER_LAG.labels(**labels)
        self._checked_at = float("-inf")  # the stream's identity was last confirmed then
        ev = events_prefix(store.root) + "."
        self._ev = ev.encode()
        self._st = (stored_prefix(store.root) + ".").encode()
        self._stored_filter = (
            stored_prefix(store.root) + "." + subject_filter[len(ev) :]
            if subject_filter.startswith(ev)
            else subject_filter
        )
        # the whole log: republished records follow on without gaps, so they are the data
        self._whole = subject_filter == ev + ">"
        self._buffer: list[RawRecord] = []
        self.taken = 0  # records taken from republished messages (not read back)

    async def start(self) -> None:
        if self._sub is None:
            self._sub = await self.store.nc.raw_subscribe(self._stored_filter, self._on_msg)

    async def stop(self) -> None:
        """End ``batches`` (at its next wait) and drop the wake-up subscription."""
        self._stopped = True
        self._wake.set()
        sub, self._sub = self._sub, None
        if sub is not None and not self.store.nc.is_closed:
            await self.store.nc.raw_unsubscribe(sub)

    @property
    def stopped(self) -> bool:
        return self._stopped

    def _on_msg(self, subject: bytes, reply: bytes, data: bytes, headers: bytes | None) -> None:
        self._wake.set()
        if not self._whole or len(self._buffer) >= MAX_BUFFERED:
            return  # a wake-up only: the records are read from the log
        seq = int(header_value(headers, b"Nats-Sequence") or 0)
        if seq >= self.next_seq:
            original = self._ev + subject[len(self._st) :] if subject.startswith(self._st) else subject
            self._buffer.append(RawRecord(seq, original, data, headers, 0))

    def wake(self) -> None:
        """Read now (someone knows there is something new, e.g. after their own append)."""
        self._wake.set()

    def _take(self) -> list[RawRecord]:
        """The buffered records that continue at ``next_seq`` without a gap (the rest stays)."""
        buf = self._buffer
        i = 0
        while i < len(buf) and buf[i].seq < self.next_seq:
            i += 1  # read from the log meanwhile
        j, seq = i, self.next_seq
        while j < len(buf) and buf[j].seq == seq:
            j, seq = j + 1, seq + 1
        taken = buf[i:j]
        del buf[:j]
        return taken

    async def _read(self) -> AsyncIterator[list[RawRecord]]:
        async for records in self.store.read_raw(self.subject_filter, self.next_seq):
            async for taken in self._deliver(records):
                yield taken
        self._lag.set(0)  # caught up

    async def _deliver(self, records: list[RawRecord]) -> AsyncIterator[list[RawRecord]]:
        if time.monotonic() - self._checked_at >= CHECK_EVERY_S:
            # before taking anything: records of a re-created stream would pass for the next
            # ones of the old stream (so no batch is taken without a check within a second)
            await self.check()
        self.next_seq = records[-1].seq + 1
        self._consumed.inc(len(records))
        yield records

    async def check(self) -> None:
        """Raise StreamReset if the stream was deleted and created again, or ends before what
        this reader has read: reading on at ``next_seq`` would wait forever for events that
        will never come (the new stream numbers its events from 1 again). Also measures
        ``draflow_consumer_lag`` (stream events past this reader)."""
        status = await self.store.check_stream(self.next_seq - 1)
        self._checked_at = time.monotonic()
        self._lag.set(max(0, status.last_seq - self.next_seq + 1))

    async def batches(self) -> AsyncIterator[list[RawRecord]]:
        await self.start()
        backoff = 0.05
        read = True  # catch up from the log first
        while not self._stopped:
            try:
                if read:
                    read = False
                    async for records in self._read():
                        yield records
                taken = self._take()
                if taken:
                    self.taken += len(taken)
                    async for records in self._deliver(taken):
                        yield records
                    continue
                if self._buffer:  # a gap before what is buffered (a reconnect, an overflow)
                    read = True
                    continue
                if self._wake.is_set() and not self._whole:
                    self._wake.clear()
                    read = True  # something matching was stored: read it
                    continue
                self._wake.clear()
                # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation
                idle = True
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.idle_poll_s):
                        await self._wake.wait()
                        idle = False
                if idle:
                    await self.check()
                    read = True  # anything a wake-up missed
                backoff = 0.05
            except StoreUnavailable as exc:
                log.warning("tail %s: %s; retrying in %.2fs", self.subject_filter, exc, backoff)
                read = True
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)
