"""The event-sourced :class:`~draflow.services.driver_controller.saga_wiring.ClaimStore` of the service.

Claims and classes are folded from their aggregate subjects with the shared object fold
(``draflow.projections.objects.fold``); a changed claim is written as the generic lifecycle facts
(``ClassicResourceClaimFinalizersChanged``, ``ClassicResourceClaimStatusUpdated``) in one append
with the saga step's deterministic message id and ``expected_last_seq`` = the version loaded, so a
concurrent writer makes the step reload and decide again (``ConcurrencyError``).
"""

from __future__ import annotations

from typing import Any

from draflow.events.api import classic_v1alpha1 as cv
from draflow.events.envelope import Envelope, Event
from draflow.events.objects import finalizers_changed, status_updated
from draflow.infra.eventstore import EventStore
from draflow.projections.objects import fold
from draflow.sagas.engine import StepContext

__all__ = ["EventClaimStore"]


def _apply(state: Any, env: Envelope[Event]) -> Any:
    return fold(state, env.type, env.data, env.seq)


class EventClaimStore:
    def __init__(self, store: EventStore) -> None:
        self.store = store

    async def load(self, namespace: str, name: str) -> tuple[cv.ResourceClaim | None, int]:
        loaded = await self.store.load(self.store.subject(cv.CLAIM_KIND, namespace, name), _apply, None)
        claim = loaded.state if isinstance(loaded.state, cv.ResourceClaim) else None
        return claim, loaded.version

    async def load_class(self, name: str) -> cv.ResourceClass | None:
        loaded = await self.store.load(self.store.subject(cv.CLASS_KIND, None, name), _apply, None)
        return loaded.state if isinstance(loaded.state, cv.ResourceClass) else None

    async def write(self, ctx: StepContext, old: cv.ResourceClaim, new: cv.ResourceClaim, seq: int) -> None:
        events: list[Event] = []
        if new.metadata.finalizers != old.metadata.finalizers:
            events.append(finalizers_changed(cv.CLAIM_KIND, new.metadata.finalizers))
        if new.status != old.status:
            events.append(status_updated(cv.CLAIM_KIND, new.status))
        if not events:
            return
        subject = self.store.subject(cv.CLAIM_KIND, new.metadata.namespace, new.metadata.name)
        await ctx.append(subject, events, expected_last_seq=seq, suffix=type(events[-1]).__name__)
