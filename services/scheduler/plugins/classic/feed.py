"""The scheduler shell's side of the classic plugin: feed it classic claims, carry out its asks.

:class:`ClassicFeed` is created by the scheduler's snapshot. It

* hands every classic claim change from the log to the plugin (``observe`` / ``forget``) and to
  the scheduling queue as a ``ResourceClaim`` addition without an old object, so pods waiting for
  one of their classic claims are requeued by the plugin's queueing hint (and other plugins'
  hints, which only know structured claims, see a claim they do not use);
* carries out the plugin's :class:`ClaimWrite` asks in background tasks: load the claim from its
  aggregate, :func:`apply_write` on that latest version, validate the status as the apiserver's
  status verb would (``validate_classic``) and append ``ClassicResourceClaimStatusUpdated`` with
  the version loaded as expected last sequence; a conflict reloads and decides again. Identical
  asks in flight are merged (an attempt repeated before the first write landed asks again).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from events.api import classic_v1alpha1 as cv
from events.envelope import Envelope, Event
from events.objects import status_updated
from infra.errors import ConcurrencyError
from infra.eventstore import EventStore
from projections.objects import fold
from services.dra.classic.validation import validate_classic
from services.scheduler.framework.core import Scheduler
from services.scheduler.framework.events import ActionType, ClusterEvent, EventResource
from services.scheduler.plugins.classic.plugin import ClassicDynamicResources
from services.scheduler.plugins.classic.writes import ClaimWrite, apply_write

__all__ = ["CLASSIC_KINDS", "ClassicFeed"]

log = logging.getLogger(__name__)

CLASSIC_KINDS = frozenset({cv.CLAIM_KIND})
MAX_CONFLICTS = 16


def _apply(state: Any, env: Envelope[Event]) -> Any:
    return fold(state, env.type, env.data, env.seq)


class ClassicFeed:
    def __init__(self, store: EventStore, core: Scheduler, wake: Callable[[], None]) -> None:
        self.store = store
        self.core = core
        self.wake = wake
        plugins = [p for p in core.profile.plugins if isinstance(p, ClassicDynamicResources)]
        self.plugin = plugins[0] if plugins else None
        if self.plugin is not None:
            self.plugin.sink = self.submit
        self._inflight: dict[ClaimWrite, asyncio.Task[None]] = {}
        self.written = 0

    def apply(self, kind: str, namespace: str, name: str, obj: object | None) -> None:
        """A classic object changed (``obj``) or was deleted (None)."""
        if self.plugin is None or kind != cv.CLAIM_KIND:
            return
        if obj is None:
            self.plugin.forget(namespace, name)
            return
        if isinstance(obj, cv.ResourceClaim):
            self.plugin.observe(obj)
            self.core.queue.on_event(ClusterEvent(EventResource.RESOURCE_CLAIM, ActionType.ADD, None, obj))

    def submit(self, write: ClaimWrite) -> None:
        if write in self._inflight:
            return
        try:
            task = asyncio.get_running_loop().create_task(self._write(write))
        except RuntimeError:  # no loop (a pure test drove the core): nothing to carry out
            return
        self._inflight[write] = task
        task.add_done_callback(lambda _: self._inflight.pop(write, None))

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

    async def _write(self, w: ClaimWrite) -> None:
        subject = self.store.subject(cv.CLAIM_KIND, w.namespace, w.name)
        try:
            for _ in range(MAX_CONFLICTS):
                loaded = await self.store.load(subject, _apply, None)
                claim = loaded.state
                if not isinstance(claim, cv.ResourceClaim):
                    return
                new = apply_write(claim, w)
                if isinstance(new, str):
                    log.info("classic %s of claim %s/%s skipped: %s", w.op, w.namespace, w.name, new)
                    return
                if new.status == claim.status:
                    return
                problems = validate_classic(new, claim)
                if problems:
                    log.warning("classic %s of claim %s/%s invalid: %s", w.op, w.namespace, w.name, problems)
                    return
                try:
                    await self.store.append(
                        subject, [status_updated(cv.CLAIM_KIND, new.status)], expected_last_seq=loaded.version
                    )
                except ConcurrencyError:
                    continue  # the claim moved on: decide again on the new version
                self.written += 1
                self.wake()
                return
            log.warning("classic %s of claim %s/%s: kept conflicting", w.op, w.namespace, w.name)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("classic %s of claim %s/%s failed", w.op, w.namespace, w.name)
