"""What the plugin's streaming services share (device health, numeric capacity): open streams
that send again when woken, and a servicer for the generated code.

A stream sends at once, then waits for a wake-up: ``changed()`` wakes every open stream of the
reporter (a change between two waits is not lost: the next wait returns at once). With
``refresh_s`` set, a stream also wakes on its own after that long without a change.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from types import SimpleNamespace
from typing import Any

from grpc import aio

__all__ = ["WakingReporter", "servicer"]

Wait = Callable[[], Awaitable[None]]


class WakingReporter:
    def __init__(self, refresh_s: float | None = None) -> None:
        self.refresh_s = refresh_s
        self._waiting: set[asyncio.Event] = set()

    def changed(self) -> None:
        """What the streams send may have changed: every open stream looks again."""
        for event in self._waiting:
            event.set()

    @contextlib.contextmanager
    def waiter(self) -> Iterator[Wait]:
        """One stream's wait for its next wake-up, while the stream is open."""
        wake = asyncio.Event()
        self._waiting.add(wake)

        async def wait() -> None:
            if self.refresh_s is None:
                await wake.wait()
            else:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), self.refresh_s)
            wake.clear()

        try:
            yield wait
        finally:
            self._waiting.discard(wake)


def servicer(method: str, stream: Callable[[], AsyncIterator[Any]]) -> Any:
    """A servicer of one server-streaming ``method`` (its name in the generated code): every call
    is a new ``stream()``."""

    async def serve(request: Any, context: aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
        async for response in stream():
            yield response

    return SimpleNamespace(**{method: serve})
