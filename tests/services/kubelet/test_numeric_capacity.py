"""The kubelet publishes its node's NodeResourceCapacity (KEP-4381) through its NodeRestriction
API: from what the node plugin reported (its capacity stream), rewritten only on change, deleted
when nothing is left; another node's object is refused."""

from __future__ import annotations

import pytest

from draflow.events.api import numeric_v1alpha2 as nv
from draflow.events.api.codec import encode_object
from draflow.events.api.meta import ObjectMeta
from draflow.infra.config import Settings
from draflow.infra.eventstore import EventStore
from draflow.services.apiserver.server import ApiServer
from draflow.services.drivers.frobnicator.node import FrobnicatorNodePlugin
from draflow.services.kubelet.numeric_capacity import object_name, publish
from draflow.services.runtime.controller import Runtime
from draflow.services.runtime.protocol import StatusError

pytestmark = pytest.mark.kep4381

NAME = object_name("node-1", "frobnicator.example.com")


async def test_publish_update_delete_and_restriction(apiserver: ApiServer, settings: Settings) -> None:
    events = await EventStore.open(settings, "kubelet-node-1")
    rt = Runtime(events, actor="kubelet-node-1", api_timeout_s=10.0, node="node-1")
    await rt.start()
    try:
        plugin = FrobnicatorNodePlugin(node_name="node-1", node_labels={}, frobnicators=8)
        assert await publish(rt, "node-1", plugin.driver_name, plugin.capacity())
        obj = rt.get(nv.KIND, "", NAME)
        assert isinstance(obj, nv.NodeResourceCapacity)
        assert (obj.node_name, obj.driver_name, obj.instances[0].data) == (
            "node-1",
            "frobnicator.example.com",
            {"count": 8},
        )
        # get --field-selector nodeName=...,driverName=... selects by node and driver
        items, _ = await rt.api.list(
            nv.KIND, field_selector="nodeName=node-1,driverName=frobnicator.example.com"
        )
        assert [i["metadata"]["name"] for i in items] == [NAME]
        items, _ = await rt.api.list(nv.KIND, field_selector="nodeName=node-2")
        assert items == []
        version = rt.cache.index.version(nv.KIND, "", NAME)
        assert await publish(rt, "node-1", plugin.driver_name, plugin.capacity())
        assert rt.cache.index.version(nv.KIND, "", NAME) == version  # unchanged: nothing written
        plugin.set_frobnicators(2)
        assert await publish(rt, "node-1", plugin.driver_name, plugin.capacity())
        obj = rt.get(nv.KIND, "", NAME)
        assert isinstance(obj, nv.NodeResourceCapacity) and obj.instances[0].data == {"count": 2}
        plugin.set_frobnicators(0)
        assert await publish(rt, "node-1", plugin.driver_name, plugin.capacity())
        assert rt.get(nv.KIND, "", NAME) is None
        # node-1 may not publish node-2's capacity
        other = nv.NodeResourceCapacity(
            metadata=ObjectMeta(name="node-2-frobnicator.example.com"),
            node_name="node-2",
            driver_name="frobnicator.example.com",
            instances=obj.instances,
        )
        with pytest.raises(StatusError) as exc:
            await rt.api.apply([encode_object(other)])
        assert "can only create NodeResourceCapacity with the same NodeName as the requesting node, " in str(
            exc.value
        )
    finally:
        await rt.stop()
        await events.close()
