"""The kubelet's device health streams: one ``NodeWatchResources`` per registered driver.

After upstream's DRA manager (``HandleWatchResourcesStream``): for the instance serving each driver
(``registry.serving``) the kubelet opens the ``DRAResourceHealth`` stream on the plugin's endpoint
and feeds each message into the ``HealthCache``; ``on_change`` is called when a device's health
changed (the kubelet then rewrites the affected pods' statuses). A plugin without the service
answers ``UNIMPLEMENTED``: no health for that driver, not asked again until it registers again. A
stream that breaks (plugin gone, restarting) clears the driver (its devices are Unknown) and is
opened again after a backoff (``retry_s`` doubling up to ``max_retry_s``) while the instance is
still registered. ``reconcile`` (called on every registration change) starts and stops streams.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
from grpc import aio

from draflow.services.kubelet.devicehealth import HEALTHY, UNHEALTHY, UNKNOWN, HealthCache
from draflow.services.kubelet.plugins.registry import Instance, PluginRegistry
from draflow.services.runtime.kubeletapi.drahealth.v1alpha1 import api_pb2 as health_pb2
from draflow.services.runtime.kubeletapi.drahealth.v1alpha1 import api_pb2_grpc as health_grpc

__all__ = ["HealthWatcher"]

log = logging.getLogger(__name__)

_HEALTH = {health_pb2.HEALTHY: HEALTHY, health_pb2.UNHEALTHY: UNHEALTHY}


def devices_of(response: Any) -> list[tuple[str, str, str]]:
    """``(pool, device, health)`` of one ``NodeWatchResourcesResponse``."""
    return [
        (d.device.pool_name, d.device.device_name, _HEALTH.get(d.health, UNKNOWN)) for d in response.devices
    ]


class HealthWatcher:
    def __init__(
        self,
        registry: PluginRegistry,
        cache: HealthCache,
        on_change: Callable[[], None],
        *,
        retry_s: float = 0.5,
        max_retry_s: float = 5.0,
    ) -> None:
        self.registry = registry
        self.cache = cache
        self.on_change = on_change
        self.retry_s = retry_s
        self.max_retry_s = max_retry_s
        self._streams: dict[str, tuple[Path, asyncio.Task[None]]] = {}  # driver -> (instance socket, task)
        self.unimplemented: set[Path] = set()  # instances without the service (not asked again)

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
                task = asyncio.create_task(self._watch(instance), name=f"health {driver}")
                self._streams[driver] = (instance.socket, task)

    async def close(self) -> None:
        tasks = [task for _, task in self._streams.values()]
        self._streams.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _update(self, changed: set[tuple[str, str]]) -> None:
        if changed:
            self.on_change()

    async def _watch(self, instance: Instance) -> None:
        driver = instance.driver
        failures = 0
        async with aio.insecure_channel(instance.client.address) as channel:
            stub = health_grpc.DRAResourceHealthStub(channel)
            while True:
                try:
                    async for response in stub.NodeWatchResources(health_pb2.NodeWatchResourcesRequest()):
                        failures = 0
                        self._update(self.cache.update(driver, devices_of(response)))
                    log.info("health stream of %s ended; opening it again", driver)
                except aio.AioRpcError as exc:
                    if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                        log.info("DRA driver %s reports no device health (%s)", driver, exc.details())
                        self.unimplemented.add(instance.socket)
                        self._streams.pop(driver, None)
                        return
                    if failures == 0:
                        log.warning("health stream of %s: %s: %s", driver, exc.code(), exc.details())
                finally:
                    self._update(self.cache.clear(driver))
                failures += 1
                await asyncio.sleep(min(self.retry_s * 2 ** (failures - 1), self.max_retry_s))
