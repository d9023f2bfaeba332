"""frobnicator.example.com (KEP-4381's numeric example driver) as its own plugin process: its
capacity reaches the kubelet over the capacity stream and becomes the node's NodeResourceCapacity;
a change on the plugin's side (frobnicators lost, through its admin endpoint) is republished, and
a killed and restarted plugin is subscribed to again.

The plugin's capacity stream has no timer (``kubeletplugin.capacity``): every change below reaches
the kubelet through a wake-up alone, the admin endpoint's for the failure switch and the plugin
host's for the Node's label, the two things the frobnicator's capacity depends on."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from draflow.events.api import numeric_v1alpha2 as nv
from draflow.infra.config import Settings
from draflow.infra.eventstore import EventStore
from draflow.services.drivers.kubeletplugin.admin import admin_path, admin_request
from draflow.services.runtime.kubeletapi import sockets
from draflow.services.runtime.protocol import StatusError
from tests.e2e.classic_cluster import ClassicCluster, eventually
from tests.processes import Proc

pytestmark = pytest.mark.kep4381

FROB = "frobnicator.example.com"
NODE = "node-a"
PLUGIN = f"{FROB}-plugin-{NODE}"  # its name in ClassicCluster.procs
OBJECT = f"{NODE}-{FROB}"


@pytest.fixture
async def cluster(settings: Settings, event_store: EventStore) -> AsyncIterator[ClassicCluster]:
    c = ClassicCluster(settings, event_store)
    try:
        await c.start({NODE: f"{FROB}/frobnicators=8"})
        yield c
    finally:
        codes = await c.stop()
        assert all(code == 0 for code in codes), {n: p.stderr[-20:] for n, p in c.procs.items()}


async def admin(settings: Settings, **switches: Any) -> None:
    path = admin_path(sockets.plugins_dir(settings.data_dir, NODE), FROB)
    answer = await admin_request(path, {"op": "set", "switches": switches})
    assert "error" not in answer, answer


async def count(cluster: ClassicCluster) -> int | None:
    try:
        obj = await cluster.client.get_object(nv.KIND, OBJECT)
    except StatusError as exc:
        if exc.status.code == 404:
            return None
        raise
    assert isinstance(obj, nv.NodeResourceCapacity)
    assert (obj.node_name, obj.driver_name) == (NODE, FROB)
    return int(obj.instances[0].data["count"])


async def test_capacity_follows_the_plugin_and_survives_its_restart(cluster: ClassicCluster) -> None:
    async def counted(n: int | None) -> bool:
        return await count(cluster) == n

    await eventually(lambda: counted(8), what="the Node label's 8 frobnicators published")
    await admin(cluster.settings, capacity_lost=5)
    await eventually(lambda: counted(3), what="3 left after 5 were lost")
    await admin(cluster.settings, capacity_lost=8)
    await eventually(lambda: counted(None), what="nothing left: the object deleted")
    await admin(cluster.settings, capacity_lost=1)
    await eventually(lambda: counted(7), what="7 are back")
    cluster.procs[PLUGIN].kill()
    kubelet = cluster.procs[f"kubelet-{NODE}"]

    async def stream_lost() -> bool:
        return any("capacity stream of frobnicator.example.com" in line for line in kubelet.stderr)

    await eventually(stream_lost, what="the kubelet noticing the stream is gone")
    assert await count(cluster) == 7  # kept while the plugin is away
    restarted = Proc(
        cluster.settings, "draflow.services.drivers.classic_plugin", ["--driver", FROB, "--node", NODE]
    )
    cluster.procs[PLUGIN] = restarted
    restarted.expect(f"{FROB} plugin on {NODE}: serving")
    # the restarted plugin's switches are fresh: all 8 again, through the new stream
    await eventually(lambda: counted(8), what="the restarted plugin's capacity published")
    await admin(cluster.settings, capacity_lost=6)
    await eventually(lambda: counted(2), what="a change after the restart")
    node = await cluster.client.get("Node", NODE)
    node["metadata"]["labels"][f"{FROB}/frobnicators"] = "10"  # more hardware on the node
    await cluster.apply(node)
    await eventually(lambda: counted(4), what="the Node's new label (10, 6 of them lost) published")
