"""The service shells' core loops, in-process, against a real nats-server and a real apiserver."""

from __future__ import annotations

from typing import Any

import pytest

from draflow.events.dra import PodResourcesPrepared
from draflow.infra.config import Settings
from draflow.services.apiserver.server import ApiServer
from draflow.services.claim_controller.service import ClaimControllerService
from draflow.services.drivers.gpu_example import GpuExamplePlugin
from draflow.services.drivers.gpu_example.publisher import GPUS_LABEL, SlicePublisher
from draflow.services.drivers.kubeletplugin.faults import FailureSwitches, Faulty
from draflow.services.kubelet.service import KubeletService
from tests.builders.manifests import gpu_template_yaml
from tests.shells import Running, eventually, manifests, run, schedule, start_runtime

pytestmark = pytest.mark.kep4381

TEMPLATE_POD = (
    gpu_template_yaml()
    + """---
apiVersion: v1
kind: Pod
metadata: {name: pod0, namespace: default}
spec:
  containers:
  - name: ctr0
    image: ubuntu:22.04
    resources:
      claims: [{name: gpu}]
  resourceClaims:
  - name: gpu
    resourceClaimTemplateName: single-gpu
"""
)


async def register_node(svc: KubeletService) -> None:
    """``run(..., before=register_node)``: the kubelet registers its Node before it starts."""
    await svc.register()


async def template_pod_running(probe: Any, node: str = "node-1") -> str:
    """TEMPLATE_POD applied, its claim allocated on ``node`` (gpu-1) and the pod Running; the
    claim's name."""
    for result in await probe.api.apply(manifests(TEMPLATE_POD)):
        assert result.error is None, result.error
    pod = await eventually(
        lambda: (p := probe.get("Pod", "default", "pod0")) and p.status.resource_claim_statuses and p,
        what="claim statuses",
    )
    claim_name: str = pod.status.resource_claim_statuses[0].resource_claim_name
    await eventually(lambda: probe.items("Node"), what="node registered")
    await schedule(probe, "default", "pod0", node, {claim_name: [("gpu", "gpu-1")]})
    await eventually(lambda: probe.get("Pod", "default", "pod0").status.phase == "Running", what="Running")
    return claim_name


def kubelet_builder(settings: Settings, node: str, failures: FailureSwitches | None = None, **kw: Any):
    state = settings.data_dir / f"kubelet-{node}"

    def build(rt):
        def get_claim(ref):
            c = rt.get("ResourceClaim", ref.namespace, ref.name)
            return c if c is not None and c.metadata.uid == ref.uid else None

        switches = failures or FailureSwitches()
        driver = GpuExamplePlugin(
            node,
            settings.data_dir / "cdi" / node,
            get_claim,
            num_gpus=8,
            state_dir=state / "plugin",
            failures=switches,
        )
        plugin = Faulty(driver, switches)  # in-process: the kubelet's gRPC path has its own tests
        return KubeletService(
            rt, node, state, {plugin.driver_name: plugin}, node_labels={GPUS_LABEL: "8"}, **kw
        )

    return build


async def _register(svc: KubeletService) -> None:
    await svc.register()


def _claims(rt, ns: str = "default") -> list:
    return rt.items("ResourceClaim", ns)


async def test_template_claim_prepare_run_and_teardown(apiserver: ApiServer, settings: Settings) -> None:
    ctl, _ = await run(settings, "claim-controller", ClaimControllerService)
    kubelet, kl = await run(settings, "kubelet", kubelet_builder(settings, "node-1"), before=_register)
    driver, _ = await run(settings, "driver", SlicePublisher)
    probe, probe_events = await start_runtime(settings, "probe")
    services: list[Running] = [ctl, kubelet, driver]
    try:
        # the driver publishes the node's pool once the kubelet registered it
        slices = await eventually(lambda: probe.items("ResourceSlice"), what="slices")
        assert [s.spec.pool.generation for s in slices] == [1]
        assert len(slices[0].spec.devices) == 8
        assert slices[0].metadata.owner_references[0].kind == "Node"

        for result in await probe.api.apply(manifests(TEMPLATE_POD)):
            assert result.error is None, result.error
        pod = await eventually(
            lambda: (p := probe.get("Pod", "default", "pod0")) and p.status.resource_claim_statuses and p,
            what="claim statuses",
        )
        (status,) = pod.status.resource_claim_statuses
        claim = probe.get("ResourceClaim", "default", status.resource_claim_name)
        assert claim.metadata.owner_references[0].uid == pod.metadata.uid
        assert claim.metadata.annotations["resource.kubernetes.io/pod-claim-name"] == "gpu"

        await schedule(probe, "default", "pod0", "node-1", {claim.metadata.name: [("gpu", "gpu-3")]})
        await eventually(
            lambda: probe.get("Pod", "default", "pod0").status.phase == "Running", what="Running"
        )
        running = probe.get("Pod", "default", "pod0")
        assert [(c["name"], c["ready"]) for c in running.status.container_statuses] == [("ctr0", True)]
        plugin = kl.plugins["gpu.example.com"]
        assert plugin.prepared == {claim.metadata.uid}
        spec = settings.data_dir / "cdi" / "node-1" / f"k8s.gpu.example.com-gpu_{claim.metadata.uid}.json"
        assert spec.exists()
        prepared = [
            e.data
            for e in await probe_events.events(probe_events.subject("Pod", "default", "pod0"))
            if isinstance(e.data, PodResourcesPrepared)
        ]
        assert prepared[0].node_name == "node-1"
        (ctr,) = prepared[0].containers
        assert ctr.container == "ctr0"
        assert ctr.cdi_ids == (
            "k8s.gpu.example.com/gpu=common",
            f"k8s.gpu.example.com/gpu={claim.metadata.uid}-gpu-3",
        )
        assert (settings.data_dir / "kubelet-node-1" / "dra_manager_state").exists()

        # teardown: unprepare on the node, reservation dropped, deallocated, pod and claim gone
        (res,) = await probe.api.delete([("Pod", "default", "pod0")])
        assert res.error is None
        await eventually(lambda: probe.get("Pod", "default", "pod0") is None, what="pod gone")
        await eventually(lambda: not _claims(probe), what="claim deleted")
        assert plugin.prepared == frozenset()
        assert not spec.exists()
        assert kl.manager.entries() == []
    finally:
        for s in services:
            await s.stop()
        await probe.stop()
        await probe_events.close()


async def test_claim_controller_adopts_claim_created_before_a_crash(
    apiserver: ApiServer, settings: Settings
) -> None:
    probe, probe_events = await start_runtime(settings, "probe")
    try:
        for result in await probe.api.apply(manifests(TEMPLATE_POD)):
            assert result.error is None
        pod = await eventually(lambda: probe.get("Pod", "default", "pod0"), what="pod")
        # what a controller that crashed after creating the claim (before recording it) left behind
        orphan = f"""
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  name: pod0-gpu-before-crash
  namespace: default
  annotations: {{resource.kubernetes.io/pod-claim-name: gpu}}
  ownerReferences:
  - apiVersion: v1
    kind: Pod
    name: pod0
    uid: {pod.metadata.uid}
    controller: true
    blockOwnerDeletion: true
spec:
  devices:
    requests:
    - name: gpu
      exactly: {{deviceClassName: gpu.example.com}}
"""
        (result,) = await probe.api.apply(manifests(orphan))
        assert result.error is None, result.error
        ctl, _ = await run(settings, "claim-controller", ClaimControllerService)
        try:
            pod = await eventually(
                lambda: (p := probe.get("Pod", "default", "pod0")) and p.status.resource_claim_statuses and p,
                what="claim statuses",
            )
            assert pod.status.resource_claim_statuses[0].resource_claim_name == "pod0-gpu-before-crash"
            await ctl.rt.cache.wait_position(await probe_events.stream_last_seq())
            assert [c.metadata.name for c in _claims(probe)] == ["pod0-gpu-before-crash"]
        finally:
            await ctl.stop()
    finally:
        await probe.stop()
        await probe_events.close()
