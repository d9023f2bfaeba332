"""The classic (KEP-3063) drivers' node side as plugin processes behind the DRA v1 gRPC service:
prepare failing on demand through the plugin's admin endpoint, and a plugin killed and restarted
while a pod's claim is prepared (the pod's deletion waits for the unprepare, which the restarted
plugin does from its checkpoint)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from draflow.infra.config import Settings
from draflow.infra.eventstore import EventStore
from draflow.services.drivers import cdi
from draflow.services.drivers.kubeletplugin.admin import admin_path, admin_request
from draflow.services.runtime.kubeletapi import sockets
from tests.e2e.classic_cluster import FABRIC, ClassicCluster, claim, eventually, example, pod
from tests.processes import Proc

pytestmark = pytest.mark.kep3063

FPGA = "fpga.example.com"
NODE = "node-a"
PLUGIN = f"{FPGA}-plugin-{NODE}"  # its name in ClassicCluster.procs


@pytest.fixture
async def cluster(settings: Settings, event_store: EventStore) -> AsyncIterator[ClassicCluster]:
    c = ClassicCluster(settings, event_store)
    try:
        await c.start({NODE: FABRIC})
        yield c
    finally:
        codes = await c.stop()
        assert all(code == 0 for code in codes), {n: p.stderr[-20:] for n, p in c.procs.items()}


async def admin(settings: Settings, op: str, **switches: Any) -> dict[str, Any]:
    path = admin_path(sockets.plugins_dir(settings.data_dir, NODE), FPGA)
    answer = await admin_request(path, {"op": op, **({"switches": switches} if op == "set" else {})})
    assert "error" not in answer, answer
    return answer


async def fpga_pod(cluster: ClassicCluster, name: str) -> None:
    params = {"bitstream": "/images/aes.xclbin", "users": 1}
    await cluster.apply(
        example("fpga-resourceclass.yaml")[0], claim(name, "fpga", params), pod(name, {"fpga": name})
    )


async def events_of(cluster: ClassicCluster, name: str) -> list[str]:
    listed, _ = await cluster.client.list("Event", namespace="default")
    return [
        e.get("message", "")
        for e in listed
        if e.get("reason") == "FailedPrepareDynamicResources" and e["involvedObject"]["name"] == name
    ]


async def test_classic_prepare_failing_on_demand_keeps_the_pod_pending_until_cleared(
    cluster: ClassicCluster,
) -> None:
    await admin(cluster.settings, "set", prepare_claims=["aes"])
    await fpga_pod(cluster, "aes")
    warned = await eventually(lambda: events_of(cluster, "aes"), what="FailedPrepareDynamicResources")
    assert "injected failure for claim aes" in warned[0], warned
    asked = (await admin(cluster.settings, "get"))["calls"]["prepare"]

    async def retried() -> bool:
        return bool((await admin(cluster.settings, "get"))["calls"]["prepare"] > asked)

    await eventually(retried, what="prepare asked again")
    assert ((await cluster.pod("aes")) or {})["status"]["phase"] == "Pending"
    await admin(cluster.settings, "clear")
    await cluster.running("aes")
    await cluster.delete("Pod", "aes")
    await cluster.gone("Pod", "aes")


async def test_a_killed_classic_plugin_holds_the_deletion_until_it_is_back(cluster: ClassicCluster) -> None:
    await fpga_pod(cluster, "aes")
    await cluster.running("aes")
    uid = (await cluster.allocated("aes"))["metadata"]["uid"]
    spec = cluster.settings.data_dir / "cdi" / NODE / f"{cdi.transient_spec_name(FPGA, 'fpga', uid)}.json"
    assert spec.exists()
    cluster.procs[PLUGIN].kill()
    await cluster.delete("Pod", "aes")

    kubelet = cluster.procs[f"kubelet-{NODE}"]

    async def release_failed_twice() -> bool:
        return sum("classic release of pod aes" in line for line in kubelet.stderr) >= 2

    # the kubelet cannot unprepare (tried again and again): the pod is not deleted, the spec stays
    await eventually(release_failed_twice, what="the unprepare failing")
    assert await cluster.pod("aes") is not None and spec.exists()
    argv = ["--driver", FPGA, "--node", NODE]
    restarted = Proc(cluster.settings, "draflow.services.drivers.classic_plugin", argv)
    cluster.procs[PLUGIN] = restarted
    restarted.expect(f"{FPGA} plugin on {NODE}: serving")
    await cluster.gone("Pod", "aes")
    assert not spec.exists()  # unprepared by the restarted plugin (its checkpoint read back)
