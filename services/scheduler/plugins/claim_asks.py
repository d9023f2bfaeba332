"""A plugin's asks to write a classic claim, carried out by the scheduler shell: what the classic
and numeric feeds share.

A pure plugin cannot append; it hands the shell an ask (``submit``), which carries it out in a
background task: load the claim's aggregate, let ``decide`` say what to append on that version
(nothing: the ask no longer applies), append it with the version loaded as expected last
sequence, and on a conflict (the claim moved on) load and decide again, up to ``max_conflicts``
times. Identical asks in flight are merged (an attempt repeated before the first write landed
asks again). Each append counts in ``written`` and calls ``wake``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Hashable, Sequence
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from draflow.events.api import classic_v1alpha1 as cv
from draflow.events.envelope import Envelope, Event
from draflow.infra.errors import ConcurrencyError
from draflow.infra.eventstore import EventStore
from draflow.projections.objects import fold

__all__ = ["ClaimAsks"]

log = logging.getLogger(__name__)


class _Ask(Hashable, Protocol):
    @property
    def namespace(self) -> str: ...

    @property
    def name(self) -> str: ...


A = TypeVar("A", bound=_Ask)


def _apply(state: Any, env: Envelope[Event]) -> Any:
    return fold(state, env.type, env.data, env.seq)


class ClaimAsks(Generic[A]):
    max_conflicts: ClassVar[int] = 8

    def __init__(self, store: EventStore, wake: Callable[[], None]) -> None:
        self.store = store
        self.wake = wake
        self._inflight: dict[A, asyncio.Task[None]] = {}
        self.written = 0

    def decide(self, ask: A, claim: cv.ResourceClaim) -> Event | Sequence[Event] | None:
        """What to append for ``ask`` on ``claim`` as loaded (None: nothing)."""
        raise NotImplementedError

    def describe(self, ask: A) -> str:
        """The ask in log lines."""
        raise NotImplementedError

    def submit(self, ask: A) -> None:
        if ask in self._inflight:
            return
        try:
            task = asyncio.get_running_loop().create_task(self._write(ask))
        except RuntimeError:  # no loop (a pure test drove the core): nothing to carry out
            return
        self._inflight[ask] = task
        task.add_done_callback(lambda _: self._inflight.pop(ask, None))

    async def stop(self) -> None:
        """Cancel the asks still in flight (a stopping scheduler; the next attempt asks again)."""
        tasks = list(self._inflight.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def drain(self) -> None:
        tasks = list(self._inflight.values())
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _write(self, ask: A) -> None:
        subject = self.store.subject(cv.CLAIM_KIND, ask.namespace, ask.name)
        try:
            for _ in range(self.max_conflicts):
                loaded = await self.store.load(subject, _apply, None)
                if not isinstance(loaded.state, cv.ResourceClaim):
                    return
                events = self.decide(ask, loaded.state)
                if events is None:
                    return
                try:
                    await self.store.append(subject, events, expected_last_seq=loaded.version)
                except ConcurrencyError:
                    continue  # the claim moved on: decide again on the new version
                self.written += 1
                self.wake()
                return
            log.warning("%s: kept conflicting", self.describe(ask))
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("%s failed", self.describe(ask))
