"""A driver prepare failure with every real component in the loop.

apiserver, claim controller, the example driver's slice publisher, the real scheduler (its
PodScheduling saga allocates and binds) and a kubelet whose node plugin refuses the devices: the
pod fails, the compensation frees everything (nothing prepared, no claim left allocated, no device
held) and ``draflow log`` shows the trail from allocation to cleanup.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

from infra.config import Settings
from infra.eventstore import EventStore
from services.apiserver.server import ApiServer
from services.claim_controller.service import ClaimControllerService
from services.drivers.gpu_example.plugin import FailureSwitches
from services.drivers.gpu_example.publisher import SlicePublisher
from services.kubelet.service import KubeletService
from services.runtime.client import ApiClient
from services.scheduler.service import SchedulerService
from tests.controllers.shells import eventually, manifests, run, start_runtime
from tests.controllers.test_shells import TEMPLATE_POD, kubelet_builder
from tests.scheduler_service.test_races import _env

ROOT = Path(__file__).resolve().parents[2]
DEVICE_CLASS = (ROOT / "services" / "drivers" / "gpu_example" / "deviceclass.yaml").read_text()


async def _register(svc: KubeletService) -> None:
    await svc.register()


async def _log(settings: Settings, *args: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "services.cli", "log", *args,
        cwd=ROOT, env=_env(settings), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    return out.decode()


async def test_prepare_failure_through_the_real_scheduler_is_compensated_and_logged(
    apiserver: ApiServer, api: ApiClient, settings: Settings
) -> None:
    every_gpu = {f"gpu-{i}" for i in range(8)}
    build = kubelet_builder(
        settings,
        "node-1",
        FailureSwitches(prepare_devices=every_gpu),
        max_prepare_attempts=2,
        retry_base_s=0.05,
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

        pod = await eventually(
            lambda: (p := probe.get("Pod", "default", "pod0")) and p.status.phase == "Failed" and p,
            timeout_s=30,
            what="pod failed after the prepare retries",
        )
        assert pod.spec.node_name == "node-1"  # the scheduler bound it; the kubelet could not start it
        assert "gpu-" in pod.status.message
        claim_name = pod.status.resource_claim_statuses[0].resource_claim_name
        # compensation: unprepared, reservation dropped, deallocated, then deleted with its done pod
        await eventually(lambda: probe.get("ResourceClaim", "default", claim_name) is None, what="claim gone")
        plugin = kl.plugins["gpu.example.com"]
        assert plugin.prepared == frozenset()
        assert kl.manager.entries() == []

        trail = await _log(settings, "--subject", f"{settings.root}.ev.ResourceClaim.default.{claim_name}")
        types = [line.split()[3] for line in trail.splitlines()[1:] if line.strip()]
        trail_order = ["ClaimAllocated", "ClaimReserved", "ClaimReservationsReleased", "ClaimDeallocated"]
        assert [t for t in types if t in trail_order] == trail_order, trail
        assert types[-1] == "ResourceClaimDeleted", trail
        events = await _log(settings, "--subject", f"{settings.root}.ev.Event.default.>", "-o", "json")
        assert "FailedPrepareDynamicResources" in events
    finally:
        stop.set()
        await asyncio.wait({sched_task}, timeout=10)
        await sched_store.close()
        for s in (kubelet, ctl, driver):
            await s.stop()
        await probe.stop()
        await probe_events.close()
