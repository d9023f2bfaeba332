"""Guards: one resource handed out by racing deciders, serialised on a subject of its own.

Optimistic concurrency on a decision's own aggregate (a claim) cannot stop two deciders that
write *different* aggregates from handing out the same resource (one device to two claims, one
node's capacity twice). A guard adds the resource to the decision's append: next to its events,
one :class:`~draflow.events.guard.GuardTaken` on the resource's guard subject
(``<root>.ev.Guard.<scope>.<key>``), expecting the guard subject's last sequence as the decision
saw it, all in **one atomic batch** (``EventStore.append(..., guards=...)``). JetStream checks
``Nats-Expected-Last-Subject-Sequence`` on every subject of the batch and refuses the whole batch
when one is wrong, so of two deciders that saw the same state exactly one lands; the other gets
:class:`GuardConflict` naming the guard subjects that moved, reads what was taken there since
(:func:`takes_since`) and decides again. Releasing appends :class:`GuardReleased` without an
expectation (freeing never over-commits) in the batch that frees the resource; a reader that
counts a take once the aggregate showed it needs no release when the aggregate frees the
resource (the scheduler's device guards: ``ClaimDeallocated`` is a single append).

Rules of use: one guard per subject per append (JetStream checks an expectation only on a
subject's first message in a batch), at most ``MAX_BATCH_EVENTS`` messages in all. The guard
subjects order decisions; they never count: what is allocated is read from the objects.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, NamedTuple

from draflow.events.envelope import Envelope, Event
from draflow.events.guard import GUARD_KIND, GuardReleased, GuardTaken
from draflow.events.subjects import aggregate_subject, events_prefix
from draflow.infra.errors import ConcurrencyError

if TYPE_CHECKING:
    from draflow.infra.eventstore import EventStore

__all__ = [
    "Guard",
    "GuardConflict",
    "guard_prefix",
    "guard_subject",
    "held",
    "release",
    "take",
    "takes_since",
]


class Guard(NamedTuple):
    """One guard message of an append: ``event`` on ``subject``, at ``expected_last_seq`` (the
    guard subject's last stream sequence the decision saw, 0 = never guarded; None = no check,
    for releases)."""

    subject: str
    event: Event
    expected_last_seq: int | None = None


class GuardConflict(ConcurrencyError):
    """Someone appended to guard subjects of this append since the decision saw them: nothing of
    the append landed. ``subjects``: the guard subjects that moved (with the expectation used)."""

    def __init__(self, subject: str, moved: Sequence[tuple[str, int]]) -> None:
        first = moved[0] if moved else (subject, 0)
        super().__init__(first[0], first[1])
        self.message_subject = subject
        self.moved = tuple(moved)

    @property
    def subjects(self) -> tuple[str, ...]:
        return tuple(s for s, _ in self.moved)

    def __str__(self) -> str:
        moved = ", ".join(f"{s} (expected {e})" for s, e in self.moved)
        return f"{self.message_subject}: guarded resources were taken meanwhile: {moved}"


def guard_prefix(root: str) -> str:
    """Every guard subject starts with this (``<root>.ev.Guard.``)."""
    return f"{events_prefix(root)}.{GUARD_KIND}."


def guard_subject(root: str, scope: str, key: str) -> str:
    """The guard subject of resource ``key`` in ``scope`` (``device``, ``counters``, ``numeric``...)."""
    return aggregate_subject(GUARD_KIND, scope, key, root)


def take(subject: str, expected_last_seq: int, holder: str, holder_uid: str = "") -> Guard:
    return Guard(subject, GuardTaken(holder=holder, holder_uid=holder_uid), expected_last_seq)


def release(subject: str, holder: str, holder_uid: str = "") -> Guard:
    return Guard(subject, GuardReleased(holder=holder, holder_uid=holder_uid), None)


def held(history: Iterable[Envelope[Event]]) -> dict[str, Envelope[Event]]:
    """Holder uid (or name) -> its take, for takes not released later in ``history``."""
    out: dict[str, Envelope[Event]] = {}
    for env in history:
        data = env.data
        if isinstance(data, GuardTaken):
            out[data.holder_uid or data.holder] = env
        elif isinstance(data, GuardReleased):
            out.pop(data.holder_uid or data.holder, None)
    return out


async def takes_since(
    store: EventStore,
    subject: str,
    seq: int,
    *,
    counted: Callable[[Envelope[Event]], bool] = lambda env: False,
) -> tuple[list[Envelope[Event]], int]:
    """What a decision that saw ``subject`` at ``seq`` did not count: the takes appended after
    ``seq`` and not released since, except those ``counted`` accepts (e.g. the decider's own
    earlier decisions, which its later ones already count); and the subject's last sequence now,
    the expectation to retry with when nothing is left."""
    history = await store.events(subject, seq + 1)
    head = history[-1].seq if history else seq
    return [env for env in held(history).values() if not counted(env)], head
