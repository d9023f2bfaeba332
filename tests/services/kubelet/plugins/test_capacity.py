"""KEP-4381's capacity stream over real unix sockets (draflow's ``dranumeric`` rendering): the
plugin library's ``NodeResourceCapacity`` service and the kubelet's ``CapacityWatcher``."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from grpc import aio

from draflow.services.drivers.frobnicator.node import FrobnicatorNodePlugin
from draflow.services.drivers.kubeletplugin.capacity import CapacityReporter
from draflow.services.drivers.kubeletplugin.server import PluginServer
from draflow.services.kubelet.plugins.capacity import CapacityWatcher
from draflow.services.runtime.kubeletapi import sockets
from draflow.services.runtime.kubeletapi.dranumeric.v1alpha1 import api_pb2 as num_pb2
from draflow.services.runtime.kubeletapi.dranumeric.v1alpha1 import api_pb2_grpc as num_grpc
from tests.helpers import assert_eventually
from tests.services.kubelet.plugins.test_health import NoHealth
from tests.services.kubelet.plugins.test_registration import Node

pytestmark = pytest.mark.kep4381

FROB = "frobnicator.example.com"


class Watched:
    def __init__(self, node: Node) -> None:
        self.node = node
        self.changes = 0
        self.streams = CapacityWatcher(node.registry, self._changed, retry_s=0.05, max_retry_s=0.2)

    def _changed(self) -> None:
        self.changes += 1

    async def scan(self) -> None:
        await self.node.watcher.scan()
        self.streams.reconcile()

    def count(self) -> int | None:
        report = self.streams.reports.get(FROB)
        if report is None:
            return None
        return report[0].data["count"] if report else 0

    def plugin(self, frobnicators: int, instance: str = "") -> tuple[FrobnicatorNodePlugin, PluginServer]:
        driver = FrobnicatorNodePlugin(
            node_name="node-1", node_labels={}, frobnicators=frobnicators, state_dir=self.node.root / "frob"
        )
        server = PluginServer(
            driver, registry_dir=self.node.registry_dir, plugins_dir=self.node.plugins_dir, instance=instance
        )
        return driver, server


@pytest.fixture
async def watched(tmp_path: Path) -> AsyncIterator[Watched]:
    w = Watched(Node(tmp_path))
    yield w
    await w.streams.close()
    for instance in w.node.registry.instances():
        await instance.client.close()


async def test_a_client_from_the_generated_stubs_gets_the_capacity_and_each_change(watched: Watched) -> None:
    driver, plugin = watched.plugin(8)
    assert plugin.capacity is not None
    await plugin.start()
    try:
        async with aio.insecure_channel(sockets.dial_address(plugin.endpoint)) as channel:
            stream = num_grpc.NodeResourceCapacityStub(channel).NodeListAndWatchResources(
                num_pb2.NodeListAndWatchResourcesRequest()
            )
            first = await stream.read()
            ((instance),) = first.instances
            assert (instance.id, instance.api_version, instance.kind, instance.data) == (
                "frobnicators",
                "counter.dra.config.k8s.io/v1alpha1",
                "Capacity",
                b'{"count":8}',
            )
            plugin.capacity_changed()  # nothing moved: nothing is sent
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(asyncio.shield(read := asyncio.ensure_future(stream.read())), 0.3)
            driver.set_frobnicators(3)
            plugin.capacity_changed()
            second = await asyncio.wait_for(read, 2)
            assert [i.data for i in second.instances] == [b'{"count":3}']
            driver.set_frobnicators(0)
            plugin.health_changed()  # a failure switch set through the admin endpoint wakes it too
            third = await asyncio.wait_for(stream.read(), 2)
            assert list(third.instances) == []
            stream.cancel()
    finally:
        await plugin.stop(0.1)


async def test_the_kubelet_follows_the_stream_and_a_restarted_plugin(watched: Watched) -> None:
    driver, plugin = watched.plugin(8)
    await plugin.start()
    try:
        await watched.scan()
        await assert_eventually(lambda: watched.count() == 8, timeout_s=5)
        assert watched.streams.pending == {FROB}
        watched.streams.published(FROB, watched.streams.reports[FROB])
        assert watched.streams.pending == set()
        changes = watched.changes
        driver.set_frobnicators(2)
        plugin.capacity_changed()
        await assert_eventually(lambda: watched.count() == 2, timeout_s=5)
        assert watched.changes == changes + 1 and watched.streams.pending == {FROB}
        # publishing an older report does not clear a newer one
        watched.streams.published(FROB, ())
        assert watched.streams.pending == {FROB}
    finally:
        await plugin.stop(0.1)
    # the stream broke: the last report is kept (the object stays published) and retried
    messages = watched.streams.messages
    await asyncio.sleep(0.3)
    assert watched.count() == 2 and watched.streams.streaming() == {FROB}
    _, restarted = watched.plugin(6)  # the plugin comes back (it re-creates its sockets)
    await restarted.start()
    try:
        await watched.scan()
        await assert_eventually(lambda: watched.count() == 6, timeout_s=5)
        assert watched.streams.messages > messages
    finally:
        await restarted.stop(0.1)
    await watched.scan()  # deregistered: no stream any more, the report kept
    assert watched.streams.streaming() == frozenset() and watched.count() == 6


async def test_a_plugin_that_was_down_when_the_stream_opened_is_reached_with_backoff(
    watched: Watched,
) -> None:
    """The instance is registered but its DRA endpoint is not serving yet (a plugin restarting
    under the kubelet's feet): the stream is opened again until it answers."""
    _, plugin = watched.plugin(4)
    await plugin.start()
    await watched.scan()
    await assert_eventually(lambda: watched.count() == 4, timeout_s=5)
    await plugin.stop(0.1)
    _, again = watched.plugin(5)
    await asyncio.sleep(0.5)  # several failed attempts (retry 0.05 s doubling, at most 0.2 s)
    await again.start()  # without a scan: the running stream's retries find it
    try:
        await assert_eventually(lambda: watched.count() == 5, timeout_s=5)
    finally:
        await again.stop(0.1)


async def test_a_rolling_update_moves_the_stream_to_the_new_instance(watched: Watched) -> None:
    _, old = watched.plugin(4, instance="a")
    await old.start()
    try:
        await watched.scan()
        await assert_eventually(lambda: watched.count() == 4, timeout_s=5)
        _, new = watched.plugin(5, instance="b")
        await new.start()
        try:
            await watched.scan()
            await assert_eventually(lambda: watched.count() == 5, timeout_s=5)
            await old.stop(0.1)  # the old one goes: the new one still serves, no change
            await watched.scan()
            await asyncio.sleep(0.2)
            assert watched.count() == 5 and watched.streams.streaming() == {FROB}
        finally:
            await new.stop(0.1)
    finally:
        await old.stop(0.1)


async def test_a_plugin_without_the_capacity_service_is_not_asked_again(watched: Watched) -> None:
    node = watched.node
    plugin = PluginServer(NoHealth(), registry_dir=node.registry_dir, plugins_dir=node.plugins_dir)
    assert plugin.capacity is None
    await plugin.start()
    try:
        await watched.scan()
        (instance,) = node.registry.instances()
        await assert_eventually(lambda: instance.socket in watched.streams.unimplemented, timeout_s=5)
        watched.streams.reconcile()
        assert watched.streams.streaming() == frozenset() and watched.streams.reports == {}
    finally:
        await plugin.stop(0.1)


class GarbledFirst(CapacityReporter):
    """A plugin whose first capacity stream sends an instance whose data is not JSON (a broken
    build), and whose later streams are right."""

    garbled = 1

    async def stream(self) -> AsyncGenerator[Any, None]:
        if self.garbled:
            self.garbled -= 1
            yield num_pb2.NodeListAndWatchResourcesResponse(
                instances=[num_pb2.NodeResourceInstance(id="frobnicators", data=b"{not json")]
            )
            await asyncio.Event().wait()  # the stream stays open: the kubelet is the one to break it
        async for message in super().stream():
            yield message


async def test_a_message_the_kubelet_cannot_decode_breaks_the_stream_and_it_is_opened_again(
    watched: Watched, caplog: pytest.LogCaptureFixture
) -> None:
    driver, plugin = watched.plugin(8)
    plugin.capacity = reporter = GarbledFirst(driver.capacity)
    caplog.set_level(logging.WARNING, logger="draflow.services.kubelet.plugins.streams")
    await plugin.start()
    try:
        await watched.scan()
        await assert_eventually(lambda: watched.count() == 8, timeout_s=5)
        assert reporter.garbled == 0 and watched.streams.messages == 1  # the garbled one never counted
        assert "capacity stream of frobnicator.example.com: instance 'frobnicators': data is not JSON" in (
            caplog.text
        )
    finally:
        await plugin.stop(0.1)
