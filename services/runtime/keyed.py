"""Per-object syncs that start as soon as their object changes (client-go's work queue, in asyncio).

A controller whose pass syncs every dirty object and returns when the last one is done makes
everything that changes meanwhile wait for the slowest object of the pass: a pod created while the
claim controller deallocates the claims of ten deleted pods waited for all of those round trips
before its own claim was created. :class:`KeyedSyncs` runs each key's sync as its own task
instead, as upstream's controllers do with their work queue:

* at most one sync per key at a time; a key submitted while its sync runs is synced once more
  after it (the change may have come after the sync read the cache), never twice at once; one
  submitted again while it still waits for a slot is synced once;
* at most ``concurrency`` syncs run at the same time (the others wait for a slot, in order);
* a sync that raises is logged and its key handed to ``on_failure`` (the service resubmits it
  after a backoff: the state it acts on is in the log), the other keys go on;
* :meth:`join` waits for every sync started (tests; a service's stop), :meth:`close` cancels them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Hashable

__all__ = ["KeyedSyncs", "SyncOne"]

log = logging.getLogger(__name__)

SyncOne = Callable[[], Awaitable[None]]


class KeyedSyncs:
    def __init__(
        self,
        *,
        concurrency: int = 64,
        on_failure: Callable[[Hashable, BaseException], None] | None = None,
        name: str = "sync",
    ) -> None:
        self._slots = asyncio.Semaphore(concurrency)
        self._running: dict[Hashable, asyncio.Task[None]] = {}
        self._queued: dict[Hashable, SyncOne] = {}  # keys waiting for a slot: the sync to run
        self._again: dict[Hashable, SyncOne] = {}  # keys submitted while their sync ran
        self._on_failure = on_failure
        self._name = name
        self.started = 0  # syncs run so far (tests count them)

    def __len__(self) -> int:
        """Keys being synced or waiting for a slot."""
        return len(self._running)

    def busy(self, key: Hashable) -> bool:
        return key in self._running

    def submit(self, key: Hashable, sync: SyncOne) -> None:
        """Sync ``key`` now (``sync``: a zero-argument coroutine function), or once more after the
        sync in flight for it; a key still waiting for a slot is synced once, with the latest."""
        if key in self._running:
            if key in self._queued:
                self._queued[key] = sync  # not started yet: it will read the newest state anyway
            else:
                self._again[key] = sync
            return
        self._queued[key] = sync
        self._running[key] = asyncio.create_task(self._run(key), name=f"{self._name} {key}")

    async def _run(self, key: Hashable) -> None:
        try:
            while True:
                async with self._slots:
                    sync = self._queued.pop(key)
                    self.started += 1
                    try:
                        await sync()
                    except asyncio.CancelledError:
                        raise
                    except Exception as exc:
                        log.exception("%s %s failed", self._name, key)
                        self._again.pop(key, None)  # the retry after a backoff covers it
                        if self._on_failure is not None:
                            self._on_failure(key, exc)
                        return
                again = self._again.pop(key, None)
                if again is None:
                    return
                self._queued[key] = again
        finally:
            self._queued.pop(key, None)
            self._running.pop(key, None)

    async def join(self) -> None:
        """Until no sync runs (including those started while waiting)."""
        while self._running:
            await asyncio.wait(list(self._running.values()))

    async def close(self, grace_s: float = 0.0) -> None:
        """Let the syncs in flight finish for ``grace_s``, then cancel the rest."""
        if grace_s > 0 and self._running:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(grace_s):
                    await self.join()
        self._again.clear()
        tasks = list(self._running.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
