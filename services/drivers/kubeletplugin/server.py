"""A DRA driver's kubelet plugin: the DRA node service and plugin registration on unix sockets.

In the spirit of ``k8s.io/dynamic-resource-allocation/kubeletplugin``: hand ``PluginServer`` a
driver object (``draflow.services.dra.kubeletplugin.DRAPlugin``: ``driver_name``,
``node_prepare_resources``, ``node_unprepare_resources``) and it

1. serves ``DRAPlugin`` (``NodePrepareResources`` / ``NodeUnprepareResources``) in every version
   asked for (``v1.DRAPlugin``, ``v1beta1.DRAPlugin``) on ``plugins/<driver>/dra.sock``;
2. then serves ``pluginregistration.Registration`` on ``plugins_registry/<driver>-reg.sock``:
   the kubelet finds that socket, calls ``GetInfo`` (type ``DRAPlugin``, the driver name, the
   endpoint, the versions) and reports its verdict through ``NotifyRegistrationStatus``
   (``registered`` is set when it accepted, ``registration_error`` says why it refused).

3. with a driver that lists its devices (``health_devices()``), also serves the device health
   service ``DRAResourceHealth`` on the DRA endpoint (``health``); ``health_changed()`` makes
   every open stream send again.
4. with a driver that reports numeric capacity (``capacity()``, KEP-4381), also serves draflow's
   ``NodeResourceCapacity/NodeListAndWatchResources`` stream on the DRA endpoint (``capacity``).

``instance`` names one of several plugins of the same driver (a rolling update: upstream's
``RollingUpdate(uid)``): its sockets become ``<driver>-<instance>-reg.sock`` and
``dra-<instance>.sock``, so an old and a new instance run side by side; the kubelet sends new
calls to the newest and falls back to the other when one goes. ``stop`` removes the registration
socket first (the kubelet deregisters the instance), then lets calls in flight finish.

The driver's methods are plain functions (no event loop needed to write one); they run in a
worker thread, one call at a time per plugin, so a slow prepare never stalls registration. A
``PluginError`` from the driver is the whole call's gRPC error (``INTERNAL``); per-claim errors
travel in the answer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import grpc
from grpc import aio

from draflow.services.dra.kubeletplugin import DRAPlugin, PluginError
from draflow.services.dra.resourceclaim import ClaimRef
from draflow.services.drivers.kubeletplugin.capacity import CapacityReporter, add_capacity_service
from draflow.services.drivers.kubeletplugin.faults import FailureSwitches
from draflow.services.drivers.kubeletplugin.health import HealthReporter, add_health_service
from draflow.services.runtime.kubeletapi import sockets, wire
from draflow.services.runtime.kubeletapi.pluginregistration.v1 import api_pb2 as reg_pb2
from draflow.services.runtime.kubeletapi.pluginregistration.v1 import api_pb2_grpc as reg_grpc

__all__ = ["PluginServer"]

log = logging.getLogger(__name__)

BeforeCall = Callable[[Sequence[ClaimRef]], Awaitable[None]]


class PluginServer:
    def __init__(
        self,
        driver: DRAPlugin,
        *,
        registry_dir: Path,
        plugins_dir: Path,
        versions: Sequence[str] = ("v1.DRAPlugin",),
        instance: str = "",
        failures: FailureSwitches | None = None,
        before_prepare: BeforeCall | None = None,
    ) -> None:
        unknown = [v for v in versions if v not in wire.BY_SERVICE]
        if unknown or not versions:
            raise ValueError(
                f"unsupported DRA service versions {unknown or list(versions)}: "
                f"choose from {', '.join(wire.BY_SERVICE)}"
            )
        self.driver = driver
        self.versions = tuple(versions)
        self.registration_path = sockets.registration_socket(registry_dir, driver.driver_name, instance)
        self.endpoint = sockets.dra_socket(plugins_dir, driver.driver_name, instance)
        self.failures = failures or FailureSwitches()
        self.before_prepare = before_prepare
        devices = getattr(driver, "health_devices", None)
        self.health = HealthReporter(devices, self.failures) if callable(devices) else None
        capacity = getattr(driver, "capacity", None)
        self.capacity = CapacityReporter(capacity) if callable(capacity) else None
        self.registered = asyncio.Event()
        self.registration_error = ""
        self.calls: dict[str, int] = {"prepare": 0, "unprepare": 0}
        self._lock = asyncio.Lock()  # one driver call at a time, as the driver's checkpoint expects
        self._dra: aio.Server | None = None
        self._registration: aio.Server | None = None

    @property
    def driver_name(self) -> str:
        return self.driver.driver_name

    async def start(self) -> None:
        """Serve the node service, then register (the kubelet may call as soon as it sees us)."""
        self._dra = await self._serve(self.endpoint, self._add_dra_services)
        self._registration = await self._serve(self.registration_path, self._add_registration)
        log.info(
            "%s plugin: %s on %s, registration on %s",
            self.driver_name,
            "/".join(self.versions),
            self.endpoint,
            self.registration_path,
        )

    async def stop(self, grace_s: float = 5.0) -> None:
        """Deregister (remove the registration socket), then stop serving after calls in flight
        (health streams, which never finish by themselves, are cut at the grace period)."""
        if self._registration is not None:
            sockets.release(self.registration_path)
            await self._registration.stop(0)
            self._registration = None
        if self._dra is not None:
            await self._dra.stop(grace_s)
            sockets.release(self.endpoint)
            self._dra = None

    async def _serve(self, path: Path, add: Callable[[aio.Server], None]) -> aio.Server:
        address = sockets.bind(path)
        server = aio.server()
        add(server)
        try:
            server.add_insecure_port(address)
        except RuntimeError as exc:
            raise sockets.SocketPathError(f"cannot listen on {address}: {exc}") from None
        await server.start()
        sockets.link(path, address)
        return server

    def health_changed(self) -> None:
        """The failure switches changed: health and capacity streams look again."""
        if self.health is not None:
            self.health.changed()
        if self.capacity is not None:
            self.capacity.changed()

    def capacity_changed(self) -> None:
        """What the driver's capacity depends on changed: capacity streams ask it again."""
        if self.capacity is not None:
            self.capacity.changed()

    def _add_dra_services(self, server: aio.Server) -> None:
        for name in self.versions:
            version = wire.BY_SERVICE[name]
            version.grpc.add_DRAPluginServicer_to_server(_DRAService(self, version), server)
        if self.health is not None:
            add_health_service(server, self.health)
        if self.capacity is not None:
            add_capacity_service(server, self.capacity)

    def _add_registration(self, server: aio.Server) -> None:
        reg_grpc.add_RegistrationServicer_to_server(_RegistrationService(self), server)

    # -- the calls -----------------------------------------------------------------------------

    async def prepare(self, claims: list[ClaimRef]) -> Any:
        self.calls["prepare"] += 1
        if self.failures.prepare_delay_s > 0:
            await asyncio.sleep(self.failures.prepare_delay_s)
        if self.before_prepare is not None:
            await self.before_prepare(claims)
        async with self._lock:
            return await asyncio.to_thread(self.driver.node_prepare_resources, claims)

    async def unprepare(self, claims: list[ClaimRef]) -> Any:
        self.calls["unprepare"] += 1
        async with self._lock:
            return await asyncio.to_thread(self.driver.node_unprepare_resources, claims)


class _DRAService:
    """One version's ``DRAPlugin`` servicer (the generated servicer's method names)."""

    def __init__(self, server: PluginServer, version: wire.Version) -> None:
        self.server = server
        self.version = version

    async def NodePrepareResources(self, request: Any, context: aio.ServicerContext[Any, Any]) -> Any:
        try:
            results = await self.server.prepare(wire.claims_from_request(request))
        except PluginError as exc:
            await context.abort(grpc.StatusCode.INTERNAL, str(exc))
        return wire.prepare_response(self.version, results)

    async def NodeUnprepareResources(self, request: Any, context: aio.ServicerContext[Any, Any]) -> Any:
        try:
            results = await self.server.unprepare(wire.claims_from_request(request))
        except PluginError as exc:
            await context.abort(grpc.StatusCode.INTERNAL, str(exc))
        return wire.unprepare_response(self.version, results)


class _RegistrationService:
    def __init__(self, server: PluginServer) -> None:
        self.server = server

    async def GetInfo(self, request: Any, context: aio.ServicerContext[Any, Any]) -> Any:
        return reg_pb2.PluginInfo(
            type=wire.DRA_PLUGIN_TYPE,
            name=self.server.driver_name,
            endpoint=str(self.server.endpoint),
            supported_versions=list(self.server.versions),
        )

    async def NotifyRegistrationStatus(self, request: Any, context: aio.ServicerContext[Any, Any]) -> Any:
        s = self.server
        if request.plugin_registered:
            s.registration_error = ""
            s.registered.set()
            log.info("%s plugin: registered with the kubelet", s.driver_name)
        else:
            s.registration_error = request.error
            s.registered.clear()
            log.error("%s plugin: the kubelet refused the registration: %s", s.driver_name, request.error)
        return reg_pb2.RegistrationStatusResponse()
