"""Who wrote what is on an object now: the ownership a saga's compensation checks before it undoes.

Several scheduler instances decide without coordinating, so two sagas can act on the same pod and
derive the same names (the special claim's name and uid are deterministic). A compensation must
undo only what its own saga wrote — never a same-named object, reservation or allocation another
saga wrote and may rely on. The log says who wrote each fact: every saga append carries the saga
id as its correlation id. These helpers read one object's history (its subject's events, oldest
first) and answer "which correlation id wrote the fact as it stands now", or ``None`` when the fact
is absent or was last set by a write nobody in particular owns (a whole-status replacement).

Pure: no I/O; the callers read the history and the object's version in one read, and append with
that version as the expected last sequence, so a concurrent change makes them read and decide again.
"""

from __future__ import annotations

from collections.abc import Sequence

from draflow.events.dra import (
    ClaimAllocated,
    ClaimDeallocated,
    ClaimReservationsReleased,
    ClaimReserved,
    PodBound,
)
from draflow.events.envelope import Envelope, Event
from draflow.events.objects import APPLIED, DELETED, STATUS_UPDATED, kind_and_verb

__all__ = [
    "allocation_writer",
    "binder",
    "creator",
    "current_incarnation",
    "foreign",
    "reservation_writer",
]


def _verb(env: Envelope[Event]) -> str:
    kv = kind_and_verb(env.type)
    return "" if kv is None else kv[1]


def current_incarnation(history: Sequence[Envelope[Event]]) -> Sequence[Envelope[Event]]:
    """The events since the object was last created (after its last ``<Kind>Deleted``)."""
    for i in range(len(history) - 1, -1, -1):
        if _verb(history[i]) == DELETED:
            return history[i + 1 :]
    return history


def creator(history: Sequence[Envelope[Event]]) -> str | None:
    """The correlation id of the append that created the object as it exists now (None: absent)."""
    events = current_incarnation(history)
    if not events or _verb(events[0]) != APPLIED:
        return None
    return events[0].correlation_id


def reservation_writer(history: Sequence[Envelope[Event]], consumer_uid: str) -> str | None:
    """The correlation id of the ``ClaimReserved`` (or the ``ClaimAllocated`` naming it as its
    consumer) that put ``consumer_uid`` in ``reservedFor`` as it stands; None when it is not
    reserved by such an event (never, released since, or the status was replaced as a whole
    since)."""
    for env in reversed(current_incarnation(history)):
        data = env.data
        if isinstance(data, ClaimReserved) and data.consumer.uid == consumer_uid:
            return env.correlation_id
        if isinstance(data, ClaimAllocated) and data.consumer and data.consumer.uid == consumer_uid:
            return env.correlation_id
        if isinstance(data, ClaimReservationsReleased) and consumer_uid in data.uids:
            return None
        if isinstance(data, ClaimDeallocated) and consumer_uid in data.released:
            return None
        if _verb(env) == STATUS_UPDATED:
            return None
    return None


def allocation_writer(history: Sequence[Envelope[Event]]) -> str | None:
    """The correlation id of the ``ClaimAllocated`` behind the claim's current allocation; None when
    it is not allocated by such an event."""
    for env in reversed(current_incarnation(history)):
        if isinstance(env.data, ClaimAllocated):
            return env.correlation_id
        if isinstance(env.data, ClaimDeallocated) or _verb(env) == STATUS_UPDATED:
            return None
    return None


def binder(history: Sequence[Envelope[Event]]) -> str | None:
    """The correlation id of the pod's ``PodBound`` (a pod is bound once); None when unbound."""
    for env in reversed(current_incarnation(history)):
        if isinstance(env.data, PodBound):
            return env.correlation_id
    return None


def foreign(writer: str | None, saga_id: str) -> bool:
    """Whether ``writer`` is another saga (or a write caused by one): not us, and not nobody.

    Writes without a correlation id (the claim controller, the apiserver on a user's request) are
    nobody's saga: a scheduling attempt may rely on them, and no compensation undoes them."""
    return bool(writer) and writer != saga_id
