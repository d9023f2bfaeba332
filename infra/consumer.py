"""Durable pull consumers: one per service and purpose, explicit acks, poison events dead-lettered.

A :class:`DurableConsumer` fetches batches with an explicit expiry, decodes each event, runs the
handler inside a CONSUMER span (parent: the producer's span from the message's ``traceparent``) and
then acknowledges:

* success -> ``ack`` (after the handler's batch has committed, see :class:`Handler.batch`);
* :class:`~draflow.infra.errors.PermanentError` (including :class:`~draflow.infra.errors.PoisonEvent`) or an
  undecodable message -> copied to the dead-letter stream with the reason, then ``term``;
* anything else is treated as transient. Unordered consumers ``nak(delay)`` the event (exponential
  backoff) and JetStream redelivers it; ordered consumers (projections, where a later event must
  never be applied before an earlier one) retry it in place, keeping the lease with
  ``in_progress``. After ``max_deliver`` attempts the event is dead-lettered and terminated.

The consumer is created or updated idempotently on start and again after every reconnect. An
ordered consumer with a checkpoint (``start_after``) is also reset to the checkpoint + 1 then, so
delivery resumes exactly after the last event its projection committed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

import msgspec
import nats.errors
from nats.aio.msg import Msg
from nats.js import JetStreamContext, api
from nats.js.errors import APIError, NotFoundError

from draflow.events.codec import DecodeError, decode
from draflow.events.envelope import Envelope, Event
from draflow.infra import metrics, tracing
from draflow.infra.errors import PermanentError, StoreUnavailable
from draflow.infra.eventstore import EventStore

__all__ = ["ConsumerOptions", "DurableConsumer", "FunctionHandler", "Handler"]

log = logging.getLogger(__name__)


class ConsumerOptions(msgspec.Struct, frozen=True, kw_only=True):
    batch: int = 256
    fetch_wait_s: float = 1.0  # expiry of each pull request
    ack_wait_s: float = 30.0
    max_deliver: int = 5
    max_ack_pending: int = 4096
    retry_base_s: float = 0.2  # nak delay / in-place retry backoff: base * 2**(attempt-1) ...
    retry_max_s: float = 10.0  # ... capped here
    ordered: bool = False


class Handler:
    """What a consumer drives. Override :meth:`handle`; override :meth:`batch` for a transaction."""

    async def handle(self, env: Envelope[Event]) -> None:
        raise NotImplementedError

    @contextlib.asynccontextmanager
    async def batch(self) -> AsyncIterator[None]:
        """Wraps the handling of one fetched batch; leaving it normally must commit what was handled."""
        yield


class FunctionHandler(Handler):
    def __init__(self, fn: Callable[[Envelope[Event]], Awaitable[None]]) -> None:
        self.fn = fn

    async def handle(self, env: Envelope[Event]) -> None:
        await self.fn(env)


def _meta(reply: str) -> tuple[int, int]:
    """(stream sequence, delivery count) from a JetStream ack subject (v1 and v2 forms)."""
    t = reply.split(".")
    off = 0 if len(t) == 9 else 2
    return int(t[5 + off]), int(t[4 + off])


class _Retry(Exception):
    """Internal: the handler failed transiently on one event."""

    def __init__(self, index: int, cause: BaseException) -> None:
        self.index = index
        self.cause = cause


class DurableConsumer:
    def __init__(
        self,
        store: EventStore,
        name: str,
        filter_subjects: Sequence[str],
        handler: Handler,
        options: ConsumerOptions | None = None,
        *,
        start_after: Callable[[], Awaitable[int]] | None = None,
    ) -> None:
        self.store = store
        self.name = name
        self.filter_subjects = list(filter_subjects)
        self.handler = handler
        self.options = options or ConsumerOptions()
        self.start_after = start_after
        self.dlq_subject = f"{store.root}.dlq.{name}"
        self._sub: JetStreamContext.PullSubscription | None = None
        self._stale = True
        self._attempts: dict[int, int] = {}  # ordered mode: in-place attempts per stream sequence
        store.nc.on_reconnect(self._on_reconnect)

    async def _on_reconnect(self) -> None:
        self._stale = True

    def config(self) -> api.ConsumerConfig:
        o = self.options
        cfg = api.ConsumerConfig(
            name=self.name,
            durable_name=self.name,
            description=f"draflow consumer {self.name}",
            deliver_policy=api.DeliverPolicy.ALL,
            ack_policy=api.AckPolicy.EXPLICIT,
            ack_wait=o.ack_wait_s,
            max_deliver=o.max_deliver,
            max_ack_pending=o.max_ack_pending,
            replay_policy=api.ReplayPolicy.INSTANT,
            num_replicas=1,
        )
        if len(self.filter_subjects) == 1:
            cfg.filter_subject = self.filter_subjects[0]
        else:
            cfg.filter_subjects = self.filter_subjects
        return cfg

    async def ensure(self) -> None:
        """Create or update the durable consumer; rewind it to the checkpoint if there is one."""
        js = self.store.js
        info = await js.add_consumer(self.store.stream, self.config())
        if self.start_after is not None:
            checkpoint = await self.start_after()
            floor = info.ack_floor.stream_seq if info.ack_floor else 0
            if floor != checkpoint or info.num_ack_pending:
                await js.reset_consumer(self.store.stream, self.name, seq=checkpoint + 1)
        if self._sub is None:
            self._sub = await js.pull_subscribe_bind(durable=self.name, stream=self.store.stream)
        self._stale = False

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Fetch and handle until ``stop`` is set (or the task is cancelled)."""
        stop = stop or asyncio.Event()
        backoff = self.options.retry_base_s
        while not stop.is_set():
            try:
                await self.poll()
                backoff = self.options.retry_base_s
            except (StoreUnavailable, nats.errors.Error, APIError, OSError) as exc:
                log.warning("consumer %s: %r; retrying in %.2fs", self.name, exc, backoff)
                self._stale = True
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), backoff)
                backoff = min(backoff * 2, self.options.retry_max_s)

    async def poll(self) -> int:
        """One fetch and its handling; returns how many messages were fetched (0 when idle)."""
        if self._stale or self._sub is None:
            await self.ensure()
        assert self._sub is not None
        try:
            msgs = await self._sub.fetch(self.options.batch, timeout=self.options.fetch_wait_s)
        except NotFoundError:
            self._stale = True  # the consumer is gone (deleted, or the server lost it): re-create
            return 0
        except nats.errors.TimeoutError:
            return 0
        await self._process(msgs)
        return len(msgs)

    async def pending(self) -> int:
        """Events not yet acknowledged by this consumer (waiting plus in flight)."""
        info = await self.store.js.consumer_info(self.store.stream, self.name)
        return int(info.num_pending or 0) + int(info.num_ack_pending or 0)

    # ---- handling ---------------------------------------------------------------------------------

    async def _process(self, msgs: list[Msg]) -> None:
        start = 0
        while start < len(msgs):
            try:
                start = await self._handle_batch(msgs, start)
            except _Retry as r:
                start = await self._transient(msgs, r.index, r.cause)

    async def _handle_batch(self, msgs: list[Msg], start: int) -> int:
        """Handle msgs[start:] in one handler batch; ack after it committed. Returns len(msgs)."""
        handled: list[Msg] = []
        poison: list[tuple[Msg, str]] = []
        failed: _Retry | None = None
        async with self.handler.batch():
            for i in range(start, len(msgs)):
                msg = msgs[i]
                seq, _ = _meta(msg.reply)
                try:
                    env = decode(msg.data, seq)
                except DecodeError as exc:
                    poison.append((msg, f"undecodable: {exc}"))
                    continue
                with tracing.consumer_span(
                    f"handle {env.type}",
                    msg.headers,
                    env.traceparent,
                    {
                        "messaging.system": "nats",
                        "messaging.operation.type": "process",
                        "messaging.consumer.group.name": self.name,
                        "messaging.destination.name": env.subject,
                        "messaging.message.id": env.id,
                        "draflow.stream.seq": seq,
                    },
                ):
                    try:
                        await self.handler.handle(env)
                    except PermanentError as exc:
                        poison.append((msg, f"{type(exc).__name__}: {exc}"))
                        continue
                    except Exception as exc:  # transient until max_deliver says otherwise
                        failed = _Retry(i, exc)
                        break
                handled.append(msg)
                self._attempts.pop(seq, None)
        # the batch committed what was handled before any failure: acknowledge exactly that
        for msg, reason in poison:
            await self._dead_letter(msg, reason)
        for msg in handled:
            await msg.ack()
        if handled:
            metrics.EVENTS_CONSUMED.labels(service=self.store.actor, consumer=self.name).inc(len(handled))
        if failed is not None:
            raise failed
        return len(msgs)

    async def _transient(self, msgs: list[Msg], index: int, cause: BaseException) -> int:
        o = self.options
        msg = msgs[index]
        seq, delivered = _meta(msg.reply)
        if o.ordered:
            attempts = self._attempts.get(seq, 0) + 1
            self._attempts[seq] = attempts
        else:
            attempts = delivered
        if attempts >= o.max_deliver:
            self._attempts.pop(seq, None)
            reason = f"gave up after {attempts} attempts: {type(cause).__name__}: {cause}"
            await self._dead_letter(msg, reason)
            return index + 1
        delay = min(o.retry_base_s * 2 ** (attempts - 1), o.retry_max_s)
        log.info("consumer %s: seq %d failed (%r), retry in %.2fs", self.name, seq, cause, delay)
        if not o.ordered:
            await msg.nak(delay=delay)
            return index + 1
        for m in msgs[index:]:  # keep the lease while we wait, so nothing overtakes this event
            await m.in_progress()
        await asyncio.sleep(delay)
        return index

    async def _dead_letter(self, msg: Msg, reason: str) -> None:
        """Copy the event with the reason into the dead-letter stream, then terminate it."""
        seq, delivered = _meta(msg.reply)
        reason = " ".join(reason.split())[:1000]
        headers = {
            **{k: v for k, v in (msg.headers or {}).items() if not k.startswith("Nats-")},
            "Nats-Msg-Id": f"dlq:{self.name}:{seq}",
            "Draflow-Dlq-Reason": reason,
            "Draflow-Dlq-Consumer": self.name,
            "Draflow-Dlq-Subject": msg.subject,
            "Draflow-Dlq-Stream-Seq": str(seq),
            "Draflow-Dlq-Deliveries": str(delivered),
        }
        await self.store.js.publish(self.dlq_subject, msg.data, headers=headers)
        log.warning("consumer %s: dead-lettered seq %d: %s", self.name, seq, reason)
        await self.store.nc.publish(msg.reply, b"+TERM " + reason.encode()[:500])
