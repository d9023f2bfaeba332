"""One DRA plugin's node service, as the kubelet calls it: batched, with a deadline.

Each call has a deadline (``timeout_s``, the kubelet's ``--plugin-call-timeout``). Whatever keeps
the call from producing an answer (the plugin is gone, hangs past the deadline, fails the whole
call) is a ``PluginError`` naming the driver and the gRPC status; the kubelet's prepare path
retries it (``draflow.services.kubelet.prepare``) and, past its attempts, the pod's preparation
(with the kubelet's backoff). Per-claim errors come back as answers, not exceptions.

A call in flight when the instance deregisters (the plugin restarted: its socket was re-created,
so the watcher closes this client's channel) is cancelled by grpc, which raises
``asyncio.CancelledError`` in the caller although nobody cancelled the caller's task. Left alone,
that cancellation would end whatever awaited the call (the kubelet's sync pass, and with it the
kubelet process); here it becomes a ``PluginError`` like any lost call, so the prepare path retries
it on the instance serving the driver now.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import grpc
from grpc import aio

from draflow.services.dra.kubeletplugin import PluginError, PrepareResult
from draflow.services.dra.resourceclaim import ClaimRef
from draflow.services.runtime.kubeletapi import wire

__all__ = ["DEFAULT_TIMEOUT_S", "PluginClient"]

DEFAULT_TIMEOUT_S = 10.0


class PluginClient:
    def __init__(
        self, driver: str, address: str, version: wire.Version, *, timeout_s: float = DEFAULT_TIMEOUT_S
    ) -> None:
        self.driver = driver
        self.address = address
        self.version = version
        self.timeout_s = timeout_s
        self._channel = aio.insecure_channel(address)
        self._stub = version.grpc.DRAPluginStub(self._channel)
        self._closed = False

    @property
    def driver_name(self) -> str:
        return self.driver

    async def close(self) -> None:
        self._closed = True  # before the channel cancels the calls in flight: they read it
        await self._channel.close()

    async def node_prepare_resources(self, claims: Sequence[ClaimRef]) -> dict[str, PrepareResult]:
        request = wire.prepare_request(self.version, claims)
        return wire.prepare_results(await self._call(self._stub.NodePrepareResources, request))

    async def node_unprepare_resources(self, claims: Sequence[ClaimRef]) -> dict[str, str | None]:
        request = wire.unprepare_request(self.version, claims)
        return wire.unprepare_results(await self._call(self._stub.NodeUnprepareResources, request))

    async def _call(self, method: Any, request: Any) -> Any:
        try:
            return await method(request, timeout=self.timeout_s)
        except aio.AioRpcError as exc:
            raise PluginError(self._describe(exc)) from None
        except aio.UsageError as exc:  # the channel was closed: the plugin deregistered meanwhile
            raise PluginError(f"DRA driver {self.driver}: {exc}") from None
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if self._closed and task is not None and not task.cancelling():
                # grpc cancelled the call because close() closed its channel; our caller's task
                # was not cancelled, so this is a lost call, not a request to stop
                raise PluginError(
                    f"DRA driver {self.driver}: the plugin deregistered during the call "
                    "(its connection was closed)"
                ) from None
            raise

    def _describe(self, exc: aio.AioRpcError) -> str:
        code = exc.code()
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return f"DRA driver {self.driver}: no answer within {self.timeout_s:g}s"
        name = code.name if code is not None else "UNKNOWN"
        return f"DRA driver {self.driver}: {name}: {exc.details()}"
