"""Saga state and decisions, pure: fold saga events, then decide the next move.

No I/O and no clock: the same events always give the same state and the same next action, which is
what lets any instance of a service resume a saga another one started.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

import msgspec

from draflow.events.envelope import Envelope, Event
from draflow.events.saga import (
    SagaCompensated,
    SagaCompensationFailed,
    SagaCompleted,
    SagaStarted,
    SagaStepCompensated,
    SagaStepCompleted,
    SagaStepFailed,
    SagaStepStarted,
)

__all__ = ["Action", "SagaState", "SagaStatus", "apply", "decide"]


class SagaStatus(StrEnum):
    RUNNING = "Running"
    COMPENSATING = "Compensating"
    COMPLETED = "Completed"
    COMPENSATED = "Compensated"
    COMPENSATION_FAILED = "CompensationFailed"

    @property
    def terminal(self) -> bool:
        return self in (SagaStatus.COMPLETED, SagaStatus.COMPENSATED, SagaStatus.COMPENSATION_FAILED)


class SagaState(msgspec.Struct, frozen=True, kw_only=True):
    saga_id: str
    saga_type: str
    input: dict[str, Any]
    steps: tuple[str, ...]
    status: SagaStatus = SagaStatus.RUNNING
    started: tuple[int, ...] = ()  # indexes of steps whose compensation is registered, in order
    compensations: dict[int, str] = {}
    outputs: dict[str, dict[str, Any]] = {}
    compensated: frozenset[int] = frozenset()
    error: str = ""
    traceparent: str = ""  # of the SagaStarted append: every step span joins this trace
    # steps that record no SagaStepStarted: index -> compensation, owed once the saga reaches them
    implied: dict[int, str] = {}
    version: int = 0  # stream sequence of the saga's last event


def apply(state: SagaState | None, env: Envelope[Event]) -> SagaState | None:
    d = env.data
    if isinstance(d, SagaStarted):
        return SagaState(
            saga_id=env.subject.rsplit(".", 1)[-1],
            saga_type=d.saga_type,
            input=d.input,
            steps=tuple(d.steps),
            traceparent=env.traceparent,
            version=env.seq,
            implied=dict(d.implied_starts),
        )
    if state is None:
        return None  # events before SagaStarted cannot happen; ignore rather than guess
    r = msgspec.structs.replace
    if isinstance(d, SagaStepStarted | SagaStepCompleted | SagaStepFailed):
        state = _reach(state, d.index)
    if isinstance(d, SagaStepStarted):
        started = state.started if d.index in state.started else (*state.started, d.index)
        return r(
            state,
            started=started,
            compensations={**state.compensations, d.index: d.compensation},
            version=env.seq,
        )
    if isinstance(d, SagaStepCompleted):
        return r(state, outputs={**state.outputs, d.step: d.output}, version=env.seq)
    if isinstance(d, SagaStepFailed):
        return r(state, status=SagaStatus.COMPENSATING, error=f"{d.step}: {d.error}", version=env.seq)
    if isinstance(d, SagaStepCompensated):
        return r(state, compensated=state.compensated | {d.index}, version=env.seq)
    if isinstance(d, SagaCompleted):
        return r(state, status=SagaStatus.COMPLETED, version=env.seq)
    if isinstance(d, SagaCompensated):
        return r(state, status=SagaStatus.COMPENSATED, version=env.seq)
    if isinstance(d, SagaCompensationFailed):
        return r(
            state,
            status=SagaStatus.COMPENSATION_FAILED,
            error=f"{state.error}; compensating {d.step}: {d.error}" if state.error else d.error,
            version=env.seq,
        )
    return r(state, version=env.seq)


def _reach(state: SagaState, index: int) -> SagaState:
    """The saga got to step ``index``: every implied start up to it is a started step now."""
    due = [i for i in sorted(state.implied) if i <= index and i not in state.started]
    if not due:
        return state
    return msgspec.structs.replace(
        state,
        started=(*state.started, *due),
        compensations={**state.compensations, **{i: state.implied[i] for i in due}},
    )


class Action(msgspec.Struct, frozen=True):
    """``kind``: run (a step), compensate (a step), complete, compensated, none (terminal)."""

    kind: str
    index: int = -1
    step: str = ""


def decide(state: SagaState) -> Action:
    """The next move. A started step that did not complete is run again (steps are idempotent)."""
    if state.status.terminal:
        return Action("none")
    if state.status == SagaStatus.RUNNING:
        for i, name in enumerate(state.steps):
            if name not in state.outputs:
                return Action("run", i, name)
        return Action("complete")
    for i in reversed(state.started):
        if i not in state.compensated and state.compensations.get(i):
            return Action("compensate", i, state.steps[i])
    return Action("compensated")
