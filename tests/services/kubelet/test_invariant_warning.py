"""The kubelet notices a broken DRA invariant live: a claim of a pod Running on its node that is
deallocated under it gets an ``InvariantBroken`` Warning Event on the pod, once."""

from __future__ import annotations

import asyncio

import pytest

from draflow.events.dra import ClaimDeallocated
from draflow.infra.config import Settings
from draflow.services.apiserver.server import ApiServer
from draflow.services.claim_controller.service import ClaimControllerService
from draflow.services.drivers.gpu_example.plugin import FailureSwitches
from draflow.services.kubelet.service import INVARIANT_BROKEN
from tests.services.kubelet.test_service import _pod_with_claim, _register, _warnings
from tests.services.test_shells import kubelet_builder
from tests.shells import eventually, run, schedule, start_runtime

pytestmark = pytest.mark.kep4381


async def test_a_running_pods_claim_deallocated_under_it_is_a_warning(
    apiserver: ApiServer, settings: Settings
) -> None:
    ctl, _ = await run(settings, "claim-controller", ClaimControllerService)
    build = kubelet_builder(settings, "node-1", FailureSwitches(), retry_base_s=0.05)
    kubelet, _ = await run(settings, "kubelet", build, before=_register)
    probe, probe_events = await start_runtime(settings, "probe")
    try:
        _, claim_name = await _pod_with_claim(probe)
        await schedule(probe, "default", "pod0", "node-1", {claim_name: [("gpu", "gpu-1")]})
        await eventually(
            lambda: probe.get("Pod", "default", "pod0").status.phase == "Running", what="Running"
        )
        assert _warnings(probe, INVARIANT_BROKEN) == []

        assert await probe.append("ResourceClaim", "default", claim_name, [ClaimDeallocated()])
        (message,) = await eventually(lambda: _warnings(probe, INVARIANT_BROKEN), what="the Warning")
        assert message == (
            "every Running pod's claims are allocated and reserved for it: pod default/pod0 is Running on "
            f"node-1 but its claim {claim_name} is not allocated"
        )
        event = next(e for e in probe.items("Event", "default") if e.reason == INVARIANT_BROKEN)
        assert event.source.component == "kubelet" and event.source.host == "node-1"
        await asyncio.sleep(1.5)  # resyncs pass over the pod again: still one Event, not counted up
        assert [e.count for e in probe.items("Event", "default") if e.reason == INVARIANT_BROKEN] == [1]
    finally:
        for s in (ctl, kubelet):
            await s.stop()
        await probe.stop()
        await probe_events.close()
