"""Device health over real unix sockets: the plugin library's ``DRAResourceHealth`` service and the
kubelet's ``HealthWatcher`` feeding its ``HealthCache``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest
from grpc import aio

from draflow.services.dra.kubeletplugin import PrepareResult
from draflow.services.dra.resourceclaim import ClaimRef
from draflow.services.drivers.kubeletplugin.server import PluginServer
from draflow.services.kubelet.devicehealth import HEALTHY, UNHEALTHY, UNKNOWN, HealthCache
from draflow.services.kubelet.plugins.health import HealthWatcher
from draflow.services.runtime.kubeletapi import sockets
from draflow.services.runtime.kubeletapi.drahealth.v1alpha1 import api_pb2 as health_pb2
from draflow.services.runtime.kubeletapi.drahealth.v1alpha1 import api_pb2_grpc as health_grpc
from tests.helpers import assert_eventually
from tests.services.kubelet.plugins.test_registration import DRIVER, Node

pytestmark = pytest.mark.kep4381


class Watched:
    def __init__(self, node: Node) -> None:
        self.node = node
        self.cache = HealthCache()
        self.changes = 0
        self.streams = HealthWatcher(node.registry, self.cache, self._changed, retry_s=0.05, max_retry_s=0.2)

    def _changed(self) -> None:
        self.changes += 1

    async def scan(self) -> None:
        await self.node.watcher.scan()
        self.streams.reconcile()

    def health(self, device: str) -> str:
        return self.cache.get(DRIVER, "node-1", device)


@pytest.fixture
async def watched(node: Node) -> AsyncIterator[Watched]:
    w = Watched(node)
    yield w
    await w.streams.close()


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    n = Node(tmp_path)
    yield n
    for instance in n.registry.instances():
        await instance.client.close()


async def test_a_client_from_the_generated_stubs_gets_every_device_and_each_change(node: Node) -> None:
    plugin = node.plugin()
    await plugin.start()
    try:
        async with aio.insecure_channel(sockets.dial_address(plugin.endpoint)) as channel:
            stream = health_grpc.DRAResourceHealthStub(channel).NodeWatchResources(
                health_pb2.NodeWatchResourcesRequest()
            )
            first = await stream.read()
            assert [(d.device.pool_name, d.device.device_name) for d in first.devices] == [
                ("node-1", f"gpu-{i}") for i in range(8)
            ]
            assert {d.health for d in first.devices} == {health_pb2.HEALTHY}
            assert all(d.last_updated_time > 0 for d in first.devices)
            plugin.failures.unhealthy_devices = {"gpu-3"}
            plugin.health_changed()
            second = await asyncio.wait_for(stream.read(), 2)
            assert [d.device.device_name for d in second.devices if d.health == health_pb2.UNHEALTHY] == [
                "gpu-3"
            ]
            stream.cancel()
    finally:
        await plugin.stop(0.1)


async def test_the_kubelet_follows_health_and_forgets_it_when_the_plugin_goes(watched: Watched) -> None:
    plugin = watched.node.plugin()
    await plugin.start()
    try:
        await watched.scan()
        await assert_eventually(lambda: watched.health("gpu-7") == HEALTHY, timeout_s=5)
        changes = watched.changes
        plugin.failures.unhealthy_devices = {"gpu-2"}
        plugin.health_changed()
        await assert_eventually(lambda: watched.health("gpu-2") == UNHEALTHY, timeout_s=5)
        assert watched.changes > changes and watched.health("gpu-1") == HEALTHY
    finally:
        await plugin.stop(0.1)
    # the stream broke: every device Unknown at once (the instance is still registered: retried)
    await assert_eventually(lambda: watched.health("gpu-2") == UNKNOWN, timeout_s=5)
    await watched.scan()  # deregistered: no stream any more
    assert watched.streams._streams == {}
    restarted = watched.node.plugin()  # and a restarted plugin streams again
    await restarted.start()
    try:
        await watched.scan()
        await assert_eventually(lambda: watched.health("gpu-2") == HEALTHY, timeout_s=5)
    finally:
        await restarted.stop(0.1)


class NoHealth:
    """A driver that cannot list its devices: its plugin serves no health service."""

    @property
    def driver_name(self) -> str:
        return "plain.example.com"

    def node_prepare_resources(self, claims: Sequence[ClaimRef]) -> dict[str, PrepareResult]:
        return {c.uid: PrepareResult() for c in claims}

    def node_unprepare_resources(self, claims: Sequence[ClaimRef]) -> dict[str, str | None]:
        return {c.uid: None for c in claims}


async def test_a_plugin_without_the_health_service_is_not_asked_again(watched: Watched) -> None:
    node = watched.node
    plugin = PluginServer(NoHealth(), registry_dir=node.registry_dir, plugins_dir=node.plugins_dir)
    assert plugin.health is None
    await plugin.start()
    try:
        await watched.scan()
        (instance,) = node.registry.instances()
        await assert_eventually(lambda: instance.socket in watched.streams.unimplemented, timeout_s=5)
        watched.streams.reconcile()
        assert watched.streams._streams == {} and "plain.example.com" not in watched.cache.reporting
    finally:
        await plugin.stop(0.1)
