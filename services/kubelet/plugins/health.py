"""The kubelet's device health streams: one ``NodeWatchResources`` per registered driver.

After upstream's DRA manager (``HandleWatchResourcesStream``): for the instance serving each driver
(``registry.serving``) the kubelet opens the ``DRAResourceHealth`` stream on the plugin's endpoint
and feeds each message into the ``HealthCache``; ``on_change`` is called when a device's health
changed (the kubelet then rewrites the affected pods' statuses). A plugin without the service
answers ``UNIMPLEMENTED``: no health for that driver, not asked again until it registers again. A
stream that breaks (plugin gone, restarting) clears the driver (its devices are Unknown) and is
opened again after a backoff (``retry_s`` doubling up to ``max_retry_s``) while the instance is
still registered. ``reconcile`` (called on every registration change) starts and stops streams
(``streams.PluginStreams``, shared with the capacity streams).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

from grpc import aio

from draflow.services.kubelet.devicehealth import HEALTHY, UNHEALTHY, UNKNOWN, HealthCache
from draflow.services.kubelet.plugins.registry import PluginRegistry
from draflow.services.kubelet.plugins.streams import PluginStreams
from draflow.services.runtime.kubeletapi.drahealth.v1alpha1 import api_pb2 as health_pb2
from draflow.services.runtime.kubeletapi.drahealth.v1alpha1 import api_pb2_grpc as health_grpc

__all__ = ["HealthWatcher"]

_HEALTH = {health_pb2.HEALTHY: HEALTHY, health_pb2.UNHEALTHY: UNHEALTHY}


def devices_of(response: Any) -> list[tuple[str, str, str]]:
    """``(pool, device, health)`` of one ``NodeWatchResourcesResponse``."""
    return [
        (d.device.pool_name, d.device.device_name, _HEALTH.get(d.health, UNKNOWN)) for d in response.devices
    ]


class HealthWatcher(PluginStreams):
    what = "health"
    missing = "reports no device health"

    def __init__(
        self, registry: PluginRegistry, cache: HealthCache, on_change: Callable[[], None], **backoff: float
    ) -> None:
        """``backoff``: ``retry_s`` and ``max_retry_s`` (``PluginStreams``)."""
        super().__init__(registry, on_change, **backoff)
        self.cache = cache

    def open(self, channel: aio.Channel) -> AsyncIterator[Any]:
        stub = health_grpc.DRAResourceHealthStub(channel)
        stream: AsyncIterator[Any] = stub.NodeWatchResources(health_pb2.NodeWatchResourcesRequest())
        return stream

    def received(self, driver: str, response: Any) -> None:
        self._update(self.cache.update(driver, devices_of(response)))

    def ended(self, driver: str) -> None:
        """Its devices are Unknown until the stream says otherwise."""
        self._update(self.cache.clear(driver))

    def _update(self, changed: set[tuple[str, str]]) -> None:
        if changed:
            self.on_change()
