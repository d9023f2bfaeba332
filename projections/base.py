"""Read models as pure reducers: ``apply(key, state, event) -> state`` per row.

A :class:`Projection` names the subjects it reads, the row keys an event touches and a pure
reducer that returns the row's next state (``None`` deletes the row). No I/O here: the same
projection is folded in memory (hot paths, tests) or persisted with its checkpoint by
``draflow.infra.projection_store``. Replaying the log from sequence 1 always gives the same rows.
"""

from __future__ import annotations

from collections.abc import Iterable, MutableMapping
from typing import Any, ClassVar, Generic, TypeVar

from draflow.events.envelope import Envelope, Event
from draflow.events.subjects import DEFAULT_ROOT

__all__ = ["MemoryView", "Projection", "fold", "subject_matches"]

S = TypeVar("S")


class Projection(Generic[S]):
    """Subclass and set ``name``, ``state_type`` and ``subjects``; implement :meth:`apply`."""

    name: ClassVar[str] = ""
    state_type: ClassVar[type[Any]] = object
    # Subject filters relative to the events prefix, e.g. ("ResourceClaim.*.*",); ">" = all events.
    subjects: ClassVar[tuple[str, ...]] = (">",)

    def filters(self, root: str = DEFAULT_ROOT) -> list[str]:
        return [f"{root}.ev.{s}" for s in self.subjects]

    def keys(self, env: Envelope[Event]) -> Iterable[str]:
        """The rows an event touches (default: one row per aggregate subject)."""
        return (env.subject,)

    def apply(self, key: str, state: S | None, env: Envelope[Event]) -> S | None:
        raise NotImplementedError


def subject_matches(pattern: str, subject: str) -> bool:
    """NATS subject matching: ``*`` is one token, a final ``>`` is one or more tokens."""
    p = pattern.split(".")
    s = subject.split(".")
    for i, tok in enumerate(p):
        if tok == ">":
            return len(s) > i
        if i >= len(s) or (tok != "*" and tok != s[i]):
            return False
    return len(p) == len(s)


def fold(
    projection: Projection[S],
    rows: MutableMapping[str, S],
    envs: Iterable[Envelope[Event]],
    root: str = DEFAULT_ROOT,
) -> MutableMapping[str, S]:
    """Apply events in order to in-memory rows (events outside the projection's subjects are ignored)."""
    filters = projection.filters(root)
    every = len(filters) == 1 and filters[0].endswith(".ev.>")
    for env in envs:
        if not every and not any(subject_matches(f, env.subject) for f in filters):
            continue
        for key in projection.keys(env):
            new = projection.apply(key, rows.get(key), env)
            if new is None:
                rows.pop(key, None)
            else:
                rows[key] = new
    return rows


class MemoryView(Generic[S]):
    """An in-memory projection with its checkpoint: the hot-path form, rebuilt from the log at start."""

    def __init__(self, projection: Projection[S], root: str = DEFAULT_ROOT) -> None:
        self.projection = projection
        self.root = root
        self.rows: dict[str, S] = {}
        self.checkpoint = 0

    def apply(self, envs: Iterable[Envelope[Event]]) -> None:
        fresh = [e for e in envs if e.seq > self.checkpoint]
        if fresh:
            fold(self.projection, self.rows, fresh, self.root)
            self.checkpoint = fresh[-1].seq
