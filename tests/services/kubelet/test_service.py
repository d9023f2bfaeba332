"""The kubelet shell: a pod whose claims cannot be prepared (refused at admission or by the driver)
stays Pending with ``FailedPrepareDynamicResources`` Warnings and is tried again until it starts,
as upstream's kubelet does (issue 23 item 1); deleting it meanwhile leaks nothing."""

from __future__ import annotations

import asyncio

import pytest

from draflow.events.api.core_v1 import Pod
from draflow.events.api.resource_v1 import (
    AllocationResult,
    DeviceAllocationResult,
    DeviceRequestAllocationResult,
)
from draflow.events.dra import ClaimAllocated, PodBound
from draflow.infra.config import Settings
from draflow.services.apiserver.server import ApiServer
from draflow.services.claim_controller.service import ClaimControllerService
from draflow.services.drivers.kubeletplugin.faults import FailureSwitches
from draflow.services.kubelet.service import KubeletService
from draflow.services.runtime.controller import Runtime
from tests.services.test_shells import TEMPLATE_POD, kubelet_builder
from tests.shells import eventually, manifests, run, schedule, start_runtime

pytestmark = pytest.mark.kep4381

DRIVER = "gpu.example.com"
FAILED = "FailedPrepareDynamicResources"


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


@pytest.mark.upstream_e2e("must retry NodePrepareResources")
async def test_prepare_failure_keeps_the_pod_pending_and_retried_until_it_runs(
    apiserver: ApiServer, settings: Settings
) -> None:
    """Upstream's "must retry NodePrepareResources": the driver fails the call, the pod stays
    Pending (never Failed), the call is made again and again; once the driver stops failing the
    pod runs."""
    failures = FailureSwitches(prepare_devices={"gpu-5"})
    ctl, _ = await run(settings, "claim-controller", ClaimControllerService)
    build = kubelet_builder(settings, "node-1", failures, retry_base_s=0.05, retry_max_s=0.2)
    kubelet, kl = await run(settings, "kubelet", build, before=_register)
    probe, probe_events = await start_runtime(settings, "probe")
    try:
        _, claim_name = await _pod_with_claim(probe)
        await schedule(probe, "default", "pod0", "node-1", {claim_name: [("gpu", "gpu-5")]})
        plugin = kl.plugins["gpu.example.com"]
        await eventually(
            lambda: sum(1 for rpc, _ in plugin.calls if rpc == "prepare") >= 4, what="prepare retried"
        )
        (message,) = set(_warnings(probe, "FailedPrepareDynamicResources"))
        assert message.startswith("Failed to prepare dynamic resources: ") and "gpu-5" in message
        pod = probe.get("Pod", "default", "pod0")
        assert pod.status.phase == "Pending" and pod.spec.node_name == "node-1"
        # one Event, counted up (the recorder aggregates repeats, as client-go's does)
        await eventually(
            lambda: (
                max((e.count for e in probe.items("Event", "default") if e.reason == FAILED), default=0) >= 2
            ),
            what="the Warning counted up",
        )

        failures.prepare_devices.clear()  # the driver recovers
        await eventually(
            lambda: probe.get("Pod", "default", "pod0").status.phase == "Running", what="Running"
        )
        claim = probe.get("ResourceClaim", "default", claim_name)
        assert plugin.prepared == {claim.metadata.uid}
    finally:
        for s in (ctl, kubelet):
            await s.stop()
        await probe.stop()
        await probe_events.close()


async def test_deleting_a_pod_that_cannot_start_releases_everything(
    apiserver: ApiServer, settings: Settings
) -> None:
    """The pod never starts; deleting it unprepares what was prepared, drops the reservation,
    deallocates and deletes its generated claim."""
    failures = FailureSwitches(prepare_devices={"gpu-5"})
    ctl, _ = await run(settings, "claim-controller", ClaimControllerService)
    build = kubelet_builder(settings, "node-1", failures, retry_base_s=0.05, retry_max_s=0.2)
    kubelet, kl = await run(settings, "kubelet", build, before=_register)
    probe, probe_events = await start_runtime(settings, "probe")
    try:
        _, claim_name = await _pod_with_claim(probe)
        await schedule(probe, "default", "pod0", "node-1", {claim_name: [("gpu", "gpu-5")]})
        await eventually(lambda: _warnings(probe, "FailedPrepareDynamicResources"), what="warning")
        await probe.delete("Pod", "default", "pod0")
        await eventually(lambda: probe.get("Pod", "default", "pod0") is None, what="pod gone")
        await eventually(lambda: probe.get("ResourceClaim", "default", claim_name) is None, what="claim gone")
        assert kl.plugins["gpu.example.com"].prepared == frozenset()
        assert kl.manager.entries() == []
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


async def test_pod_not_in_reserved_for_stays_pending_until_reserved(
    apiserver: ApiServer, settings: Settings
) -> None:
    """Upstream's "must not run a pod if a claim is not ready": bound to the node without being
    in the claim's ``reservedFor``, the pod is neither run nor failed (Warnings, no driver call);
    once the claim controller reserves the claim for it, it starts."""
    ctl, _ = await run(settings, "claim-controller", ClaimControllerService)
    build = kubelet_builder(settings, "node-1", retry_base_s=0.05, retry_max_s=0.2)
    kubelet, kl = await run(settings, "kubelet", build, before=_register)
    probe, probe_events = await start_runtime(settings, "probe")
    try:
        _, claim_name = await _pod_with_claim(probe)
        # the claim controller stops before the pod is bound, so nobody reserves the claim for it
        await ctl.stop()
        assert await probe.append("Pod", "default", "pod0", [PodBound(node_name="node-1")])
        claim = probe.get("ResourceClaim", "default", claim_name)
        pod_uid = probe.get("Pod", "default", "pod0").metadata.uid
        await eventually(lambda: _warnings(probe, "FailedPrepareDynamicResources"), what="warned")
        (msg,) = set(_warnings(probe, "FailedPrepareDynamicResources"))
        assert msg == (
            f"Failed to prepare dynamic resources: pod pod0 ({pod_uid}) "
            f"is not allowed to use ResourceClaim {claim_name} ({claim.metadata.uid})"
        )
        await asyncio.sleep(0.5)  # several retries
        assert probe.get("Pod", "default", "pod0").status.phase == "Pending"
        assert list(kl.plugins["gpu.example.com"].calls) == []

        # allocate the claim (the scheduler would have) and let the claim controller reserve it for
        # the bound pod
        allocation = AllocationResult(
            devices=DeviceAllocationResult(
                results=(
                    DeviceRequestAllocationResult(
                        request="gpu", driver=DRIVER, pool="node-1", device="gpu-2"
                    ),
                )
            )
        )
        assert await probe.append(
            "ResourceClaim", "default", claim_name, [ClaimAllocated(allocation=allocation)]
        )
        ctl, _ = await run(settings, "claim-controller", ClaimControllerService)
        await eventually(
            lambda: probe.get("Pod", "default", "pod0").status.phase == "Running", what="Running"
        )
    finally:
        for svc in (ctl, kubelet):
            await svc.stop()
        await probe.stop()
        await probe_events.close()
