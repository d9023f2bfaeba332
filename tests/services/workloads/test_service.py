"""The workloads and driver shells in-process: Deployments and Jobs drive pods, slices follow nodes."""

from __future__ import annotations

import asyncio
import contextlib

from draflow.events.dra import PodBound
from draflow.infra.config import Settings
from draflow.services.apiserver.server import ApiServer
from draflow.services.drivers.gpu_example.publisher import GPUS_LABEL, SlicePublisher
from draflow.services.garbage_collector.service import GarbageCollectorService
from draflow.services.kubelet.service import KubeletService
from draflow.services.runtime.controller import Runtime
from draflow.services.workloads.service import WorkloadsService
from tests.shells import eventually, manifests, run, start_runtime

WORKLOADS = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: c, image: nginx}]
---
apiVersion: batch/v1
kind: Job
metadata:
  name: batch
  namespace: default
  annotations: {workloads.draflow.io/run-seconds: "1"}
spec:
  completions: 2
  parallelism: 2
  template:
    spec:
      restartPolicy: Never
      containers: [{name: c, image: busybox}]
"""


async def _bind_everything(probe: Runtime, node: str) -> None:
    """Stands in for the scheduler: bind every unbound pod to ``node``."""
    while True:
        for pod in probe.items("Pod"):
            if not pod.spec.node_name and pod.metadata.deletion_timestamp is None:
                await probe.append(
                    "Pod", pod.metadata.namespace, pod.metadata.name, [PodBound(node_name=node)]
                )
        await asyncio.sleep(0.05)


def _pods(probe: Runtime, prefix: str) -> list:
    return [p for p in probe.items("Pod", "default") if p.metadata.name.startswith(prefix)]


async def _register(svc: KubeletService) -> None:
    await svc.register()


async def test_deployment_and_job_pods_run_finish_and_are_cleaned_up(
    apiserver: ApiServer, settings: Settings
) -> None:
    workloads, _ = await run(settings, "workloads", WorkloadsService, resync_s=0.2)
    collector, _ = await run(settings, "garbage-collector", GarbageCollectorService)
    kubelet, _ = await run(
        settings,
        "kubelet",
        lambda rt: KubeletService(rt, "node-1", settings.data_dir / "kubelet-node-1", {}),
        before=_register,
    )
    probe, probe_events = await start_runtime(settings, "probe")
    binder = asyncio.create_task(_bind_everything(probe, "node-1"))
    try:
        for result in await probe.api.apply(manifests(WORKLOADS)):
            assert result.error is None, result.error
        await eventually(
            lambda: len(web := _pods(probe, "web-")) == 2 and all(p.status.phase == "Running" for p in web),
            what="deployment pods running",
        )
        await eventually(
            lambda: probe.get("Deployment", "default", "web").status.ready_replicas == 2,
            what="deployment status",
        )
        web = _pods(probe, "web-")
        assert all(p.metadata.labels.get("pod-template-hash") for p in web)
        job = await eventually(
            lambda: (
                (j := probe.get("Job", "default", "batch"))
                and any(c.get("type") == "Complete" for c in j.status.get("conditions", []))
                and j
            ),
            timeout_s=20,
            what="job complete",
        )
        assert job.status["succeeded"] == 2
        assert sorted(p.status.phase for p in _pods(probe, "batch-")) == ["Succeeded", "Succeeded"]
        for p in _pods(probe, "batch-"):
            (c,) = p.status.container_statuses
            assert c["state"]["terminated"]["reason"] == "Completed" and not c["ready"]

        # scale up, down, to zero and up again: the controller converges the pod count through the
        # real apiserver, and the pods made after scaling to zero get new names (issue 23 item 7)
        deployment = WORKLOADS.split("---")[0]
        before_zero: set[str] = {p.metadata.name for p in _pods(probe, "web-")}
        for replicas in (3, 1, 0, 2):
            (res,) = await probe.api.apply(
                manifests(deployment.replace("replicas: 2", f"replicas: {replicas}"))
            )
            assert res.error is None, res.error
            await eventually(
                lambda n=replicas: (
                    len(web := _pods(probe, "web-")) == n  # type: ignore[misc]
                    and all(p.status.phase == "Running" for p in web)
                    and probe.get("Deployment", "default", "web").status.ready_replicas == n
                ),
                what=f"{replicas} replicas",
            )
            names = {p.metadata.name for p in _pods(probe, "web-")}
            if replicas:
                assert names, names
            if replicas == 2:
                assert not names & before_zero, (names, before_zero)  # never a name seen before
            before_zero |= names

        # the Deployment goes: the garbage collector deletes its pods (gracefully, through their kubelet)
        (res,) = await probe.api.delete([("Deployment", "default", "web")])
        assert res.error is None
        await eventually(lambda: not _pods(probe, "web-"), what="deployment pods gone")
    finally:
        binder.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await binder
        for s in (workloads, collector, kubelet):
            await s.stop()
        await probe.stop()
        await probe_events.close()


NODE = """
apiVersion: v1
kind: Node
metadata:
  name: gpu-node
  labels: {gpu.example.com/gpus: "%d"}
"""


async def test_slice_publisher_follows_the_nodes(apiserver: ApiServer, settings: Settings) -> None:
    driver, _ = await run(settings, "driver", SlicePublisher, resync_s=0.2)
    probe, probe_events = await start_runtime(settings, "probe")
    try:
        for result in await probe.api.apply(manifests(NODE % 8)):
            assert result.error is None, result.error
        (s,) = await eventually(lambda: probe.items("ResourceSlice"), what="slice")
        assert (s.spec.pool.name, s.spec.pool.generation, len(s.spec.devices)) == ("gpu-node", 1, 8)
        node = probe.get("Node", "", "gpu-node")
        assert s.metadata.owner_references[0].uid == node.metadata.uid
        assert node.metadata.labels[GPUS_LABEL] == "8"

        # fewer GPUs: the one slice changes in place (a single object: same generation)
        for result in await probe.api.apply(manifests(NODE % 4)):
            assert result.error is None, result.error
        await eventually(
            lambda: [len(x.spec.devices) for x in probe.items("ResourceSlice")] == [4], what="4 devices"
        )
        (s2,) = probe.items("ResourceSlice")
        assert s2.metadata.name == s.metadata.name and s2.spec.pool.generation == 1

        # 200 GPUs need two slices: a new generation, the old slice replaced
        for result in await probe.api.apply(manifests(NODE % 200)):
            assert result.error is None, result.error
        await eventually(
            lambda: sorted(len(x.spec.devices) for x in probe.items("ResourceSlice")) == [72, 128],
            what="two slices",
        )
        assert {x.spec.pool.generation for x in probe.items("ResourceSlice")} == {2}

        # the node goes: its slices go
        (res,) = await probe.api.delete([("Node", "", "gpu-node")])
        assert res.error is None
        await eventually(lambda: not probe.items("ResourceSlice"), what="slices deleted")
    finally:
        await driver.stop()
        await probe.stop()
        await probe_events.close()
