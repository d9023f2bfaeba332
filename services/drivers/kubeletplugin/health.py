"""Device health streamed to the kubelet: the ``DRAResourceHealth`` service (dra-health v1alpha1).

A driver that can tell which devices it has on the node (a ``health_devices()`` method: ``(pool,
device)`` pairs) gets the service on its DRA endpoint; the kubelet keeps one
``NodeWatchResources`` stream open per driver. Each message is the complete list (upstream's
contract): every device with ``HEALTHY`` or ``UNHEALTHY``. A new message goes out when the health
changes (the failure switch ``unhealthy_devices``, set through the admin endpoint, is how tests and
demos break a device) and every ``refresh_s`` anyway, with a fresh ``last_updated_time``, as a
plugin that polls its hardware would.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from grpc import aio

from draflow.services.drivers.kubeletplugin.faults import FailureSwitches
from draflow.services.runtime.kubeletapi.drahealth.v1alpha1 import api_pb2 as health_pb2
from draflow.services.runtime.kubeletapi.drahealth.v1alpha1 import api_pb2_grpc as health_grpc

__all__ = ["HealthReporter", "add_health_service"]

Devices = Callable[[], Sequence[tuple[str, str]]]


class HealthReporter:
    def __init__(self, devices: Devices, switches: FailureSwitches, *, refresh_s: float = 30.0) -> None:
        self.devices = devices
        self.switches = switches
        self.refresh_s = refresh_s
        self._waiting: set[asyncio.Event] = set()

    def snapshot(self) -> list[tuple[str, str, bool]]:
        """``(pool, device, healthy)`` of every device, in the driver's order."""
        broken = self.switches.unhealthy_devices
        return [(pool, device, device not in broken) for pool, device in self.devices()]

    def response(self) -> Any:
        now = int(time.time())
        return health_pb2.NodeWatchResourcesResponse(
            devices=[
                health_pb2.DeviceHealth(
                    device=health_pb2.DeviceIdentifier(pool_name=pool, device_name=device),
                    health=health_pb2.HEALTHY if healthy else health_pb2.UNHEALTHY,
                    last_updated_time=now,
                )
                for pool, device, healthy in self.snapshot()
            ]
        )

    def changed(self) -> None:
        """The health may have changed (a switch was set): every open stream sends again."""
        for event in self._waiting:
            event.set()

    async def stream(self) -> AsyncIterator[Any]:
        """The complete list now, then again on every change and every ``refresh_s``."""
        wake = asyncio.Event()
        self._waiting.add(wake)
        try:
            while True:
                wake.clear()
                yield self.response()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), self.refresh_s)
        finally:
            self._waiting.discard(wake)


class _HealthService:
    def __init__(self, reporter: HealthReporter) -> None:
        self.reporter = reporter

    async def NodeWatchResources(
        self, request: Any, context: aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[Any]:
        async for response in self.reporter.stream():
            yield response


def add_health_service(server: aio.Server, reporter: HealthReporter) -> None:
    health_grpc.add_DRAResourceHealthServicer_to_server(_HealthService(reporter), server)
