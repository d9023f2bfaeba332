"""A driver prepare failure with every real component in the loop.

apiserver, claim controller, the example driver's slice publisher, the real scheduler (its
PodScheduling saga allocates and binds) and a kubelet whose node plugin refuses the devices: the
pod stays Pending with ``FailedPrepareDynamicResources`` Warnings (the kubelet keeps trying, as
upstream's), deleting it frees everything (nothing prepared, no claim left allocated, no device
held) and ``draflow log`` shows the trail from allocation to cleanup.
"""

from __future__ import annotations

import asyncio

import pytest

from draflow.infra.config import Settings
from draflow.infra.eventstore import EventStore
from draflow.services.apiserver.server import ApiServer
from draflow.services.claim_controller.service import ClaimControllerService
from draflow.services.drivers.gpu_example.publisher import SlicePublisher
from draflow.services.drivers.kubeletplugin.faults import FailureSwitches
from draflow.services.kubelet.service import KubeletService
from draflow.services.runtime.client import ApiClient
from draflow.services.scheduler.service import SchedulerService
from tests.paths import ROOT
from tests.processes import draflow_out
from tests.services.test_shells import TEMPLATE_POD, kubelet_builder
from tests.shells import eventually, manifests, run, start_runtime

pytestmark = pytest.mark.kep4381

DEVICE_CLASS = (ROOT / "services" / "drivers" / "gpu_example" / "deviceclass.yaml").read_text()


async def _register(svc: KubeletService) -> None:
    await svc.register()


async def _log(settings: Settings, *args: str) -> str:
    return await asyncio.to_thread(draflow_out, settings, "log", *args)


async def test_prepare_failure_through_the_real_scheduler_keeps_the_pod_pending_until_deleted(
    apiserver: ApiServer, api: ApiClient, settings: Settings
) -> None:
    every_gpu = {f"gpu-{i}" for i in range(8)}
    build = kubelet_builder(
        settings,
        "node-1",
        FailureSwitches(prepare_devices=every_gpu),
        retry_base_s=0.05,
        retry_max_s=0.2,
    )
    kubelet, kl = await run(settings, "kubelet", build, before=_register)
    ctl, _ = await run(settings, "claim-controller", ClaimControllerService)
    driver, _ = await run(settings, "driver", SlicePublisher, resync_s=0.2)
    sched_store = await EventStore.open(settings, "scheduler")
    scheduler = SchedulerService(sched_store, api=api)
    stop = asyncio.Event()
    sched_task = asyncio.create_task(scheduler.run(stop))
    probe, probe_events = await start_runtime(settings, "probe")
    try:
        for result in await probe.api.apply(manifests(DEVICE_CLASS)):
            assert result.error is None, result.error
        await eventually(lambda: probe.items("ResourceSlice"), what="node-1's slice")
        for result in await probe.api.apply(manifests(TEMPLATE_POD)):
            assert result.error is None, result.error

        plugin = kl.plugins["gpu.example.com"]
        await eventually(
            lambda: sum(1 for rpc, _ in plugin.calls if rpc == "prepare") >= 3,
            timeout_s=30,
            what="the prepare tried again and again",
        )
        pod = probe.get("Pod", "default", "pod0")
        assert pod.spec.node_name == "node-1"  # the scheduler bound it; the kubelet could not start it
        assert pod.status.phase == "Pending"
        claim_name = pod.status.resource_claim_statuses[0].resource_claim_name
        # deleting the pod: unprepared, reservation dropped, deallocated, claim deleted with it
        await probe.delete("Pod", "default", "pod0")
        await eventually(lambda: probe.get("ResourceClaim", "default", claim_name) is None, what="claim gone")
        assert plugin.prepared == frozenset()
        assert kl.manager.entries() == []

        trail = await _log(settings, "--subject", f"{settings.root}.ev.ResourceClaim.default.{claim_name}")
        types = [line.split()[3] for line in trail.splitlines()[1:] if line.strip()]
        # the last reservation leaves in the deallocation's own fact (one single append)
        trail_order = ["ClaimAllocated", "ClaimDeallocated"]
        assert [t for t in types if t in (*trail_order, "ClaimReservationsReleased")] == trail_order, trail
        assert types[-1] == "ResourceClaimDeleted", trail
        events = await _log(settings, "--subject", f"{settings.root}.ev.Event.default.>", "-o", "json")
        assert "FailedPrepareDynamicResources" in events
        # explain names the pod whose reservation was released, and who released it
        told = await asyncio.to_thread(draflow_out, settings, "explain", "pod", "pod0")
        (released,) = [x for x in told.splitlines() if "reservations released" in x]
        assert "reservations released (1): pods/pod0  by kubelet" in released, told
    finally:
        stop.set()
        await asyncio.wait({sched_task}, timeout=10)
        await sched_store.close()
        for s in (kubelet, ctl, driver):
            await s.stop()
        await probe.stop()
        await probe_events.close()
