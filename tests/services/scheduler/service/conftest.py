"""The apiserver and scheduler instances in-process (asyncio tasks) on the test's own stream."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

import msgspec
import pytest

from draflow.events.api.base import ApiStruct
from draflow.events.api.codec import encode_object
from draflow.events.api.core_v1 import Pod, PodResourceClaimStatus
from draflow.events.api.meta import ObjectMeta
from draflow.events.api.resource_v1 import (
    Device,
    DeviceRequest,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceClaimTemplateSpec,
)
from draflow.events.dra import PodClaimStatusesRecorded
from draflow.infra.eventstore import EventStore
from draflow.sagas.engine import SagaEngine, Step, StepContext
from draflow.services.runtime.client import ApiClient
from draflow.services.scheduler.sagas.pod_scheduling import POD_SCHEDULING_SAGA
from draflow.services.scheduler.service import SchedulerService
from tests.builders import exact, make_claim, make_class, make_node, make_pod, make_slice


class Cluster:
    """Builds a DRA cluster through the apiserver and runs scheduler instances as tasks."""

    def __init__(self, api: ApiClient, store: EventStore) -> None:
        self.api = api
        self.store = store
        self.running: list[tuple[SchedulerService, asyncio.Event, asyncio.Task[None], EventStore]] = []

    async def apply(self, *objs: ApiStruct) -> None:
        results = await self.api.apply([encode_object(o) for o in objs])
        errors = [r.error for r in results if r.error is not None]
        assert not errors, errors

    async def nodes(self, n: int, devices: int | Sequence[Device]) -> None:
        objs: list[ApiStruct] = [make_class("gpu")]
        template = ResourceClaimTemplate(
            metadata=ObjectMeta(name="gpu-template", namespace="default"),
            spec=ResourceClaimTemplateSpec(spec=make_claim("x", exact()).spec),
        )
        objs.append(template)
        for i in range(n):
            objs += [make_node(f"node-{i}"), make_slice(f"node-{i}", devices)]
        await self.apply(*objs)

    async def pod(self, name: str, *requests: DeviceRequest, **kw: Any) -> tuple[Pod, str]:
        """A pod with the template claim ``gpu`` and its generated claim (as the claim controller
        would create it: owned by the pod, recorded in the pod's resourceClaimStatuses);
        ``requests``: the claim's requests (default: one GPU)."""
        claim_name = f"{name}-gpu"
        await self.apply(
            make_pod(name, template_claims={"gpu": "gpu-template"}, statuses={"gpu": claim_name}, **kw)
        )
        pod = await self.api.get_object("Pod", name, namespace="default")
        assert isinstance(pod, Pod)
        await self.apply(make_claim(claim_name, *(requests or (exact(),)), owner=pod))
        subject = self.store.subject("Pod", "default", name)
        statuses = (PodResourceClaimStatus(name="gpu", resource_claim_name=claim_name),)
        await self.store.append(subject, PodClaimStatusesRecorded(statuses=statuses), expected_last_seq=None)
        return pod, claim_name

    async def claim(self, name: str) -> ResourceClaim:
        claim = await self.api.get_object("ResourceClaim", name, namespace="default")
        assert isinstance(claim, ResourceClaim)
        return claim

    async def get_pod(self, name: str) -> Pod:
        pod = await self.api.get_object("Pod", name, namespace="default")
        assert isinstance(pod, Pod)
        return pod

    async def make(self, instance: str = "scheduler", **kw: Any) -> SchedulerService:
        """A scheduler instance with its own connection, not running yet."""
        store = await EventStore.open(self.store.settings, instance)
        return SchedulerService(store, instance=instance, api=self.api, **kw)

    def run(self, svc: SchedulerService) -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(svc.run(stop))
        self.running.append((svc, stop, task, svc.store))

    async def start(self, instance: str = "scheduler", **kw: Any) -> SchedulerService:
        svc = await self.make(instance, **kw)
        self.run(svc)
        return svc

    async def stop_all(self) -> None:
        for _svc, stop, task, store in self.running:
            stop.set()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(task, 10)
            await store.close()
        self.running.clear()


class HeldBind:
    """A PodScheduling saga engine for ``svc`` whose ``bind`` step waits for :meth:`release`:
    the saga's PreBind is in the log while it has not bound yet (the window in which another
    scheduler instance can decide the same pod). The steps themselves are the real ones."""

    def __init__(self, svc: SchedulerService) -> None:
        self.at_bind = asyncio.Event()
        self.go = asyncio.Event()
        real = POD_SCHEDULING_SAGA
        reserve, prebind, bind = real.steps

        async def held(ctx: StepContext) -> dict[str, Any] | None:
            self.at_bind.set()
            await self.go.wait()
            return await bind.action(ctx)

        steps = (reserve, prebind, Step(bind.name, held, bind.compensate))
        self.engine = SagaEngine(svc.store, [msgspec.structs.replace(real, steps=steps)], deps=svc)

    def release(self) -> None:
        self.go.set()


@pytest.fixture
async def cluster(api: ApiClient, event_store: EventStore) -> AsyncIterator[Cluster]:
    c = Cluster(api, event_store)
    try:
        yield c
    finally:
        await c.stop_all()


@pytest.fixture
async def instances(cluster: Cluster) -> AsyncIterator[Any]:
    """Scheduler instances a recovery test makes (``scenario.Instances``), closed at the end."""
    from tests.services.scheduler.service.scenario import Instances

    made = Instances(cluster)
    try:
        yield made
    finally:
        for svc in made.made:
            await svc.snapshot.stop()
            await svc.store.close()
