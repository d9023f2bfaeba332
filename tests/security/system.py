"""An authenticated nats-server exactly as ``python -m draflow.infra.natsd`` configures it, for tests.

``SecuredServer`` writes the data dir's authority (a credential per role) and the server's
configuration, starts the real server and lets the admin create the streams. ``Caller`` is one
role's connection with its own credential that also collects the server's refusals (nats-server
answers a forbidden publish or subscription with ``-ERR 'permissions violation ...'``), so a test
waits for the refusal itself instead of for a reply that never comes.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import msgspec
from nats.aio.client import Client

from draflow.infra.auth.authority import ensure_authority
from draflow.infra.auth.client import auth_options
from draflow.infra.auth.roles import kubelet_role
from draflow.infra.config import Settings
from draflow.infra.natsd import LocalNatsServer, bootstrap_streams, free_port, write_server_config


class SecuredServer:
    def __init__(self, data_dir: Path, nodes: tuple[str, ...] = ("node-1", "node-2")) -> None:
        self.settings = Settings(nats_url=f"nats://127.0.0.1:{free_port()}", data_dir=data_dir)
        # the kubelets' credentials made before the server starts (a running system makes them
        # as kubelets come, then reloads the server: tested in test_kubelet_credential)
        ensure_authority(self.settings, tuple(kubelet_role(n) for n in nodes))
        self.server: LocalNatsServer = write_server_config(self.settings)

    def start(self) -> None:
        self.server.start()
        ok = asyncio.run(bootstrap_streams(self.settings, self.server.url, timeout_s=30))
        assert ok, "the admin could not create the streams"

    def stop(self) -> None:
        self.server.stop()

    def as_role(self, role: str) -> Settings:
        return msgspec.structs.replace(self.settings, role=role)


class Caller:
    """A connection as ``role`` whose refusals by the server are collected."""

    def __init__(self, nc: Client, role: str) -> None:
        self.nc = nc
        self.role = role
        self.refusals: asyncio.Queue[str] = asyncio.Queue()

    @classmethod
    async def connect(cls, secured: SecuredServer, role: str) -> Caller:
        settings = secured.as_role(role)
        nc = Client()
        caller = cls(nc, role)

        async def on_error(exc: Exception) -> None:
            caller.refusals.put_nowait(str(exc))

        await nc.connect(
            servers=[settings.nats_url],
            error_cb=on_error,
            allow_reconnect=False,
            **auth_options(settings, role),
        )
        return caller

    async def refused(self, what: str, timeout_s: float = 5.0) -> str:
        """Wait for the server's refusal naming ``what`` (a subject); returns its message."""
        async with asyncio.timeout(timeout_s):
            while True:
                message = (await self.refusals.get()).lower()  # nats-server >= 2.12 writes it lower-case
                if "permissions violation" in message and f'"{what.lower()}"' in message:
                    return message

    async def publish_refused(self, subject: str, payload: bytes = b"{}") -> str:
        await self.nc.publish(subject, payload, reply=self.nc.new_inbox())
        await self.nc.flush()
        return await self.refused(subject)

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.nc.close()
