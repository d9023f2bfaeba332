"""A controller runtime (log-fed cache) on the test's own stream, for the service tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from infra.eventstore import EventStore
from services.runtime.controller import Runtime


@pytest.fixture
async def runtime(event_store: EventStore) -> AsyncIterator[Runtime]:
    rt = Runtime(event_store, actor="classic-test")
    await rt.start()
    try:
        yield rt
    finally:
        await rt.stop()
