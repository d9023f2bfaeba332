"""An authenticated server per test module (``secured``) and connections as any role (``as_role``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from tests.security.system import Caller, SecuredServer


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredServer]:
    system = SecuredServer(tmp_path_factory.mktemp("secured") / "data")
    system.start()
    try:
        yield system
    finally:
        system.stop()


@pytest.fixture
async def as_role(secured: SecuredServer) -> AsyncIterator:
    callers: list[Caller] = []

    async def connect(role: str) -> Caller:
        caller = await Caller.connect(secured, role)
        callers.append(caller)
        return caller

    yield connect
    for caller in callers:
        await caller.close()
