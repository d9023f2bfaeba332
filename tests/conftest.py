"""Shared fixtures: a real ``nats-server -js`` and per-test streams on it.

* ``nats_server`` (session): one server on a free port with a temporary store dir, shared by every
  test folder. Tests never share a stream: ``settings`` gives each test its own stream name and
  subject root, so streams do not overlap and tests stay independent while the suite stays fast.
* ``own_nats_server`` (function): a private server for tests that stop or restart it.
* ``event_store``: an :class:`~draflow.infra.eventstore.EventStore` connected to the test's stream.
* ``apiserver`` / ``api``: the apiserver in-process on that stream, and a client of it.
* ``runtime``: a controller runtime (log-fed cache) on that stream.

Processes a test starts (``tests/processes.py``) are killed when it ends.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from types import ModuleType

import pytest

from draflow.events.api import registry
from draflow.infra.config import Settings
from draflow.infra.eventstore import EventStore
from draflow.infra.natsd import LocalNatsServer
from draflow.services.apiserver.server import ApiServer
from draflow.services.runtime.client import ApiClient
from draflow.services.runtime.controller import Runtime
from tests.processes import Proc
from tests.shells import apiserver_in_process


class OneImportRoot(importlib.abc.MetaPathFinder):
    """Refuses ``import events`` (``infra``, ``projections``, ``sagas``, ``services``) in the test
    process. The checkout's root is on ``sys.path`` here, so the folders would import by their bare
    names too, and a module loaded under both names is two modules: two copies of every msgspec
    Struct class, and ``isinstance`` or tagged-union decoding between them fails without a word.
    ``tests/test_layers.py`` finds such names statically; this catches the dynamic ones (a patch
    target, an ``import_module`` string)."""

    FOLDERS = frozenset({"events", "infra", "projections", "sagas", "services"})

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname.partition(".")[0] in self.FOLDERS:
            raise ModuleNotFoundError(
                f"No module named {fullname!r}: draflow's folders are imported as 'draflow.{fullname}'",
                name=fullname,
            )
        return None


if not any(isinstance(finder, OneImportRoot) for finder in sys.meta_path):
    sys.meta_path.insert(0, OneImportRoot())

# Services export spans by default (to 127.0.0.1:4318, where a developer's own `honcho start` may
# listen). The processes tests start trace only when a test asks for it with
# OTEL_TRACES_EXPORTER=otlp and an endpoint of its own (see tests/infra/test_tracing.py).
os.environ["OTEL_TRACES_EXPORTER"] = "none"


@pytest.fixture(autouse=True)
def _no_custom_kind_left() -> Iterator[None]:
    """Custom kinds (CRDs) are registered per process, as a real apiserver serves one set: a test
    that started an apiserver in this process and left CRDs behind must not shape the next one."""
    yield
    for crd in list(registry.custom_crds()):
        registry.unregister_custom(crd)


@pytest.fixture(autouse=True)
def _no_process_left() -> Iterator[None]:
    """Every process a test started with :class:`~tests.processes.Proc` and did not stop is killed
    when the test ends, whatever its outcome (a failed assertion leaves nothing running)."""
    before = set(map(id, Proc.running))
    yield
    for proc in [p for p in Proc.running if id(p) not in before]:
        proc.kill()


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
    async with apiserver_in_process(event_store.settings) as server:
        yield server


@pytest.fixture
async def api(apiserver: ApiServer, settings: Settings) -> AsyncIterator[ApiClient]:
    """A client of the in-process apiserver."""
    client = await ApiClient.connect(settings, actor="test", timeout_s=10.0)
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
async def runtime(event_store: EventStore) -> AsyncIterator[Runtime]:
    """A controller runtime (log-fed cache) on the test's own stream."""
    rt = Runtime(event_store, actor="test-runtime")
    await rt.start()
    try:
        yield rt
    finally:
        await rt.stop()
