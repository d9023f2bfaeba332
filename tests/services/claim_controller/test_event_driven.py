"""The claim controller syncs each changed object on its own: a pod does not wait for the
round trips of other objects that a pass found dirty before it, and a failed sync is retried for
that object alone (no full pass)."""

from __future__ import annotations

import asyncio

import pytest

from draflow.infra.config import Settings
from draflow.services.apiserver.server import ApiServer
from draflow.services.claim_controller.service import ClaimControllerService
from draflow.services.runtime.controller import Runtime
from tests.services.test_shells import TEMPLATE_POD
from tests.shells import eventually, manifests, run, start_runtime

pytestmark = pytest.mark.kep4381


def _pod(name: str) -> list[dict]:
    return manifests(TEMPLATE_POD.replace("name: pod0", f"name: {name}"))


class _Held(ClaimControllerService):
    """Holds the sync of pod ``held`` until the test lets it go (a slow round trip)."""

    def __init__(self, rt: Runtime) -> None:
        super().__init__(rt, full_resync_s=3600.0)
        self.gate = asyncio.Event()
        self.holding = False

    async def _sync_pod(self, ns: str, name: str) -> None:
        if name == "held":
            self.holding = True
            await self.gate.wait()
        await super()._sync_pod(ns, name)


def _claim_recorded(probe: Runtime, name: str) -> bool:
    pod = probe.get("Pod", "default", name)
    return pod is not None and bool(pod.status.resource_claim_statuses)


async def test_a_pod_gets_its_claim_while_another_objects_sync_is_in_flight(
    apiserver: ApiServer, settings: Settings
) -> None:
    ctl, svc = await run(settings, "claim-controller", _Held)
    probe, probe_events = await start_runtime(settings, "probe")
    try:
        await eventually(lambda: svc.full_passes == 1, what="first pass")
        for result in await probe.api.apply(_pod("held")):
            assert result.error is None, result.error
        await eventually(lambda: svc.holding, what="the held pod's sync started")
        for result in await probe.api.apply(_pod("quick")):
            assert result.error is None, result.error
        # a pass that waited for all of its syncs would hold 'quick' behind 'held' for good
        await eventually(lambda: _claim_recorded(probe, "quick"), what="quick's claim")
        assert not _claim_recorded(probe, "held")
        svc.gate.set()
        await eventually(lambda: _claim_recorded(probe, "held"), what="held's claim once let go")
        assert svc.full_passes == 1
    finally:
        svc.gate.set()
        await ctl.stop()
        await probe.stop()
        await probe_events.close()


class _FailsOnce(ClaimControllerService):
    def __init__(self, rt: Runtime) -> None:
        super().__init__(rt, full_resync_s=3600.0)
        self.attempts = 0

    async def _sync_pod(self, ns: str, name: str) -> None:
        if name == "flaky":
            self.attempts += 1
            if self.attempts == 1:
                raise RuntimeError("the apiserver went away")
        await super()._sync_pod(ns, name)


async def test_a_failed_sync_is_retried_for_that_object_without_a_full_pass(
    apiserver: ApiServer, settings: Settings
) -> None:
    ctl, svc = await run(settings, "claim-controller", _FailsOnce, resync_s=3600.0)
    probe, probe_events = await start_runtime(settings, "probe")
    try:
        await eventually(lambda: svc.full_passes == 1, what="first pass")
        for result in await probe.api.apply(_pod("flaky")):
            assert result.error is None, result.error
        await eventually(lambda: _claim_recorded(probe, "flaky"), what="flaky's claim after the retry")
        assert svc.attempts >= 2 and svc.full_passes == 1
    finally:
        await ctl.stop()
        await probe.stop()
        await probe_events.close()


QUOTA = """\
apiVersion: v1
kind: ResourceQuota
metadata: {name: claims, namespace: default}
spec:
  hard:
    count/resourceclaims.resource.k8s.io: "{n}"
"""


async def test_a_refused_create_is_made_again_under_the_recorded_name_once_admitted(
    apiserver: ApiServer, settings: Settings
) -> None:
    """A create refused by admission (quota: no claim allowed) is retried by the sweep (no
    hint marks the pod again); the pod's status already names the claim (the name is derived
    from the pod's uid), and the claim is created under that very name once the quota allows
    it."""
    ctl, svc = await run(
        settings, "claim-controller", lambda rt: ClaimControllerService(rt, full_resync_s=0.2)
    )
    probe, probe_events = await start_runtime(settings, "probe")
    try:
        for result in await probe.api.apply(manifests(QUOTA.replace("{n}", "0"))):
            assert result.error is None, result.error
        await eventually(lambda: svc.full_passes == 1, what="first pass")
        for result in await probe.api.apply(_pod("refused")):
            assert result.error is None, result.error
        pod = await eventually(
            lambda: (p := probe.get("Pod", "default", "refused")) and p.status.resource_claim_statuses and p,
            what="the claim status",
        )
        name = pod.status.resource_claim_statuses[0].resource_claim_name
        await asyncio.sleep(0.5)  # sweeps pass meanwhile: each create is refused again
        assert probe.get("ResourceClaim", "default", name) is None
        for result in await probe.api.apply(manifests(QUOTA.replace("{n}", "5"))):
            assert result.error is None, result.error
        claim = await eventually(lambda: probe.get("ResourceClaim", "default", name), what="the claim")
        assert claim.metadata.owner_references[0].uid == pod.metadata.uid
        assert probe.get("Pod", "default", "refused").status.resource_claim_statuses == (
            pod.status.resource_claim_statuses
        )
    finally:
        await ctl.stop()
        await probe.stop()
        await probe_events.close()
