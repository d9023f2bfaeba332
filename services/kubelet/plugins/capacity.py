"""The kubelet's numeric capacity streams (KEP-4381): one ``NodeListAndWatchResources`` per
registered driver that serves it.

As ``HealthWatcher`` does for device health (both are ``streams.PluginStreams``): for the instance
serving each driver (``registry.serving``) the kubelet opens draflow's ``NodeResourceCapacity``
stream on the plugin's endpoint; each message (the driver's complete list of instances) replaces
what the driver reported (``reports``) and marks it ``pending``; ``on_change`` wakes the kubelet,
whose pass publishes the pending reports as the node's ``NodeResourceCapacity`` objects
(``numeric_capacity.publish``). Nothing is polled: without a message, nothing is written.

A plugin without the service answers ``UNIMPLEMENTED``: not asked again until it registers anew. A
stream that breaks (plugin gone, restarting) keeps the last report published (the scheduler goes
on allocating from it; the plugin double-checks every prepare, and a restarted plugin's first
message corrects it) and is opened again after a backoff (``retry_s`` doubling up to
``max_retry_s``) while the instance is registered. A message the kubelet cannot decode breaks the
stream the same way.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

from grpc import aio

from draflow.events.api.numeric_v1alpha2 import NodeResourceInstance
from draflow.services.drivers.kubeletplugin.capacity import CapacityDecodeError, instances_of
from draflow.services.kubelet.plugins.registry import PluginRegistry
from draflow.services.kubelet.plugins.streams import PluginStreams
from draflow.services.runtime.kubeletapi.dranumeric.v1alpha1 import api_pb2 as num_pb2
from draflow.services.runtime.kubeletapi.dranumeric.v1alpha1 import api_pb2_grpc as num_grpc

__all__ = ["CapacityWatcher"]


class CapacityWatcher(PluginStreams):
    what = "capacity"
    missing = "reports no numeric capacity"
    broken_by = (CapacityDecodeError,)

    def __init__(self, registry: PluginRegistry, on_change: Callable[[], None], **backoff: float) -> None:
        """``backoff``: ``retry_s`` and ``max_retry_s`` (``PluginStreams``)."""
        super().__init__(registry, on_change, **backoff)
        self.reports: dict[str, tuple[NodeResourceInstance, ...]] = {}  # driver -> last report
        self.pending: set[str] = set()  # drivers whose report is not published yet
        self.messages = 0  # messages received (all streams): how tests see a stream is live

    def published(self, driver: str, report: tuple[NodeResourceInstance, ...]) -> None:
        """``report`` of ``driver`` is what the log has now (unless a newer one came meanwhile)."""
        if self.reports.get(driver) == report:
            self.pending.discard(driver)

    def open(self, channel: aio.Channel) -> AsyncIterator[Any]:
        stub = num_grpc.NodeResourceCapacityStub(channel)
        request = num_pb2.NodeListAndWatchResourcesRequest()
        stream: AsyncIterator[Any] = stub.NodeListAndWatchResources(request)
        return stream

    def received(self, driver: str, response: Any) -> None:
        report = instances_of(response)
        self.messages += 1
        if driver not in self.reports or self.reports[driver] != report:
            self.reports[driver] = report
            self.pending.add(driver)
            self.on_change()
