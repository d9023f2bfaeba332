"""What the scheduler's sagas share: the host they call, their conflict error, one consistent read.

``SchedulerHost`` is what the steps need from the scheduler service that runs them (its snapshot,
reads of the log, the clock; ``draflow.services.scheduler.service.runner`` is it). Kept apart from the
saga definitions (``pod_scheduling``, ``extended_claim``, ``reallocation``) so each of those
imports it without importing the others.
"""

from __future__ import annotations

from typing import Any, Protocol

from draflow.events.api.resource_v1 import ResourceClaim
from draflow.events.envelope import Envelope, Event
from draflow.infra.eventstore import EventStore
from draflow.projections.objects import fold
from draflow.services.scheduler.framework import Scheduler

__all__ = ["MAX_CONFLICTS", "DecisionView", "SchedulerHost", "SchedulingConflict", "read_object"]

MAX_CONFLICTS = 8  # reload-and-retry rounds on one subject before giving up (compensate)


class SchedulingConflict(Exception):
    """The decision no longer holds (pod or claim changed by someone else): compensate."""


class DecisionView(Protocol):
    """A scheduling core and the objects it folded: what assuming or releasing a decision reads.
    The scheduler service is one; ``draflow verify-replay``'s replayed snapshot is another."""

    core: Scheduler

    def get(self, kind: str, namespace: str, name: str) -> tuple[Any, int]: ...


class SchedulerHost(DecisionView, Protocol):
    """What the saga steps need from the scheduler service that runs them."""

    store: EventStore  # guards: what was taken since a decision (``draflow.infra.guard``)

    async def load(self, kind: str, namespace: str, name: str) -> tuple[Any, int]: ...
    async def history(self, kind: str, namespace: str, name: str) -> list[Envelope[Event]]: ...
    async def history_since(
        self, kind: str, namespace: str, name: str, seq: int
    ) -> list[Envelope[Event]]: ...
    def subject(self, kind: str, namespace: str, name: str) -> str: ...
    def now(self) -> str: ...
    def appended(self) -> None: ...
    def bound(self, plan: Any) -> None: ...
    async def admission_refusal(self, claim: ResourceClaim) -> str:
        """Why the API server's admission (quota) would refuse creating ``claim``; "" if it would not."""
        ...


async def read_object(
    rt: SchedulerHost, kind: str, namespace: str, name: str
) -> tuple[Any, int, list[Envelope[Event]]]:
    """The object, its version and its history from one read of its subject.

    Ownership decisions (:mod:`.ownership`) and the append that follows must see the same
    state: the version returned is the sequence of the last event folded, so an append expecting
    it fails if anything was written after what was looked at.
    """
    history = await rt.history(kind, namespace, name)
    obj: Any = None
    for env in history:
        obj = fold(obj, env.type, env.data, env.seq)
    return obj, (history[-1].seq if history else 0), history
