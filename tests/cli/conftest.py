"""The CLI runs in-process (``services.cli.main.main``) against an apiserver on a background thread.

The CLI is synchronous (it calls ``asyncio.run``), so the apiserver gets its own event loop in a
thread; the CLI finds it through the same environment variables a user sets.
"""

from __future__ import annotations

import asyncio
import io
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from infra.config import Settings
from infra.eventstore import EventStore
from services.apiserver.server import ApiServer
from services.cli.main import main
from services.runtime.client import ApiClient


class ThreadedApiServer:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.error: BaseException | None = None
        self.server: ApiServer | None = None
        self.thread = threading.Thread(target=self._run, name="apiserver", daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)

        async def start() -> None:
            events = await EventStore.open(self.settings, "apiserver")
            self.server = ApiServer(events)
            await self.server.start()

        try:
            self.loop.run_until_complete(start())
        except BaseException as exc:
            self.error = exc
            self.ready.set()
            return
        self.ready.set()
        self.loop.run_forever()

    def start(self) -> None:
        self.thread.start()
        assert self.ready.wait(30), "apiserver did not start"
        if self.error is not None:
            raise self.error

    def call(self, fn: Callable[[ApiClient], Any]) -> Any:
        """Run ``await fn(client)`` with a fresh client (for setting things up the CLI cannot)."""

        async def go() -> Any:
            client = await ApiClient.connect(self.settings)
            try:
                return await fn(client)
            finally:
                await client.close()

        return asyncio.run(go())

    def stop(self) -> None:
        async def stop() -> None:
            assert self.server is not None
            await self.server.stop()
            await self.server.events.js.delete_stream(self.settings.stream)
            await self.server.events.close()

        if self.server is not None:
            asyncio.run_coroutine_threadsafe(stop(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)
        self.loop.close()


class Result(NamedTuple):
    code: int
    out: str
    err: str


@pytest.fixture
def system(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Iterator[ThreadedApiServer]:
    monkeypatch.setenv("DRAFLOW_NATS_URL", settings.nats_url)
    monkeypatch.setenv("DRAFLOW_STREAM", settings.stream)
    monkeypatch.setenv("DRAFLOW_SUBJECT_ROOT", settings.root)
    server = ThreadedApiServer(settings)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def draflow(
    system: ThreadedApiServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Callable[..., Result]:
    """Run ``draflow ARGS...`` in-process; ``stdin=`` feeds ``-f -``."""

    def run(*args: str | Path, stdin: str | None = None) -> Result:
        capsys.readouterr()
        if stdin is not None:
            monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin.encode())))
        try:
            code = main([str(a) for a in args])
        except SystemExit as exc:  # argparse usage errors
            code = int(exc.code or 0)
        out, err = capsys.readouterr()
        return Result(code, out, err)

    return run
