"""The kubelet shell: admission refusals, prepare failures (retried, then compensated), nothing leaked."""

from __future__ import annotations

from events.api.core_v1 import Pod
from events.dra import PodBound
from infra.config import Settings
from services.apiserver.server import ApiServer
from services.claim_controller.service import ClaimControllerService
from services.drivers.gpu_example.plugin import FailureSwitches
from services.kubelet.service import KubeletService
from services.runtime.controller import Runtime
from tests.controllers.shells import eventually, manifests, run, schedule, start_runtime
from tests.controllers.test_shells import TEMPLATE_POD, kubelet_builder


async def _register(svc: KubeletService) -> None:
    await svc.register()


async def _pod_with_claim(probe: Runtime) -> tuple[Pod, str]:
    for result in await probe.api.apply(manifests(TEMPLATE_POD)):
        assert result.error is None, result.error
    pod = await eventually(
        lambda: (p := probe.get("Pod", "default", "pod0")) and p.status.resource_claim_statuses and p,
        what="claim statuses",
    )
    name = pod.status.resource_claim_statuses[0].resource_claim_name
    assert name
    return pod, name


def _warnings(probe: Runtime, reason: str) -> list[str]:
    return [e.message for e in probe.items("Event", "default") if e.type == "Warning" and e.reason == reason]


async def test_prepare_failure_is_retried_then_the_pod_fails_and_nothing_is_held(
    apiserver: ApiServer, settings: Settings
) -> None:
    failures = FailureSwitches(prepare_devices={"gpu-5"})
    ctl, _ = await run(settings, "claim-controller", ClaimControllerService)
    build = kubelet_builder(settings, "node-1", failures, max_prepare_attempts=3, retry_base_s=0.05)
    kubelet, kl = await run(settings, "kubelet", build, before=_register)
    probe, probe_events = await start_runtime(settings, "probe")
    try:
        _, claim_name = await _pod_with_claim(probe)
        await schedule(probe, "default", "pod0", "node-1", {claim_name: [("gpu", "gpu-5")]})
        pod = await eventually(
            lambda: (p := probe.get("Pod", "default", "pod0")) and p.status.phase == "Failed" and p,
            what="pod failed",
        )
        assert "gpu-5" in pod.status.message
        plugin = kl.plugins["gpu.example.com"]
        # three NodePrepareResources rounds (each with the plugin's in-call retries), then given up
        assert sum(1 for rpc, _ in plugin.calls if rpc == "prepare") >= 3
        await eventually(lambda: _warnings(probe, "FailedPrepareDynamicResources"), what="warning")
        # compensation: unprepared, the reservation dropped, the claim deallocated and (its pod is
        # done) deleted by the claim controller
        await eventually(lambda: probe.get("ResourceClaim", "default", claim_name) is None, what="claim gone")
        assert plugin.prepared == frozenset()
        assert kl.manager.entries() == []
        assert probe.get("Pod", "default", "pod0").status.phase == "Failed"
    finally:
        for s in (ctl, kubelet):
            await s.stop()
        await probe.stop()
        await probe_events.close()


async def test_transient_plugin_failures_are_retried_until_running(
    apiserver: ApiServer, settings: Settings
) -> None:
    failures = FailureSwitches(fail_prepare_calls=4)  # the first pass's three calls and one more fail
    ctl, _ = await run(settings, "claim-controller", ClaimControllerService)
    build = kubelet_builder(settings, "node-1", failures, retry_base_s=0.05)
    kubelet, kl = await run(settings, "kubelet", build, before=_register)
    probe, probe_events = await start_runtime(settings, "probe")
    try:
        _, claim_name = await _pod_with_claim(probe)
        await schedule(probe, "default", "pod0", "node-1", {claim_name: [("gpu", "gpu-1")]})
        await eventually(
            lambda: probe.get("Pod", "default", "pod0").status.phase == "Running", what="Running"
        )
        assert _warnings(probe, "FailedPrepareDynamicResources")
        claim = probe.get("ResourceClaim", "default", claim_name)
        assert kl.plugins["gpu.example.com"].prepared == {claim.metadata.uid}
    finally:
        for s in (ctl, kubelet):
            await s.stop()
        await probe.stop()
        await probe_events.close()


async def test_pod_not_in_reserved_for_is_refused(apiserver: ApiServer, settings: Settings) -> None:
    ctl, _ = await run(settings, "claim-controller", ClaimControllerService)
    kubelet, kl = await run(settings, "kubelet", kubelet_builder(settings, "node-1"), before=_register)
    probe, probe_events = await start_runtime(settings, "probe")
    try:
        _, claim_name = await _pod_with_claim(probe)
        # the claim controller stops before the pod is bound, so nobody reserves the claim for it
        await ctl.stop()
        assert await probe.append("Pod", "default", "pod0", [PodBound(node_name="node-1")])
        await eventually(
            lambda: (p := probe.get("Pod", "default", "pod0")) and p.status.phase == "Failed" and p,
            what="pod failed",
        )
        (msg,) = _warnings(probe, "FailedPrepareDynamicResources")
        assert f"is not allowed to use ResourceClaim {claim_name}" in msg
        assert kl.plugins["gpu.example.com"].calls == []
    finally:
        await kubelet.stop()
        await probe.stop()
        await probe_events.close()
