"""The claim controller process is SIGKILLed while it creates claims and restarted: every pod ends up
with exactly one claim, recorded in its status (claims created before the kill are adopted)."""

from __future__ import annotations

import asyncio
import signal
from collections import Counter

import pytest

from draflow.infra.config import Settings
from draflow.services.apiserver.server import ApiServer
from tests.processes import Proc
from tests.shells import eventually, manifests, start_runtime

pytestmark = pytest.mark.kep4381

N = 60
TEMPLATE = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: gpu, namespace: default}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly: {deviceClassName: gpu.example.com}
"""


def _pod(i: int) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"pod-{i}", "namespace": "default"},
        "spec": {
            "containers": [{"name": "c", "image": "x", "resources": {"claims": [{"name": "gpu"}]}}],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "gpu"}],
        },
    }


async def test_claim_controller_killed_mid_way_converges_after_restart(
    apiserver: ApiServer, settings: Settings
) -> None:
    probe, events = await start_runtime(settings, "probe")
    ctl = Proc(settings, "draflow.services.claim_controller")
    try:
        await asyncio.to_thread(ctl.expect, "claim-controller: following")
        for result in await probe.api.apply(manifests(TEMPLATE) + [_pod(i) for i in range(N)]):
            assert result.error is None, result.error
        await eventually(lambda: len(probe.items("ResourceClaim")) >= 5, what="some claims")
        assert await asyncio.to_thread(ctl.kill) == -signal.SIGKILL
        created_before = len(probe.items("ResourceClaim"))

        ctl = Proc(settings, "draflow.services.claim_controller")
        await asyncio.to_thread(ctl.expect, "claim-controller: following")

        def converged() -> bool:
            pods = probe.items("Pod", "default")
            return len(pods) == N and all(p.status.resource_claim_statuses for p in pods)

        await eventually(converged, timeout_s=60, what="every pod's claim recorded")
        claims = probe.items("ResourceClaim", "default")
        owners = Counter(c.metadata.owner_references[0].uid for c in claims)
        assert len(claims) == N and set(owners.values()) == {1}, (created_before, owners)
        for pod in probe.items("Pod", "default"):
            (status,) = pod.status.resource_claim_statuses
            claim = probe.get("ResourceClaim", "default", status.resource_claim_name)
            assert claim.metadata.owner_references[0].uid == pod.metadata.uid
    finally:
        assert await asyncio.to_thread(ctl.terminate) in (0, -signal.SIGKILL)
        await probe.stop()
        await events.close()
