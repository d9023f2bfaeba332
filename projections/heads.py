"""Aggregate heads: for every aggregate, its version (last stream sequence) and last event.

What the apiserver needs to answer "does this object exist and at which resourceVersion" without
reading the object's history, and what ``draflow`` tools use to list aggregates.
"""

from __future__ import annotations

import msgspec

from draflow.events.envelope import Envelope, Event
from draflow.events.subjects import parse_subject
from draflow.projections.base import Projection

__all__ = ["AggregateHead", "Heads"]


class AggregateHead(msgspec.Struct, frozen=True, kw_only=True):
    kind: str
    namespace: str | None
    name: str
    version: int
    events: int
    last_type: str
    first_seq: int


class Heads(Projection[AggregateHead]):
    name = "heads"
    state_type = AggregateHead
    subjects = (">",)

    def __init__(self, root: str = "draflow") -> None:
        self.root = root

    def apply(self, key: str, state: AggregateHead | None, env: Envelope[Event]) -> AggregateHead:
        if state is None:
            ref = parse_subject(env.subject, self.root)
            return AggregateHead(
                kind=ref.kind,
                namespace=ref.namespace,
                name=ref.name,
                version=env.seq,
                events=1,
                last_type=env.type,
                first_seq=env.seq,
            )
        return msgspec.structs.replace(state, version=env.seq, events=state.events + 1, last_type=env.type)
