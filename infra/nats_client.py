"""The NATS connection every draflow process uses, with a raw fast path for bulk replies.

nats-py builds a ``Msg`` (parsing every header) and queues it for each message it receives. For the
two hottest paths, publish acknowledgements and batched direct-get replays, that costs more than
the work itself, so :class:`DraflowClient` lets a subscription hand raw ``(subject, reply, data,
headers)`` bytes straight to a synchronous sink. Everything else (consumers, KV, requests) goes
through nats-py unchanged, and raw subscriptions are re-subscribed on reconnect like any other.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import nats.errors
from nats.aio.client import Client
from nats.aio.subscription import Subscription
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_delay, wait_exponential_jitter

from draflow.infra.auth.client import auth_options
from draflow.infra.config import Settings
from draflow.infra.nats_parser import FastParser

__all__ = ["DraflowClient", "RawInbox", "RawSink", "connect"]

log = logging.getLogger(__name__)

# (subject, reply, data, raw header block or None); must not block.
RawSink = Callable[[bytes, bytes, bytes, "bytes | None"], None]


class DraflowClient(Client):
    """nats-py client whose raw subscriptions bypass ``Msg`` construction and header parsing."""

    def __init__(self) -> None:
        super().__init__()
        self._ps = FastParser(self)
        self._raw_sinks: dict[int, RawSink] = {}
        self._reconnect_listeners: list[Callable[[], Awaitable[None]]] = []
        # who connected: the role asked for and the credential file used (None: none needed)
        self.role = ""
        self.credential: str | None = None

    async def _process_msg(
        self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None
    ) -> None:
        sink = self._raw_sinks.get(sid)
        if sink is None:
            await super()._process_msg(sid, subject, reply, data, headers)  # type: ignore[arg-type]
            return
        sink(subject, reply, data, headers)

    async def _process_headers(self, headers: bytes) -> dict[str, str] | None:
        """Plain header blocks parsed with one split; status lines go to nats-py's parser."""
        if not headers:
            return None
        if headers[8:9] == b" ":
            return await super()._process_headers(headers)
        out: dict[str, str] = {}
        for line in headers[10:].split(b"\r\n"):
            name, sep, value = line.partition(b":")
            if sep:
                key = name.strip().decode("ascii", "replace")
                if key and " " not in key and "\t" not in key:
                    out[key] = value.strip().decode("utf-8", "replace")
        return out or None

    async def raw_subscribe(self, subject: str, sink: RawSink) -> Subscription:
        sub = await self.subscribe(subject)
        self._raw_sinks[sub._id] = sink
        return sub

    async def raw_unsubscribe(self, sub: Subscription) -> None:
        self._raw_sinks.pop(sub._id, None)
        await sub.unsubscribe()

    def on_reconnect(self, listener: Callable[[], Awaitable[None]]) -> None:
        """Run ``listener`` after every reconnect (consumers use it to re-create themselves)."""
        self._reconnect_listeners.append(listener)

    async def _fire_reconnected(self) -> None:
        for listener in list(self._reconnect_listeners):
            try:
                await listener()
            except Exception:  # a listener's failure must not break the others
                log.exception("reconnect listener failed")


class RawInbox:
    """Many in-flight requests multiplexed on one wildcard inbox, answered on the raw fast path.

    A handler gets each reply's ``(data, headers)`` and returns True when it expects no more.
    """

    def __init__(self, nc: DraflowClient) -> None:
        self._nc = nc
        self._prefix = ""
        self._plen = 0
        self._next = 0
        self._handlers: dict[bytes, Callable[[bytes, bytes | None], bool]] = {}
        self._sub: Subscription | None = None

    async def start(self) -> None:
        if self._sub is None:
            self._prefix = self._nc.new_inbox() + "."
            self._plen = len(self._prefix)
            self._sub = await self._nc.raw_subscribe(self._prefix + "*", self._on_msg)

    def _on_msg(self, subject: bytes, reply: bytes, data: bytes, headers: bytes | None) -> None:
        token = subject[self._plen :]
        handler = self._handlers.get(token)
        if handler is not None and handler(data, headers):
            self._handlers.pop(token, None)

    def register(self, handler: Callable[[bytes, bytes | None], bool]) -> tuple[str, bytes]:
        """A fresh reply subject routed to ``handler``; returns (subject, token for ``cancel``)."""
        self._next += 1
        token = str(self._next).encode()
        self._handlers[token] = handler
        return self._prefix + token.decode(), token

    def future(self) -> tuple[str, bytes, asyncio.Future[tuple[bytes, bytes | None]]]:
        """A reply subject whose single answer resolves the returned future."""
        fut: asyncio.Future[tuple[bytes, bytes | None]] = asyncio.get_running_loop().create_future()

        def handler(data: bytes, headers: bytes | None) -> bool:
            if not fut.done():
                fut.set_result((data, headers))
            return True

        subject, token = self.register(handler)
        return subject, token, fut

    def cancel(self, token: bytes) -> None:
        self._handlers.pop(token, None)


def _forget_tasks(nc: Client) -> None:
    """A refused attempt's reader may still fail as its socket goes (the server reset it): that
    is the refusal we already handle, not an error to print at exit."""
    for task in (nc._reading_task, nc._ping_interval_task, nc._flusher_task):
        if task is not None:
            task.add_done_callback(lambda t: t.cancelled() or t.exception())


async def connect(
    settings: Settings,
    name: str,
    *,
    connect_timeout_s: float = 60.0,
    **options: Any,
) -> DraflowClient:
    """Connect to ``settings.nats_url``, retrying (tenacity, jittered backoff) while the server starts.

    Once connected, nats-py reconnects forever on its own; listeners registered with
    ``on_reconnect`` run after each reconnect. The credential is the one of ``settings.role`` (else
    ``name``), looked up again on each attempt: the system may be writing it right now
    (``draflow.infra.auth.client``); a missing one raises
    :class:`~draflow.infra.auth.authority.AuthorityError`.
    """
    deadline = time.monotonic() + connect_timeout_s
    async for attempt in AsyncRetrying(
        stop=stop_after_delay(connect_timeout_s),
        wait=wait_exponential_jitter(multiplier=0.05, max=2.0, jitter=0.05),
        retry=retry_if_exception_type((OSError, asyncio.TimeoutError, nats.errors.Error)),
        reraise=True,
    ):
        with attempt:
            nc = DraflowClient()
            auth = auth_options(settings, settings.role or name)
            nc.role = settings.role or name
            nc.credential = auth.get("nkeys_seed") or auth.get("user_credentials")

            async def reconnected(nc: DraflowClient = nc) -> None:
                log.info("%s: reconnected to %s", name, nc.connected_url)
                await nc._fire_reconnected()  # listeners only flag their state: quick

            async def disconnected() -> None:
                log.info("%s: disconnected from NATS", name)

            async def error_cb(exc: Exception) -> None:
                log.debug("%s: NATS error: %r", name, exc)

            opts: dict[str, Any] = {
                **auth,
                # The first connection fails fast and tenacity retries it (nats-py would loop
                # forever); once connected, nats-py reconnects on its own, without limit.
                "allow_reconnect": False,
                "max_reconnect_attempts": 1,
                "reconnect_time_wait": 0.25,  # seconds between attempts; a local restart takes ~1 s
                "connect_timeout": 2,
                **options,
            }
            try:
                # one attempt never outlives the whole wait: nats-py can hang in a TLS handshake the
                # server gave up on (a certificate it does not trust)
                async with asyncio.timeout(min(10.0, max(1.0, deadline - time.monotonic()))):
                    await nc.connect(
                        servers=[s.strip() for s in settings.nats_url.split(",")],
                        name=name,
                        reconnected_cb=reconnected,
                        disconnected_cb=disconnected,
                        error_cb=error_cb,
                        **opts,
                    )
            except BaseException:
                # closing a half-open TLS connection can wait for ever too
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(2.0):
                        await nc.close()
                _forget_tasks(nc)
                raise
            if auth.get("nkeys_seed") or auth.get("user_credentials"):
                await _check_account(nc, settings)
            nc.options["allow_reconnect"] = True
            nc.options["max_reconnect_attempts"] = -1
            return nc
    raise AssertionError("unreachable")


async def _check_account(nc: Client, settings: Settings) -> None:
    """One JetStream round trip before the connection is handed out. A client that authenticates
    while the server reloads its users (a new node's kubelet credential) can be left bound to the
    account as it was before the reload: connected, but its JetStream requests go unanswered and
    the server drops it a little later. Such a connection is closed and the attempt retried."""
    try:
        await nc.request(f"$JS.API.STREAM.INFO.{settings.stream}", b"", timeout=2.0)
    except BaseException:
        with contextlib.suppress(Exception):
            async with asyncio.timeout(2.0):
                await nc.close()
        _forget_tasks(nc)
        raise
