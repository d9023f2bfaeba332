"""The shared runner for draflow services: ``run_service(name, main)`` from a service's ``__main__``.

It does what every service needs and nothing else: logging; tracing (OTLP to the system's trace
receiver unless the OpenTelemetry variables say otherwise, ``infra/tracing.py``); settings from
``DRAFLOW_NATS_URL`` (or ``--nats-url``) / ``DRAFLOW_DATA_DIR`` (and ``DRAFLOW_STREAM`` /
``DRAFLOW_SUBJECT_ROOT``), every default port shifted by ``DRAFLOW_PORT_OFFSET``; Prometheus
``/metrics`` when the service has a port (``infra/metrics.py``); connecting with tenacity retries
while nats-server starts (honcho starts everything at once); creating or updating the stream; then
running ``main(ctx)`` until it returns or SIGTERM/SIGINT arrives. On a signal ``ctx.stop`` is set,
``main`` gets a grace period to return, then is cancelled; spans are flushed and the process exits
0 well inside honcho's 5 s before it kills. A setting that cannot be used is one error line and
exit code 2, not a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, Final, Literal

import msgspec

from draflow.infra import tracing
from draflow.infra.auth.authority import AuthorityError
from draflow.infra.config import Settings, flag_from_argv
from draflow.infra.errors import StreamReset
from draflow.infra.eventstore import EventStore
from draflow.infra.metrics import metrics_port_from_argv, metrics_port_from_env, serve_metrics
from draflow.infra.signals import stop_on_signals

__all__ = ["EXIT_STREAM_RESET", "OnStreamReset", "ServiceContext", "Unusable", "run_service"]

log = logging.getLogger(__name__)


class Unusable(Exception):
    """Raised by a service's ``main`` when what it was told to do cannot be done here (its only
    port is taken): one error line and exit code 2, not a traceback."""


# the exit code of a service that stopped because its stream was reset
EXIT_STREAM_RESET: Final = 3
OnStreamReset = Literal["exit", "rebuild"]


class ServiceContext:
    def __init__(self, name: str, settings: Settings, store: EventStore, stop: asyncio.Event) -> None:
        self.name = name
        self.settings = settings
        self.store = store
        self.stop = stop  # set on SIGTERM/SIGINT: finish the current work and return

    @property
    def data_dir(self) -> Path:
        """This service's own directory under DRAFLOW_DATA_DIR (its SQLite projections live here)."""
        return self.settings.service_dir(self.name)


def configure_logging() -> None:
    logging.basicConfig(
        level=os.environ.get("DRAFLOW_LOG_LEVEL", "INFO"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def quiet_when_stopping(
    stop: asyncio.Event,
) -> Callable[[asyncio.AbstractEventLoop, dict[str, Any]], None]:
    """The event loop's handler of errors no task awaited: a connection nats-server reset while
    the service stops (honcho stops nats-server with everything else; the NATS client's own read
    task then fails closing a socket already gone) is one line, not a traceback. Anything else,
    or the same while running, goes to asyncio's default handler."""

    def handle(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if stop.is_set() and isinstance(exc, (ConnectionResetError, BrokenPipeError)):
            log.info("connection closed by the server while stopping: %s", exc)
            return
        loop.default_exception_handler(context)

    return handle


async def serve(
    name: str,
    main: Callable[[ServiceContext], Coroutine[Any, Any, None]],
    settings: Settings | None = None,
    *,
    grace_s: float = 2.0,
    on_stream_reset: OnStreamReset = "exit",
    actor: str | None = None,
) -> int:
    settings = settings or Settings.from_env()
    if not settings.role:  # the service's name is its role (its credential, its permissions)
        settings = msgspec.structs.replace(settings, role=name)
    stop = stop_on_signals()
    asyncio.get_running_loop().set_exception_handler(quiet_when_stopping(stop))
    stopping = asyncio.create_task(stop.wait())
    store: EventStore | None = None
    code = 0
    metrics_port = metrics_port_from_env()
    if metrics_port is not None:
        try:
            bound = serve_metrics(metrics_port)
        except OSError as exc:  # a second system on this machine without a DRAFLOW_PORT_OFFSET of its own
            log.warning(
                "%s: cannot serve metrics on port %d: %s (running without; another system on this machine? "
                "give each system its own DRAFLOW_PORT_OFFSET)",
                name,
                metrics_port,
                exc.strerror or exc,
            )
        else:
            log.info("%s: Prometheus metrics on http://127.0.0.1:%d/metrics", name, bound)
    try:
        log.info("%s: connecting to %s", name, settings.nats_url)
        opening = asyncio.create_task(EventStore.open(settings, actor or name))
        await asyncio.wait({opening, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if not opening.done():  # asked to stop while still waiting for nats-server
            await _cancel_until_done(opening)
            return 0
        try:
            store = opening.result()
        except AuthorityError as exc:
            log.error("%s: %s", name, exc)
            return 2
        log.info("%s: connected to %s, stream %s", name, settings.nats_url, settings.stream)
        while True:
            code, reset = await _run_main(name, main, ServiceContext(name, settings, store, stop), grace_s)
            if reset is None:
                break
            if on_stream_reset == "exit":
                log.error(
                    "%s: %s; stopping (exit %d): restart the service to rebuild from the new stream",
                    name,
                    reset,
                    EXIT_STREAM_RESET,
                )
                code = EXIT_STREAM_RESET
                break
            log.error("%s: %s; rebuilding from sequence 1 of the new stream", name, reset)
            store.accept_new_stream()
            if not reset.new_identity:  # deleted: wait until it exists again (restored)
                waiting = asyncio.create_task(store.ensure_stream(wait_s=None))
                await asyncio.wait({waiting, stopping}, return_when=asyncio.FIRST_COMPLETED)
                if not waiting.done():
                    await _cancel_until_done(waiting)
                    break
                waiting.result()
    finally:
        stopping.cancel()
        tracing.shutdown_tracing()
        if store is not None:
            await store.close()
    log.info("%s: stopped", name)
    return code


async def _run_main(
    name: str,
    main: Callable[[ServiceContext], Coroutine[Any, Any, None]],
    ctx: ServiceContext,
    grace_s: float,
) -> tuple[int, StreamReset | None]:
    """Run ``main`` until it returns, a stop signal (grace, then cancel) or a stream reset that
    any reader of the store detected (cancelled at once: its state belongs to a log that is
    gone). Returns the exit code and the reset, if that is why it ended."""
    stop, store = ctx.stop, ctx.store
    work = asyncio.create_task(main(ctx))
    stopping = asyncio.create_task(stop.wait())
    resetting = asyncio.create_task(store.wait_reset())
    try:
        await asyncio.wait({work, stopping, resetting}, return_when=asyncio.FIRST_COMPLETED)
        if resetting.done() and not work.done():
            await _cancel_until_done(work)
        if not work.done():
            try:
                await asyncio.wait_for(asyncio.shield(work), grace_s)
            except TimeoutError:
                work.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await work
    finally:
        stopping.cancel()
        resetting.cancel()
    error = None if work.cancelled() else work.exception()
    if store.reset is not None and not stop.is_set():
        return 0, store.reset
    if isinstance(error, StreamReset) and not stop.is_set():
        return 0, error
    if work.cancelled() and not stop.is_set():
        # nobody asked main to stop: a CancelledError escaped from something it awaited (a library
        # cancelling its own call). Exiting 0 would look like a clean stop, and no supervisor
        # restarts a clean stop; this is a failure
        log.error("%s: stopped: its work was cancelled from inside (a CancelledError nobody asked for)", name)
        return 1, None
    if isinstance(error, Unusable):
        log.error("%s: %s", name, error)
        return 2, None
    if error is not None:
        if stop.is_set():  # e.g. nats-server went down together with us: not a failure
            log.warning("%s: error while stopping: %r", name, error)
        else:
            log.error("%s: stopped by an error", name, exc_info=error)
            return 1, None
    return 0, None


async def _cancel_until_done(task: asyncio.Task[Any]) -> None:
    """Cancel ``task`` and wait for it, cancelling again if a cancellation is lost.

    On Python 3.11 ``asyncio.wait_for`` (used inside nats-py's connect) can swallow a cancellation
    that races with its inner future completing; the connect retry loop would then go on for a
    minute while honcho waits for us to exit.
    """
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=0.1)
    with contextlib.suppress(asyncio.CancelledError, Exception):
        task.result()


def run_service(
    name: str,
    main: Callable[[ServiceContext], Coroutine[Any, Any, None]],
    settings: Settings | None = None,
    *,
    on_stream_reset: OnStreamReset = "exit",
    actor: str | None = None,
    role: str = "",
) -> int:
    """Run a service to completion; returns the process exit code (0 on SIGTERM).

    ``on_stream_reset``: what to do when the stream turns out to be deleted and created again
    (see :class:`draflow.infra.errors.StreamReset`): ``"exit"`` stops the process with
    ``EXIT_STREAM_RESET`` and one error line naming the stream and both positions;
    ``"rebuild"`` cancels ``main`` and runs it again, which folds the new stream from sequence 1.
    ``actor``: who the process's appends name in their envelopes (default ``name``), for services
    that run as several instances (``DRAFLOW_SCHEDULER_ID``): each instance is told apart in the log.
    ``role``: the credential to connect with when it is not the service's name (a kubelet plugin
    speaks for its node, ``kubelet-<node>``).

    ``--metrics-port PORT`` and ``--nats-url URL`` among the process arguments work like
    ``DRAFLOW_METRICS_PORT`` and ``DRAFLOW_NATS_URL`` (services that parse their own arguments add
    them with ``draflow.infra.metrics.add_metrics_arg`` and ``draflow.infra.config.add_nats_url_arg``)."""
    configure_logging()
    argv = sys.argv[1:]
    try:
        port = metrics_port_from_argv(argv)
        if port is not None:
            os.environ["DRAFLOW_METRICS_PORT"] = str(port)
        if url := flag_from_argv(argv, "--nats-url"):
            os.environ["DRAFLOW_NATS_URL"] = url
        settings = settings or Settings.from_env()
        if role:
            settings = msgspec.structs.replace(settings, role=role)
        metrics_port_from_env()  # a bad port setting fails here, before connecting
        tracing.setup_tracing(name)
    except ValueError as exc:  # PortError and the like: the user's setting, not a crash
        log.error("%s: %s", name, exc)
        return 2
    return asyncio.run(serve(name, main, settings, on_stream_reset=on_stream_reset, actor=actor))
