"""Numeric capacity streamed to the kubelet: KEP-4381's capacity call, draflow's rendering
(``draflow.dranumeric.v1alpha1.NodeResourceCapacity/NodeListAndWatchResources``).

A driver that reports capacity (a ``capacity()`` method returning the KEP's
``NodeResourceInstance`` tuple) gets the service on its DRA endpoint. Each message is the complete
list; it is sent at once, then whenever the answer changed: ``changed()`` (the failure switches
were set: ``capacity_lost`` is the demo hardware losing units) wakes every stream, and every
``refresh_s`` the plugin asks its driver again, as one that watches its hardware would. An
unchanged answer is not sent again, so the kubelet does nothing until something moved.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from grpc import aio

from draflow.events.api.numeric_v1alpha2 import NodeResourceInstance
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


class CapacityReporter:
    def __init__(self, capacity: Capacity, *, refresh_s: float = 30.0) -> None:
        self.capacity = capacity
        self.refresh_s = refresh_s
        self._waiting: set[asyncio.Event] = set()

    def changed(self) -> None:
        """The capacity may have changed: every open stream asks the driver again."""
        for event in self._waiting:
            event.set()

    async def stream(self) -> AsyncIterator[Any]:
        wake = asyncio.Event()
        self._waiting.add(wake)
        sent: tuple[NodeResourceInstance, ...] | None = None
        try:
            while True:
                wake.clear()
                now = tuple(await asyncio.to_thread(self.capacity))
                if now != sent:
                    sent = now
                    yield to_message(now)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), self.refresh_s)
        finally:
            self._waiting.discard(wake)


class _CapacityService:
    def __init__(self, reporter: CapacityReporter) -> None:
        self.reporter = reporter

    async def NodeListAndWatchResources(
        self, request: Any, context: aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[Any]:
        async for response in self.reporter.stream():
            yield response


def add_capacity_service(server: aio.Server, reporter: CapacityReporter) -> None:
    num_grpc.add_NodeResourceCapacityServicer_to_server(_CapacityService(reporter), server)
