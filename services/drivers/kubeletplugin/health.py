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

import time
from collections.abc import AsyncGenerator, Callable, Sequence
from typing import Any

from grpc import aio

from draflow.services.drivers.kubeletplugin.faults import FailureSwitches
from draflow.services.drivers.kubeletplugin.streams import WakingReporter, servicer
from draflow.services.runtime.kubeletapi.drahealth.v1alpha1 import api_pb2 as health_pb2
from draflow.services.runtime.kubeletapi.drahealth.v1alpha1 import api_pb2_grpc as health_grpc

__all__ = ["HealthReporter", "add_health_service"]

Devices = Callable[[], Sequence[tuple[str, str]]]


class HealthReporter(WakingReporter):
    def __init__(self, devices: Devices, switches: FailureSwitches, *, refresh_s: float = 30.0) -> None:
        super().__init__(refresh_s)
        self.devices = devices
        self.switches = switches

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

    async def stream(self) -> AsyncGenerator[Any, None]:
        """The complete list now, then again on every change and every ``refresh_s``."""
        with self.waiter() as wait:
            while True:
                yield self.response()
                await wait()


def add_health_service(server: aio.Server, reporter: HealthReporter) -> None:
    health_grpc.add_DRAResourceHealthServicer_to_server(
        servicer("NodeWatchResources", reporter.stream), server
    )
