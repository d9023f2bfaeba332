"""In-process harness for the service shells: a real apiserver and real services on the test's stream.

Each service gets its own EventStore connection and :class:`Runtime`, runs its loop as a task and
is stopped like SIGTERM would (the stop event). ``schedule`` plays the scheduler's part for tests
that must not depend on it: it appends the facts the scheduler appends (``ClaimAllocated``,
``ClaimReserved`` on each claim, then ``PodBound``), in that order.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import yaml

from draflow.events.api.resource_v1 import (
    AllocationResult,
    DeviceAllocationResult,
    DeviceRequestAllocationResult,
    ResourceClaimConsumerReference,
)
from draflow.events.dra import ClaimAllocated, ClaimReserved, PodBound
from draflow.infra.config import Settings
from draflow.infra.eventstore import EventStore
from draflow.services.apiserver.server import ApiServer
from draflow.services.runtime.controller import Runtime
from tests.helpers import assert_eventually


class Running:
    def __init__(
        self, rt: Runtime, events: EventStore, task: asyncio.Task[None], stop: asyncio.Event
    ) -> None:
        self.rt = rt
        self.events = events
        self.task = task
        self.stop_event = stop

    async def stop(self) -> None:
        self.stop_event.set()
        await asyncio.wait_for(self.task, 10)
        await self.rt.stop()
        await self.events.close()


@contextlib.asynccontextmanager
async def apiserver_in_process(
    settings: Settings, actor: str = "apiserver", *, requests: bool = True
) -> AsyncIterator[ApiServer]:
    """The apiserver as an asyncio task on ``settings``' stream, with its own connection (a second
    one with another ``actor`` is a replica: requests go to either; ``requests=False``: one that
    takes none, for a Kubernetes API of its own)."""
    events = await EventStore.open(settings, actor)
    server = ApiServer(events, requests=requests)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()
        await events.close()


async def start_runtime(settings: Settings, actor: str) -> tuple[Runtime, EventStore]:
    events = await EventStore.open(settings, actor)
    rt = Runtime(events, actor=actor, api_timeout_s=10.0)
    await rt.start()
    return rt, events


async def run(
    settings: Settings,
    actor: str,
    build: Callable[[Runtime], Any],
    *,
    resync_s: float = 1.0,
    before: Callable[[Any], Awaitable[None]] | None = None,
) -> tuple[Running, Any]:
    """Start a service: ``build(rt)`` returns the object whose ``sync`` the loop runs."""
    rt, events = await start_runtime(settings, actor)
    svc = build(rt)
    if before is not None:
        await before(svc)
    stop = asyncio.Event()
    task = asyncio.create_task(rt.run(stop, svc.sync, resync_s=resync_s))
    return Running(rt, events, task, stop), svc


async def eventually(check: Callable[[], Any], timeout_s: float = 15.0, what: str = "") -> Any:
    """Poll ``check`` (sync or async) until it returns something truthy."""
    return await assert_eventually(check, timeout_s=timeout_s, interval_s=0.05, message=what)


def manifests(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def load_dir(path: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for f in sorted(path.glob("*.yaml")):
        out += manifests(f.read_text())
    return out


async def schedule(
    rt: Runtime, namespace: str, pod_name: str, node: str, devices: dict[str, list[tuple[str, str]]]
) -> None:
    """Allocate ``devices`` (claim name -> [(request, device)]) on ``node``, reserve, bind."""
    pod = rt.get("Pod", namespace, pod_name)
    assert pod is not None
    consumer = ResourceClaimConsumerReference(resource="pods", name=pod_name, uid=pod.metadata.uid)
    for claim_name, results in devices.items():
        allocation = AllocationResult(
            devices=DeviceAllocationResult(
                results=tuple(
                    DeviceRequestAllocationResult(request=r, driver="gpu.example.com", pool=node, device=d)
                    for r, d in results
                )
            )
        )
        ok = await rt.append(
            "ResourceClaim",
            namespace,
            claim_name,
            [
                ClaimAllocated(allocation=allocation, node_name=node, pod_uid=pod.metadata.uid),
                ClaimReserved(consumer=consumer),
            ],
        )
        assert ok, claim_name
    assert await rt.append("Pod", namespace, pod_name, [PodBound(node_name=node)])
