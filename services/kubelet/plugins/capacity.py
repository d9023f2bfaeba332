"""The kubelet's numeric capacity streams (KEP-4381): one ``NodeListAndWatchResources`` per
registered driver that serves it.

As ``HealthWatcher`` does for device health: for the instance serving each driver
(``registry.serving``) the kubelet opens draflow's ``NodeResourceCapacity`` stream on the plugin's
endpoint; each message (the driver's complete list of instances) replaces what the driver reported
(``reports``) and marks it ``pending``; ``on_change`` wakes the kubelet, whose pass publishes the
pending reports as the node's ``NodeResourceCapacity`` objects (``numeric_capacity.publish``).
Nothing is polled: without a message, nothing is written.

A plugin without the service answers ``UNIMPLEMENTED``: not asked again until it registers anew. A
stream that breaks (plugin gone, restarting) keeps the last report published (the scheduler goes
on allocating from it; the plugin double-checks every prepare, and a restarted plugin's first
message corrects it) and is opened again after a backoff (``retry_s`` doubling up to
``max_retry_s``) while the instance is registered. A message the kubelet cannot decode breaks the
stream the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from pathlib import Path

import grpc
from grpc import aio

from draflow.events.api.numeric_v1alpha2 import NodeResourceInstance
from draflow.services.drivers.kubeletplugin.capacity import CapacityDecodeError, instances_of
from draflow.services.kubelet.plugins.registry import Instance, PluginRegistry
from draflow.services.runtime.kubeletapi.dranumeric.v1alpha1 import api_pb2 as num_pb2
from draflow.services.runtime.kubeletapi.dranumeric.v1alpha1 import api_pb2_grpc as num_grpc

__all__ = ["CapacityWatcher"]

log = logging.getLogger(__name__)


class CapacityWatcher:
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
        self.reports: dict[str, tuple[NodeResourceInstance, ...]] = {}  # driver -> last report
        self.pending: set[str] = set()  # drivers whose report is not published yet
        self.messages = 0  # messages received (all streams): how tests see a stream is live
        self._streams: dict[str, tuple[Path, asyncio.Task[None]]] = {}
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
                task = asyncio.create_task(self._watch(instance), name=f"capacity {driver}")
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

    def published(self, driver: str, report: tuple[NodeResourceInstance, ...]) -> None:
        """``report`` of ``driver`` is what the log has now (unless a newer one came meanwhile)."""
        if self.reports.get(driver) == report:
            self.pending.discard(driver)

    def _received(self, driver: str, report: tuple[NodeResourceInstance, ...]) -> None:
        self.messages += 1
        if driver not in self.reports or self.reports[driver] != report:
            self.reports[driver] = report
            self.pending.add(driver)
            self.on_change()

    async def _watch(self, instance: Instance) -> None:
        driver = instance.driver
        failures = 0
        async with aio.insecure_channel(instance.client.address) as channel:
            stub = num_grpc.NodeResourceCapacityStub(channel)
            while True:
                try:
                    request = num_pb2.NodeListAndWatchResourcesRequest()
                    async for response in stub.NodeListAndWatchResources(request):
                        failures = 0
                        self._received(driver, instances_of(response))
                    log.info("capacity stream of %s ended; opening it again", driver)
                except aio.AioRpcError as exc:
                    if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                        log.info("DRA driver %s reports no numeric capacity (%s)", driver, exc.details())
                        self.unimplemented.add(instance.socket)
                        self._streams.pop(driver, None)
                        return
                    if failures == 0:
                        log.warning("capacity stream of %s: %s: %s", driver, exc.code(), exc.details())
                except CapacityDecodeError as exc:
                    log.warning("capacity stream of %s: %s", driver, exc)
                failures += 1
                await asyncio.sleep(min(self.retry_s * 2 ** (failures - 1), self.max_retry_s))
