"""The kubelet process is killed (SIGKILL) with claims prepared, and restarted from its checkpoint."""

from __future__ import annotations

import asyncio
import functools
import json
import signal

import pytest

from draflow.events.api.core_v1 import Pod
from draflow.infra.config import Settings
from draflow.services.apiserver.server import ApiServer
from draflow.services.claim_controller.service import ClaimControllerService
from draflow.services.runtime.controller import Runtime
from tests.processes import GPU_PLUGIN, Proc
from tests.services.test_shells import TEMPLATE_POD
from tests.shells import eventually, manifests, run, schedule, start_runtime

pytestmark = pytest.mark.kep4381

POD1 = """
apiVersion: v1
kind: Pod
metadata: {name: pod1, namespace: default}
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


def _recorded(probe: Runtime, name: str) -> Pod | None:
    pod = probe.get("Pod", "default", name)
    return pod if pod is not None and pod.status.resource_claim_statuses else None


def _running(probe: Runtime, name: str) -> bool:
    pod = probe.get("Pod", "default", name)
    return pod is not None and pod.status.phase == "Running"


async def _kubelet(settings: Settings) -> Proc:
    w = Proc(settings, "draflow.services.kubelet", ["--node", "node-1", "--gpus", "8"])
    # in a thread: the apiserver answering the kubelet runs on this test's event loop
    await asyncio.to_thread(w.expect, "kubelet node-1: registered")
    return w


async def test_kubelet_killed_and_restarted_unprepares_from_its_checkpoint(
    apiserver: ApiServer, settings: Settings
) -> None:
    """The node's gpu.example.com plugin (its own process) stays up while the kubelet is killed;
    the restarted kubelet finds its registration socket again and unprepares through it."""
    ctl, _ = await run(settings, "claim-controller", ClaimControllerService)
    probe, probe_events = await start_runtime(settings, "probe")
    plugin = Proc(settings, GPU_PLUGIN, ["--node", "node-1", "--gpus", "8"])
    await asyncio.to_thread(plugin.expect, "gpu.example.com plugin on node-1: serving")
    kubelet = await _kubelet(settings)
    try:
        for result in await probe.api.apply(manifests(TEMPLATE_POD) + manifests(POD1)):
            assert result.error is None, result.error
        claims = {}
        for i, pod_name in enumerate(("pod0", "pod1")):
            pod = await eventually(functools.partial(_recorded, probe, pod_name), what="claim statuses")
            claim_name = pod.status.resource_claim_statuses[0].resource_claim_name
            claims[pod_name] = probe.get("ResourceClaim", "default", claim_name)
            await schedule(probe, "default", pod_name, "node-1", {claim_name: [("gpu", f"gpu-{i}")]})
        for pod_name in ("pod0", "pod1"):
            await eventually(functools.partial(_running, probe, pod_name), what="Running")
        cdi = settings.data_dir / "cdi" / "node-1"
        specs = {n: cdi / f"k8s.gpu.example.com-gpu_{c.metadata.uid}.json" for n, c in claims.items()}
        assert all(s.exists() for s in specs.values())

        assert await asyncio.to_thread(kubelet.kill) == -signal.SIGKILL
        checkpoint = json.loads((settings.data_dir / "kubelet-node-1" / "dra_manager_state").read_text())
        entries = json.loads(checkpoint["Data"])["Entries"]
        assert sorted(e["ClaimUID"] for e in entries) == sorted(c.metadata.uid for c in claims.values())

        # while the kubelet is down: pod0 is deleted (graceful: waits for its kubelet), pod1 is
        # force-deleted (gone at once: only the checkpoint remembers its claim is prepared)
        (r0,) = await probe.api.delete([("Pod", "default", "pod0")])
        (r1,) = await probe.api.delete([("Pod", "default", "pod1")], grace_period_seconds=0)
        assert r0.error is None and r1.error is None
        await eventually(lambda: probe.get("Pod", "default", "pod1") is None, what="pod1 gone")
        assert probe.get("Pod", "default", "pod0").metadata.deletion_timestamp is not None
        assert all(s.exists() for s in specs.values())

        kubelet = await _kubelet(settings)
        await eventually(lambda: probe.get("Pod", "default", "pod0") is None, what="pod0 gone")
        await eventually(lambda: not probe.items("ResourceClaim", "default"), what="claims deleted")
        await eventually(lambda: not any(s.exists() for s in specs.values()), what="CDI specs removed")
        await eventually(
            lambda: (
                not json.loads(
                    json.loads((settings.data_dir / "kubelet-node-1" / "dra_manager_state").read_text())[
                        "Data"
                    ]
                )["Entries"]
            ),
            what="checkpoint empty",
        )
    finally:
        assert await asyncio.to_thread(kubelet.terminate) in (0, -signal.SIGKILL)
        assert await asyncio.to_thread(plugin.terminate) == 0
        await ctl.stop()
        await probe.stop()
        await probe_events.close()


async def test_corrupt_checkpoint_stops_the_kubelet(apiserver: ApiServer, settings: Settings) -> None:
    state = settings.data_dir / "kubelet-node-1"
    state.mkdir(parents=True)
    data = '{"kind":"DRACheckpoint","apiVersion":"checkpoint.dra.kubelet.k8s.io/v1","Entries":[]}'
    (state / "dra_manager_state").write_text(json.dumps({"Data": data, "Checksum": 1}))
    kubelet = Proc(settings, "draflow.services.kubelet", ["--node", "node-1"])
    code = await asyncio.to_thread(kubelet.wait, 60)
    assert code == 1
    assert any("CorruptCheckpointError" in line for line in kubelet.stderr), kubelet.stderr[-10:]
