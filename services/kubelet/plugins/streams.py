"""Following one server stream per registered DRA driver: what the kubelet's device health and
numeric capacity watchers share.

For the instance serving each driver (``registry.serving``) a ``PluginStreams`` keeps one call of
the plugin's streaming service open on the plugin's endpoint and hands every message to
``received``. ``reconcile`` (called on every registration change) starts and stops the streams:
a driver gone or served by another instance now loses its stream. A plugin without the service
answers ``UNIMPLEMENTED``: not asked again until the instance registers anew. A stream that breaks
(plugin gone, restarting, or a message ``broken_by`` rejects) calls ``ended`` and is opened again
after a backoff (``retry_s`` doubling up to ``max_retry_s``, back to ``retry_s`` once a message
arrives) while the instance is registered.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, ClassVar

import grpc
from grpc import aio

from draflow.services.kubelet.plugins.registry import Instance, PluginRegistry

__all__ = ["PluginStreams"]

log = logging.getLogger(__name__)


class PluginStreams:
    # what the streams carry ("health"): names tasks and log lines
    what: ClassVar[str]
    # said of a driver without the service ("reports no device health")
    missing: ClassVar[str]
    # errors ``received`` raises for a message it cannot take: the stream is opened again
    broken_by: ClassVar[tuple[type[Exception], ...]] = ()

    def __init__(
        self,
        registry: PluginRegistry,
        on_change: Callable[[], None],
        *,
        retry_s: float = 0.5,
        max_retry_s: float = 5.0,
    ) -> None:
        self.registry = registry
        self.on_change = on_change
        self.retry_s = retry_s
        self.max_retry_s = max_retry_s
        self._streams: dict[str, tuple[Path, asyncio.Task[None]]] = {}  # driver -> (instance socket, task)
        self.unimplemented: set[Path] = set()  # instances without the service (not asked again)

    def open(self, channel: aio.Channel) -> AsyncIterator[Any]:
        """The streaming call on ``channel`` (the plugin's endpoint)."""
        raise NotImplementedError

    def received(self, driver: str, response: Any) -> None:
        """One message of ``driver``'s stream."""
        raise NotImplementedError

    def ended(self, driver: str) -> None:
        """``driver``'s stream is over (broken, closed or cancelled): nothing by default."""

    def reconcile(self) -> None:
        """One stream per driver, to the instance serving it now."""
        wanted = {d: i for d in self.registry if (i := self.registry.serving(d)) is not None}
        for driver, (socket, task) in list(self._streams.items()):
            instance = wanted.get(driver)
            if instance is None or instance.socket != socket:
                task.cancel()
                del self._streams[driver]
        self.unimplemented &= {i.socket for i in self.registry.instances()}
        for driver, instance in wanted.items():
            if driver not in self._streams and instance.socket not in self.unimplemented:
                task = asyncio.create_task(self._follow(instance), name=f"{self.what} {driver}")
                self._streams[driver] = (instance.socket, task)

    def streaming(self) -> frozenset[str]:
        """The drivers whose stream is open or being opened."""
        return frozenset(self._streams)

    async def close(self) -> None:
        tasks = [task for _, task in self._streams.values()]
        self._streams.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _follow(self, instance: Instance) -> None:
        driver = instance.driver
        failures = 0
        async with aio.insecure_channel(instance.client.address) as channel:
            while True:
                try:
                    async for response in self.open(channel):
                        failures = 0
                        self.received(driver, response)
                    log.info("%s stream of %s ended; opening it again", self.what, driver)
                except aio.AioRpcError as exc:
                    if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                        log.info("DRA driver %s %s (%s)", driver, self.missing, exc.details())
                        self.unimplemented.add(instance.socket)
                        self._streams.pop(driver, None)
                        return
                    if failures == 0:
                        log.warning("%s stream of %s: %s: %s", self.what, driver, exc.code(), exc.details())
                except self.broken_by as exc:
                    log.warning("%s stream of %s: %s", self.what, driver, exc)
                finally:
                    self.ended(driver)
                failures += 1
                await asyncio.sleep(min(self.retry_s * 2 ** (failures - 1), self.max_retry_s))
