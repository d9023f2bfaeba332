"""Following the log: every stored message matching a subject filter, in stream order, as it lands.

Reads use the event store's batched direct get (no consumer state on the server, gapless by
construction: each read continues at the sequence after the last one seen). A core-NATS
subscription on the same filter only wakes the reader up when something is published; since the
stream may store a message a moment after subscribers see it, an empty read after a wake-up is
retried a few times with short pauses, and an idle poll catches anything a wake-up missed (a
reconnect, say). Used by the apiserver to stay current and by ``draflow get -w`` to watch.

Every idle poll (and every unexplained empty wake-up) also asks the stream for its identity and
end (:meth:`EventStore.check_stream`): a stream deleted and created again starts numbering at 1,
so a reader that went on at its old position would silently see nothing ever again. It raises
:class:`StreamReset` instead, and the event store remembers it for the whole process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator

from nats.aio.subscription import Subscription

from infra import metrics
from infra.eventstore import EventStore, RawRecord, StoreUnavailable

__all__ = ["Tail"]

log = logging.getLogger(__name__)

_RETRY_PAUSES_S = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05)
CHECK_EVERY_S = 1.0  # while reading, the stream's identity is confirmed at least this often


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

    async def start(self) -> None:
        if self._sub is None:
            self._sub = await self.store.nc.raw_subscribe(self.subject_filter, self._on_msg)

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

    def wake(self) -> None:
        """Read now (someone knows there is something new, e.g. after their own append)."""
        self._wake.set()

    async def _read(self) -> AsyncIterator[list[RawRecord]]:
        async for records in self.store.read_raw(self.subject_filter, self.next_seq):
            if time.monotonic() - self._checked_at >= CHECK_EVERY_S:
                # before taking anything: records of a re-created stream would pass for the next
                # ones of the old stream (so no batch is taken without a check within a second)
                await self.check()
            self.next_seq = records[-1].seq + 1
            self._consumed.inc(len(records))
            yield records
        self._lag.set(0)  # caught up

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
        while not self._stopped:
            try:
                got = False
                async for records in self._read():
                    got = True
                    yield records
                if got:
                    continue
                woken = self._wake.is_set()
                self._wake.clear()
                if woken:
                    for pause in _RETRY_PAUSES_S:  # published, maybe not stored yet
                        await asyncio.sleep(pause)
                        async for records in self._read():
                            got = True
                            yield records
                        if got:
                            break
                    if got:
                        continue
                    await self.check()  # something was published past us, but nothing to read?
                # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation
                idle = True
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.idle_poll_s):
                        await self._wake.wait()
                        idle = False
                if idle:
                    await self.check()
                backoff = 0.05
            except StoreUnavailable as exc:
                log.warning("tail %s: %s; retrying in %.2fs", self.subject_filter, exc, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)
