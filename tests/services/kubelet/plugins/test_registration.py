"""The kubelet's plugin watcher and a plugin from the plugin library, over real unix sockets.

No bus: the kubelet side is its ``RegistrationWatcher`` + ``PluginRegistry`` + ``PluginClient``;
the plugin side is ``PluginServer`` around the gpu.example.com driver, reading claims from a dict.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from grpc import aio

from draflow.events.api.resource_v1 import ResourceClaim
from draflow.services.dra.kubeletplugin import PluginError
from draflow.services.dra.resourceclaim import ClaimRef
from draflow.services.drivers.gpu_example import GpuExamplePlugin
from draflow.services.drivers.kubeletplugin.faults import FailureSwitches, Faulty
from draflow.services.drivers.kubeletplugin.server import PluginServer
from draflow.services.kubelet.plugins.registry import PluginRegistry
from draflow.services.kubelet.plugins.watcher import RegistrationWatcher
from draflow.services.runtime.kubeletapi import sockets
from draflow.services.runtime.kubeletapi.pluginregistration.v1 import api_pb2 as reg_pb2
from draflow.services.runtime.kubeletapi.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from tests.builders import make_allocation, make_claim
from tests.helpers import assert_eventually

pytestmark = pytest.mark.kep4381

DRIVER = "gpu.example.com"


class Node:
    """One node's directories, its claims, and the kubelet's side of the boundary."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.registry_dir = sockets.registry_dir(root, "node-1")
        self.plugins_dir = sockets.plugins_dir(root, "node-1")
        self.claims: dict[str, ResourceClaim] = {}
        self.registry = PluginRegistry()
        self.changes = 0
        self.watcher = RegistrationWatcher(
            self.registry_dir, self.registry, call_timeout_s=2.0, retry_s=0.05, on_change=self._changed
        )

    def _changed(self) -> None:
        self.changes += 1

    def add_claim(self, name: str, device: str) -> ClaimRef:
        claim = make_claim(name, allocation=make_allocation(("gpu", device), pool="node-1"))
        self.claims[claim.metadata.uid] = claim
        return ClaimRef(namespace="default", uid=claim.metadata.uid, name=name)

    def plugin(
        self, *, versions: tuple[str, ...] = ("v1.DRAPlugin",), instance: str = "", state: str = "plugin"
    ) -> PluginServer:
        switches = FailureSwitches()
        driver = GpuExamplePlugin(
            "node-1",
            self.root / "cdi",
            lambda ref: self.claims.get(ref.uid),
            state_dir=self.root / state,
            failures=switches,
        )
        return PluginServer(
            Faulty(driver, switches),
            registry_dir=self.registry_dir,
            plugins_dir=self.plugins_dir,
            versions=versions,
            instance=instance,
            failures=switches,
        )


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    n = Node(tmp_path)
    yield n
    for instance in n.registry.instances():
        await instance.client.close()


@pytest.mark.upstream_e2e("registers plugin")
async def test_a_plugin_registers_serves_v1_and_deregisters(node: Node) -> None:
    """Upstream: ``It("registers plugin")`` — the kubelet finds the registration socket, accepts
    the plugin (NotifyRegistrationStatus reaches it), calls it, and lets it go with its socket."""
    plugin = node.plugin()
    await plugin.start()
    try:
        await node.watcher.scan()
        (instance,) = node.registry.instances()
        assert (instance.driver, instance.service) == (DRIVER, "v1.DRAPlugin")
        assert instance.socket == node.registry_dir / "gpu.example.com-reg.sock"
        assert instance.endpoint == str(node.plugins_dir / DRIVER / "dra.sock")
        await asyncio.wait_for(plugin.registered.wait(), 5)  # NotifyRegistrationStatus reached it
        assert list(node.registry) == [DRIVER] and node.changes == 1

        ref = node.add_claim("a", "gpu-2")
        missing = ClaimRef(namespace="default", uid="uid-zz", name="zz")
        results = await node.registry[DRIVER].node_prepare_resources([ref, missing])
        (device,) = results[ref.uid].devices
        assert (device.pool_name, device.device_name, device.request_names) == ("node-1", "gpu-2", ("gpu",))
        assert device.cdi_device_ids == (
            "k8s.gpu.example.com/gpu=common",
            f"k8s.gpu.example.com/gpu={ref.uid}-gpu-2",
        )
        assert results[missing.uid].error.endswith("ResourceClaim default/zz not found")
        assert (node.root / "cdi" / f"k8s.gpu.example.com-gpu_{ref.uid}.json").exists()
        assert await node.registry[DRIVER].node_unprepare_resources([ref]) == {ref.uid: None}
        assert not (node.root / "cdi" / f"k8s.gpu.example.com-gpu_{ref.uid}.json").exists()
    finally:
        await plugin.stop()
    assert not (node.registry_dir / "gpu.example.com-reg.sock").exists()
    await node.watcher.scan()
    assert node.registry.instances() == [] and DRIVER not in node.registry and node.changes == 2


async def test_whole_call_failures_and_deadlines_are_plugin_errors(node: Node) -> None:
    plugin = node.plugin()
    await plugin.start()
    try:
        await node.watcher.scan()
        client = node.registry[DRIVER]
        ref = node.add_claim("a", "gpu-0")
        plugin.failures.fail_prepare_calls = 1
        with pytest.raises(PluginError, match="INTERNAL: injected failure: NodePrepareResources unavailable"):
            await client.node_prepare_resources([ref])
        plugin.failures.prepare_claims = {"a"}
        (result,) = (await client.node_prepare_resources([ref])).values()
        assert result.error.endswith("injected failure for claim a") and result.devices == ()
        plugin.failures.prepare_claims = set()
        plugin.failures.prepare_delay_s = 5.0
        client.timeout_s = 0.3
        with pytest.raises(PluginError, match=r"DRA driver gpu.example.com: no answer within 0.3s"):
            await client.node_prepare_resources([ref])
    finally:
        await plugin.stop(grace_s=0)


async def test_v1beta1_plugin_is_served_in_its_version_and_v1_is_preferred(node: Node) -> None:
    old = node.plugin(versions=("v1beta1.DRAPlugin",))
    await old.start()
    try:
        await node.watcher.scan()
        (instance,) = node.registry.instances()
        assert instance.service == "v1beta1.DRAPlugin"
        ref = node.add_claim("a", "gpu-1")
        (result,) = (await node.registry[DRIVER].node_prepare_resources([ref])).values()
        assert [d.device_name for d in result.devices] == ["gpu-1"]
    finally:
        await old.stop()
    both = node.plugin(versions=("v1beta1.DRAPlugin", "v1.DRAPlugin"))
    await both.start()
    try:
        await node.watcher.scan()
        (instance,) = node.registry.instances()
        assert instance.service == "v1.DRAPlugin"
    finally:
        await both.stop()


async def test_rolling_update_hands_over_without_a_gap(node: Node) -> None:
    """Upstream's rolling update of a kubelet plugin: the new instance registers beside the old
    one and takes the new calls; the old one leaving changes nothing for the driver's pods."""
    first = node.plugin(instance="a")
    await first.start()
    await node.watcher.scan()
    a = node.add_claim("a", "gpu-0")
    assert not (await node.registry[DRIVER].node_prepare_resources([a]))[a.uid].error
    second = node.plugin(instance="b")
    await second.start()
    try:
        await node.watcher.scan()
        assert [i.socket.name for i in node.registry.instances(DRIVER)] == [
            "gpu.example.com-a-reg.sock",
            "gpu.example.com-b-reg.sock",
        ]
        b = node.add_claim("b", "gpu-1")
        assert not (await node.registry[DRIVER].node_prepare_resources([b]))[b.uid].error
        assert (first.calls["prepare"], second.calls["prepare"]) == (1, 1)
        await first.stop()
        await node.watcher.scan()
        # the driver stays registered all along; the claim the old one prepared is released by the new
        assert list(node.registry) == [DRIVER]
        assert await node.registry[DRIVER].node_unprepare_resources([a]) == {a.uid: None}
        assert second.calls["unprepare"] == 1
    finally:
        await second.stop()
    await node.watcher.scan()
    assert DRIVER not in node.registry


async def test_the_old_instance_serves_again_when_the_new_one_goes(node: Node) -> None:
    first, second = node.plugin(instance="a"), node.plugin(instance="b")
    await first.start()
    await node.watcher.scan()
    await second.start()
    await node.watcher.scan()
    await second.stop()
    await node.watcher.scan()
    try:
        ref = node.add_claim("a", "gpu-0")
        assert not (await node.registry[DRIVER].node_prepare_resources([ref]))[ref.uid].error
        assert first.calls["prepare"] == 1
    finally:
        await first.stop()


async def test_a_restarted_plugin_is_registered_again(node: Node) -> None:
    """Between a plugin's death and the watcher's next look, calls fail (UNAVAILABLE: a
    ``PluginError`` the kubelet retries); the restarted plugin's socket is another inode, a new
    registration that replaces the old one."""
    plugin = node.plugin()
    await plugin.start()
    await node.watcher.scan()
    assert plugin._registration is not None and plugin._dra is not None
    await plugin._registration.stop(0)  # dies: nothing serves any more
    await plugin._dra.stop(0)
    ref = node.add_claim("a", "gpu-3")
    with pytest.raises(PluginError, match="UNAVAILABLE"):
        await node.registry[DRIVER].node_prepare_resources([ref])
    restarted = node.plugin()
    await restarted.start()
    try:
        await node.watcher.scan()
        assert len(node.registry.instances()) == 1
        assert not (await node.registry[DRIVER].node_prepare_resources([ref]))[ref.uid].error
        assert restarted.calls["prepare"] == 1 and node.changes == 3  # registered, gone, registered
    finally:
        await restarted.stop()


async def _serve_registration(path: Path, info: reg_pb2.PluginInfo) -> tuple[aio.Server, list]:
    """A registration server from the generated code alone (any plugin, any language)."""
    heard: list = []

    class Registration(reg_grpc.RegistrationServicer):
        async def GetInfo(self, request, context):
            return info

        async def NotifyRegistrationStatus(self, request, context):
            heard.append((request.plugin_registered, request.error))
            return reg_pb2.RegistrationStatusResponse()

    server = aio.server()
    reg_grpc.add_RegistrationServicer_to_server(Registration(), server)
    address = sockets.bind(path)
    server.add_insecure_port(address)
    await server.start()
    sockets.link(path, address)
    return server, heard


@pytest.mark.parametrize(
    ("info", "error"),
    [
        (
            reg_pb2.PluginInfo(type="CSIPlugin", name="csi.example.com", supported_versions=["1.0.0"]),
            "plugin type 'CSIPlugin' is not supported by this kubelet (only DRAPlugin)",
        ),
        (
            reg_pb2.PluginInfo(type="DRAPlugin", name="x.example.com", supported_versions=["v1alpha4.Node"]),
            "none of the services supported by the plugin (v1alpha4.Node) is supported by the kubelet "
            "(v1.DRAPlugin, v1beta1.DRAPlugin)",
        ),
        (
            reg_pb2.PluginInfo(type="DRAPlugin", name="", supported_versions=["v1.DRAPlugin"]),
            "plugin name is empty: a DRA plugin must name its driver",
        ),
    ],
)
async def test_a_refused_plugin_is_told_why_and_not_asked_again(
    node: Node, info: reg_pb2.PluginInfo, error: str
) -> None:
    path = node.registry_dir / "bad-reg.sock"
    server, heard = await _serve_registration(path, info)
    try:
        await node.watcher.scan()
        await node.watcher.scan()
        assert heard == [(False, error)]
        assert node.registry.instances() == []
    finally:
        await server.stop(0)


async def test_a_socket_that_does_not_answer_is_retried_with_backoff(node: Node) -> None:
    """A plugin that put its socket in place before serving (or a dead one's leftover)."""
    path = node.registry_dir / "gpu.example.com-reg.sock"
    address = sockets.bind(path)
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(address.removeprefix("unix:"))  # a socket file nobody accepts on
    sock.close()
    sockets.link(path, address)
    node.watcher.retry_s = 0.5
    await node.watcher.scan()
    assert node.registry.instances() == []
    await node.watcher.scan()  # within the backoff: not dialled again
    assert node.watcher._seen[path].failures == 1
    sockets.release(path)
    plugin = node.plugin()
    await plugin.start()  # the plugin's own socket at the same path (after the backoff at the latest)

    async def registered() -> bool:
        await node.watcher.scan()
        return DRIVER in node.registry

    try:
        await assert_eventually(registered, timeout_s=5)
    finally:
        await plugin.stop()


async def test_a_deep_data_dir_gets_linked_short_sockets(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 40)
    n = Node(deep)
    plugin = n.plugin()
    await plugin.start()
    try:
        assert plugin.endpoint.is_symlink() and len(str(plugin.endpoint)) > sockets.MAX_SOCKET_PATH
        await n.watcher.scan()
        ref = n.add_claim("a", "gpu-0")
        assert not (await n.registry[DRIVER].node_prepare_resources([ref]))[ref.uid].error
    finally:
        await plugin.stop()
        for instance in n.registry.instances():
            await instance.client.close()
    assert not plugin.endpoint.is_symlink() and not plugin.registration_path.is_symlink()


async def test_a_call_on_a_deregistered_instance_is_a_plugin_error(node: Node) -> None:
    """A call that races a deregistration (its channel closed under it) fails like any lost call."""
    plugin = node.plugin()
    await plugin.start()
    try:
        await node.watcher.scan()
        client = node.registry[DRIVER]
        await client.close()
        with pytest.raises(PluginError, match=r"DRA driver gpu\.example\.com: .*[Cc]hannel"):
            await client.node_unprepare_resources([node.add_claim("a", "gpu-0")])
    finally:
        await plugin.stop()


async def test_a_call_in_flight_when_its_instance_deregisters_is_a_plugin_error(node: Node) -> None:
    """The plugin restarts while a prepare waits for it: the watcher sees the re-created socket and
    closes the old instance's channel, and grpc cancels the call. The caller gets a ``PluginError``
    (retried like any lost call), not a ``CancelledError`` that would end the caller's task — the
    kubelet's sync pass, and with it the kubelet process, as happened under chaos."""
    plugin = node.plugin()
    await plugin.start()
    try:
        await node.watcher.scan()
        client = node.registry[DRIVER]
        plugin.failures.prepare_delay_s = 5.0
        call = asyncio.create_task(client.node_prepare_resources([node.add_claim("a", "gpu-0")]))
        await assert_eventually(lambda: plugin.calls["prepare"] == 1, timeout_s=5)  # in flight
        (instance,) = node.registry.instances()
        await node.watcher._deregister(instance.socket)  # what a re-created socket leads to
        with pytest.raises(PluginError, match=r"gpu\.example\.com: the plugin deregistered during the call"):
            await call
        assert not call.cancelled()
    finally:
        await plugin.stop(grace_s=0)


async def test_cancelling_the_caller_still_cancels_a_call(node: Node) -> None:
    """The conversion above is only for grpc's own cancellation: a task cancelled by its owner (the
    kubelet stopping) is cancelled, whether or not the client was closed meanwhile."""
    plugin = node.plugin()
    await plugin.start()
    try:
        await node.watcher.scan()
        client = node.registry[DRIVER]
        plugin.failures.prepare_delay_s = 5.0
        call = asyncio.create_task(client.node_prepare_resources([node.add_claim("a", "gpu-0")]))
        await assert_eventually(lambda: plugin.calls["prepare"] == 1, timeout_s=5)
        call.cancel()
        await client.close()
        with pytest.raises(asyncio.CancelledError):
            await call
        assert call.cancelled()
    finally:
        await plugin.stop(grace_s=0)
