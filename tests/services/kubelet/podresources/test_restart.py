"""A kubelet SIGKILLed with pods running answers identically after its restart, from its checkpoints.

The restarted kubelet's first ``List`` is taken as soon as its socket is up, before anything new is
appended to the log: the DRA claim infos, the classic prepare results and the device-plugin
assignments all come from the checkpoints (no driver is asked again: running pods are not
prepared again). The killed kubelet's stale socket file is replaced; a clean stop removes it.
"""

from __future__ import annotations

import asyncio
import signal
import stat

import pytest

from draflow.infra.natsd import LocalNatsServer
from tests.builders.manifests import gpu_template_yaml
from tests.helpers import wait_for
from tests.services.kubelet.podresources.cluster import (
    NODE,
    allocatable,
    cluster,
    list_pods,
    running,
    short_settings,
    socket_of,
    start_kubelet,
)
from tests.shells import manifests

pytestmark = pytest.mark.kep3695

PODS = (
    gpu_template_yaml("one-gpu", "default")
    + """---
apiVersion: v1
kind: Pod
metadata: {name: dra, namespace: default}
spec:
  resourceClaims:
  - {name: gpu, resourceClaimTemplateName: one-gpu}
  containers:
  - {name: ctr, image: busybox, resources: {claims: [{name: gpu}]}}
---
apiVersion: v1
kind: Pod
metadata: {name: legacy-a, namespace: default}
spec:
  containers:
  - {name: ctr, image: busybox, resources: {limits: {example.com/gpu: 1}}}
---
apiVersion: v1
kind: Pod
metadata: {name: legacy-b, namespace: default}
spec:
  containers:
  - {name: ctr, image: busybox, resources: {limits: {example.com/gpu: 1}}}
"""
)


async def test_restarted_kubelet_answers_from_its_checkpoints(nats_server: LocalNatsServer) -> None:
    settings = short_settings(nats_server)
    async with cluster(settings) as (probe, procs):
        socket = socket_of(settings)
        for result in await probe.api.apply(manifests(PODS)):
            assert result.error is None, result.error
        for name in ("dra", "legacy-a", "legacy-b"):
            await wait_for(running(probe, "default", name), 90, f"{name} Running")
        before = await list_pods(socket)
        devices = {
            p.name: [list(d.device_ids) for d in p.containers[0].devices] for p in before.pod_resources
        }
        assert sorted(devices["legacy-a"] + devices["legacy-b"]) == [["gpu-0"], ["gpu-1"]]
        assert len(before.pod_resources[0].containers[0].dynamic_resources[0].claim_resources) == 1
        last_seq = await probe.events.stream_last_seq()

        assert await asyncio.to_thread(procs[-1].kill) == -signal.SIGKILL
        assert stat.S_ISSOCK(socket.lstat().st_mode)  # left behind by the killed kubelet

        procs[-1] = start_kubelet(settings)
        await asyncio.to_thread(procs[-1].expect, f"kubelet {NODE}: pod-resources API on", 90)
        after = await list_pods(socket)
        assert after == before
        # and nothing the answer depends on had changed meanwhile (the restarted kubelet's own
        # Node and Lease updates aside): the answer came from the checkpoints
        for kind in ("Pod", "ResourceClaim", "ClassicResourceClaim"):
            subjects = f"{probe.events.subject(kind, 'default', 'x')[:-1]}>"
            assert await probe.events.events(subjects, last_seq + 1) == []
        assert [(d.resource_name, list(d.device_ids)) for d in (await allocatable(socket)).devices] == [
            ("example.com/gpu", ["gpu-0", "gpu-1"])
        ]
        # the restarted kubelet goes on: a pod deleted now releases its device-plugin device
        (result,) = await probe.api.delete([("Pod", "default", "legacy-a")])
        assert result.error is None
        await wait_for(lambda: probe.get("Pod", "default", "legacy-a") is None or [], 60, "legacy-a gone")
        assert sorted(p.name for p in (await list_pods(socket)).pod_resources) == ["dra", "legacy-b"]

        assert await asyncio.to_thread(procs[-1].terminate) == 0
        assert not socket.exists()  # removed on a clean stop
        procs.pop()
