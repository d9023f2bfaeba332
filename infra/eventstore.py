"""The event store: one JetStream stream, optimistic appends, fast reads and folds.

* ``ensure_stream`` creates or updates the stream (limits retention, file storage, ``deny_delete``,
  ``deny_purge``, ``allow_direct``, atomic batches, a duplicate window) and its dead-letter stream;
  every service calls it on start, so it is idempotent.
* ``append`` publishes events to one aggregate subject with ``Nats-Msg-Id`` (de-duplication) and
  ``Nats-Expected-Last-Subject-Sequence`` (optimistic concurrency: the *stream* sequence of the
  subject's last message, 0 = must not exist) and returns the stream sequences. Several events go
  in one atomic batch. A conflict raises :class:`ConcurrencyError`, recognised by JetStream error
  code 10071. Transient failures are retried with the same ids; since the server checks the
  expected sequence before de-duplicating, a conflict on a retry is resolved by looking at the
  message right after the expected sequence: if it is ours, the append had succeeded.
* ``read`` streams events in batches via batched direct get (no consumer state), prefetching the
  next batch while the caller folds the current one; ``load`` folds one aggregate; ``last`` reads a
  subject's last message with a direct get.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import datetime
import logging
import os
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from typing import Any, Generic, NamedTuple, TypeVar

import nats.errors
from nats.js.errors import APIError, ServiceUnavailableError

from draflow.events.codec import (
    HDR_SCHEMA,
    HDR_TRACEPARENT,
    HDR_TYPE,
    decode,
    decode_many,
    encode,
    make_envelope,
)
from draflow.events.envelope import Envelope, Event
from draflow.events.subjects import aggregate_subject, events_prefix, parse_subject
from draflow.infra import tracing
from draflow.infra.archive import Archive, archive_dir
from draflow.infra.auth.roles import ADMIN
from draflow.infra.config import Settings
from draflow.infra.errors import (
    AppendError,
    ConcurrencyError,
    EventStoreError,
    HistoryUnavailable,
    StoreUnavailable,
    StreamMissing,
    StreamReset,
)
from draflow.infra.guard import Guard, GuardConflict
from draflow.infra.nats_client import DraflowClient, RawInbox, connect
from draflow.infra.publisher import (
    ERR_BATCH_DUPLICATE_MSG_ID,
    ERR_STREAM_NAME_IN_USE,
    ERR_WRONG_LAST_SEQUENCE,
    HDR_EXPECTED_LAST_SUBJECT_SEQ,
    HDR_MSG_ID,
    MAX_BATCH_EVENTS,
    Publisher,
)
from draflow.infra.reader import RawRecord, StreamReader, StreamStatus
from draflow.infra.retry import transient_retry
from draflow.infra.shortfall import Shortfall
from draflow.infra.snapshots import SnapshotStore
from draflow.infra.streams import dlq_stream_config, event_stream_config, snapshot_stream_config

__all__ = [
    "ERR_WRONG_LAST_SEQUENCE",
    "HDR_EXPECTED_LAST_SUBJECT_SEQ",
    "HDR_MSG_ID",
    "AppendError",
    "AppendRequest",
    "ConcurrencyError",
    "EventStore",
    "EventStoreError",
    "Guard",
    "GuardConflict",
    "HistoryUnavailable",
    "Loaded",
    "RawRecord",
    "StoreUnavailable",
    "StreamReset",
    "StreamStatus",
    "acting_for",
    "new_id",
]

S = TypeVar("S")

log = logging.getLogger(__name__)


# whose request the current task is serving, when not this process's own decision: the
# Kubernetes API sets it to the authenticated user (``user:alice``) around the write it hands to the
# apiserver, so every event that write appends names the user as its actor
acting_for: contextvars.ContextVar[str | None] = contextvars.ContextVar("draflow_acting_for", default=None)


def new_id() -> str:
    """A random event id (use a deterministic one when a retry must not duplicate)."""
    return os.urandom(12).hex()


class Loaded(NamedTuple, Generic[S]):
    """A folded aggregate and its version (stream sequence of its last event, 0 if none)."""

    state: S
    version: int


class AppendRequest(NamedTuple):
    subject: str
    events: Sequence[Event]
    expected_last_seq: int | None
    msg_id: str | None = None
    correlation_id: str = ""
    causation_id: str = ""


def _check_guards(subject: str, guards: Sequence[Guard], prefix: str) -> None:
    seen = {subject}
    for g in guards:
        if not g.subject.startswith(prefix):
            raise ValueError(f"{g.subject}: not an event subject of this stream ({prefix}...)")
        # JetStream checks an expectation only on a subject's first message of a batch: a
        # subject may come again only without one (a saga's completion after its step's)
        if g.subject in seen and (g.subject == subject or g.expected_last_seq is not None):
            raise ValueError(f"{subject}: guard subject {g.subject} twice in one append")
        seen.add(g.subject)


def _has_gap(expected: int, records: Sequence[RawRecord]) -> bool:
    """Whether ``records`` (read from ``expected`` on) skip a sequence."""
    return records[-1].seq - expected + 1 != len(records)


def _kind_of(subject: str) -> str:
    parts = subject.split(".", 4)
    return parts[2] if len(parts) > 3 else subject


def _span_attributes(subject: str, msg_id: str, evs: Sequence[Event]) -> dict[str, Any]:
    return {
        "messaging.system": "nats",
        "messaging.operation": "publish",
        "messaging.operation.type": "send",
        "messaging.operation.name": "publish",
        "messaging.destination.name": subject,
        "messaging.message.id": msg_id,
        "draflow.event.types": ",".join(type(e).type_name() for e in evs),
    }


class EventStore:
    """Appends and reads events of one stream. Construct with :meth:`open` (or pass a connection)."""

    def __init__(self, nc: DraflowClient, settings: Settings, actor: str) -> None:
        self.nc = nc
        self.settings = settings
        self.actor = actor
        self.stream = settings.stream
        self.root = settings.root
        self.all_events = f"{events_prefix(settings.root)}.>"
        self._events_prefix = f"{events_prefix(settings.root)}."
        self.js = nc.jetstream(timeout=10.0)
        self._inbox = RawInbox(nc)
        self._pub = Publisher(nc, self._inbox)
        self._reader = StreamReader(nc, self._inbox, self.stream)
        self.snapshots = SnapshotStore(nc, settings, actor, self._inbox)
        self.archive = Archive(archive_dir(settings), self.all_events)
        # the identity (creation time) of the stream this process follows, learnt at start
        self.identity: str | None = None
        self.reset: StreamReset | None = None  # set once a reset was detected
        self._archive_identity: str | None = None  # whose segments reads fill gaps from
        self._shortfall = Shortfall(self.stream)  # when "it ends before" is believed
        self._reset_seen = asyncio.Event()

    @classmethod
    async def open(
        cls,
        settings: Settings,
        actor: str,
        nc: DraflowClient | None = None,
        *,
        ensure: bool = True,
        connect_timeout_s: float = 60.0,
    ) -> EventStore:
        """Connect (retrying while the server starts), ensure the streams exist, ready to use.

        Tools that only read pass ``ensure=False``: they must not create or change the stream.
        """
        if nc is None:
            nc = await connect(settings, actor, connect_timeout_s=connect_timeout_s)
        store = cls(nc, settings, actor)
        await store.start(ensure=ensure)
        return store

    async def start(self, *, ensure: bool = True) -> None:
        await self._inbox.start()
        if ensure:
            await self.ensure_stream()
            self.identity = (await self._reader.stream_status()).created

    # ---- stream identity: detecting a reset -------------------------------------------------------

    async def stream_status(self) -> StreamStatus:
        return await self._reader.stream_status()

    async def check_stream(self, position: int) -> StreamStatus:
        """Raise :class:`StreamReset` if the stream is not the one this process has applied up to
        ``position``: gone (deleted), another identity (deleted and created again), or it ends
        before ``position``. The first check of a store opened without ``ensure`` learns the identity.
        StoreUnavailable when the stream cannot be asked (or does not exist right now), and while
        an answer that it ends before ``position`` is not proof yet (``draflow.infra.shortfall``: a
        cluster's lagging replica answers so for a moment)."""
        if self.reset is not None:
            raise self.reset
        try:
            status = await self._reader.stream_status()
        except StreamMissing:
            if self.identity is None:  # never followed one: nothing lost yet
                raise
            # the log this process follows is gone: never answer from memory as if it were there
            self.reset = StreamReset(self.stream, position, 0, self.identity, "")
            self._reset_seen.set()
            raise self.reset from None
        if self.identity is None:
            self.identity = status.created
        if status.created != self.identity or self._shortfall.judge(status, position, time.monotonic()):
            self.reset = StreamReset(self.stream, position, status.last_seq, self.identity, status.created)
            self._reset_seen.set()
            raise self.reset
        return status

    async def wait_reset(self) -> StreamReset:
        """Return once any reader of this store has detected a stream reset."""
        await self._reset_seen.wait()
        assert self.reset is not None
        return self.reset

    def accept_new_stream(self) -> None:
        """After rebuilding from the new stream: follow it from now on (its identity is learnt at
        the next check)."""
        self.identity = self.reset.new_identity if self.reset is not None else None
        self.reset = None
        self._reset_seen = asyncio.Event()

    async def close(self) -> None:
        """Flush what is buffered (acks, publishes) and close the connection."""
        if self.nc.is_closed:
            return
        # If the server is gone, nats-py is in its reconnect loop. On Python 3.11 cancelling that
        # loop can be lost (asyncio.wait_for), which would keep the process alive: make the loop
        # end by itself after one more attempt.
        self.nc.options["allow_reconnect"] = False
        self.nc.options["max_reconnect_attempts"] = 1
        if self.nc.is_connected:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.nc.flush(), 0.5)
        # the server may have gone first (everything stops at once under honcho): nothing to close
        try:
            await self.nc.close()
        except (OSError, nats.errors.Error, TimeoutError):
            pass
        except asyncio.CancelledError:
            # a lost connection's transport cancels its own close waiter (seen when nats-server
            # stops first): the client is closed all the same. A cancellation of this task is not
            # swallowed.
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise

    # ---- stream setup -----------------------------------------------------------------------------

    @property
    def manages_streams(self) -> bool:
        """Whether this process creates and updates the streams: the admin, or anyone on a server
        that asks for no credential. Every other role may not (the server refuses it)."""
        return self.nc.credential is None or self.nc.role == ADMIN

    async def ensure_stream(self, *, wait_s: float | None = 120.0) -> None:
        """Create the event and dead-letter streams, or update them to the current config; a role
        that may not manage them waits until they exist (the admin creates them at start), at
        most ``wait_s`` (None: for ever)."""
        configs = (
            event_stream_config(self.settings),
            dlq_stream_config(self.settings),
            snapshot_stream_config(self.settings),
        )
        for config in configs:
            if not self.manages_streams:
                await self._wait_for_stream(str(config.name), wait_s)
                continue
            try:
                await self.js.add_stream(config)
            except APIError as exc:
                if exc.err_code != ERR_STREAM_NAME_IN_USE:
                    raise
                await self.js.update_stream(config)

    async def _wait_for_stream(self, name: str, wait_s: float | None) -> None:
        reader = StreamReader(self.nc, self._inbox, name)
        delay, told = 0.05, False
        async with asyncio.timeout(wait_s):
            while True:
                try:
                    await reader.stream_status()
                    return
                except StoreUnavailable as exc:
                    if not told:
                        log.info("%s: waiting for stream %s (the admin makes it): %s", self.actor, name, exc)
                        told = True
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)

    # ---- appends ----------------------------------------------------------------------------------

    def subject(self, kind: str, namespace: str | None, name: str) -> str:
        return aggregate_subject(kind, namespace, name, self.root)

    async def append(
        self,
        subject: str,
        events: Event | Sequence[Event],
        *,
        expected_last_seq: int | None,
        msg_id: str | None = None,
        cause: Envelope[Any] | None = None,
        correlation_id: str | None = None,
        causation_id: str | None = None,
        wait_s: float = 5.0,
        actor: str | None = None,
        links: Sequence[str] = (),
        guards: Sequence[Guard] = (),
    ) -> tuple[int, ...]:
        """Append ``events`` to ``subject`` atomically; returns their stream sequences.

        ``expected_last_seq``: the stream sequence of the subject's last event as you loaded it (0 =
        the subject must be empty; None = no check). ``msg_id``: a deterministic id makes a retried
        append a no-op (events get ``msg_id`` or ``msg_id#i``). ``cause``: the event that led to this
        append (sets causation and correlation). ``actor``: whose decision it is when not this
        process's (the apiserver appending a kubelet's facts once NodeRestriction admitted them).
        ``links``: traceparents of spans in other traces the append span links to. ``guards``:
        guard messages (:mod:`draflow.infra.guard`) appended in the same atomic batch, after the
        events; one whose guard subject moved refuses the whole batch with ``GuardConflict``.
        """
        evs: Sequence[Event] = (events,) if isinstance(events, Event) else events
        if not evs:
            raise ValueError(f"{subject}: nothing to append")
        if not subject.startswith(self._events_prefix):
            raise ValueError(f"{subject}: not an event subject of this stream ({self._events_prefix}...)")
        if len(evs) + len(guards) > MAX_BATCH_EVENTS:
            raise ValueError(f"{subject}: at most {MAX_BATCH_EVENTS} events per append")
        _check_guards(subject, guards, self._events_prefix)
        base = msg_id or new_id()
        corr = correlation_id if correlation_id is not None else (cause.correlation_id if cause else "")
        caus = causation_id if causation_id is not None else (cause.id if cause else "")
        attrs = _span_attributes(subject, base, evs) if tracing.enabled() else {}
        with tracing.producer_span(f"append {_kind_of(subject)}", attrs, links) as traceparent:
            msgs = self._build(subject, evs, base, expected_last_seq, corr, caus, traceparent, actor)
            for i, g in enumerate(guards):  # ids: the append's id and the guard's position
                msgs += self._build(
                    g.subject, (g.event,), f"{base}#g{i}", g.expected_last_seq, corr, caus, traceparent, actor
                )
            checks = [(subject, expected_last_seq, 0)] + [
                (g.subject, g.expected_last_seq, len(evs) + i) for i, g in enumerate(guards)
            ]
            try:
                return await self._publish(msgs, len(evs), checks, wait_s)
            except StoreUnavailable:
                pass
            # Retry with the very same ids: de-duplication and conflict resolution make it safe.
            async for attempt in transient_retry(max_delay_s=max(wait_s * 6, 30.0)):
                with attempt:
                    return await self._publish(msgs, len(evs), checks, wait_s)
        raise AssertionError("unreachable")

    async def append_many(
        self,
        requests: Iterable[AppendRequest],
        *,
        window: int = 1024,
        wait_s: float = 10.0,
        return_exceptions: bool = False,
    ) -> list[Any]:
        """Pipelined appends: up to ``window`` publishes in flight; results in request order.

        Single-event requests are published without waiting for each ack; any that fail (conflict,
        timeout, refusal) and multi-event requests then go through :meth:`append` with the same
        ids, so the outcome is that of calling ``append`` for each request, only faster. Each
        result is the tuple of sequences; a failed request raises (the first failure, after all
        requests were tried) or, with ``return_exceptions``, leaves its exception in its place.
        """
        reqs = list(requests)
        results: list[Any] = [None] * len(reqs)
        in_flight: deque[tuple[int, str, bytes, asyncio.Future[tuple[bytes, bytes | None]]]] = deque()
        slow: list[int] = []
        ids: list[str] = [r.msg_id or new_id() for r in reqs]
        traced = tracing.enabled()

        async def settle_oldest() -> None:
            i, subject, token, fut = in_flight.popleft()
            try:
                # Only a pending ack costs a trip through the event loop; while we do not yield,
                # nats-py's flusher coalesces the publishes into few socket writes.
                data, hdrs = fut.result() if fut.done() else await asyncio.wait_for(fut, wait_s)
                ack = self._pub.parse_ack(subject, data, hdrs)
            except (TimeoutError, StoreUnavailable, AppendError):
                self._inbox.cancel(token)
                slow.append(i)
                return
            if ack.error is None:
                results[i] = (ack.seq,)
            else:
                slow.append(i)

        for i, r in enumerate(reqs):
            if len(r.events) != 1 or not r.subject.startswith(self._events_prefix):
                slow.append(i)
                continue
            attrs = _span_attributes(r.subject, ids[i], r.events) if traced else {}
            with tracing.producer_span(f"append {_kind_of(r.subject)}", attrs) as traceparent:
                ((_, payload, hdrs),) = self._build(
                    r.subject,
                    r.events,
                    ids[i],
                    r.expected_last_seq,
                    r.correlation_id,
                    r.causation_id,
                    traceparent,
                )
                reply, token, fut = self._inbox.future()
                try:
                    await self._pub.send(r.subject, payload, hdrs, reply)
                except StoreUnavailable:
                    self._inbox.cancel(token)
                    slow.append(i)
                    continue
            in_flight.append((i, r.subject, token, fut))
            if len(in_flight) >= window:
                await settle_oldest()
        while in_flight:
            await settle_oldest()

        sem = asyncio.Semaphore(64)

        async def one(i: int) -> tuple[int, ...]:
            r = reqs[i]
            async with sem:
                return await self.append(
                    r.subject,
                    r.events,
                    expected_last_seq=r.expected_last_seq,
                    msg_id=ids[i],
                    correlation_id=r.correlation_id,
                    causation_id=r.causation_id,
                    wait_s=wait_s,
                )

        slow.sort()
        outcomes = await asyncio.gather(*(one(i) for i in slow), return_exceptions=True)
        for i, outcome in zip(slow, outcomes, strict=True):
            results[i] = outcome
        if not return_exceptions:
            for outcome in results:
                if isinstance(outcome, BaseException):
                    raise outcome
        return results

    def _build(
        self,
        subject: str,
        evs: Sequence[Event],
        base: str,
        expected: int | None,
        corr: str,
        caus: str,
        traceparent: str,
        actor: str | None = None,
    ) -> list[tuple[str, bytes, dict[str, str]]]:
        out: list[tuple[str, bytes, dict[str, str]]] = []
        single = len(evs) == 1
        for i, ev in enumerate(evs):
            eid = base if single else f"{base}#{i}"
            env = make_envelope(
                ev,
                id=eid,
                subject=subject,
                correlation_id=corr,
                causation_id=caus,
                actor=actor or acting_for.get() or self.actor,
                traceparent=traceparent,
            )
            hdrs = {HDR_MSG_ID: eid, HDR_TYPE: env.type, HDR_SCHEMA: str(env.schema)}
            if traceparent:
                hdrs[HDR_TRACEPARENT] = traceparent
            if i == 0 and expected is not None:
                hdrs[HDR_EXPECTED_LAST_SUBJECT_SEQ] = str(expected)
            out.append((subject, encode(env), hdrs))
        return out

    async def _publish(
        self,
        msgs: list[tuple[str, bytes, dict[str, str]]],
        n_events: int,
        checks: list[tuple[str, int | None, int]],
        wait_s: float,
    ) -> tuple[int, ...]:
        """Publish one append (``msgs``: its events, then its guard messages) as one atomic batch.

        ``checks``: (subject, expected last sequence, index of its message in ``msgs``)."""
        subject = msgs[0][0]
        n = len(msgs)
        if n == 1:
            _, payload, hdrs = msgs[0]
            ack = await self._pub.request(subject, payload, hdrs, wait_s)
        else:
            ack = await self._pub.publish_batch(msgs, wait_s)
        if ack.error is None:
            first = ack.seq - n + 1
            return tuple(range(first, first + n_events))
        err = ack.error
        if err.err_code == ERR_WRONG_LAST_SEQUENCE and any(e is not None for _, e, _ in checks):
            # The server checks expectations before de-duplication, so a retry of an append that
            # did land reports a conflict: ours is then the message right after the expectation.
            for subj, expected, index in checks:
                if expected is None:
                    continue
                found = await self._reader.next_on_subject(subj, expected + 1)
                if found is not None and found.header(HDR_MSG_ID) == msgs[index][2][HDR_MSG_ID]:
                    first = found.seq - index
                    return tuple(range(first, first + n_events))
                break  # the first checked subject decides: all of a batch lands or none
            await self._raise_conflict(checks)
        if err.err_code == ERR_BATCH_DUPLICATE_MSG_ID:
            last = await self.last_record(msgs[-1][0])
            if last is not None and last.header(HDR_MSG_ID) == msgs[-1][2][HDR_MSG_ID]:
                first = last.seq - n + 1
                return tuple(range(first, first + n_events))
        if err.code == 503:
            raise StoreUnavailable(f"{subject}: JetStream unavailable: {err.description}")
        raise AppendError(subject, err.code, err.err_code, err.description)

    async def _raise_conflict(self, checks: list[tuple[str, int | None, int]]) -> None:
        """Which expectation failed: the append's own subject first (``ConcurrencyError``), else
        the guard subjects that moved (``GuardConflict``); told by reading, never by error text."""
        subject, expected, _ = checks[0]
        guards = [(s, e) for s, e, _ in checks[1:] if e is not None]
        if expected is not None and (not guards or await self.last_seq(subject) != expected):
            raise ConcurrencyError(subject, expected)
        moved = [(s, e) for s, e in guards if await self.last_seq(s) != e]
        raise GuardConflict(subject, moved or guards)

    # ---- reads ------------------------------------------------------------------------------------

    async def read_raw(
        self,
        subject_filter: str | None = None,
        from_seq: int = 1,
        to_seq: int | None = None,
        *,
        batch: int = 2048,
        wait_s: float = 10.0,
    ) -> AsyncIterator[list[RawRecord]]:
        """Stored messages matching ``subject_filter`` (wildcards allowed) in sequence order, in batches.

        Stops once caught up with the stream as it was when the read started (or at ``to_seq``).
        History moved out of the stream is read from the archive segments, transparently, also
        when a trim removes events while this read is on its way to them; a range neither holds
        raises :class:`HistoryUnavailable` naming the oldest sequence.

        How a trim is noticed: a trim removes a prefix of the stream, so the stream read returns
        the next event still there and the removed ones look like a gap. A gap (or, for a
        filter, the end of the read, which may hide one) is followed by one question to the
        stream: if its first sequence is now past the gap's start, the archive (written before
        any trim) fills the gap. Reading everything, the stream's last event is never trimmed,
        so a contiguous read that reached the end missed nothing and asks nothing.
        """
        filt = subject_filter or self.all_events
        expected = max(1, from_seq)  # every matching event before this one has been yielded
        if to_seq is not None and to_seq < expected:
            return
        answers = [0]  # replies the stream read has had (see StreamReader.read)
        first, asked_at = 0, -1  # the stream's first sequence, learnt after reply number asked_at
        async for records in self._reader.read(filt, expected, to_seq, batch, wait_s, answers):
            if _has_gap(expected, records):
                first, asked_at = await self.first_seq(), answers[0]
                if first > expected:  # the stream no longer holds expected..first-1
                    upto = min(first - 1, records[-1].seq)
                    async for archived in self._archived(filt, expected, upto, first, batch):
                        yield archived
                    expected = upto + 1
                    records = [r for r in records if r.seq > upto]
            if records:
                expected = records[-1].seq + 1
                yield records
        if to_seq is not None and expected > to_seq:
            return
        if to_seq is None and filt == self.all_events and asked_at < 0:
            return  # a gapless read of everything that ended at the stream's end
        if asked_at != answers[0]:  # the read's end came after the last question: ask again
            first = await self.first_seq()
        if first > expected:  # the events after the last one read were trimmed, maybe matching
            upto = first - 1 if to_seq is None else min(first - 1, to_seq)
            async for archived in self._archived(filt, expected, upto, first, batch):
                yield archived

    async def first_seq(self, wait_s: float = 5.0) -> int:
        """The stream's first sequence now (0: empty); learns its identity for the archive.

        Only a leader's answer counts: a replica answering for a leaderless group (an election)
        may not have applied a trim yet, and an old first sequence would hide it. Asked again for
        at most ``wait_s``, then StoreUnavailable (readers retry)."""
        delay, deadline = 0.05, time.monotonic() + wait_s
        while (status := await self._reader.stream_status()).leaderless:
            if time.monotonic() > deadline:
                raise StoreUnavailable(f"stream {self.stream}: no leader to say where it starts")
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)
        self._archive_identity = self.identity or status.created
        return int(status.state.first_seq) if status.last_seq else 0

    async def _archived(
        self, filt: str, lo: int, hi: int, first: int, batch: int
    ) -> AsyncIterator[list[RawRecord]]:
        """The archived events ``lo..hi`` matching ``filt`` (the stream starts at ``first``)."""
        segs = self.archive.contiguous(self._archive_identity)
        reaches = bool(segs) and segs[-1].last + 1 >= first
        oldest = segs[0].first if reaches else first
        if lo < oldest:
            raise HistoryUnavailable(lo, oldest, str(self.archive.folder))
        for records in self.archive.read(segs, filt, lo, hi, batch):
            yield records

    async def last_per_subject(
        self, subject_filter: str, *, batch: int = 2048, wait_s: float = 10.0
    ) -> AsyncIterator[list[RawRecord]]:
        """The last stored message of each subject matching ``subject_filter`` (e.g. every saga's head)."""
        async for records in self._reader.last_per_subject(subject_filter, batch, wait_s):
            yield records

    async def read(
        self,
        subject_filter: str | None = None,
        from_seq: int = 1,
        to_seq: int | None = None,
        *,
        batch: int = 2048,
    ) -> AsyncIterator[list[Envelope[Event]]]:
        """Decoded events (upcast to the current schema) matching ``subject_filter``, in batches."""
        async for records in self.read_raw(subject_filter, from_seq, to_seq, batch=batch):
            yield decode_many([(r.data, r.seq) for r in records])

    async def fold(
        self,
        subject_filter: str,
        apply: Callable[[S, Envelope[Event]], S],
        initial: S,
        *,
        from_seq: int = 1,
        to_seq: int | None = None,
    ) -> Loaded[S]:
        """Fold every matching event with the pure reducer ``apply``; version = last sequence seen."""
        state, version = initial, 0
        async for envs in self.read(subject_filter, from_seq, to_seq):
            for env in envs:
                state = apply(state, env)
            version = envs[-1].seq
        return Loaded(state, version)

    async def load(self, subject: str, apply: Callable[[S, Envelope[Event]], S], initial: S) -> Loaded[S]:
        """Fold one aggregate; ``version`` is the ``expected_last_seq`` for the next append."""
        return await self.fold(subject, apply, initial)

    async def events(self, subject_filter: str, from_seq: int = 1) -> list[Envelope[Event]]:
        out: list[Envelope[Event]] = []
        async for envs in self.read(subject_filter, from_seq):
            out.extend(envs)
        return out

    async def first_stored_since(self, when: datetime.datetime) -> RawRecord | None:
        """The first message stored at or after ``when`` (a direct get by start time), or None."""
        stamp = when.astimezone(datetime.UTC).isoformat().replace("+00:00", "Z")
        reader = self._reader
        return await reader.direct_get(reader.direct_subject, f'{{"start_time": "{stamp}"}}'.encode())

    async def record_at(self, seq: int) -> RawRecord | None:
        """The stored message at ``seq`` (a direct get; None if the stream does not hold it)."""
        reader = self._reader
        return await reader.direct_get(reader.direct_subject, f'{{"seq": {int(seq)}}}'.encode())

    async def last_record(self, subject: str) -> RawRecord | None:
        """The subject's last stored message, by direct get (None if the subject is empty)."""
        return await self._reader.last(subject)

    async def last(self, subject: str) -> Envelope[Event] | None:
        rec = await self.last_record(subject)
        return None if rec is None else decode(rec.data, rec.seq)

    async def last_seq(self, subject: str) -> int:
        """The aggregate's version: stream sequence of its last event, 0 if it has none."""
        rec = await self.last_record(subject)
        return 0 if rec is None else rec.seq

    async def stream_last_seq(self, *, wait_s: float = 0.0) -> int:
        """The stream's last sequence. With ``wait_s``, asked again (backing off) for at most that
        long while JetStream gives no answer: a cluster electing the stream's leader, or every
        server away, must not fail a service that is starting (it folds up to this position)."""
        if wait_s <= 0:
            info = await self.js.stream_info(self.stream)
            return int(info.state.last_seq)
        unanswered = (nats.errors.TimeoutError, nats.errors.NoRespondersError, ServiceUnavailableError)
        async for attempt in transient_retry(attempts=1000, max_delay_s=wait_s, retry_on=unanswered):
            with attempt:
                try:
                    info = await self.js.stream_info(self.stream)
                except unanswered as exc:
                    log.warning("stream %s: no answer to STREAM.INFO (%r); asking again", self.stream, exc)
                    raise
        return int(info.state.last_seq)

    def parse_subject(self, subject: str) -> tuple[str, str | None, str]:
        return tuple(parse_subject(subject, self.root))  # type: ignore[return-value]
