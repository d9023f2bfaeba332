"""Shared fixtures: a real ``nats-server -js`` and per-test streams on it.

* ``nats_server`` (session): one server on a free port with a temporary store dir, shared by every
  test folder. Tests never share a stream: ``settings`` gives each test its own stream name and
  subject root, so streams do not overlap and tests stay independent while the suite stays fast.
* ``own_nats_server`` (function): a private server for tests that stop or restart it.
* ``event_store``: an :class:`~infra.eventstore.EventStore` connected to the test's stream.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from infra.config import Settings
from infra.eventstore import EventStore
from infra.natsd import LocalNatsServer
from services.apiserver.server import ApiServer
from services.runtime.client import ApiClient

# Services export spans by default (to 127.0.0.1:4318, where a developer's own `honcho start` may
# listen). The processes tests start trace only when a test asks for it with
# OTEL_TRACES_EXPORTER=otlp and an endpoint of its own (see tests/foundation/test_tracing.py).
os.environ["OTEL_TRACES_EXPORTER"] = "none"


@pytest.fixture(scope="session")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalNatsServer]:
    server = LocalNatsServer(tmp_path_factory.mktemp("nats") / "store")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def own_nats_server(tmp_path: Path) -> Iterator[LocalNatsServer]:
    server = LocalNatsServer(tmp_path / "nats-store")
    server.start()
    try:
        yield server
    finally:
        server.stop()


def settings_for(server: LocalNatsServer, data_dir: Path) -> Settings:
    """Settings with a stream and subject root of their own on ``server``."""
    tag = os.urandom(4).hex()
    data_dir.mkdir(parents=True, exist_ok=True)
    return Settings(nats_url=server.url, data_dir=data_dir, stream=f"T{tag.upper()}", root=f"t{tag}")


@pytest.fixture
def settings(nats_server: LocalNatsServer, tmp_path: Path) -> Settings:
    return settings_for(nats_server, tmp_path / "data")


@pytest.fixture
async def event_store(settings: Settings) -> AsyncIterator[EventStore]:
    store = await EventStore.open(settings, "test")
    try:
        yield store
    finally:
        if store.nc.is_connected:
            for name in (settings.stream, settings.dlq_stream):
                try:
                    await store.js.delete_stream(name)
                except Exception:  # best effort: the server is torn down after the session anyway
                    pass
        await store.close()


@pytest.fixture
async def apiserver(event_store: EventStore) -> AsyncIterator[ApiServer]:
    """The apiserver in-process (an asyncio task) on the test's own stream."""
    events = await EventStore.open(event_store.settings, "apiserver")
    server = ApiServer(events)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()
        await events.close()


@pytest.fixture
async def api(apiserver: ApiServer, settings: Settings) -> AsyncIterator[ApiClient]:
    """A client of the in-process apiserver."""
    client = await ApiClient.connect(settings, actor="test", timeout_s=10.0)
    try:
        yield client
    finally:
        await client.close()
