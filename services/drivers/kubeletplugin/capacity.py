"""Numeric capacity streamed to the kubelet: KEP-4381's capacity call, draflow's rendering
(``draflow.dranumeric.v1alpha1.NodeResourceCapacity/NodeListAndWatchResources``).

A driver that reports capacity (a ``capacity()`` method returning the KEP's
``NodeResourceInstance`` tuple) gets the service on its DRA endpoint. Each message is the complete
list; it is sent at once, then whenever the answer changed. An unchanged answer is not sent again,
so the kubelet does nothing until something moved.

Nothing is polled: a stream asks the driver again only when woken (``changed()``, the plugin
server's ``capacity_changed()``). What a shipped driver's capacity depends on wakes it: the
frobnicator's is its Node's label less the failure switch ``capacity_lost``, and the plugin host
wakes the streams on every Node change in the plugin's view (``host.main_for``) and the admin
endpoint on every switch change (``health_changed()``). A driver whose capacity moved by itself
(hardware it watches; none here does) would need a wake-up of its own: ``capacity_changed()``
when it notices, or a reporter with ``refresh_s`` (a poll).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, Callable, Sequence
from typing import Any

from grpc import aio

from draflow.events.api.numeric_v1alpha2 import NodeResourceInstance
from draflow.services.drivers.kubeletplugin.streams import WakingReporter, servicer
from draflow.services.runtime.kubeletapi.dranumeric.v1alpha1 import api_pb2 as num_pb2
from draflow.services.runtime.kubeletapi.dranumeric.v1alpha1 import api_pb2_grpc as num_grpc

__all__ = ["CapacityDecodeError", "CapacityReporter", "add_capacity_service", "instances_of", "to_message"]

Capacity = Callable[[], Sequence[NodeResourceInstance]]


def to_message(instances: Sequence[NodeResourceInstance]) -> Any:
    return num_pb2.NodeListAndWatchResourcesResponse(
        instances=[
            num_pb2.NodeResourceInstance(
                id=i.id,
                api_version=i.api_version,
                kind=i.kind,
                data=json.dumps(i.data, sort_keys=True, separators=(",", ":")).encode(),
            )
            for i in instances
        ]
    )


class CapacityDecodeError(ValueError):
    """An instance whose data is not JSON."""


def instances_of(response: Any) -> tuple[NodeResourceInstance, ...]:
    """The instances of one ``NodeListAndWatchResourcesResponse`` (the kubelet's side)."""
    out = []
    for i in response.instances:
        try:
            data = json.loads(i.data) if i.data else {}
        except ValueError as exc:
            raise CapacityDecodeError(f"instance {i.id!r}: data is not JSON: {exc}") from None
        out.append(NodeResourceInstance(id=i.id, api_version=i.api_version, kind=i.kind, data=data))
    return tuple(out)


class CapacityReporter(WakingReporter):
    def __init__(self, capacity: Capacity, *, refresh_s: float | None = None) -> None:
        super().__init__(refresh_s)
        self.capacity = capacity

    async def stream(self) -> AsyncGenerator[Any, None]:
        """The capacity now, then again each time it is woken and the answer changed."""
        sent: tuple[NodeResourceInstance, ...] | None = None
        with self.waiter() as wait:
            while True:
                now = tuple(await asyncio.to_thread(self.capacity))
                if now != sent:
                    sent = now
                    yield to_message(now)
                await wait()


def add_capacity_service(server: aio.Server, reporter: CapacityReporter) -> None:
    num_grpc.add_NodeResourceCapacityServicer_to_server(
        servicer("NodeListAndWatchResources", reporter.stream), server
    )
